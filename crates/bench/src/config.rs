//! Command-line arguments and the validated configuration of one run.
//!
//! Design: [`BenchArgs`] is what clap parses (shared by `tessera bench` and the standalone
//! `tessera-bench` binary); [`BenchArgs::validate`] turns it into a [`BenchConfig`] whose invariants the
//! runner relies on: at least one request slot, a finite bound on the run (a request count, a duration,
//! or both), positive finite rates and intervals, a plain-`http` URL (the client is built without TLS —
//! the bench targets a server on this machine).

use std::{fmt, path::PathBuf, str::FromStr, time::Duration};

use clap::{Args, ValueEnum};
use serde::Serialize;

use crate::{
    adapters::{AdapterArgs, Adapters},
    capacity::CapacityArgs,
    embed::{EmbedWorkload, Span, DEFAULT_TEXTS, DEFAULT_TEXT_TOKENS, MAX_TEXTS},
    goodput::{SloTarget, SloTargets},
    workload::{read_trace, Dataset, RequestSpec, Workload},
};

/// Request count used when neither `--requests` nor `--duration` bounds the run.
pub const DEFAULT_REQUESTS: u64 = 100;

/// Which OpenAI endpoint to drive.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Endpoint {
    /// `POST /v1/completions` with a `prompt`.
    Completions,
    /// `POST /v1/chat/completions` with one user message.
    Chat,
    /// `POST /v1/embeddings` with a list of texts (`--texts-per-request`, `--text-tokens`).
    Embeddings,
}

impl fmt::Display for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Completions => "completions",
            Self::Chat => "chat",
            Self::Embeddings => "embeddings",
        })
    }
}

/// When requests are issued.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Arrival {
    /// Each of the `--concurrency` clients sends its next request as soon as the last one finishes.
    Closed,
    /// `--arrival poisson:RATE` as typed; validation turns it into `Open { rate, burstiness: 1 }`.
    Poisson(f64),
    /// Open loop: gamma-distributed gaps of mean `1 / rate` and shape `burstiness` (an infinite
    /// rate sends every request at once); at most `--max-concurrency` in flight when given.
    Open { rate: f64, burstiness: f64 },
    /// Open loop at the arrival times of the `--trace` file.
    Trace,
}

impl FromStr for Arrival {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if s == "closed" {
            return Ok(Self::Closed);
        }
        let rate = s
            .strip_prefix("poisson:")
            .ok_or_else(|| format!("expected `closed` or `poisson:RATE`, got {s:?}"))?;
        let rate: f64 = rate
            .parse()
            .map_err(|_| format!("poisson rate must be a number, got {rate:?}"))?;
        if !(rate.is_finite() && rate > 0.0) {
            return Err(format!("poisson rate must be positive, got {rate}"));
        }
        Ok(Self::Poisson(rate))
    }
}

impl fmt::Display for Arrival {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Closed => write!(f, "closed"),
            Self::Poisson(r) => write!(f, "poisson:{r}"),
            Self::Open { rate, burstiness } => write!(f, "rate:{rate} burstiness:{burstiness}"),
            Self::Trace => write!(f, "trace"),
        }
    }
}

/// Parses a `--request-rate`: a positive number of requests per second, or `inf`.
fn parse_rate(s: &str) -> Result<f64, String> {
    let r: f64 = s
        .parse()
        .map_err(|_| format!("expected requests per second or `inf`, got {s:?}"))?;
    if r > 0.0 && !r.is_nan() {
        Ok(r)
    } else {
        Err(format!("request rate must be positive, got {s}"))
    }
}

