//! The bench against an in-process fake OpenAI streaming server: counts, timings, request bodies,
//! failures, chat, mixed load, Poisson arrivals and the output files.

mod common;

use std::time::Duration;

use bench::BenchArgs;
use clap::Parser;
use common::{FakeOptions, FakeServer};

#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    args: BenchArgs,
}

fn args(server: &FakeServer, extra: &[&str]) -> BenchArgs {
    let url = server.url();
    let mut argv = vec!["bench", "--url", url.as_str(), "--no-progress"];
    argv.extend_from_slice(extra);
    Cli::try_parse_from(argv).expect("valid argv").args
}

fn temp_path(name: &str) -> std::path::PathBuf {
    std::env::temp_dir().join(format!("tessera-bench-{}-{name}", std::process::id()))
}

#[tokio::test]
async fn closed_loop_counts_requests_and_times_every_token() {
    let server = FakeServer::start(FakeOptions::default()).await;
    let a = args(
        &server,
        &[
            "-c",
            "4",
            "-n",
            "12",
            "--prompt-tokens",
            "40",
            "--output-tokens",
            "5",
        ],
    );
    let report = bench::run_async(a).await.expect("run");
    let r = &report.results;
    assert_eq!((r.requests_ok, r.requests_failed), (12, 0));
    assert_eq!(r.output_tokens_total, 60);
    assert_eq!(r.mean_output_tokens, Some(5.0));
    assert_eq!(
        r.mean_prompt_tokens,
        Some(40.0),
        "prompts should be exactly P words"
    );
    assert_eq!(r.ttft_ms.count, 12);
    assert_eq!(r.itl_ms.count, 12 * 4);
    // The fake waits 30 ms before the first token and 10 ms between tokens.
    assert!(r.ttft_ms.p50.expect("ttft") >= 25.0, "{:?}", r.ttft_ms);
    assert!(r.itl_ms.p50.expect("itl") >= 8.0, "{:?}", r.itl_ms);
    assert!(r.e2e_ms.p50.expect("e2e") >= 60.0, "{:?}", r.e2e_ms);
    assert!(r.output_tokens_per_s > 0.0 && r.requests_per_s > 0.0);
    assert_eq!(
        server
            .recorded
            .peak_in_flight
            .load(std::sync::atomic::Ordering::SeqCst),
        4
    );
}

#[tokio::test]
async fn requests_carry_streaming_ignore_eos_and_the_discovered_model() {
    let server = FakeServer::start(FakeOptions::default()).await;
    let a = args(
        &server,
        &[
            "-c",
            "2",
            "-n",
            "4",
            "--prompt-tokens",
            "30",
            "--shared-prefix-tokens",
            "20",
            "--output-tokens",
            "3",
        ],
    );
    bench::run_async(a).await.expect("run");
    let reqs = server.requests();
    assert_eq!(reqs.len(), 4);
    let prompts: Vec<String> = reqs
        .iter()
        .map(|(path, body)| {
            assert_eq!(path, "/v1/completions");
            assert_eq!(body["model"], "fake-model");
            assert_eq!(body["max_tokens"], 3);
            assert_eq!(body["ignore_eos"], true);
            assert_eq!(body["stream"], true);
            assert_eq!(body["stream_options"]["include_usage"], true);
            body["prompt"].as_str().expect("prompt").to_string()
        })
        .collect();
    let prefix: Vec<&str> = prompts[0].split(' ').take(20).collect();
    for p in &prompts {
        assert_eq!(p.split(' ').count(), 30);
        assert_eq!(p.split(' ').take(20).collect::<Vec<_>>(), prefix);
    }
    let mut distinct = prompts.clone();
    distinct.sort();
    distinct.dedup();
    assert_eq!(
        distinct.len(),
        4,
        "each request has its own prompt after the prefix"
    );
}

#[tokio::test]
async fn chat_without_usage_counts_tokens_by_chunks() {
    let server = FakeServer::start(FakeOptions {
        usage: false,
        ..FakeOptions::default()
    })
    .await;
    let a = args(
        &server,
        &[
            "--endpoint",
            "chat",
            "-c",
            "2",
            "-n",
            "4",
            "--output-tokens",
            "6",
            "--model",
            "m",
        ],
    );
    let report = bench::run_async(a).await.expect("run");
    let r = &report.results;
    assert_eq!(r.requests_ok, 4);
    assert_eq!(r.mean_output_tokens, Some(6.0));
    assert_eq!(r.mean_prompt_tokens, None);
    // The role-only chunk is not a token: 6 tokens give 5 gaps each.
    assert_eq!(r.itl_ms.count, 4 * 5);
    let reqs = server.requests();
    assert_eq!(reqs[0].0, "/v1/chat/completions");
    assert_eq!(reqs[0].1["model"], "m");
    assert_eq!(reqs[0].1["messages"][0]["role"], "user");
}

