//! Goodput: requests per second served within latency targets (DistServe's measure; vLLM's
//! `benchmark_serving.py --goodput`).
//!
//! Design: `--goodput ttft:MS tpot:MS e2el:MS` (any non-empty subset, milliseconds) sets service
//! level objectives; a request is *good* when it succeeded and meets every one given. Its TPOT
//! (time per output token, after the first) is `(e2e − ttft) / (output_tokens − 1)`, as vLLM
//! computes it, and 0 for a one-token output. Goodput is good requests over the wall time of the
//! run; the fraction good counts failed requests as not good.
//!
//! Invariants: targets are positive and finite, each key at most once; `good <= requests`.

use std::{fmt, str::FromStr};

use serde::{Deserialize, Serialize};

use crate::client::Outcome;

/// One `KEY:MS` target as typed on the command line.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SloTarget {
    pub key: SloKey,
    pub ms: f64,
}

/// Which latency a target bounds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SloKey {
    Ttft,
    Tpot,
    E2el,
}

impl FromStr for SloTarget {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let (key, value) = s
            .split_once(':')
            .ok_or_else(|| format!("expected KEY:MS (ttft, tpot or e2el), got {s:?}"))?;
        let key = match key {
            "ttft" => SloKey::Ttft,
            "tpot" => SloKey::Tpot,
            "e2el" => SloKey::E2el,
            other => {
                return Err(format!(
                    "unknown goodput key {other:?}: use ttft, tpot or e2el"
                ))
            }
        };
        let ms: f64 = value
            .parse()
            .map_err(|_| format!("goodput target must be milliseconds, got {value:?}"))?;
        if !(ms.is_finite() && ms > 0.0) {
            return Err(format!(
                "goodput target must be a positive number of ms, got {ms}"
            ));
        }
        Ok(Self { key, ms })
    }
}

/// The latency targets of a run, in milliseconds (`None`: not bounded).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct SloTargets {
    pub ttft_ms: Option<f64>,
    pub tpot_ms: Option<f64>,
    pub e2el_ms: Option<f64>,
}

impl SloTargets {
    /// Collects command-line targets; a key given twice is an error.
    pub fn from_list(list: &[SloTarget]) -> Result<Option<Self>, String> {
        if list.is_empty() {
            return Ok(None);
        }
        let mut t = Self::default();
        for one in list {
            let slot = match one.key {
                SloKey::Ttft => &mut t.ttft_ms,
                SloKey::Tpot => &mut t.tpot_ms,
                SloKey::E2el => &mut t.e2el_ms,
            };
            if slot.replace(one.ms).is_some() {
                return Err(format!("goodput key {:?} given twice", one.key));
            }
        }
        Ok(Some(t))
    }

    /// Whether `o` succeeded and meets every target.
    pub fn is_good(&self, o: &Outcome) -> bool {
        let Some(ttft) = o.ttft.filter(|_| o.ok) else {
            return false;
        };
        let within = |limit: Option<f64>, s: f64| limit.is_none_or(|ms| s * 1000.0 <= ms);
        within(self.ttft_ms, ttft)
            && within(self.tpot_ms, tpot_s(o).unwrap_or(0.0))
            && within(self.e2el_ms, o.e2e)
    }
}

impl fmt::Display for SloTargets {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let parts: Vec<String> = [
            ("ttft", self.ttft_ms),
            ("tpot", self.tpot_ms),
            ("e2el", self.e2el_ms),
        ]
        .iter()
        .filter_map(|(k, v)| v.map(|ms| format!("{k}:{ms}")))
        .collect();
        f.write_str(&parts.join(" "))
    }
}

/// A successful request's time per output token after the first, in seconds (vLLM's TPOT); 0 for
/// a one-token output, `None` for a failed request.
pub fn tpot_s(o: &Outcome) -> Option<f64> {
    let ttft = o.ttft.filter(|_| o.ok)?;
    let n = o.output_tokens();
    Some(if n > 1 {
        (o.e2e - ttft) / (n - 1) as f64
    } else {
        0.0
    })
}

