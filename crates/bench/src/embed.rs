//! `--endpoint embeddings`: closed-loop clients posting batches of texts to `/v1/embeddings`.
//!
//! Design: `-c` clients each send their next request when the last one ends, drawing request
//! indices from one shared counter (as the completion runner does). Request `i` holds a number of
//! texts drawn uniformly from `--texts-per-request`, each of a length drawn uniformly from
//! `--text-tokens` words (the prompt builder's one-token words, so about that many tokens in
//! WordPiece, SentencePiece and BPE vocabularies alike); the draws are keyed by the seed and `i`,
//! so every run, and every server, gets the same requests. A request is `ok` when the status is
//! 2xx and `data` holds one non-empty vector per text; the report counts requests, embeddings
//! (texts) and the server's `usage.prompt_tokens` per second of wall time, and the end-to-end
//! latency distribution. Works against tessera, `llama-server --embeddings` and vLLM alike.

use std::{
    fmt::{self, Write as _},
    str::FromStr,
    sync::{
        atomic::{AtomicU64, Ordering},
        Arc,
    },
    time::{Duration, Instant},
};

use anyhow::Context as _;
use indicatif::{ProgressBar, ProgressStyle};
use serde::Serialize;
use serde_json::{json, Value};
use tokio::task::JoinSet;

use crate::{
    client::Client,
    config::BenchConfig,
    prompt::{stream_seed, PromptBuilder, SplitMix64},
    report::{count_errors_of, ErrorCount},
    runner::Stop,
    stats::Distribution,
};

/// Keeps the draws of text counts and lengths apart from every other stream of the seed.
const SALT_EMBED: u64 = 0x454d_4245_4400_0000;
/// Texts of one request are keyed `index * TEXT_KEYS + j`, so no two texts share words.
const TEXT_KEYS: u64 = 1 << 16;

/// An inclusive range typed `A-B`, or `N` for `N-N`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Span {
    pub min: usize,
    pub max: usize,
}

impl FromStr for Span {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let num = |t: &str| {
            t.trim()
                .parse::<usize>()
                .map_err(|_| format!("expected N or MIN-MAX (whole numbers), got {s:?}"))
        };
        let (min, max) = match s.split_once('-') {
            Some((a, b)) => (num(a)?, num(b)?),
            None => (num(s)?, num(s)?),
        };
        if min == 0 || min > max {
            return Err(format!("expected 1 <= MIN <= MAX, got {s:?}"));
        }
        Ok(Self { min, max })
    }
}

impl fmt::Display for Span {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}", self.min, self.max)
    }
}

impl Span {
    fn draw(&self, rng: &mut SplitMix64) -> usize {
        self.min + rng.below(self.max - self.min + 1)
    }
}

/// The texts of an embeddings run: how many per request and how long.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct EmbedWorkload {
    pub texts_per_request: Span,
    pub text_tokens: Span,
}

/// The default of `--texts-per-request`.
pub const DEFAULT_TEXTS: Span = Span { min: 1, max: 16 };
/// The default of `--text-tokens`.
pub const DEFAULT_TEXT_TOKENS: Span = Span { min: 10, max: 500 };
/// The most texts one request may hold (the text keys of a request stay apart below this).
pub const MAX_TEXTS: usize = 2048;

impl EmbedWorkload {
    /// The word counts of request `index`'s texts.
    pub fn lengths(&self, seed: u64, index: u64) -> Vec<usize> {
        let mut rng = SplitMix64::new(stream_seed(seed ^ SALT_EMBED, index));
        let n = self.texts_per_request.draw(&mut rng);
        (0..n).map(|_| self.text_tokens.draw(&mut rng)).collect()
    }

    /// Request `index`'s texts.
    pub fn texts(&self, prompts: &PromptBuilder, seed: u64, index: u64) -> Vec<String> {
        let base = index.wrapping_mul(TEXT_KEYS);
        self.lengths(seed, index)
            .into_iter()
            .zip(0u64..)
            .map(|(len, j)| prompts.prompt_with_len(base.wrapping_add(j), len))
            .collect()
    }
}

