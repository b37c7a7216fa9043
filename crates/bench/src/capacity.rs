//! `--find-capacity`: the highest request rate a server sustains within latency targets.
//!
//! Design: the search itself is `search` (pure, over a probe callback); this module turns one
//! probe into a benchmark run and a run into a [`ProbeRecord`]. A probe at rate R sends open-loop
//! arrivals (gamma gaps, `--burstiness`, no in-flight cap unless `--max-concurrency`) for a window
//! of `max(--capacity-duration, --capacity-warmup + --capacity-min-requests / R)` seconds, with a
//! seed of its own (fresh prompts and lengths, so no prefix cache carries over between probes).
//! Requests that *arrived* in the first `--capacity-warmup` seconds are left out of its statistics
//! (the server's queue is filling then). The probe ends at the window's end plus a drain time;
//! requests still running then are cut and counted as not good. The drain is long enough never to
//! cut a request that could still be good: with a `e2el` target, that target; with `ttft` and
//! `tpot`, `ttft + tpot · (longest output − 1)` (a request slower than that misses one of them);
//! otherwise the request `--timeout`.
//!
//! A probe's goodput is its good measured requests over the measured part of the window
//! (`window − warmup`), i.e. good requests per second of offered traffic; the probe passes when
//! its fraction good is at least `--capacity-attainment`.

use std::{path::PathBuf, time::Duration};

use anyhow::Context as _;
use clap::Args;
use serde::{Deserialize, Serialize};

use crate::{
    client::Outcome,
    config::{Arrival, BenchConfig},
    goodput::{tpot_s, GoodputResults, SloTargets},
    report::{count_errors, ErrorCount},
    runner::{self, Stop},
    search::{self, Attained, SearchParams, Stopped},
    stats::Distribution,
    workload::Dataset,
};

/// Capacity-search flags (flattened into `BenchArgs`).
#[derive(Debug, Clone, Args)]
#[command(next_help_heading = "Capacity search")]
pub struct CapacityArgs {
    /// Find the highest request rate at which at least `--capacity-attainment` of requests meet
    /// the `--goodput` targets (required), by doubling then bisection over open-loop probes.
    #[arg(long)]
    pub find_capacity: bool,
    /// Fraction of a probe's requests that must be good for the probe to pass.
    #[arg(long, value_name = "F", default_value_t = 0.9)]
    pub capacity_attainment: f64,
    /// Lowest request rate probed (requests/s); the search starts here and doubles.
    #[arg(long, value_name = "R", default_value_t = 0.05)]
    pub capacity_min_rate: f64,
    /// Highest request rate probed (requests/s).
    #[arg(long, value_name = "R", default_value_t = 8.0)]
    pub capacity_max_rate: f64,
    /// Stop when the failing rate is within this relative distance of the passing one.
    #[arg(long, value_name = "F", default_value_t = 0.1)]
    pub capacity_precision: f64,
    /// At most this many probes.
    #[arg(long, value_name = "N", default_value_t = 12)]
    pub capacity_steps: u32,
    /// Seconds of arrivals per probe (longer at low rates, see `--capacity-min-requests`).
    #[arg(long, value_name = "SECS", default_value_t = 120.0)]
    pub capacity_duration: f64,
    /// Requests arriving in a probe's first SECS seconds are left out of its statistics.
    #[arg(long, value_name = "SECS", default_value_t = 20.0)]
    pub capacity_warmup: f64,
    /// A probe's window is stretched so that about this many requests arrive after its warm-up.
    #[arg(long, value_name = "N", default_value_t = 20)]
    pub capacity_min_requests: u32,
    /// Send no load: draw the capacity JSON files written by earlier runs (`--json`) as one chart,
    /// a series per file (repeat the flag), into `--chart`.
    #[arg(long, value_name = "FILE")]
    pub plot: Vec<PathBuf>,
}

/// A checked capacity-search configuration.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CapacityConfig {
    pub search: SearchParams,
    pub targets: SloTargets,
    pub burstiness: f64,
    /// In-flight cap of every probe (`None`: none).
    pub max_concurrency: Option<usize>,
    pub duration_s: f64,
    pub warmup_s: f64,
    pub min_requests: u32,
    pub drain_s: f64,
}