#[tokio::test]
async fn failed_requests_are_counted_and_excluded_from_latencies() {
    let server = FakeServer::start(FakeOptions {
        fail_every: Some(3),
        ..FakeOptions::default()
    })
    .await;
    let a = args(&server, &["-c", "3", "-n", "9", "--output-tokens", "2"]);
    let report = bench::run_async(a).await.expect("run");
    let r = &report.results;
    assert_eq!((r.requests_ok, r.requests_failed), (6, 3));
    assert_eq!(r.ttft_ms.count, 6);
    assert_eq!(r.errors.len(), 1);
    assert_eq!(r.errors[0].count, 3);
    assert!(
        r.errors[0].message.starts_with("HTTP 500"),
        "{:?}",
        r.errors
    );
}

#[tokio::test]
async fn api_key_is_sent_as_bearer_and_its_absence_fails_requests() {
    let opts = FakeOptions {
        api_key: Some("sekrit".into()),
        ..FakeOptions::default()
    };
    let server = FakeServer::start(opts).await;
    let with_key = args(
        &server,
        &["-n", "2", "--output-tokens", "2", "--api-key", "sekrit"],
    );
    assert_eq!(
        bench::run_async(with_key)
            .await
            .expect("run")
            .results
            .requests_ok,
        2
    );
    let without = args(
        &server,
        &["-n", "2", "--output-tokens", "2", "--model", "x"],
    );
    let r = bench::run_async(without).await.expect("run").results;
    assert_eq!((r.requests_ok, r.requests_failed), (0, 2));
    assert!(r.errors[0].message.starts_with("HTTP 401"));
}

#[tokio::test]
async fn mixed_load_reports_long_prompts_apart_from_decoders() {
    let server = FakeServer::start(FakeOptions::default()).await;
    let a = args(
        &server,
        &[
            "-c",
            "2",
            "-n",
            "4",
            "--output-tokens",
            "20",
            "--prompt-tokens",
            "16",
            "--long-prompt-every",
            "0.05",
            "--long-prompt-tokens",
            "300",
        ],
    );
    let report = bench::run_async(a).await.expect("run");
    let (r, lp) = (
        &report.results,
        report.long_prompts.as_ref().expect("long prompts"),
    );
    assert_eq!(r.requests_ok, 4);
    assert_eq!(
        r.mean_output_tokens,
        Some(20.0),
        "long prompts must not mix into decoder stats"
    );
    assert_eq!(r.itl_ms.count, 4 * 19);
    assert!(lp.ok >= 2, "{lp:?}");
    assert_eq!(lp.failed, 0);
    assert_eq!(lp.ttft_ms.count, lp.ok);
    let long: Vec<_> = server
        .requests()
        .into_iter()
        .filter(|(_, b)| b["max_tokens"] == 1)
        .collect();
    assert_eq!(long.len(), lp.completed + lp.cancelled_at_end);
    for (_, b) in &long {
        assert_eq!(
            b["prompt"].as_str().expect("prompt").split(' ').count(),
            300
        );
    }
}

#[tokio::test]
async fn poisson_arrivals_stop_at_the_duration() {
    let server = FakeServer::start(FakeOptions {
        first_token_delay: Duration::from_millis(5),
        token_delay: Duration::from_millis(2),
        ..FakeOptions::default()
    })
    .await;
    let a = args(
        &server,
        &[
            "-c",
            "4",
            "--arrival",
            "poisson:40",
            "--duration",
            "0.5",
            "--output-tokens",
            "2",
            "--seed",
            "5",
        ],
    );
    let started = std::time::Instant::now();
    let report = bench::run_async(a).await.expect("run");
    let r = &report.results;
    // 40/s for 0.5 s: about 20 arrivals; a Poisson count is very unlikely to leave 5..=50.
    let n = r.requests_ok + r.requests_failed;
    assert!((5..=50).contains(&n), "{n} requests");
    assert_eq!(r.requests_failed, 0);
    assert!(started.elapsed() < Duration::from_secs(3));
    assert!(
        server
            .recorded
            .peak_in_flight
            .load(std::sync::atomic::Ordering::SeqCst)
            <= 4
    );
}

