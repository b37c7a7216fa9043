//! The summary of a run: numbers, a printed table and the JSON document.
//!
//! Design: [`Report::new`] derives everything from the raw outcomes once; the table and the JSON are
//! two renderings of the same struct, so they cannot disagree. Latency percentiles cover successful
//! requests only. Output throughput is successful decoders' output tokens over the wall time (first
//! request sent to last decoder finished); long prompts are reported on their own and count in neither.
//! TPOT is per request, `(e2e − ttft) / (output tokens − 1)` (see `goodput`); with `--goodput`
//! targets the results also hold goodput, good requests over the same wall time.

use std::{collections::BTreeMap, fmt::Write as _};

use serde::Serialize;

use crate::{
    adapters::{per_adapter, table_lines, AdapterResults, AdaptersEcho},
    client::Outcome,
    config::{BenchConfig, Endpoint, LongPrompts},
    goodput::{tpot_s, GoodputResults},
    runner::RunResult,
    stats::Distribution,
    workload::Dataset,
};

/// How many distinct error messages the report keeps.
const MAX_ERRORS: usize = 8;

/// The run's settings, echoed into the JSON so a result file is self-describing.
#[derive(Debug, Clone, Serialize)]
pub struct ConfigEcho {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
    pub url: String,
    pub model: String,
    pub endpoint: Endpoint,
    /// Closed loop: the clients; open loop: the in-flight cap, 0 for none.
    pub concurrency: usize,
    pub requests: Option<u64>,
    /// Request lengths: `fixed` uses `prompt_tokens` / `output_tokens`; `chat` has them as its
    /// upper bounds; a trace overrides the dataset.
    pub dataset: Dataset,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub trace: Option<String>,
    pub prompt_tokens: usize,
    pub output_tokens: u32,
    pub shared_prefix_tokens: usize,
    /// Distinct shared prefixes the requests start with.
    pub prefixes: usize,
    pub seed: u64,
    pub arrival: String,
    pub duration_s: Option<f64>,
    pub temperature: f32,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub top_p: Option<f32>,
    pub warmup_requests: u32,
    pub long_prompts: Option<LongPrompts>,
    /// LoRA adapters the requests were spread over (request `i` got the `i mod n`-th).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub adapters: Option<AdaptersEcho>,
}

/// One error message and how often it occurred.
#[derive(Debug, Clone, Serialize, serde::Deserialize, PartialEq)]
pub struct ErrorCount {
    pub message: String,
    pub count: usize,
}

/// The decoders' results.
#[derive(Debug, Clone, Serialize)]
pub struct Results {
    pub requests_ok: usize,
    pub requests_failed: usize,
    pub wall_time_s: f64,
    pub output_tokens_total: u64,
    pub output_tokens_per_s: f64,
    pub requests_per_s: f64,
    pub mean_output_tokens: Option<f64>,
    /// Mean `usage.prompt_tokens`, when the server reported usage.
    pub mean_prompt_tokens: Option<f64>,
    pub ttft_ms: Distribution,
    /// Per-request time per output token after the first.
    pub tpot_ms: Distribution,
    pub itl_ms: Distribution,
    pub e2e_ms: Distribution,
    /// With `--goodput`: requests within the targets, and their rate.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub goodput: Option<GoodputResults>,
    /// ITL p99 / p50: how much the tail stretches (issue 5's mixed-load goal is <= 2.5).
    pub itl_p99_over_p50: Option<f64>,
    /// With adapters: each adapter's requests and output throughput, in the order given.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub per_adapter: Vec<AdapterResults>,
    pub errors: Vec<ErrorCount>,
}

/// The long prompts of the mixed-load mode.
#[derive(Debug, Clone, Serialize)]
pub struct LongPromptResults {
    pub completed: usize,
    pub ok: usize,
    pub failed: usize,
    pub cancelled_at_end: usize,
    pub ttft_ms: Distribution,
    pub e2e_ms: Distribution,
    pub errors: Vec<ErrorCount>,
}