/// What one embeddings request did.
#[derive(Debug, Clone, Default)]
pub struct EmbedOutcome {
    pub ok: bool,
    pub error: Option<String>,
    /// Seconds from sending to the end of the body.
    pub e2e: f64,
    /// Texts sent.
    pub texts: usize,
    /// `usage.prompt_tokens`, when the server sent it.
    pub prompt_tokens: Option<u64>,
}

/// Checks an embeddings response for `texts` inputs; returns `usage.prompt_tokens`.
pub fn check_response(body: &[u8], texts: usize) -> Result<Option<u64>, String> {
    let v: Value = serde_json::from_slice(body).map_err(|e| format!("body is not JSON: {e}"))?;
    let data = v
        .get("data")
        .and_then(Value::as_array)
        .ok_or("no `data` array")?;
    if data.len() != texts {
        return Err(format!("{} vectors for {texts} texts", data.len()));
    }
    let good = |d: &Value| match d.get("embedding") {
        Some(Value::Array(a)) => !a.is_empty(),
        Some(Value::String(s)) => !s.is_empty(), // base64
        _ => false,
    };
    if let Some(bad) = data.iter().position(|d| !good(d)) {
        return Err(format!("data[{bad}] has no embedding"));
    }
    Ok(v.pointer("/usage/prompt_tokens").and_then(Value::as_u64))
}

async fn send(client: &Client, texts: Vec<String>) -> EmbedOutcome {
    let n = texts.len();
    let body = json!({ "model": client.model(), "input": texts });
    let started = Instant::now();
    let result = async {
        let resp = client
            .post_json(&body)
            .await
            .map_err(|e| format!("send: {e}"))?;
        let status = resp.status();
        let bytes = resp.bytes().await.map_err(|e| format!("body: {e}"))?;
        if !status.is_success() {
            let snippet: String = String::from_utf8_lossy(&bytes).chars().take(200).collect();
            return Err(format!("HTTP {}: {snippet}", status.as_u16()));
        }
        check_response(&bytes, n)
    }
    .await;
    let e2e = started.elapsed().as_secs_f64();
    match result {
        Ok(prompt_tokens) => EmbedOutcome {
            ok: true,
            error: None,
            e2e,
            texts: n,
            prompt_tokens,
        },
        Err(e) => EmbedOutcome {
            error: Some(e),
            e2e,
            texts: n,
            ..EmbedOutcome::default()
        },
    }
}

/// Raw results of one embeddings run.
#[derive(Debug)]
pub struct EmbedRun {
    pub model: String,
    pub outcomes: Vec<EmbedOutcome>,
    pub wall: Duration,
}