/// `tessera bench`: a load generator for any OpenAI-compatible server (tessera, llama-server, vLLM).
#[derive(Debug, Clone, Args)]
pub struct BenchArgs {
    /// Base URL of the server (`http://host:port`, with or without a trailing `/v1`).
    #[arg(long, value_name = "URL", default_value = "http://127.0.0.1:8000")]
    pub url: String,
    /// API key, sent as `Authorization: Bearer KEY`.
    #[arg(long, value_name = "KEY")]
    pub api_key: Option<String>,
    /// Model name to put in requests (default: the first one listed by `GET /v1/models`).
    #[arg(long, value_name = "NAME")]
    pub model: Option<String>,
    /// Closed loop: number of clients, each sending its next request when the last one ends
    /// (default 1). Open loop (`--request-rate`, `--arrival poisson:R`, a timed `--trace`): the most
    /// requests in flight at once, later arrivals wait for a slot (default: no cap).
    #[arg(long, value_name = "N", short = 'c', visible_alias = "max-concurrency")]
    pub concurrency: Option<usize>,
    /// Open loop: requests per second (`inf`: all at once), arriving with gamma-distributed gaps
    /// (see `--burstiness`) whatever the server's speed.
    #[arg(long, value_name = "R", value_parser = parse_rate)]
    pub request_rate: Option<f64>,
    /// Shape of the gamma-distributed gaps between arrivals (mean kept at 1/R): 1 is a Poisson
    /// process, below 1 burstier, above 1 more regular (vLLM's `--burstiness`).
    #[arg(long, value_name = "B", default_value_t = 1.0)]
    pub burstiness: f64,
    /// Total number of requests (default: 100, or unbounded within `--duration`).
    #[arg(long, value_name = "N", short = 'n')]
    pub requests: Option<u64>,
    /// Request lengths: `fixed` (`--prompt-tokens` / `--output-tokens`) or `chat`: long-tailed,
    /// lognormal prompt (median 256) and output (median 128) lengths, clipped to
    /// `--max-prompt-tokens` / `--max-output-tokens` and seeded by `--seed`. The `chat` parameters
    /// are this tool's choice, not fitted to a dataset (see the crate README).
    #[arg(long, value_enum, default_value_t = Dataset::Fixed)]
    pub dataset: Dataset,
    /// `--dataset chat`: longest prompt, in tokens.
    #[arg(long, value_name = "P", default_value_t = 1024)]
    pub max_prompt_tokens: usize,
    /// `--dataset chat`: longest output, in tokens.
    #[arg(long, value_name = "O", default_value_t = 512)]
    pub max_output_tokens: u32,
    /// Per-request lengths from a JSON Lines file, one `{"prompt_tokens": P, "output_tokens": O}`
    /// per line, optionally with `"arrival_s": T` on every line (then those arrival times are
    /// replayed and `--request-rate` must not be given). At most one pass over the file.
    #[arg(long, value_name = "FILE", conflicts_with = "dataset")]
    pub trace: Option<PathBuf>,
    /// Latency targets in milliseconds, vLLM style: `--goodput ttft:2000 tpot:100` (keys: ttft,
    /// tpot, e2el). A request is good when it succeeded and meets every one; reports goodput.
    #[arg(long, value_name = "KEY:MS", num_args = 1..)]
    pub goodput: Vec<SloTarget>,
    /// Name of this run in JSON files and charts (e.g. "tessera", "llama-server -np 16").
    #[arg(long, value_name = "NAME")]
    pub label: Option<String>,
    /// Approximate prompt length in tokens, shared prefix included.
    #[arg(long, value_name = "P", default_value_t = 256)]
    pub prompt_tokens: usize,
    /// Output tokens per request (`max_tokens`, with `ignore_eos: true`).
    #[arg(long, value_name = "O", default_value_t = 128)]
    pub output_tokens: u32,
    /// Leading tokens of the prompt that are the same in every request (for prefix caching).
    #[arg(long, value_name = "S", default_value_t = 0)]
    pub shared_prefix_tokens: usize,
    /// Distinct shared prefixes (many users, each with a long system prompt): each request
    /// starts with one of them, picked pseudo-randomly from the seed and the request index.
    #[arg(long, value_name = "K", default_value_t = 1)]
    pub prefixes: usize,
    /// Endpoint to drive.
    #[arg(long, value_enum, default_value_t = Endpoint::Completions)]
    pub endpoint: Endpoint,
    /// Seed of the prompt words, the `chat` lengths and the open-loop arrival times.
    #[arg(long, value_name = "X", default_value_t = 0)]
    pub seed: u64,
    /// Write the report as JSON to this file.
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// Write an SVG chart of the latency distributions (CDFs) to this file.
    #[arg(long, value_name = "FILE")]
    pub chart: Option<PathBuf>,
    /// Stop issuing new requests after this many seconds (in-flight ones finish).
    #[arg(long, value_name = "SECS")]
    pub duration: Option<f64>,
    /// Arrival process: `closed` or `poisson:RATE`, an alias of `--request-rate RATE`.
    #[arg(long, value_name = "closed|poisson:RATE", default_value = "closed")]
    pub arrival: Arrival,
    /// Mixed load: send a long prompt every this many seconds beside the decoders.
    #[arg(long, value_name = "SECS")]
    pub long_prompt_every: Option<f64>,
    /// Mixed load: tokens of each long prompt.
    #[arg(long, value_name = "T", default_value_t = 2000)]
    pub long_prompt_tokens: usize,
    /// Sampling temperature sent with every request.
    #[arg(long, value_name = "T", default_value_t = 0.0)]
    pub temperature: f32,
    /// Nucleus sampling: `top_p` sent with every request (not sent when absent).
    #[arg(long, value_name = "P")]
    pub top_p: Option<f32>,
    /// Per-request timeout in seconds (connection to last byte).
    #[arg(long, value_name = "SECS", default_value_t = 600.0)]
    pub timeout: f64,
    /// Requests sent one at a time before the measured run and left out of the results (they
    /// page in the model's weights and warm the server's caches).
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub warmup: u32,
    /// Do not draw a progress bar.
    #[arg(long)]
    pub no_progress: bool,
    /// `--endpoint embeddings`: texts per request, `N` or `MIN-MAX`, drawn uniformly (default
    /// 1-16).
    #[arg(long, value_name = "N|MIN-MAX")]
    pub texts_per_request: Option<Span>,
    /// `--endpoint embeddings`: words per text (about as many tokens), `N` or `MIN-MAX`, drawn
    /// uniformly (default 10-500).
    #[arg(long, value_name = "N|MIN-MAX")]
    pub text_tokens: Option<Span>,
    #[command(flatten)]
    pub adapters: AdapterArgs,
    #[command(flatten)]
    pub capacity: CapacityArgs,
}

