//! `tessera bench`: a load generator for OpenAI-compatible completion servers.
//!
//! Design: streaming clients send synthetic prompts to `/v1/completions` or
//! `/v1/chat/completions` with `max_tokens` = the request's output length and `ignore_eos`, and
//! time every token chunk as it arrives: time to first token, inter-token latency, time per output
//! token, end-to-end latency. Requests are issued by a closed loop of `-c` clients, or open loop
//! (`--request-rate R --burstiness B`: gamma-distributed arrivals, as vLLM's serving benchmark;
//! optional `--max-concurrency` cap), or at a trace's own times. Lengths are fixed, drawn from the
//! built-in `chat` distribution, or read from a `--trace` file. With `--goodput` latency targets
//! a run reports goodput; `--find-capacity` searches for the highest rate that meets them, and
//! `--plot` draws several such searches on one chart. A mixed-load mode adds a long prompt every
//! few seconds and reports the decoders separately from it. Results: a table on stdout, a JSON file,
//! an SVG chart. `--endpoint embeddings` is its own closed loop (`embed`): batches of texts to
//! `/v1/embeddings`, reported as requests, embeddings and tokens per second. `--lora-names` /
//! `--lora-ids` spread the requests over LoRA adapters (`adapters`), by name as vLLM and Tessera
//! take them or by id as llama-server does. Works against tessera, llama.cpp's `llama-server` and
//! vLLM alike (plain HTTP).
//!
//! Modules, in the order a run uses them: `config` (flags → validated config), `workload` (request
//! lengths, traces), `adapters` (the LoRA adapter of each request), `sampling` / `arrivals`
//! (seeded distributions, the arrival schedule), `prompt` (deterministic prompts), `client` (one
//! timed streaming request), `sse` (stream parsing), `runner` (the client pool), `goodput`
//! (targets), `stats` / `report` (summaries), `chart` (SVG); for capacity: `search` (the pure
//! search), `capacity` (probes, report), `capacity_chart`.

pub mod adapters;
pub mod arrivals;
pub mod capacity;
pub mod capacity_chart;
pub mod chart;
pub mod client;
pub mod config;
pub mod embed;
pub mod goodput;
pub mod prompt;
pub mod report;
pub mod runner;
pub mod sampling;
pub mod search;
pub mod sse;
pub mod stats;
pub mod workload;

use anyhow::Context as _;

pub use capacity::CapacityReport;
pub use config::{Arrival, BenchArgs, BenchConfig, Endpoint};
pub use embed::EmbedReport;
pub use report::Report;
pub use runner::Stop;

/// Runs a benchmark, prints its table, writes the requested files, and returns the report.
pub async fn run_async(args: BenchArgs) -> anyhow::Result<Report> {
    run_until(args, Stop::new()).await
}

