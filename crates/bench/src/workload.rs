//! What each request asks for: its prompt length and output length, from a fixed pair, the
//! built-in `chat` length distribution, or a trace file.
//!
//! Design: a [`Workload`] maps a request index to a [`RequestSpec`], so request `i` asks for the
//! same lengths whatever the interleaving of the run, and a seed fully determines a run's load.
//!
//! The `chat` distribution: prompt and output lengths are independent lognormals, clipped to
//! `[CHAT_MIN_TOKENS, --max-prompt-tokens]` and `[CHAT_MIN_TOKENS, --max-output-tokens]`:
//! - prompt tokens: median [`CHAT_PROMPT_MEDIAN`] (256), log-sd [`CHAT_PROMPT_SIGMA`] (1.0);
//! - output tokens: median [`CHAT_OUTPUT_MEDIAN`] (128), log-sd [`CHAT_OUTPUT_SIGMA`] (0.8).
//!
//! Where these come from: they are this crate's choice, not a fit to a dataset. Chat traffic is
//! long-tailed in both lengths (most turns are short, a few are very long — the reason vLLM's
//! serving benchmark samples real ShareGPT conversations rather than fixed lengths), and a
//! lognormal is the simplest long-tailed shape with a median and a spread to set. The medians
//! are sized for small models on a CPU (a 256-token prefill and 128 decoded tokens per request),
//! and the default clips (1024 prompt, 512 output) keep a probe's tail within a small model's
//! context. No published summary statistic of ShareGPT or LMSYS-Chat-1M was checked against them:
//! to replay real lengths, write them to a `--trace` file.
//!
//! Trace files: JSON Lines, one object per request, `{"prompt_tokens": P, "output_tokens": O}`
//! with an optional `"arrival_s": T` (seconds from the start). Either every line has `arrival_s`
//! (the trace's own arrival times are replayed, non-decreasing) or none has (arrivals come from
//! `--request-rate`, or the closed loop). Blank lines are skipped; any other bad line is an error
//! naming the file, the line and the problem. Unknown keys are errors, not silently ignored.

use std::{path::Path, sync::Arc};

use clap::ValueEnum;
use serde::{Deserialize, Serialize};

use crate::{
    prompt::{stream_seed, SplitMix64},
    sampling,
};

/// Smallest prompt or output length the `chat` distribution gives.
pub const CHAT_MIN_TOKENS: usize = 4;
/// Median prompt length of the `chat` distribution, in tokens.
pub const CHAT_PROMPT_MEDIAN: f64 = 256.0;
/// Log-space standard deviation of the `chat` prompt length.
pub const CHAT_PROMPT_SIGMA: f64 = 1.0;
/// Median output length of the `chat` distribution, in tokens.
pub const CHAT_OUTPUT_MEDIAN: f64 = 128.0;
/// Log-space standard deviation of the `chat` output length.
pub const CHAT_OUTPUT_SIGMA: f64 = 0.8;

/// Seed salt of the length stream.
const SALT_LENGTHS: u64 = 0x4c45_4e47_5448_5300;

/// Where request lengths come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Dataset {
    /// Every request: `--prompt-tokens` in, `--output-tokens` out.
    Fixed,
    /// Long-tailed chat-like lengths (lognormal, clipped); see `--max-prompt-tokens`.
    Chat,
}

/// The lengths of one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct RequestSpec {
    pub prompt_tokens: usize,
    pub output_tokens: u32,
}

/// A parsed trace: lengths per request and, when the file gave them, arrival times.
#[derive(Debug, Clone, PartialEq)]
pub struct Trace {
    pub specs: Arc<[RequestSpec]>,
    pub arrivals: Option<Arc<[f64]>>,
}

/// The lengths of a run's requests.
#[derive(Debug, Clone, PartialEq)]
pub enum Workload {
    Fixed(RequestSpec),
    Chat {
        seed: u64,
        max_prompt: usize,
        max_output: u32,
    },
    /// Request `i` of a trace; the run is bounded by the trace's length.
    Trace(Arc<[RequestSpec]>),
}

impl Workload {
    /// The lengths of request `index`. For a trace, indices past its end wrap around (the run
    /// never asks for them: its request count is at most the trace's length).
    pub fn spec(&self, index: u64) -> RequestSpec {
        match self {
            Self::Fixed(s) => *s,
            Self::Chat {
                seed,
                max_prompt,
                max_output,
            } => chat_spec(*seed, index, *max_prompt, *max_output),
            Self::Trace(specs) => specs[(index % specs.len() as u64) as usize],
        }
    }