/// Mixed-load long prompts.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct LongPrompts {
    /// Seconds between two long prompts.
    pub every_s: f64,
    /// Tokens per long prompt.
    pub tokens: usize,
}

/// The traffic part of a validated configuration.
struct Traffic {
    arrival: Arrival,
    concurrency: usize,
    requests: Option<u64>,
    workload: Workload,
    trace_arrivals: Option<std::sync::Arc<[f64]>>,
}

/// A validated run configuration.
#[derive(Debug, Clone)]
pub struct BenchConfig {
    /// Base URL without a trailing `/` or `/v1`.
    pub base_url: String,
    pub api_key: Option<String>,
    pub model: Option<String>,
    /// Closed loop: the clients; open loop: the in-flight cap, or 0 for none.
    pub concurrency: usize,
    /// Upper bound on requests; `None` only when `duration` is set.
    pub requests: Option<u64>,
    pub prompt_tokens: usize,
    pub output_tokens: u32,
    pub shared_prefix_tokens: usize,
    /// Distinct shared prefixes (at least 1).
    pub prefixes: usize,
    pub endpoint: Endpoint,
    pub seed: u64,
    pub duration: Option<Duration>,
    pub arrival: Arrival,
    pub long_prompts: Option<LongPrompts>,
    pub temperature: f32,
    pub top_p: Option<f32>,
    pub timeout: Duration,
    /// Unmeasured requests sent one at a time before the run.
    pub warmup: u32,
    /// Request lengths (`prompt_tokens` / `output_tokens` are the fixed pair or the chat bounds).
    pub workload: Workload,
    pub dataset: Dataset,
    pub trace: Option<PathBuf>,
    /// The trace's arrival times, when `arrival` is [`Arrival::Trace`].
    pub trace_arrivals: Option<std::sync::Arc<[f64]>>,
    pub goodput: Option<SloTargets>,
    pub label: Option<String>,
    /// Requests still running this long after the start are cut and counted as failed (a
    /// capacity probe's end; `None` in a plain run).
    pub cutoff: Option<Duration>,
    /// The texts of an embeddings run (`Some` exactly when `endpoint` is embeddings).
    pub embed: Option<EmbedWorkload>,
    /// LoRA adapters the requests are spread over (`--lora-names` / `--lora-ids`).
    pub adapters: Option<Adapters>,
}