impl CapacityArgs {
    /// Checks the flags against the run's validated `cfg` and `burstiness`.
    pub fn validate(&self, cfg: &BenchConfig, burstiness: f64) -> anyhow::Result<CapacityConfig> {
        let targets = cfg.goodput.context(
            "--find-capacity needs --goodput targets, e.g. --goodput ttft:2000 tpot:100",
        )?;
        if !matches!(cfg.arrival, Arrival::Closed) {
            anyhow::bail!("--find-capacity chooses the request rates itself: drop --request-rate / --arrival / a timed --trace");
        }
        let a = self.capacity_attainment;
        anyhow::ensure!(
            a > 0.0 && a <= 1.0,
            "--capacity-attainment must be in (0, 1], got {a}"
        );
        let (lo, hi) = (self.capacity_min_rate, self.capacity_max_rate);
        anyhow::ensure!(
            lo.is_finite() && hi.is_finite() && lo > 0.0 && hi >= lo,
            "--capacity-min-rate and --capacity-max-rate must be positive with min <= max, got {lo} and {hi}"
        );
        let p = self.capacity_precision;
        anyhow::ensure!(
            p.is_finite() && p > 0.0,
            "--capacity-precision must be positive, got {p}"
        );
        anyhow::ensure!(
            self.capacity_steps >= 1,
            "--capacity-steps must be at least 1"
        );
        let (d, w) = (self.capacity_duration, self.capacity_warmup);
        anyhow::ensure!(
            d.is_finite() && d > 0.0 && d < 1e7,
            "--capacity-duration must be positive, got {d}"
        );
        anyhow::ensure!(
            w.is_finite() && w >= 0.0 && w < d,
            "--capacity-warmup must be in [0, --capacity-duration), got {w}"
        );
        Ok(CapacityConfig {
            search: SearchParams {
                min_rate: lo,
                max_rate: hi,
                attainment: a,
                precision: p,
                max_probes: self.capacity_steps,
            },
            targets,
            burstiness,
            max_concurrency: cfg.max_in_flight(),
            duration_s: d,
            warmup_s: w,
            min_requests: self.capacity_min_requests,
            drain_s: drain_s(&targets, longest_output(cfg), cfg.timeout),
        })
    }
}

fn longest_output(cfg: &BenchConfig) -> u32 {
    match &cfg.workload {
        crate::workload::Workload::Fixed(s) => s.output_tokens,
        crate::workload::Workload::Chat { max_output, .. } => *max_output,
        crate::workload::Workload::Trace(specs) => {
            specs.iter().map(|s| s.output_tokens).max().unwrap_or(1)
        }
    }
}

/// How long after a probe's window its requests may still finish and be good (module docs).
pub fn drain_s(t: &SloTargets, longest_output: u32, timeout: Duration) -> f64 {
    let by_parts = match (t.ttft_ms, t.tpot_ms) {
        (Some(ttft), Some(tpot)) => Some(ttft + tpot * f64::from(longest_output.saturating_sub(1))),
        _ => None,
    };
    let bound_ms = match (t.e2el_ms, by_parts) {
        (Some(e), Some(b)) => Some(e.min(b)),
        (e, b) => e.or(b),
    };
    // A small margin for the client's own timing; never beyond the request timeout.
    bound_ms.map_or(timeout.as_secs_f64(), |ms| {
        (ms / 1000.0 + 1.0).min(timeout.as_secs_f64())
    })
}