/// Latency samples of successful requests, in seconds, kept for the chart (not serialised).
#[derive(Debug, Clone, Default)]
pub struct Samples {
    pub ttft: Vec<f64>,
    pub itl: Vec<f64>,
    pub e2e: Vec<f64>,
    pub long_ttft: Vec<f64>,
}

/// Everything a run produced.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub tool: &'static str,
    pub started_unix_s: f64,
    pub config: ConfigEcho,
    pub results: Results,
    pub long_prompts: Option<LongPromptResults>,
    #[serde(skip)]
    pub samples: Samples,
}

impl Report {
    pub fn new(cfg: &BenchConfig, run: &RunResult) -> Self {
        let wall = run.wall.as_secs_f64();
        let ok: Vec<&Outcome> = run.decoders.iter().filter(|o| o.ok).collect();
        let output_tokens_total: u64 = ok.iter().map(|o| o.output_tokens()).sum();
        let per_s = |x: f64| if wall > 0.0 { x / wall } else { 0.0 };
        let samples = Samples {
            ttft: ok.iter().filter_map(|o| o.ttft).collect(),
            itl: ok.iter().flat_map(|o| o.itl.iter().copied()).collect(),
            e2e: ok.iter().map(|o| o.e2e).collect(),
            long_ttft: run
                .long_prompts
                .iter()
                .filter(|o| o.ok)
                .filter_map(|o| o.ttft)
                .collect(),
        };
        let itl_ms = Distribution::from_seconds(&samples.itl);
        let results = Results {
            requests_ok: ok.len(),
            requests_failed: run.decoders.len() - ok.len(),
            wall_time_s: wall,
            output_tokens_total,
            output_tokens_per_s: per_s(output_tokens_total as f64),
            requests_per_s: per_s(ok.len() as f64),
            mean_output_tokens: mean(ok.iter().map(|o| o.output_tokens() as f64)),
            mean_prompt_tokens: mean(
                ok.iter()
                    .filter_map(|o| o.usage_prompt_tokens.map(|t| t as f64)),
            ),
            ttft_ms: Distribution::from_seconds(&samples.ttft),
            tpot_ms: Distribution::from_seconds(
                &ok.iter().filter_map(|o| tpot_s(o)).collect::<Vec<_>>(),
            ),
            e2e_ms: Distribution::from_seconds(&samples.e2e),
            goodput: cfg
                .goodput
                .map(|t| GoodputResults::new(t, &run.decoders, wall)),
            itl_p99_over_p50: ratio(itl_ms.p99, itl_ms.p50),
            itl_ms,
            per_adapter: cfg
                .adapters
                .as_ref()
                .map_or_else(Vec::new, |a| per_adapter(a, &run.decoders, wall)),
            errors: count_errors(&run.decoders),
        };
        let long_prompts = cfg.long_prompts.map(|_| long_results(run));
        Self {
            tool: "tessera-bench",
            started_unix_s: run.started_unix_s,
            config: echo(cfg, &run.model),
            results,
            long_prompts,
            samples,
        }
    }

    /// The JSON document written by `--json`.
    pub fn to_json(&self) -> String {
        // Serialising plain structs of numbers and strings cannot fail.
        serde_json::to_string_pretty(self).unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"))
    }

