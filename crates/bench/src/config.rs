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
}

impl fmt::Display for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Completions => "completions",
            Self::Chat => "chat",
        })
    }
}

/// When requests are issued.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Arrival {
    /// Each of the `--concurrency` clients sends its next request as soon as the last one finishes.
    Closed,
    /// Requests arrive as a Poisson process of this rate (per second); at most `--concurrency` are in
    /// flight, later arrivals wait for a free slot.
    Poisson(f64),
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
        }
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
    /// Number of requests in flight at once (closed-loop clients).
    #[arg(long, value_name = "N", short = 'c', default_value_t = 1)]
    pub concurrency: usize,
    /// Total number of requests (default: 100, or unbounded within `--duration`).
    #[arg(long, value_name = "N", short = 'n')]
    pub requests: Option<u64>,
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
    /// Seed of the prompt words and of Poisson arrivals.
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
    /// Arrival process: `closed` or `poisson:RATE` (requests per second).
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
}

/// Mixed-load long prompts.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct LongPrompts {
    /// Seconds between two long prompts.
    pub every_s: f64,
    /// Tokens per long prompt.
    pub tokens: usize,
}

/// A validated run configuration.
#[derive(Debug, Clone)]
pub struct BenchConfig {
    /// Base URL without a trailing `/` or `/v1`.
    pub base_url: String,
    pub api_key: Option<String>,
    pub model: Option<String>,
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
        if !(1..=4096).contains(&self.concurrency) {
            return Err(out_of_range("concurrency", "in 1..=4096", self.concurrency));
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
        let requests = match (self.requests, duration) {
            (None, None) => Some(DEFAULT_REQUESTS),
            (r, _) => r,
        };
        Ok(BenchConfig {
            base_url,
            api_key: self.api_key.clone(),
            model: self.model.clone(),
            concurrency: self.concurrency,
            requests,
            prompt_tokens: self.prompt_tokens,
            output_tokens: self.output_tokens,
            shared_prefix_tokens: self.shared_prefix_tokens,
            prefixes: self.prefixes,
            endpoint: self.endpoint,
            seed: self.seed,
            duration,
            arrival: self.arrival,
            long_prompts,
            temperature: self.temperature,
            top_p: self.top_p,
            timeout: positive_seconds("timeout", self.timeout)?,
            warmup: self.warmup,
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