/// Runs the closed loop of `cfg` (its `embed` workload must be set).
pub async fn execute(
    cfg: &BenchConfig,
    show_progress: bool,
    stop: Stop,
) -> anyhow::Result<EmbedRun> {
    let workload = cfg
        .embed
        .context("an embeddings run without its workload")?;
    let model = Client::model_for(cfg).await?;
    let client = Client::new(cfg, model.clone())?;
    let prompts = Arc::new(PromptBuilder::new(cfg.seed, 0, 0));
    let mut warm_failed = 0;
    for i in 0..u64::from(cfg.warmup) {
        // Indices counted down from the top: texts no measured request sends.
        let texts = workload.texts(&prompts, cfg.seed, u64::MAX / TEXT_KEYS - i);
        warm_failed += usize::from(!send(&client, texts).await.ok);
    }
    if warm_failed > 0 {
        eprintln!("warm-up: {warm_failed} of {} requests failed", cfg.warmup);
    }
    let bar = match (show_progress, cfg.requests) {
        (true, Some(n)) => ProgressBar::new(n),
        (true, None) => ProgressBar::new_spinner(),
        (false, _) => ProgressBar::hidden(),
    };
    if let Ok(style) = ProgressStyle::with_template("{bar:40} {pos}/{len} requests {elapsed}") {
        bar.set_style(style);
    }
    let start = Instant::now();
    let deadline = cfg.duration.map(|d| start + d);
    let next = Arc::new(AtomicU64::new(0));
    let mut set = JoinSet::new();
    for _ in 0..cfg.concurrency {
        let (client, prompts, next, stop, bar) = (
            client.clone(),
            prompts.clone(),
            next.clone(),
            stop.clone(),
            bar.clone(),
        );
        let (limit, seed) = (cfg.requests, cfg.seed);
        set.spawn(async move {
            let mut out = Vec::new();
            loop {
                if stop.is_requested() || deadline.is_some_and(|d| Instant::now() >= d) {
                    break;
                }
                let i = next.fetch_add(1, Ordering::Relaxed);
                if limit.is_some_and(|n| i >= n) {
                    break;
                }
                out.push(send(&client, workload.texts(&prompts, seed, i)).await);
                bar.inc(1);
            }
            out
        });
    }
    let mut outcomes = Vec::new();
    while let Some(res) = set.join_next().await {
        match res {
            Ok(v) => outcomes.extend(v),
            Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
            Err(_) => {}
        }
    }
    let wall = start.elapsed();
    bar.finish_and_clear();
    Ok(EmbedRun {
        model,
        outcomes,
        wall,
    })
}

/// The echo of an embeddings run's configuration in its report.
#[derive(Debug, Clone, Serialize)]
pub struct EmbedConfigEcho {
    pub url: String,
    pub model: String,
    pub label: Option<String>,
    pub concurrency: usize,
    pub requests: Option<u64>,
    pub duration_s: Option<f64>,
    pub seed: u64,
    pub workload: EmbedWorkload,
}

/// The numbers of an embeddings run.
#[derive(Debug, Clone, Serialize)]
pub struct EmbedResults {
    pub requests_ok: usize,
    pub requests_failed: usize,
    pub wall_time_s: f64,
    pub embeddings_total: usize,
    pub prompt_tokens_total: u64,
    pub requests_per_s: f64,
    pub embeddings_per_s: f64,
    pub prompt_tokens_per_s: f64,
    pub latency_ms: Distribution,
    pub errors: Vec<ErrorCount>,
}

/// Everything an embeddings run produced.
#[derive(Debug, Clone, Serialize)]
pub struct EmbedReport {
    pub tool: &'static str,
    pub config: EmbedConfigEcho,
    pub results: EmbedResults,
}