/// Goodput figures of a set of requests.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GoodputResults {
    pub targets: SloTargets,
    /// Requests counted (successful and failed).
    pub requests: usize,
    pub good_requests: usize,
    /// `good_requests / requests` (0 without requests).
    pub fraction_good: f64,
    /// Good requests per second of `window_s`.
    pub goodput_rps: f64,
}

impl GoodputResults {
    pub fn new<'a>(
        targets: SloTargets,
        outcomes: impl IntoIterator<Item = &'a Outcome>,
        window_s: f64,
    ) -> Self {
        let (mut requests, mut good) = (0, 0);
        for o in outcomes {
            requests += 1;
            good += usize::from(targets.is_good(o));
        }
        Self {
            targets,
            requests,
            good_requests: good,
            fraction_good: if requests > 0 {
                good as f64 / requests as f64
            } else {
                0.0
            },
            goodput_rps: if window_s > 0.0 {
                good as f64 / window_s
            } else {
                0.0
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn outcome(ok: bool, ttft: f64, e2e: f64, tokens: u64) -> Outcome {
        Outcome {
            ok,
            ttft: Some(ttft),
            e2e,
            token_chunks: tokens,
            ..Outcome::default()
        }
    }

    fn targets(s: &[&str]) -> SloTargets {
        let list: Vec<SloTarget> = s.iter().map(|t| t.parse().expect("target")).collect();
        SloTargets::from_list(&list).expect("valid").expect("some")
    }

    #[test]
    fn tpot_is_decode_time_over_tokens_after_the_first() {
        // 0.2 s to the first token, 1.2 s in all, 11 tokens: 1.0 s over 10 gaps.
        let t = tpot_s(&outcome(true, 0.2, 1.2, 11)).expect("tpot");
        assert!((t - 0.1).abs() < 1e-12, "{t}");
        assert_eq!(tpot_s(&outcome(true, 0.2, 0.3, 1)), Some(0.0));
        assert_eq!(tpot_s(&outcome(false, 0.2, 1.2, 11)), None);
    }

    #[test]
    fn a_request_is_good_only_when_it_meets_every_given_target() {
        let t = targets(&["ttft:300", "tpot:100"]);
        assert!(t.is_good(&outcome(true, 0.25, 1.25, 11))); // ttft 250, tpot 100
        assert!(!t.is_good(&outcome(true, 0.35, 1.35, 11))); // ttft 350
        assert!(!t.is_good(&outcome(true, 0.25, 1.36, 11))); // tpot 111
        assert!(!t.is_good(&outcome(false, 0.1, 0.2, 11))); // failed
        let e = targets(&["e2el:1000"]);
        assert!(e.is_good(&outcome(true, 0.9, 1.0, 50)));
        assert!(!e.is_good(&outcome(true, 0.1, 1.01, 2)));
    }

    #[test]
    fn goodput_counts_good_requests_over_the_window() {
        let t = targets(&["ttft:100"]);
        let os = [
            outcome(true, 0.05, 0.5, 4),
            outcome(true, 0.2, 0.5, 4),
            outcome(false, 0.01, 0.5, 4),
            outcome(true, 0.09, 0.5, 4),
        ];
        let g = GoodputResults::new(t, &os, 4.0);
        assert_eq!((g.requests, g.good_requests), (4, 2));
        assert_eq!((g.fraction_good, g.goodput_rps), (0.5, 0.5));
    }

    #[test]
    fn targets_parse_like_vllm_and_reject_bad_ones() {
        assert_eq!(
            targets(&["ttft:2000", "tpot:100"]),
            SloTargets {
                ttft_ms: Some(2000.0),
                tpot_ms: Some(100.0),
                e2el_ms: None
            }
        );
        for bad in ["ttft", "itl:5", "ttft:0", "ttft:-3", "tpot:x", "e2el:inf"] {
            assert!(bad.parse::<SloTarget>().is_err(), "{bad}");
        }
        let twice: Vec<SloTarget> = ["ttft:1", "ttft:2"]
            .iter()
            .map(|s| s.parse().expect("t"))
            .collect();
        assert!(SloTargets::from_list(&twice).is_err());
        assert_eq!(
            targets(&["tpot:50", "ttft:900"]).to_string(),
            "ttft:900 tpot:50"
        );
    }
}