    /// The same workload with a new seed (a capacity probe's fresh requests); a trace has no seed.
    pub fn reseeded(&self, seed: u64) -> Self {
        match self {
            Self::Chat {
                max_prompt,
                max_output,
                ..
            } => Self::Chat {
                seed,
                max_prompt: *max_prompt,
                max_output: *max_output,
            },
            other => other.clone(),
        }
    }

    /// Largest prompt any request can have (for validating the shared prefix).
    pub fn max_prompt_tokens(&self) -> usize {
        match self {
            Self::Fixed(s) => s.prompt_tokens,
            Self::Chat { max_prompt, .. } => *max_prompt,
            Self::Trace(specs) => specs.iter().map(|s| s.prompt_tokens).max().unwrap_or(0),
        }
    }
}

fn chat_spec(seed: u64, index: u64, max_prompt: usize, max_output: u32) -> RequestSpec {
    let mut rng = SplitMix64::new(stream_seed(seed ^ SALT_LENGTHS, index));
    let p = sampling::lognormal(&mut rng, CHAT_PROMPT_MEDIAN.ln(), CHAT_PROMPT_SIGMA);
    let o = sampling::lognormal(&mut rng, CHAT_OUTPUT_MEDIAN.ln(), CHAT_OUTPUT_SIGMA);
    let clip =
        |v: f64, max: usize| (v.round() as usize).clamp(CHAT_MIN_TOKENS, max.max(CHAT_MIN_TOKENS));
    RequestSpec {
        prompt_tokens: clip(p, max_prompt),
        output_tokens: clip(o, max_output as usize) as u32,
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TraceLine {
    prompt_tokens: u64,
    output_tokens: u64,
    #[serde(default)]
    arrival_s: Option<f64>,
}

/// Reads and checks a trace file.
pub fn read_trace(path: &Path) -> Result<Trace, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("--trace {}: cannot read: {e}", path.display()))?;
    parse_trace(&path.display().to_string(), &text)
}