impl BenchConfig {
    /// Open loop: the in-flight cap (`None`: no cap).
    pub fn max_in_flight(&self) -> Option<usize> {
        (self.concurrency > 0).then_some(self.concurrency)
    }
}

/// An argument out of range.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum ConfigError {
    #[error("--{flag} must be {expected}, got {got}")]
    OutOfRange {
        flag: &'static str,
        expected: &'static str,
        got: String,
    },
    #[error("--url must be a plain http:// URL (this client has no TLS), got {url:?}")]
    BadUrl { url: String },
    #[error("{0}")]
    Invalid(String),
}

fn out_of_range(flag: &'static str, expected: &'static str, got: impl fmt::Display) -> ConfigError {
    ConfigError::OutOfRange {
        flag,
        expected,
        got: got.to_string(),
    }
}

fn positive_seconds(flag: &'static str, v: f64) -> Result<Duration, ConfigError> {
    if v.is_finite() && v > 0.0 && v < 1e9 {
        Ok(Duration::from_secs_f64(v))
    } else {
        Err(out_of_range(flag, "a positive number of seconds", v))
    }
}

impl BenchArgs {
    /// Checks every argument and normalises the URL.
    pub fn validate(&self) -> Result<BenchConfig, ConfigError> {
        let base_url = normalise_url(&self.url)?;
        if let Some(c) = self.concurrency.filter(|c| !(1..=4096).contains(c)) {
            return Err(out_of_range("concurrency", "in 1..=4096", c));
        }
        if self.requests == Some(0) {
            return Err(out_of_range("requests", "at least 1", 0));
        }
        if !(1..=1_000_000).contains(&self.prompt_tokens) {
            return Err(out_of_range(
                "prompt-tokens",
                "in 1..=1000000",
                self.prompt_tokens,
            ));
        }
        if self.output_tokens == 0 {
            return Err(out_of_range("output-tokens", "at least 1", 0));
        }
        if self.shared_prefix_tokens > self.prompt_tokens {
            return Err(out_of_range(
                "shared-prefix-tokens",
                "at most --prompt-tokens",
                self.shared_prefix_tokens,
            ));
        }
        if !(1..=4096).contains(&self.prefixes) {
            return Err(out_of_range("prefixes", "in 1..=4096", self.prefixes));
        }
        if !(self.temperature.is_finite() && self.temperature >= 0.0) {
            return Err(out_of_range(
                "temperature",
                "a non-negative number",
                self.temperature,
            ));
        }
        if let Some(p) = self.top_p {
            if !(p.is_finite() && p > 0.0 && p <= 1.0) {
                return Err(out_of_range("top-p", "in (0, 1]", p));
            }
        }
        let duration = self
            .duration
            .map(|d| positive_seconds("duration", d))
            .transpose()?;
        let long_prompts = match self.long_prompt_every {
            None => None,
            Some(every) => {
                positive_seconds("long-prompt-every", every)?;
                if !(1..=1_000_000).contains(&self.long_prompt_tokens) {
                    let t = self.long_prompt_tokens;
                    return Err(out_of_range("long-prompt-tokens", "in 1..=1000000", t));
                }
                Some(LongPrompts {
                    every_s: every,
                    tokens: self.long_prompt_tokens,
                })
            }
        };
        let t = self.traffic(duration)?;
        let embed = self.embed_workload(&t)?;
        Ok(BenchConfig {
            base_url,
            api_key: self.api_key.clone(),
            model: self.model.clone(),
            concurrency: t.concurrency,
            requests: t.requests,
            prompt_tokens: self.prompt_tokens,
            output_tokens: self.output_tokens,
            shared_prefix_tokens: self.shared_prefix_tokens,
            prefixes: self.prefixes,
            endpoint: self.endpoint,
            seed: self.seed,
            duration,
            arrival: t.arrival,
            long_prompts,
            temperature: self.temperature,
            top_p: self.top_p,
            timeout: positive_seconds("timeout", self.timeout)?,
            warmup: self.warmup,
            workload: t.workload,
            dataset: self.dataset,
            trace: self.trace.clone(),
            trace_arrivals: t.trace_arrivals,
            goodput: SloTargets::from_list(&self.goodput).map_err(ConfigError::Invalid)?,
            label: self.label.clone(),
            cutoff: None,
            embed,
            adapters: self.adapters.validate(self.model.as_deref())?,
        })
    }