impl EmbedReport {
    pub fn new(cfg: &BenchConfig, run: &EmbedRun) -> anyhow::Result<Self> {
        let workload = cfg
            .embed
            .context("an embeddings run without its workload")?;
        let wall = run.wall.as_secs_f64();
        let per_s = |x: f64| if wall > 0.0 { x / wall } else { 0.0 };
        let ok: Vec<&EmbedOutcome> = run.outcomes.iter().filter(|o| o.ok).collect();
        let embeddings_total: usize = ok.iter().map(|o| o.texts).sum();
        let prompt_tokens_total: u64 = ok.iter().filter_map(|o| o.prompt_tokens).sum();
        let e2e: Vec<f64> = ok.iter().map(|o| o.e2e).collect();
        let errors = count_errors_of(run.outcomes.iter().filter_map(|o| o.error.as_deref()));
        Ok(Self {
            tool: "tessera-bench",
            config: EmbedConfigEcho {
                url: cfg.base_url.clone(),
                model: run.model.clone(),
                label: cfg.label.clone(),
                concurrency: cfg.concurrency,
                requests: cfg.requests,
                duration_s: cfg.duration.map(|d| d.as_secs_f64()),
                seed: cfg.seed,
                workload,
            },
            results: EmbedResults {
                requests_ok: ok.len(),
                requests_failed: run.outcomes.len() - ok.len(),
                wall_time_s: wall,
                embeddings_total,
                prompt_tokens_total,
                requests_per_s: per_s(ok.len() as f64),
                embeddings_per_s: per_s(embeddings_total as f64),
                prompt_tokens_per_s: per_s(prompt_tokens_total as f64),
                latency_ms: Distribution::from_seconds(&e2e),
                errors,
            },
        })
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
            "tessera bench: {} model={} endpoint=embeddings concurrency={}",
            c.url, c.model, c.concurrency
        );
        let _ = writeln!(
            s,
            "texts per request {}, words per text {}, seed {}",
            c.workload.texts_per_request, c.workload.text_tokens, c.seed
        );
        let _ = writeln!(
            s,
            "requests {} ok, {} failed in {:.1} s",
            r.requests_ok, r.requests_failed, r.wall_time_s
        );
        let _ = writeln!(s, "{:<22}{:>12.2}", "requests/s", r.requests_per_s);
        let _ = writeln!(s, "{:<22}{:>12.2}", "embeddings/s", r.embeddings_per_s);
        let _ = writeln!(
            s,
            "{:<22}{:>12.1}",
            "prompt tokens/s", r.prompt_tokens_per_s
        );
        let d = &r.latency_ms;
        let f = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.1}"));
        let _ = writeln!(
            s,
            "latency ms: mean {} p50 {} p90 {} p99 {} max {}",
            f(d.mean),
            f(d.p50),
            f(d.p90),
            f(d.p99),
            f(d.max)
        );
        for e in &r.errors {
            let _ = writeln!(s, "error x{}: {}", e.count, e.message);
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spans_parse_single_numbers_and_ranges_and_refuse_the_rest() {
        assert_eq!("1-16".parse(), Ok(Span { min: 1, max: 16 }));
        assert_eq!("7".parse(), Ok(Span { min: 7, max: 7 }));
        for bad in ["0-3", "5-2", "a-b", "", "3-", "-1"] {
            assert!(bad.parse::<Span>().is_err(), "{bad}");
        }
    }

    #[test]
    fn requests_are_the_same_for_a_seed_and_stay_in_their_spans() {
        let w = EmbedWorkload {
            texts_per_request: Span { min: 1, max: 16 },
            text_tokens: Span { min: 10, max: 500 },
        };
        let mut counts = std::collections::BTreeSet::new();
        for i in 0..200 {
            let l = w.lengths(3, i);
            assert_eq!(l, w.lengths(3, i));
            assert!((1..=16).contains(&l.len()));
            assert!(l.iter().all(|n| (10..=500).contains(n)));
            counts.insert(l.len());
        }
        assert!(counts.len() > 10, "the counts vary: {counts:?}");
        assert_ne!(w.lengths(3, 0), w.lengths(4, 0));
        let prompts = PromptBuilder::new(3, 0, 0);
        let texts = w.texts(&prompts, 3, 5);
        let words: Vec<usize> = texts.iter().map(|t| t.split(' ').count()).collect();
        assert_eq!(words, w.lengths(3, 5));
        assert_ne!(texts.first(), texts.get(1));
    }

    #[test]
    fn a_response_needs_one_vector_per_text() {
        let good =
            br#"{"data":[{"embedding":[0.1]},{"embedding":"AAAA"}],"usage":{"prompt_tokens":9}}"#;
        assert_eq!(check_response(good, 2), Ok(Some(9)));
        assert_eq!(check_response(good, 3), Err("2 vectors for 3 texts".into()));
        let empty = br#"{"data":[{"embedding":[]}]}"#;
        assert_eq!(
            check_response(empty, 1),
            Err("data[0] has no embedding".into())
        );
        assert!(check_response(b"oops", 1).is_err());
        assert_eq!(
            check_response(br#"{"data":[{"embedding":[1]}]}"#, 1),
            Ok(None)
        );
    }
}