/// Parses trace text; `name` is the file name used in errors (`name:line: problem`).
pub fn parse_trace(name: &str, text: &str) -> Result<Trace, String> {
    let mut specs = Vec::new();
    let mut arrivals: Vec<f64> = Vec::new();
    let mut with_arrival = None;
    for (k, line) in text.lines().enumerate() {
        let at = |problem: String| format!("--trace {name}:{}: {problem}", k + 1);
        if line.trim().is_empty() {
            continue;
        }
        let l: TraceLine = serde_json::from_str(line).map_err(|e| at(e.to_string()))?;
        if !(1..=1_000_000).contains(&l.prompt_tokens) {
            return Err(at(format!(
                "prompt_tokens must be in 1..=1000000, got {}",
                l.prompt_tokens
            )));
        }
        if !(1..=1_000_000).contains(&l.output_tokens) {
            return Err(at(format!(
                "output_tokens must be in 1..=1000000, got {}",
                l.output_tokens
            )));
        }
        match (
            *with_arrival.get_or_insert(l.arrival_s.is_some()),
            l.arrival_s,
        ) {
            (true, Some(t)) => {
                if !(t.is_finite() && (0.0..1e9).contains(&t)) {
                    return Err(at(format!(
                        "arrival_s must be a non-negative number of seconds, got {t}"
                    )));
                }
                if arrivals.last().is_some_and(|&prev| t < prev) {
                    return Err(at(format!("arrival_s {t} is earlier than the line before")));
                }
                arrivals.push(t);
            }
            (true, None) => return Err(at("arrival_s missing (earlier lines have one)".into())),
            (false, Some(_)) => return Err(at("arrival_s given (earlier lines have none)".into())),
            (false, None) => {}
        }
        specs.push(RequestSpec {
            prompt_tokens: l.prompt_tokens as usize,
            output_tokens: l.output_tokens as u32,
        });
    }
    if specs.is_empty() {
        return Err(format!("--trace {name}: no requests in the file"));
    }
    Ok(Trace {
        specs: specs.into(),
        arrivals: with_arrival.unwrap_or(false).then(|| arrivals.into()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trace_with_arrivals_is_read_in_order() {
        let t = parse_trace(
            "t.jsonl",
            "{\"prompt_tokens\": 10, \"output_tokens\": 3, \"arrival_s\": 0}\n\n\
             {\"prompt_tokens\": 20, \"output_tokens\": 5, \"arrival_s\": 1.5}\n",
        )
        .expect("valid trace");
        assert_eq!(t.specs.len(), 2);
        assert_eq!(
            t.specs[1],
            RequestSpec {
                prompt_tokens: 20,
                output_tokens: 5
            }
        );
        assert_eq!(t.arrivals.as_deref(), Some(&[0.0, 1.5][..]));
    }

    #[test]
    fn trace_without_arrivals_has_none() {
        let t = parse_trace("t", "{\"prompt_tokens\": 1, \"output_tokens\": 1}").expect("valid");
        assert_eq!(t.arrivals, None);
    }

    #[test]
    fn bad_trace_lines_name_the_file_line_and_problem() {
        let ok = "{\"prompt_tokens\": 5, \"output_tokens\": 2}";
        let cases = [
            (format!("{ok}\nnot json"), ":2:", "expected"),
            (format!("{ok}\n{{\"prompt_tokens\": 5}}"), ":2:", "output_tokens"),
            ("{\"prompt_tokens\": 0, \"output_tokens\": 2}".to_string(), ":1:", "prompt_tokens must be"),
            ("{\"prompt_tokens\": 3, \"output_tokens\": 0}".to_string(), ":1:", "output_tokens must be"),
            (format!("{ok}\n{{\"prompt_tokens\": 5, \"output_tokens\": 2, \"extra\": 1}}"), ":2:", "unknown field"),
            (
                format!("{ok}\n{{\"prompt_tokens\": 5, \"output_tokens\": 2, \"arrival_s\": 1}}"),
                ":2:",
                "arrival_s given",
            ),
            (
                "{\"prompt_tokens\": 5, \"output_tokens\": 2, \"arrival_s\": 2}\n{\"prompt_tokens\": 5, \"output_tokens\": 2, \"arrival_s\": 1}".to_string(),
                ":2:",
                "earlier than",
            ),
            (
                "{\"prompt_tokens\": 5, \"output_tokens\": 2, \"arrival_s\": -1}".to_string(),
                ":1:",
                "non-negative",
            ),
            ("\n\n".to_string(), "", "no requests"),
        ];
        for (text, line, problem) in cases {
            let err = parse_trace("load.jsonl", &text).expect_err(&text);
            assert!(err.starts_with("--trace load.jsonl"), "{err}");
            assert!(err.contains(&format!("load.jsonl{line}")), "{err}");
            assert!(err.contains(problem), "{err}");
        }
    }

    #[test]
    fn missing_trace_file_is_an_error_naming_it() {
        let err = read_trace(Path::new("no/such/trace.jsonl")).expect_err("missing file");
        assert!(err.contains("no/such/trace.jsonl"), "{err}");
    }

    #[test]
    fn chat_lengths_are_long_tailed_clipped_and_seeded() {
        let w = Workload::Chat {
            seed: 3,
            max_prompt: 1024,
            max_output: 512,
        };
        let specs: Vec<RequestSpec> = (0..20_000).map(|i| w.spec(i)).collect();
        let mut p: Vec<usize> = specs.iter().map(|s| s.prompt_tokens).collect();
        let mut o: Vec<u32> = specs.iter().map(|s| s.output_tokens).collect();
        p.sort_unstable();
        o.sort_unstable();
        // Medians near the lognormal medians (the clips are far in the tails).
        assert!(
            (240..=272).contains(&p[10_000]),
            "prompt median {}",
            p[10_000]
        );
        assert!(
            (120..=136).contains(&o[10_000]),
            "output median {}",
            o[10_000]
        );
        // Long-tailed: p90 well above twice the median; clipped at both ends.
        assert!(p[18_000] > 2 * p[10_000], "prompt p90 {}", p[18_000]);
        assert!(
            p[0] >= CHAT_MIN_TOKENS && p[0] < 10,
            "shortest prompt {}",
            p[0]
        );
        assert_eq!(*p.last().expect("n"), 1024);
        assert_eq!(*o.last().expect("n"), 512);
        assert!(o[0] >= CHAT_MIN_TOKENS as u32);
        assert_eq!(w.spec(17), w.spec(17));
        assert_ne!(
            (0..50).map(|i| w.spec(i)).collect::<Vec<_>>(),
            (0..50).map(|i| w.reseeded(4).spec(i)).collect::<Vec<_>>()
        );
    }
}