    /// The embeddings workload, or an error naming a flag that has no meaning for the chosen
    /// endpoint (an embeddings run is a closed loop of plain requests).
    fn embed_workload(&self, t: &Traffic) -> Result<Option<EmbedWorkload>, ConfigError> {
        let invalid = |m: String| Err(ConfigError::Invalid(m));
        if self.endpoint != Endpoint::Embeddings {
            if self.texts_per_request.is_some() || self.text_tokens.is_some() {
                return invalid(
                    "--texts-per-request and --text-tokens need --endpoint embeddings".into(),
                );
            }
            return Ok(None);
        }
        let unsupported = [
            (
                t.arrival != Arrival::Closed,
                "--request-rate / --arrival / a timed --trace",
            ),
            (self.trace.is_some(), "--trace"),
            (self.dataset != Dataset::Fixed, "--dataset"),
            (!self.goodput.is_empty(), "--goodput"),
            (self.long_prompt_every.is_some(), "--long-prompt-every"),
            (self.shared_prefix_tokens > 0, "--shared-prefix-tokens"),
            (self.capacity.find_capacity, "--find-capacity"),
            (self.chart.is_some(), "--chart"),
            (!self.adapters.lora_names.is_empty(), "--lora-names"),
            (self.adapters.lora_ids.is_some(), "--lora-ids"),
        ];
        if let Some((_, flag)) = unsupported.iter().find(|(given, _)| *given) {
            return invalid(format!(
                "{flag} is not supported with --endpoint embeddings (a closed loop of -c clients)"
            ));
        }
        let texts = self.texts_per_request.unwrap_or(DEFAULT_TEXTS);
        if texts.max > MAX_TEXTS {
            return Err(out_of_range("texts-per-request", "at most 2048", texts.max));
        }
        let tokens = self.text_tokens.unwrap_or(DEFAULT_TEXT_TOKENS);
        if tokens.max > 1_000_000 {
            return Err(out_of_range("text-tokens", "at most 1000000", tokens.max));
        }
        Ok(Some(EmbedWorkload {
            texts_per_request: texts,
            text_tokens: tokens,
        }))
    }