#[tokio::test]
async fn json_and_chart_files_are_written() {
    let server = FakeServer::start(FakeOptions::default()).await;
    let (json_path, svg_path) = (temp_path("out.json"), temp_path("out.svg"));
    let (j, s) = (
        json_path.to_string_lossy().to_string(),
        svg_path.to_string_lossy().to_string(),
    );
    let a = args(
        &server,
        &[
            "-n",
            "3",
            "--output-tokens",
            "3",
            "--json",
            &j,
            "--chart",
            &s,
        ],
    );
    bench::run_async(a).await.expect("run");
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json_path).expect("json file"))
            .expect("valid json");
    assert_eq!(v["results"]["requests_ok"], 3);
    assert_eq!(v["config"]["model"], "fake-model");
    assert!(v["results"]["ttft_ms"]["p50"].as_f64().is_some());
    assert!(v["results"]["itl_ms"]["p99"].as_f64().is_some());
    let svg = std::fs::read_to_string(&svg_path).expect("svg file");
    assert!(svg.starts_with("<svg") && svg.contains("TTFT (n=3)") && svg.contains("ITL (n=6)"));
    let _ = std::fs::remove_file(json_path);
    let _ = std::fs::remove_file(svg_path);
}

#[tokio::test]
async fn unreachable_server_fails_requests_instead_of_hanging() {
    // Bind then drop a listener to get a port nobody listens on.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .expect("bind")
        .local_addr()
        .expect("addr")
        .port();
    let url = format!("http://127.0.0.1:{port}");
    let a = Cli::try_parse_from([
        "bench",
        "--url",
        &url,
        "--no-progress",
        "-n",
        "3",
        "--model",
        "m",
        "--timeout",
        "5",
    ])
    .expect("argv")
    .args;
    let r = bench::run_async(a).await.expect("run").results;
    assert_eq!((r.requests_ok, r.requests_failed), (0, 3));
    assert!(r.errors[0].message.starts_with("send"), "{:?}", r.errors);
}

#[tokio::test]
async fn warmup_requests_are_sent_first_and_left_out_of_the_results() {
    let server = FakeServer::start(FakeOptions::default()).await;
    let a = args(
        &server,
        &[
            "-c",
            "2",
            "-n",
            "3",
            "--output-tokens",
            "2",
            "--warmup",
            "2",
        ],
    );
    let report = bench::run_async(a).await.expect("run");
    assert_eq!(report.results.requests_ok, 3);
    assert_eq!(report.results.ttft_ms.count, 3);
    assert_eq!(report.config.warmup_requests, 2);
    let reqs = server.requests();
    assert_eq!(reqs.len(), 5);
    // The warm-up prompts are not among the measured ones.
    let prompt = |i: usize| reqs[i].1["prompt"].as_str().expect("prompt").to_string();
    let measured: Vec<String> = (2..5).map(prompt).collect();
    assert!(!measured.contains(&prompt(0)) && !measured.contains(&prompt(1)));
}

#[tokio::test]
async fn stop_request_ends_the_run_early_and_reports_finished_requests() {
    let server = FakeServer::start(FakeOptions::default()).await;
    let a = args(&server, &["-c", "2", "-n", "1000", "--output-tokens", "3"]);
    let stop = bench::Stop::new();
    let trigger = stop.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(300)).await;
        trigger.request();
    });
    let report = bench::run_until(a, stop).await.expect("run");
    let r = &report.results;
    // Each request takes >= 50 ms, so 2 clients finish a handful in 300 ms, far from 1000.
    assert!(
        r.requests_ok >= 2 && r.requests_ok < 100,
        "{} requests",
        r.requests_ok
    );
    assert_eq!(r.requests_failed, 0, "in-flight requests finish normally");
    assert_eq!(server.requests().len(), r.requests_ok);
}