/// One probe's figures (requests that arrived after the warm-up only).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProbeRecord {
    /// Offered request rate, requests/s.
    pub rate: f64,
    pub seed: u64,
    /// Seconds of arrivals.
    pub window_s: f64,
    /// Requests sent in the whole window, warm-up included.
    pub requests_sent: usize,
    /// Requests that arrived after the warm-up: the ones counted below.
    pub requests_measured: usize,
    pub requests_ok: usize,
    pub requests_failed: usize,
    /// Of the failed: still running at the probe's cutoff.
    pub requests_cut: usize,
    pub good_requests: usize,
    pub fraction_good: f64,
    /// Good measured requests per second of the measured window.
    pub goodput_rps: f64,
    /// Successful measured requests per second of the measured window.
    pub request_throughput_rps: f64,
    pub output_tokens_per_s: f64,
    pub ttft_ms: Distribution,
    pub tpot_ms: Distribution,
    pub itl_ms: Distribution,
    pub e2e_ms: Distribution,
    /// Why measured requests failed, most frequent first.
    #[serde(default)]
    pub errors: Vec<ErrorCount>,
    pub passed: bool,
}

impl Attained for ProbeRecord {
    fn fraction_good(&self) -> f64 {
        self.fraction_good
    }
}

impl ProbeRecord {
    /// Summarises a probe's outcomes; `passed` is left for the search to set.
    pub fn new(
        rate: f64,
        seed: u64,
        window_s: f64,
        cc: &CapacityConfig,
        outcomes: &[Outcome],
    ) -> Self {
        let measured: Vec<&Outcome> = outcomes
            .iter()
            .filter(|o| o.arrived_s.is_some_and(|t| t >= cc.warmup_s))
            .collect();
        let span = (window_s - cc.warmup_s).max(f64::MIN_POSITIVE);
        let ok: Vec<&Outcome> = measured.iter().copied().filter(|o| o.ok).collect();
        let g = GoodputResults::new(cc.targets, measured.iter().copied(), span);
        let secs = |f: &dyn Fn(&Outcome) -> Option<f64>| -> Vec<f64> {
            ok.iter().filter_map(|o| f(o)).collect()
        };
        let itl: Vec<f64> = ok.iter().flat_map(|o| o.itl.iter().copied()).collect();
        let cut = measured
            .iter()
            .filter(|o| o.error.as_deref().is_some_and(|e| e.contains("cutoff")))
            .count();
        let out_tokens: u64 = ok.iter().map(|o| o.output_tokens()).sum();
        Self {
            rate,
            seed,
            window_s,
            requests_sent: outcomes.len(),
            requests_measured: measured.len(),
            requests_ok: ok.len(),
            requests_failed: measured.len() - ok.len(),
            requests_cut: cut,
            good_requests: g.good_requests,
            fraction_good: g.fraction_good,
            goodput_rps: g.goodput_rps,
            request_throughput_rps: ok.len() as f64 / span,
            output_tokens_per_s: out_tokens as f64 / span,
            ttft_ms: Distribution::from_seconds(&secs(&|o| o.ttft)),
            tpot_ms: Distribution::from_seconds(&secs(&tpot_s)),
            itl_ms: Distribution::from_seconds(&itl),
            e2e_ms: Distribution::from_seconds(&secs(&|o| Some(o.e2e))),
            errors: count_errors(&measured.iter().map(|o| (*o).clone()).collect::<Vec<_>>()),
            passed: false,
        }
    }
}

/// The search's answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Answer {
    /// Highest passing rate below every failing one, requests/s (`None`: the minimum failed).
    pub capacity_rps: Option<f64>,
    /// Lowest failing rate (`None`: none failed).
    pub lowest_failing_rps: Option<f64>,
    pub stopped: Stopped,
}

/// What `--find-capacity --json` writes, and `--plot` reads.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CapacityReport {
    pub tool: String,
    pub kind: String,
    pub label: Option<String>,
    pub started_unix_s: f64,
    pub url: String,
    pub model: String,
    pub endpoint: String,
    pub dataset: Dataset,
    pub trace: Option<String>,
    /// Fixed: the prompt length; chat: the longest prompt.
    pub prompt_tokens: usize,
    /// Fixed: the output length; chat: the longest output.
    pub output_tokens: u32,
    pub seed: u64,
    pub capacity: CapacityConfig,
    pub probes: Vec<ProbeRecord>,
    pub answer: Answer,
}

/// Seed of probe `k`: far apart from the base seed and each other.
pub fn probe_seed(base: u64, k: usize) -> u64 {
    base.wrapping_add((k as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15))
}