    /// The human-readable table printed after a run.
    pub fn table(&self) -> String {
        let (c, r) = (&self.config, &self.results);
        let mut s = String::new();
        let _ = writeln!(
            s,
            "tessera bench: {} model={} endpoint={} arrival={} concurrency={}",
            c.url, c.model, c.endpoint, c.arrival, c.concurrency
        );
        let lengths = match (&c.trace, c.dataset) {
            (Some(t), _) => format!("trace {t}"),
            (None, Dataset::Fixed) => format!(
                "prompt ~{} tok, output {} tok",
                c.prompt_tokens, c.output_tokens
            ),
            (None, Dataset::Chat) => format!(
                "chat lengths (prompt <= {} tok, output <= {} tok)",
                c.prompt_tokens, c.output_tokens
            ),
        };
        let _ = writeln!(
            s,
            "  {lengths} (shared prefix {} x {}), seed {}",
            c.shared_prefix_tokens, c.prefixes, c.seed
        );
        if let Some(a) = &c.adapters {
            let _ = writeln!(
                s,
                "  LoRA adapters by `{}`, request i gets the (i mod {})-th: {}",
                a.by,
                a.names.len(),
                a.names.join(", ")
            );
        }
        let _ = writeln!(
            s,
            "{:<22}{} ok, {} failed",
            "requests", r.requests_ok, r.requests_failed
        );
        let _ = writeln!(s, "{:<22}{:.2} s", "wall time", r.wall_time_s);
        let _ = writeln!(s, "{:<22}{:.2}", "output tok/s", r.output_tokens_per_s);
        let _ = writeln!(s, "{:<22}{:.3}", "requests/s", r.requests_per_s);
        table_lines(&mut s, &r.per_adapter);
        let _ = writeln!(
            s,
            "{:<22}{}",
            "mean output tok/req",
            opt(r.mean_output_tokens, 1)
        );
        let _ = writeln!(
            s,
            "{:<22}{}",
            "mean prompt tok/req",
            opt(r.mean_prompt_tokens, 1)
        );
        let _ = writeln!(
            s,
            "{:<22}{:>10}{:>10}{:>10}{:>10}{:>10}",
            "latency (ms)", "p50", "p90", "p99", "mean", "max"
        );
        dist_row(&mut s, "TTFT", &r.ttft_ms);
        dist_row(&mut s, "TPOT", &r.tpot_ms);
        dist_row(&mut s, "ITL", &r.itl_ms);
        dist_row(&mut s, "end-to-end", &r.e2e_ms);
        if let Some(g) = &r.goodput {
            let _ = writeln!(
                s,
                "{:<22}{:.3} req/s ({} of {} requests good, {:.1}%; targets {})",
                "goodput",
                g.goodput_rps,
                g.good_requests,
                g.requests,
                100.0 * g.fraction_good,
                g.targets
            );
        }
        let _ = writeln!(s, "{:<22}{}", "ITL p99/p50", opt(r.itl_p99_over_p50, 2));
        if let Some(lp) = &self.long_prompts {
            let _ = writeln!(
                s,
                "long prompts: {} ok, {} failed, {} cancelled at end",
                lp.ok, lp.failed, lp.cancelled_at_end
            );
            dist_row(&mut s, "long-prompt TTFT", &lp.ttft_ms);
        }
        error_lines(&mut s, &r.errors);
        if let Some(lp) = &self.long_prompts {
            error_lines(&mut s, &lp.errors);
        }
        s
    }
}

fn long_results(run: &RunResult) -> LongPromptResults {
    let ok: Vec<&Outcome> = run.long_prompts.iter().filter(|o| o.ok).collect();
    let ttft: Vec<f64> = ok.iter().filter_map(|o| o.ttft).collect();
    let e2e: Vec<f64> = ok.iter().map(|o| o.e2e).collect();
    LongPromptResults {
        completed: run.long_prompts.len(),
        ok: ok.len(),
        failed: run.long_prompts.len() - ok.len(),
        cancelled_at_end: run.long_prompts_cancelled,
        ttft_ms: Distribution::from_seconds(&ttft),
        e2e_ms: Distribution::from_seconds(&e2e),
        errors: count_errors(&run.long_prompts),
    }
}