    /// The arrival process, the concurrency, the request bound and the request lengths.
    fn traffic(&self, duration: Option<Duration>) -> Result<Traffic, ConfigError> {
        let invalid = |m: &str| ConfigError::Invalid(m.to_string());
        if !(self.burstiness.is_finite() && self.burstiness > 0.0) {
            return Err(out_of_range(
                "burstiness",
                "a positive number",
                self.burstiness,
            ));
        }
        let trace = self
            .trace
            .as_deref()
            .map(read_trace)
            .transpose()
            .map_err(ConfigError::Invalid)?;
        let trace_arrivals = trace.as_ref().and_then(|t| t.arrivals.clone());
        let arrival = match (trace_arrivals.is_some(), self.request_rate, self.arrival) {
            (true, None, Arrival::Closed) => Arrival::Trace,
            (true, _, _) => return Err(invalid(
                "--trace has arrival_s times, which are replayed: drop --request-rate / --arrival \
                     (or remove arrival_s from the file)",
            )),
            (false, Some(_), Arrival::Poisson(_)) => {
                return Err(invalid(
                    "give --request-rate or --arrival poisson:R, not both",
                ))
            }
            (false, Some(rate), _) | (false, None, Arrival::Poisson(rate)) => Arrival::Open {
                rate,
                burstiness: self.burstiness,
            },
            (false, None, other) => other,
        };
        let searching = self.capacity.find_capacity;
        if self.burstiness != 1.0 && !searching && !matches!(arrival, Arrival::Open { .. }) {
            return Err(invalid("--burstiness needs --request-rate"));
        }
        // The capacity search's probes are open loop: no cap unless one is given.
        let concurrency = match arrival {
            Arrival::Closed if !searching => self.concurrency.unwrap_or(1),
            _ => self.concurrency.unwrap_or(0),
        };
        let all_at_once = matches!(arrival, Arrival::Open { rate, .. } if rate.is_infinite());
        let requests = match (&trace, self.requests, duration) {
            (Some(t), n, _) => {
                Some(n.map_or(t.specs.len() as u64, |n| n.min(t.specs.len() as u64)))
            }
            (None, None, Some(_)) if all_at_once => {
                return Err(invalid(
                    "--request-rate inf needs --requests (it sends them all at once)",
                ))
            }
            (None, None, None) => Some(DEFAULT_REQUESTS),
            (None, r, _) => r,
        };
        let workload = match (&trace, self.dataset) {
            (Some(t), _) => Workload::Trace(t.specs.clone()),
            (None, Dataset::Fixed) => Workload::Fixed(RequestSpec {
                prompt_tokens: self.prompt_tokens,
                output_tokens: self.output_tokens,
            }),
            (None, Dataset::Chat) => {
                if !(crate::workload::CHAT_MIN_TOKENS..=1_000_000).contains(&self.max_prompt_tokens)
                {
                    let m = self.max_prompt_tokens;
                    return Err(out_of_range("max-prompt-tokens", "in 4..=1000000", m));
                }
                if !(4..=1_000_000).contains(&self.max_output_tokens) {
                    let m = self.max_output_tokens;
                    return Err(out_of_range("max-output-tokens", "in 4..=1000000", m));
                }
                Workload::Chat {
                    seed: self.seed,
                    max_prompt: self.max_prompt_tokens,
                    max_output: self.max_output_tokens,
                }
            }
        };
        Ok(Traffic {
            arrival,
            concurrency,
            requests,
            workload,
            trace_arrivals,
        })
    }
}

/// `http://h:p/`, `http://h:p/v1` and `http://h:p/v1/` all become `http://h:p`.
fn normalise_url(url: &str) -> Result<String, ConfigError> {
    let trimmed = url.trim().trim_end_matches('/');
    let rest = trimmed.strip_prefix("http://").unwrap_or("");
    if rest.is_empty() || rest.starts_with('/') || rest.contains(char::is_whitespace) {
        return Err(ConfigError::BadUrl {
            url: url.to_string(),
        });
    }
    let base = trimmed.strip_suffix("/v1").unwrap_or(trimmed);
    Ok(base.to_string())
}