/// [`run_async`] that stops issuing requests once `stop` is requested and reports what it has.
pub async fn run_until(args: BenchArgs, stop: Stop) -> anyhow::Result<Report> {
    anyhow::ensure!(
        !args.capacity.find_capacity && args.capacity.plot.is_empty(),
        "--find-capacity and --plot runs go through find_capacity / plot"
    );
    let cfg = args.validate()?;
    anyhow::ensure!(
        cfg.embed.is_none(),
        "--endpoint embeddings runs go through embeddings"
    );
    let run = runner::execute(&cfg, !args.no_progress, stop).await?;
    let report = Report::new(&cfg, &run);
    println!("{}", report.table());
    if let Some(path) = &args.json {
        std::fs::write(path, report.to_json())
            .with_context(|| format!("writing {}", path.display()))?;
    }
    if let Some(path) = &args.chart {
        std::fs::write(path, chart_svg(&report)?)
            .with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(report)
}

/// `--endpoint embeddings`: runs, prints the table, writes the JSON report when asked, and
/// returns the report.
pub async fn embeddings(args: BenchArgs, stop: Stop) -> anyhow::Result<EmbedReport> {
    let cfg = args.validate()?;
    let run = embed::execute(&cfg, !args.no_progress, stop).await?;
    let report = EmbedReport::new(&cfg, &run)?;
    println!("{}", report.table());
    if let Some(path) = &args.json {
        std::fs::write(path, report.to_json())
            .with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(report)
}

/// `--find-capacity`: searches, prints the probe table and the answer, writes the requested
/// files, and returns the report.
pub async fn find_capacity(args: BenchArgs, stop: Stop) -> anyhow::Result<CapacityReport> {
    let cfg = args.validate()?;
    let cc = args.capacity.validate(&cfg, args.burstiness)?;
    let report = capacity::find(&cfg, &cc, !args.no_progress, &stop).await?;
    println!("{}", report.table());
    if let Some(path) = &args.json {
        std::fs::write(path, report.to_json())
            .with_context(|| format!("writing {}", path.display()))?;
    }
    if let Some(path) = &args.chart {
        let svg = capacity_chart::capacity_svg(std::slice::from_ref(&report))?;
        std::fs::write(path, svg).with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(report)
}

/// `--plot A.json --plot B.json --chart OUT.svg`: one chart of earlier capacity runs; no load.
pub fn plot(args: &BenchArgs) -> anyhow::Result<()> {
    let out = args
        .chart
        .as_ref()
        .context("--plot draws into the file given by --chart")?;
    let svg = capacity_chart::plot_files(&args.capacity.plot)?;
    std::fs::write(out, svg).with_context(|| format!("writing {}", out.display()))?;
    println!(
        "wrote {} ({} runs)",
        out.display(),
        args.capacity.plot.len()
    );
    Ok(())
}

/// `tessera bench` entry point: builds a single-threaded tokio runtime (the client is I/O-bound, and
/// one thread leaves the cores to the server being measured) and runs the benchmark on it.
pub fn run(args: BenchArgs) -> anyhow::Result<()> {
    if !args.capacity.plot.is_empty() {
        return plot(&args);
    }
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the tokio runtime")?;
    if args.endpoint == Endpoint::Embeddings {
        let report = rt.block_on(async {
            let stop = Stop::new();
            tokio::spawn(stop_on_ctrl_c(stop.clone()));
            embeddings(args, stop).await
        })?;
        anyhow::ensure!(report.results.requests_ok > 0, "no request succeeded");
        return Ok(());
    }
    if args.capacity.find_capacity {
        return rt.block_on(async {
            let stop = Stop::new();
            tokio::spawn(stop_on_ctrl_c(stop.clone()));
            find_capacity(args, stop).await.map(|_| ())
        });
    }
    let report = rt.block_on(async {
        let stop = Stop::new();
        tokio::spawn(stop_on_ctrl_c(stop.clone()));
        run_until(args, stop).await
    })?;
    if report.results.requests_ok == 0 {
        anyhow::bail!("no request succeeded");
    }
    Ok(())
}

/// First Ctrl-C: stop issuing requests, let in-flight ones finish, report. Second: quit at once.
async fn stop_on_ctrl_c(stop: Stop) {
    if tokio::signal::ctrl_c().await.is_ok() {
        eprintln!("interrupted: finishing in-flight requests (Ctrl-C again to quit now)");
        stop.request();
        if tokio::signal::ctrl_c().await.is_ok() {
            std::process::exit(130);
        }
    }
}

/// The SVG chart of a report's latency distributions.
pub fn chart_svg(report: &Report) -> anyhow::Result<String> {
    let c = &report.config;
    let caption = format!(
        "{} {} c={} prompt~{} out={} ({})",
        c.model, c.endpoint, c.concurrency, c.prompt_tokens, c.output_tokens, c.arrival
    );
    let s = &report.samples;
    let mut series = vec![
        chart::Series {
            title: "TTFT",
            samples_s: &s.ttft,
        },
        chart::Series {
            title: "ITL",
            samples_s: &s.itl,
        },
        chart::Series {
            title: "end-to-end",
            samples_s: &s.e2e,
        },
    ];
    if report.long_prompts.is_some() {
        series.push(chart::Series {
            title: "long-prompt TTFT",
            samples_s: &s.long_ttft,
        });
    }
    chart::latency_cdf_svg(&caption, &series)
}