#[tokio::test]
async fn server_closing_connections_after_each_stream_fails_no_request() {
    let server = FakeServer::start(FakeOptions {
        close_after_stream: true,
        first_token_delay: Duration::from_millis(2),
        token_delay: Duration::from_millis(1),
        ..FakeOptions::default()
    })
    .await;
    let a = args(&server, &["-c", "2", "-n", "40", "--output-tokens", "2"]);
    let r = bench::run_async(a).await.expect("run").results;
    assert_eq!(
        (r.requests_ok, r.requests_failed),
        (40, 0),
        "{:?}",
        r.errors
    );
}

fn peak(server: &FakeServer) -> usize {
    server
        .recorded
        .peak_in_flight
        .load(std::sync::atomic::Ordering::SeqCst)
}

#[tokio::test]
async fn infinite_request_rate_sends_everything_at_once_unless_capped() {
    let server = FakeServer::start(FakeOptions::default()).await;
    let a = args(
        &server,
        &["--request-rate", "inf", "-n", "8", "--output-tokens", "5"],
    );
    let r = bench::run_async(a).await.expect("run").results;
    assert_eq!(r.requests_ok, 8);
    assert_eq!(peak(&server), 8, "no cap by default in the open loop");
    let capped = FakeServer::start(FakeOptions::default()).await;
    let a = args(
        &capped,
        &[
            "--request-rate",
            "inf",
            "-n",
            "8",
            "--max-concurrency",
            "3",
            "--output-tokens",
            "5",
        ],
    );
    assert_eq!(
        bench::run_async(a).await.expect("run").results.requests_ok,
        8
    );
    assert_eq!(peak(&capped), 3);
}

#[tokio::test]
async fn chat_dataset_sends_each_request_its_own_lengths() {
    let server = FakeServer::start(FakeOptions {
        first_token_delay: Duration::from_millis(1),
        token_delay: Duration::from_millis(1),
        ..FakeOptions::default()
    })
    .await;
    let extra = [
        "-n",
        "12",
        "--dataset",
        "chat",
        "--max-prompt-tokens",
        "2000",
        "--max-output-tokens",
        "64",
        "--seed",
        "4",
    ];
    let a = args(&server, &extra);
    let cfg = a.validate().expect("valid");
    let r = bench::run_async(a).await.expect("run").results;
    assert_eq!(r.requests_ok, 12);
    let mut want: Vec<(usize, u64)> = (0..12)
        .map(|i| cfg.workload.spec(i))
        .map(|s| (s.prompt_tokens, u64::from(s.output_tokens)))
        .collect();
    let mut got: Vec<(usize, u64)> = server
        .requests()
        .iter()
        .map(|(_, b)| {
            let words = b["prompt"].as_str().expect("prompt").split(' ').count();
            (words, b["max_tokens"].as_u64().expect("max_tokens"))
        })
        .collect();
    want.sort_unstable();
    got.sort_unstable();
    assert_eq!(got, want);
    let distinct: std::collections::HashSet<_> = got.iter().collect();
    assert!(distinct.len() > 6, "lengths vary: {got:?}");
    assert!(got.iter().all(|&(p, o)| p <= 2000 && o <= 64));
}

#[tokio::test]
async fn timed_trace_is_replayed_with_its_lengths() {
    let server = FakeServer::start(FakeOptions {
        first_token_delay: Duration::from_millis(1),
        token_delay: Duration::from_millis(1),
        ..FakeOptions::default()
    })
    .await;
    let path = temp_path("trace.jsonl");
    std::fs::write(
        &path,
        "{\"prompt_tokens\": 7, \"output_tokens\": 2, \"arrival_s\": 0}\n\
         {\"prompt_tokens\": 9, \"output_tokens\": 3, \"arrival_s\": 0.02}\n\
         {\"prompt_tokens\": 11, \"output_tokens\": 4, \"arrival_s\": 0.04}\n",
    )
    .expect("write trace");
    let p = path.to_string_lossy().to_string();
    let report = bench::run_async(args(&server, &["--trace", &p]))
        .await
        .expect("run");
    assert_eq!(report.results.requests_ok, 3);
    assert_eq!(report.results.output_tokens_total, 9);
    assert_eq!(report.config.arrival, "trace");
    let mut got: Vec<(usize, u64)> = server
        .requests()
        .iter()
        .map(|(_, b)| {
            let words = b["prompt"].as_str().expect("prompt").split(' ').count();
            (words, b["max_tokens"].as_u64().expect("max_tokens"))
        })
        .collect();
    got.sort_unstable();
    assert_eq!(got, vec![(7, 2), (9, 3), (11, 4)]);
    std::fs::write(
        &path,
        "{\"prompt_tokens\": 7, \"output_tokens\": 2}\n{\"prompt_tokens\": 7}\n",
    )
    .expect("write bad trace");
    let err = bench::run_async(args(&server, &["--trace", &p]))
        .await
        .expect_err("bad trace");
    assert!(err.to_string().contains(&format!("{p}:2:")), "{err}");
    let _ = std::fs::remove_file(path);
}