impl BenchConfig {
    pub fn endpoint_url(&self) -> String {
        match self.endpoint {
            Endpoint::Completions => format!("{}/v1/completions", self.base_url),
            Endpoint::Chat => format!("{}/v1/chat/completions", self.base_url),
            Endpoint::Embeddings => format!("{}/v1/embeddings", self.base_url),
        }
    }

    pub fn models_url(&self) -> String {
        format!("{}/v1/models", self.base_url)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        args: BenchArgs,
    }

    fn parse(argv: &[&str]) -> BenchArgs {
        let mut full = vec!["bench"];
        full.extend_from_slice(argv);
        Cli::try_parse_from(full).expect("valid argv").args
    }

    #[test]
    fn defaults_bound_the_run_by_a_request_count() {
        let cfg = parse(&[]).validate().expect("valid");
        assert_eq!(cfg.requests, Some(DEFAULT_REQUESTS));
        assert_eq!(cfg.endpoint_url(), "http://127.0.0.1:8000/v1/completions");
        assert_eq!(cfg.arrival, Arrival::Closed);
    }

    #[test]
    fn duration_alone_leaves_the_count_unbounded() {
        let cfg = parse(&["--duration", "5"]).validate().expect("valid");
        assert_eq!(cfg.requests, None);
        assert_eq!(cfg.duration, Some(Duration::from_secs(5)));
    }

    #[test]
    fn url_with_v1_suffix_is_normalised() {
        let cfg = parse(&["--url", "http://localhost:9/v1/", "--endpoint", "chat"]).validate();
        assert_eq!(
            cfg.expect("valid").endpoint_url(),
            "http://localhost:9/v1/chat/completions"
        );
    }

    #[test]
    fn https_and_garbage_urls_are_rejected() {
        for url in [
            "https://example.com",
            "localhost:8000",
            "http://",
            "http:///x",
        ] {
            assert!(
                matches!(
                    parse(&["--url", url]).validate(),
                    Err(ConfigError::BadUrl { .. })
                ),
                "{url}"
            );
        }
    }

    #[test]
    fn out_of_range_values_name_their_flag() {
        let cases: &[(&[&str], &str)] = &[
            (&["-c", "0"], "concurrency"),
            (&["-n", "0"], "requests"),
            (&["--output-tokens", "0"], "output-tokens"),
            (
                &["--prompt-tokens", "10", "--shared-prefix-tokens", "11"],
                "shared-prefix-tokens",
            ),
            (&["--duration=-1"], "duration"),
            (&["--long-prompt-every", "0"], "long-prompt-every"),
            (&["--timeout", "NaN"], "timeout"),
            (&["--top-p", "0"], "top-p"),
            (&["--top-p", "1.5"], "top-p"),
        ];
        for (argv, flag) in cases {
            match parse(argv).validate() {
                Err(ConfigError::OutOfRange { flag: f, .. }) => assert_eq!(f, *flag),
                other => panic!("{argv:?}: {other:?}"),
            }
        }
    }

    #[test]
    fn arrival_parses_closed_and_poisson_rates() {
        assert_eq!("closed".parse::<Arrival>(), Ok(Arrival::Closed));
        assert_eq!("poisson:2.5".parse::<Arrival>(), Ok(Arrival::Poisson(2.5)));
        for bad in ["poisson:", "poisson:-1", "poisson:inf", "open", "poisson:x"] {
            assert!(bad.parse::<Arrival>().is_err(), "{bad}");
        }
    }