/// The configuration of probe `k` at `rate`.
fn probe_config(cfg: &BenchConfig, cc: &CapacityConfig, k: usize, rate: f64) -> (BenchConfig, f64) {
    let window = cc
        .duration_s
        .max(cc.warmup_s + f64::from(cc.min_requests) / rate);
    let seed = probe_seed(cfg.seed, k);
    let mut p = cfg.clone();
    p.arrival = Arrival::Open {
        rate,
        burstiness: cc.burstiness,
    };
    p.concurrency = cc.max_concurrency.unwrap_or(0);
    p.requests = None;
    p.duration = Some(Duration::from_secs_f64(window));
    p.cutoff = Some(Duration::from_secs_f64(window + cc.drain_s));
    p.seed = seed;
    p.workload = cfg.workload.reseeded(seed);
    p.long_prompts = None;
    if k > 0 {
        p.warmup = 0;
    }
    (p, window)
}

/// Runs the search against the server of `cfg`.
pub async fn find(
    cfg: &BenchConfig,
    cc: &CapacityConfig,
    show_progress: bool,
    stop: &Stop,
) -> anyhow::Result<CapacityReport> {
    let started_unix_s = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64());
    // The model the first probe discovered is named in the later ones' requests.
    let model = std::cell::RefCell::new(cfg.model.clone());
    let result = search::search(&cc.search, |k, rate| {
        let (p, window) = probe_config(cfg, cc, k, rate);
        let p = BenchConfig {
            model: model.borrow().clone(),
            ..p
        };
        let stop = stop.clone();
        let model = &model;
        async move {
            anyhow::ensure!(
                !stop.is_requested(),
                "interrupted before probe {} at {rate:.3} req/s",
                k + 1
            );
            eprintln!("probe {}: {rate:.3} req/s for {window:.0} s ...", k + 1);
            let run = runner::execute(&p, show_progress, stop.clone())
                .await
                .with_context(|| format!("probe {} at {rate:.3} req/s", k + 1))?;
            // A probe cut short by Ctrl-C would be judged on a partial window: not a verdict.
            anyhow::ensure!(
                !stop.is_requested(),
                "interrupted during probe {} at {rate:.3} req/s",
                k + 1
            );
            *model.borrow_mut() = Some(run.model.clone());
            let mut rec = ProbeRecord::new(rate, p.seed, window, cc, &run.decoders);
            rec.passed = rec.fraction_good >= cc.search.attainment;
            eprintln!(
                "probe {}: {rate:.3} req/s: {}/{} good ({:.1}%; {} failed, {} of them cut) -> {}",
                k + 1,
                rec.good_requests,
                rec.requests_measured,
                100.0 * rec.fraction_good,
                rec.requests_failed,
                rec.requests_cut,
                if rec.passed { "pass" } else { "fail" }
            );
            Ok(rec)
        }
    })
    .await?;
    Ok(CapacityReport {
        tool: "tessera-bench".into(),
        kind: "capacity".into(),
        label: cfg.label.clone(),
        started_unix_s,
        url: cfg.base_url.clone(),
        model: model.into_inner().unwrap_or_default(),
        endpoint: cfg.endpoint.to_string(),
        dataset: cfg.dataset,
        trace: cfg.trace.as_ref().map(|p| p.display().to_string()),
        prompt_tokens: cfg.workload.max_prompt_tokens(),
        output_tokens: longest_output(cfg),
        seed: cfg.seed,
        capacity: cc.clone(),
        probes: result.probes.into_iter().map(|p| p.result).collect(),
        answer: Answer {
            capacity_rps: result.capacity,
            lowest_failing_rps: result.lowest_failing,
            stopped: result.stopped,
        },
    })
}

impl CapacityReport {
    /// The JSON document written by `--json`.
    pub fn to_json(&self) -> String {
        // Serialising plain structs of numbers and strings cannot fail.
        serde_json::to_string_pretty(self).unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"))
    }