#[tokio::test]
async fn goodput_counts_requests_within_the_targets() {
    let server = FakeServer::start(FakeOptions::default()).await;
    let lenient = args(
        &server,
        &[
            "-c",
            "2",
            "-n",
            "4",
            "--output-tokens",
            "3",
            "--goodput",
            "ttft:60000",
            "tpot:60000",
        ],
    );
    let g = bench::run_async(lenient)
        .await
        .expect("run")
        .results
        .goodput
        .expect("goodput");
    assert_eq!((g.requests, g.good_requests, g.fraction_good), (4, 4, 1.0));
    assert!(g.goodput_rps > 0.0);
    // The fake waits 30 ms before the first token: a 1 ms TTFT target fails every request.
    let strict = args(
        &server,
        &[
            "-c",
            "2",
            "-n",
            "4",
            "--output-tokens",
            "3",
            "--goodput",
            "ttft:1",
        ],
    );
    let r = bench::run_async(strict).await.expect("run").results;
    let g = r.goodput.expect("goodput");
    assert_eq!((g.good_requests, g.goodput_rps), (0, 0.0));
    // TPOT: (e2e - ttft) / 2 per request, with 10 ms between the fake's tokens.
    assert!(r.tpot_ms.p50.expect("tpot") >= 8.0, "{:?}", r.tpot_ms);
}

fn capacity_args(server: &FakeServer, target: &str, json: &str, svg: &str) -> BenchArgs {
    args(
        server,
        &[
            "--find-capacity",
            "--goodput",
            target,
            "--label",
            "fake <server>",
            "--capacity-min-rate",
            "5",
            "--capacity-max-rate",
            "10",
            "--capacity-duration",
            "0.4",
            "--capacity-warmup",
            "0.1",
            "--capacity-min-requests",
            "0",
            "--capacity-steps",
            "4",
            "--output-tokens",
            "2",
            "--prompt-tokens",
            "6",
            "--json",
            json,
            "--chart",
            svg,
        ],
    )
}

#[tokio::test]
async fn find_capacity_writes_every_probe_and_the_answer() {
    let server = FakeServer::start(FakeOptions {
        first_token_delay: Duration::from_millis(2),
        token_delay: Duration::from_millis(1),
        ..FakeOptions::default()
    })
    .await;
    let (json, svg) = (temp_path("cap.json"), temp_path("cap.svg"));
    let (j, s) = (
        json.to_string_lossy().to_string(),
        svg.to_string_lossy().to_string(),
    );
    let report = bench::find_capacity(
        capacity_args(&server, "ttft:60000", &j, &s),
        bench::Stop::new(),
    )
    .await
    .expect("search");
    // The fake keeps up with 10 req/s: probes at 5 and 10 pass, the answer is the maximum.
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).expect("json")).expect("valid json");
    assert_eq!(v["kind"], "capacity");
    assert_eq!(v["label"], "fake <server>");
    assert_eq!(v["capacity"]["targets"]["ttft_ms"], 60000.0);
    let probes = v["probes"].as_array().expect("probes");
    assert_eq!(probes.len(), 2);
    for (p, rate) in probes.iter().zip([5.0, 10.0]) {
        assert_eq!(p["rate"], rate);
        assert_eq!(p["passed"], true);
        assert_eq!(p["fraction_good"], 1.0);
        let n = p["requests_measured"].as_u64().expect("n");
        assert!(
            n >= 1 && n <= p["requests_sent"].as_u64().expect("sent"),
            "{p}"
        );
        for key in ["ttft_ms", "tpot_ms", "itl_ms", "e2e_ms"] {
            assert!(p[key]["p90"].as_f64().is_some(), "{key} in {p}");
        }
    }
    assert_eq!(v["answer"]["capacity_rps"], 10.0);
    assert_eq!(v["answer"]["stopped"], "max-rate-passed");
    assert_eq!(report.answer.capacity_rps, Some(10.0));
    // Each probe sends its own prompts: none is repeated across the run.
    let prompts: Vec<String> = server
        .requests()
        .iter()
        .map(|(_, b)| b["prompt"].to_string())
        .collect();
    let distinct: std::collections::HashSet<&String> = prompts.iter().collect();
    assert_eq!(distinct.len(), prompts.len());
    let chart = std::fs::read_to_string(&svg).expect("svg");
    assert!(
        chart.starts_with("<svg")
            && chart.contains("p90 TTFT")
            && chart.contains("fake &lt;server&gt;")
    );
    // --plot draws the file again, beside a second run, with no load sent.
    let sent = server.requests().len();
    let (json2, out) = (temp_path("cap2.json"), temp_path("both.svg"));
    let mut other: serde_json::Value = v.clone();
    other["label"] = "other server".into();
    std::fs::write(&json2, other.to_string()).expect("write");
    let o = out.to_string_lossy().to_string();
    let plot = args(
        &server,
        &[
            "--plot",
            &j,
            "--plot",
            &json2.to_string_lossy(),
            "--chart",
            &o,
        ],
    );
    bench::plot(&plot).expect("plot");
    let both = std::fs::read_to_string(&out).expect("svg");
    assert!(both.contains("fake &lt;server&gt;") && both.contains("other server"));
    assert_eq!(server.requests().len(), sent);
    for p in [json, svg, json2, out] {
        let _ = std::fs::remove_file(p);
    }
}