    #[test]
    fn request_rate_is_open_loop_without_a_cap_unless_one_is_given() {
        let cfg = parse(&["--request-rate", "2.5", "--burstiness", "0.5"])
            .validate()
            .expect("valid");
        assert_eq!(
            cfg.arrival,
            Arrival::Open {
                rate: 2.5,
                burstiness: 0.5
            }
        );
        assert_eq!(cfg.max_in_flight(), None);
        for flag in ["-c", "--concurrency", "--max-concurrency"] {
            let cfg = parse(&["--request-rate", "inf", flag, "3"])
                .validate()
                .expect("valid");
            assert_eq!(cfg.max_in_flight(), Some(3), "{flag}");
        }
        // The closed loop keeps one client by default.
        assert_eq!(parse(&[]).validate().expect("valid").concurrency, 1);
    }

    #[test]
    fn arrival_poisson_is_an_alias_of_request_rate() {
        let cfg = parse(&["--arrival", "poisson:4", "-c", "2"])
            .validate()
            .expect("valid");
        assert_eq!(
            cfg.arrival,
            Arrival::Open {
                rate: 4.0,
                burstiness: 1.0
            }
        );
        assert_eq!(cfg.max_in_flight(), Some(2));
    }

    #[test]
    fn contradictory_traffic_flags_are_rejected() {
        let cases: &[&[&str]] = &[
            &["--request-rate", "2", "--arrival", "poisson:3"],
            &["--request-rate", "inf", "--duration", "5"],
            &["--burstiness", "2"],
            &["--goodput", "ttft:1", "ttft:2"],
        ];
        for argv in cases {
            assert!(
                matches!(parse(argv).validate(), Err(ConfigError::Invalid(_))),
                "{argv:?}"
            );
        }
        assert!(matches!(
            parse(&["--request-rate", "1", "--burstiness", "0"]).validate(),
            Err(ConfigError::OutOfRange {
                flag: "burstiness",
                ..
            })
        ));
        for bad in [
            &["--request-rate", "0"][..],
            &["--request-rate", "x"],
            &["--goodput", "itl:3"],
        ] {
            let mut full = vec!["bench"];
            full.extend_from_slice(bad);
            assert!(Cli::try_parse_from(full).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn goodput_takes_several_targets_after_one_flag() {
        let cfg = parse(&["--goodput", "ttft:2000", "tpot:100", "-n", "5"])
            .validate()
            .expect("valid");
        let t = cfg.goodput.expect("targets");
        assert_eq!(
            (t.ttft_ms, t.tpot_ms, t.e2el_ms),
            (Some(2000.0), Some(100.0), None)
        );
        assert_eq!(cfg.requests, Some(5));
    }

    #[test]
    fn a_timed_trace_replays_its_arrivals_and_bounds_the_run() {
        let path =
            std::env::temp_dir().join(format!("tessera-bench-cfg-{}.jsonl", std::process::id()));
        let line = |t: f64| {
            format!("{{\"prompt_tokens\": 8, \"output_tokens\": 2, \"arrival_s\": {t}}}\n")
        };
        std::fs::write(&path, [0.0, 0.5, 1.0].map(line).concat()).expect("write trace");
        let p = path.to_string_lossy().to_string();
        let cfg = parse(&["--trace", &p]).validate().expect("valid");
        assert_eq!((cfg.arrival, cfg.requests), (Arrival::Trace, Some(3)));
        assert_eq!(cfg.trace_arrivals.as_deref(), Some(&[0.0, 0.5, 1.0][..]));
        assert_eq!(
            parse(&["--trace", &p, "-n", "2"])
                .validate()
                .expect("valid")
                .requests,
            Some(2)
        );
        let err = parse(&["--trace", &p, "--request-rate", "3"])
            .validate()
            .expect_err("both");
        assert!(err.to_string().contains("arrival_s"), "{err}");
        let _ = std::fs::remove_file(path);
    }

    #[test]
    fn mixed_load_flags_make_long_prompts() {
        let cfg = parse(&["--long-prompt-every", "3", "--long-prompt-tokens", "500"]).validate();
        let lp = cfg.expect("valid").long_prompts;
        assert_eq!(
            lp,
            Some(LongPrompts {
                every_s: 3.0,
                tokens: 500
            })
        );
    }
}