fn echo(cfg: &BenchConfig, model: &str) -> ConfigEcho {
    ConfigEcho {
        label: cfg.label.clone(),
        url: cfg.base_url.clone(),
        model: model.to_string(),
        endpoint: cfg.endpoint,
        concurrency: cfg.concurrency,
        requests: cfg.requests,
        dataset: cfg.dataset,
        trace: cfg.trace.as_ref().map(|p| p.display().to_string()),
        prompt_tokens: match cfg.dataset {
            Dataset::Chat => cfg.workload.max_prompt_tokens(),
            Dataset::Fixed => cfg.prompt_tokens,
        },
        output_tokens: match &cfg.workload {
            crate::workload::Workload::Chat { max_output, .. } => *max_output,
            _ => cfg.output_tokens,
        },
        shared_prefix_tokens: cfg.shared_prefix_tokens,
        prefixes: cfg.prefixes,
        seed: cfg.seed,
        arrival: cfg.arrival.to_string(),
        duration_s: cfg.duration.map(|d| d.as_secs_f64()),
        temperature: cfg.temperature,
        top_p: cfg.top_p,
        warmup_requests: cfg.warmup,
        long_prompts: cfg.long_prompts,
        adapters: cfg.adapters.as_ref().map(|a| a.echo()),
    }
}

fn mean(values: impl Iterator<Item = f64>) -> Option<f64> {
    let (sum, n) = values.fold((0.0, 0usize), |(s, n), v| (s + v, n + 1));
    (n > 0).then(|| sum / n as f64)
}

fn ratio(a: Option<f64>, b: Option<f64>) -> Option<f64> {
    match (a, b) {
        (Some(a), Some(b)) if b > 0.0 => Some(a / b),
        _ => None,
    }
}

/// Distinct error messages, most frequent first, at most eight (`MAX_ERRORS`).
pub fn count_errors(outcomes: &[Outcome]) -> Vec<ErrorCount> {
    count_errors_of(outcomes.iter().filter_map(|o| o.error.as_deref()))
}

/// Distinct messages among `errors`, most frequent first, at most eight (`MAX_ERRORS`).
pub fn count_errors_of<'a>(errors: impl Iterator<Item = &'a str>) -> Vec<ErrorCount> {
    let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
    for e in errors {
        *counts.entry(e).or_default() += 1;
    }
    let mut v: Vec<ErrorCount> = counts
        .into_iter()
        .map(|(m, count)| ErrorCount {
            message: m.to_string(),
            count,
        })
        .collect();
    v.sort_by_key(|e| std::cmp::Reverse(e.count));
    v.truncate(MAX_ERRORS);
    v
}

fn opt(v: Option<f64>, decimals: usize) -> String {
    v.map_or_else(|| "-".to_string(), |x| format!("{x:.decimals$}"))
}

fn dist_row(s: &mut String, name: &str, d: &Distribution) {
    let _ = writeln!(
        s,
        "{name:<22}{:>10}{:>10}{:>10}{:>10}{:>10}",
        opt(d.p50, 1),
        opt(d.p90, 1),
        opt(d.p99, 1),
        opt(d.mean, 1),
        opt(d.max, 1)
    );
}

fn error_lines(s: &mut String, errors: &[ErrorCount]) {
    for e in errors {
        let _ = writeln!(s, "  error x{}: {}", e.count, e.message);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn failed(msg: &str) -> Outcome {
        Outcome {
            error: Some(msg.to_string()),
            ..Outcome::default()
        }
    }

    #[test]
    fn errors_are_counted_most_frequent_first() {
        let outcomes = vec![failed("b"), failed("a"), failed("b"), Outcome::default()];
        let errs = count_errors(&outcomes);
        assert_eq!(
            errs,
            vec![
                ErrorCount {
                    message: "b".into(),
                    count: 2
                },
                ErrorCount {
                    message: "a".into(),
                    count: 1
                }
            ]
        );
    }

    #[test]
    fn mean_and_ratio_handle_empty_and_zero() {
        assert_eq!(mean(std::iter::empty()), None);
        assert_eq!(mean([1.0, 2.0, 6.0].into_iter()), Some(3.0));
        assert_eq!(ratio(Some(3.0), Some(0.0)), None);
        assert_eq!(ratio(Some(3.0), Some(1.5)), Some(2.0));
    }
}