#[tokio::test]
async fn find_capacity_below_the_minimum_rate_reports_no_capacity() {
    let server = FakeServer::start(FakeOptions::default()).await;
    let (json, svg) = (temp_path("nocap.json"), temp_path("nocap.svg"));
    let (j, s) = (
        json.to_string_lossy().to_string(),
        svg.to_string_lossy().to_string(),
    );
    // The fake's 30 ms TTFT misses a 1 ms target: the first probe fails and ends the search.
    let report = bench::find_capacity(capacity_args(&server, "ttft:1", &j, &s), bench::Stop::new())
        .await
        .expect("search");
    assert_eq!(report.probes.len(), 1);
    assert!(!report.probes[0].passed && report.probes[0].fraction_good == 0.0);
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).expect("json")).expect("valid json");
    assert!(v["answer"]["capacity_rps"].is_null());
    assert_eq!(v["answer"]["stopped"], "min-rate-failed");
    let _ = std::fs::remove_file(json);
    let _ = std::fs::remove_file(svg);
}

#[tokio::test]
async fn find_capacity_needs_goodput_targets() {
    let server = FakeServer::start(FakeOptions::default()).await;
    let a = args(&server, &["--find-capacity"]);
    let err = bench::find_capacity(a, bench::Stop::new())
        .await
        .expect_err("no targets");
    assert!(err.to_string().contains("--goodput"), "{err}");
    assert!(server.requests().is_empty());
}

#[tokio::test]
async fn probe_requests_still_running_after_the_drain_are_cut_and_not_good() {
    // Each request takes >= 30 ms + 199 x 10 ms = 2.02 s; targets ttft:50 tpot:1 give a drain of
    // 0.05 + 0.199 + 1 = 1.249 s after a 0.4 s window: every request is cut at 1.65 s, however
    // fast or slow the machine.
    let server = FakeServer::start(FakeOptions::default()).await;
    let (json, svg) = (temp_path("cut.json"), temp_path("cut.svg"));
    let (j, s) = (
        json.to_string_lossy().to_string(),
        svg.to_string_lossy().to_string(),
    );
    let mut a = capacity_args(&server, "ttft:50", &j, &s);
    a.goodput.push("tpot:1".parse().expect("target"));
    a.output_tokens = 200;
    a.capacity.capacity_steps = 1;
    let report = bench::find_capacity(a, bench::Stop::new())
        .await
        .expect("search");
    let p = &report.probes[0];
    assert!(p.requests_measured >= 1, "{p:?}");
    assert_eq!(
        (p.requests_cut, p.requests_failed, p.good_requests),
        (p.requests_measured, p.requests_measured, 0)
    );
    assert!(p.errors[0].message.contains("cutoff"), "{:?}", p.errors);
    let _ = std::fs::remove_file(json);
    let _ = std::fs::remove_file(svg);
}