    /// The table printed after a search: one row per probe, in rate order, then the answer.
    pub fn table(&self) -> String {
        use std::fmt::Write as _;
        let c = &self.capacity;
        let mut s = String::new();
        let _ = writeln!(
            s,
            "tessera bench --find-capacity: {} model={} {}; targets {}, attainment {:.0}%",
            self.label.as_deref().unwrap_or(&self.url),
            self.model,
            match self.dataset {
                Dataset::Chat => format!(
                    "chat lengths (<= {} / {} tok)",
                    self.prompt_tokens, self.output_tokens
                ),
                Dataset::Fixed => format!("{} / {} tok", self.prompt_tokens, self.output_tokens),
            },
            c.targets,
            100.0 * c.search.attainment
        );
        let _ = writeln!(
            s,
            "{:>8}{:>6}{:>7}{:>9}{:>9} |{:>8}{:>8}{:>8} |{:>7}{:>7}{:>7} | verdict",
            "req/s",
            "n",
            "good%",
            "goodput",
            "tok/s",
            "TTFT50",
            "TTFT90",
            "TTFT99",
            "TPOT50",
            "TPOT90",
            "TPOT99"
        );
        let mut probes: Vec<&ProbeRecord> = self.probes.iter().collect();
        probes.sort_by(|a, b| a.rate.total_cmp(&b.rate));
        let f = |v: Option<f64>| v.map_or_else(|| "-".to_string(), |x| format!("{x:.0}"));
        for p in probes {
            let _ = writeln!(
                s,
                "{:>8.3}{:>6}{:>7.1}{:>9.3}{:>9.1} |{:>8}{:>8}{:>8} |{:>7}{:>7}{:>7} | {}",
                p.rate,
                p.requests_measured,
                100.0 * p.fraction_good,
                p.goodput_rps,
                p.output_tokens_per_s,
                f(p.ttft_ms.p50),
                f(p.ttft_ms.p90),
                f(p.ttft_ms.p99),
                f(p.tpot_ms.p50),
                f(p.tpot_ms.p90),
                f(p.tpot_ms.p99),
                if p.passed { "pass" } else { "fail" }
            );
        }
        let a = &self.answer;
        let answer = match (a.capacity_rps, a.stopped) {
            (None, _) => format!("below {:.3} req/s (the lowest rate probed failed)", c.search.min_rate),
            (Some(r), Stopped::MaxRatePassed) => format!("at least {r:.3} req/s (the highest rate probed passed)"),
            (Some(r), Stopped::Converged) => format!(
                "{r:.3} req/s (passes; {} fails)",
                a.lowest_failing_rps.map_or("-".into(), |h| format!("{h:.3}"))
            ),
            (Some(r), Stopped::ProbeLimit | Stopped::MinRateFailed) => format!(
                "{r:.3} req/s passes; the probe limit ended the search before {} (fails) was within {:.0}%",
                a.lowest_failing_rps.map_or("-".into(), |h| format!("{h:.3}")),
                100.0 * c.search.precision
            ),
        };
        let _ = writeln!(s, "capacity: {answer}");
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(arrived: f64, ttft: f64, e2e: f64, tokens: u64) -> Outcome {
        Outcome {
            ok: true,
            ttft: Some(ttft),
            e2e,
            token_chunks: tokens,
            itl: vec![0.01; tokens.saturating_sub(1) as usize],
            arrived_s: Some(arrived),
            ..Outcome::default()
        }
    }

    fn cc() -> CapacityConfig {
        CapacityConfig {
            search: SearchParams {
                min_rate: 0.05,
                max_rate: 8.0,
                attainment: 0.9,
                precision: 0.1,
                max_probes: 12,
            },
            targets: SloTargets {
                ttft_ms: Some(500.0),
                tpot_ms: Some(100.0),
                e2el_ms: None,
            },
            burstiness: 1.0,
            max_concurrency: None,
            duration_s: 12.0,
            warmup_s: 2.0,
            min_requests: 0,
            drain_s: 1.0,
        }
    }

    #[test]
    fn probe_statistics_leave_out_requests_that_arrived_in_the_warmup() {
        let outcomes = vec![
            ok(0.5, 5.0, 6.0, 10), // warm-up: slow, not counted
            ok(2.0, 0.2, 1.0, 10), // good: tpot 89 ms
            ok(3.0, 0.6, 1.0, 10), // ttft misses
            Outcome {
                error: Some("still running at the probe's cutoff".into()),
                arrived_s: Some(11.0),
                ..Outcome::default()
            },
        ];
        let r = ProbeRecord::new(1.0, 7, 12.0, &cc(), &outcomes);
        assert_eq!((r.requests_sent, r.requests_measured), (4, 3));
        assert_eq!(
            (r.requests_ok, r.requests_failed, r.requests_cut),
            (2, 1, 1)
        );
        assert_eq!(r.good_requests, 1);
        assert!((r.fraction_good - 1.0 / 3.0).abs() < 1e-12);
        // 1 good request over the 10 s measured window.
        assert!((r.goodput_rps - 0.1).abs() < 1e-12);
        assert_eq!(r.ttft_ms.count, 2);
        assert!((r.ttft_ms.max.expect("max") - 600.0).abs() < 1e-9);
    }

    #[test]
    fn drain_never_cuts_a_request_that_could_still_be_good() {
        let t = |ttft, tpot, e2el| SloTargets {
            ttft_ms: ttft,
            tpot_ms: tpot,
            e2el_ms: e2el,
        };
        let to = Duration::from_secs(600);
        // 2 s + 100 ms x 511 gaps = 53.1 s, plus the 1 s margin.
        assert!((drain_s(&t(Some(2000.0), Some(100.0), None), 512, to) - 54.1).abs() < 1e-9);
        assert!(
            (drain_s(&t(Some(2000.0), Some(100.0), Some(9000.0)), 512, to) - 10.0).abs() < 1e-9
        );
        assert_eq!(drain_s(&t(Some(2000.0), None, None), 512, to), 600.0);
        assert_eq!(drain_s(&t(None, None, Some(1e9)), 512, to), 600.0);
    }

    #[test]
    fn probes_get_fresh_seeds_open_loop_arrivals_and_stretched_windows_at_low_rates() {
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            args: crate::config::BenchArgs,
        }
        let argv = [
            "bench",
            "--dataset",
            "chat",
            "--find-capacity",
            "--goodput",
            "ttft:500",
            "tpot:100",
        ];
        let args = <Cli as clap::Parser>::try_parse_from(argv)
            .expect("argv")
            .args;
        let cfg = args.validate().expect("valid");
        let mut c = args
            .capacity
            .validate(&cfg, 1.0)
            .expect("valid capacity flags");
        c.min_requests = 20;
        let (p0, w0) = probe_config(&cfg, &c, 0, 0.1);
        let (p1, w1) = probe_config(&cfg, &c, 1, 4.0);
        // 0.1 req/s: 20 s warm-up + 20 / 0.1 = 220 s > 120 s; at 4 req/s the duration rules.
        assert_eq!((w0, w1), (220.0, 120.0));
        assert_ne!(p0.seed, p1.seed);
        assert_ne!(p0.workload, p1.workload, "fresh lengths per probe");
        assert_eq!(
            p1.arrival,
            Arrival::Open {
                rate: 4.0,
                burstiness: 1.0
            }
        );
        assert_eq!(
            (p1.requests, p1.duration),
            (None, Some(Duration::from_secs(120)))
        );
        // Open loop without a cap unless --max-concurrency is given.
        assert_eq!((c.max_concurrency, p1.max_in_flight()), (None, None));
        let capped_argv = argv.iter().chain(&["--max-concurrency", "5"]);
        let capped = <Cli as clap::Parser>::try_parse_from(capped_argv)
            .expect("argv")
            .args;
        let capped_cfg = capped.validate().expect("valid");
        let cc5 = capped.capacity.validate(&capped_cfg, 1.0).expect("valid");
        assert_eq!(
            probe_config(&capped_cfg, &cc5, 0, 1.0).0.max_in_flight(),
            Some(5)
        );
        // Cut at the window plus 0.5 s + 100 ms x 511 + 1 s.
        let cut = p1.cutoff.expect("cutoff").as_secs_f64();
        assert!((cut - (120.0 + 52.6)).abs() < 1e-6, "{cut}");
    }
}
