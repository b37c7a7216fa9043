//! The capacity search: the highest request rate whose probe meets the attainment target, found
//! by doubling then bisection, over any probe function.
//!
//! Design: [`search`] knows nothing of HTTP; it calls `probe(k, rate)` (the k-th probe, from 0)
//! and reads the fraction of good requests from what comes back, so it is unit-tested against
//! fake latency models. Phase 1 probes `min_rate`, then doubles the rate (capped at `max_rate`)
//! until a probe fails; phase 2 bisects the bracket geometrically (rates span orders of magnitude,
//! so the midpoint is `sqrt(lo · hi)`) until `hi / lo <= 1 + precision` or `max_probes` probes
//! have run. A probe's error ends the search with that error.
//!
//! Invariants: the answer, when there is one, is a rate that was probed and passed, and it is
//! below every rate that was probed and failed — the bracket only ever shrinks, so a noisy,
//! non-monotone server can make the answer conservative (a spurious failure lowers `hi`) or
//! optimistic by at most one noisy pass, never report a rate above a failed probe. At most
//! `max_probes` probes run.

use std::future::Future;

use serde::{Deserialize, Serialize};

/// What the search reads from a probe's result.
pub trait Attained {
    /// Fraction of the probe's requests that met the targets, in [0, 1].
    fn fraction_good(&self) -> f64;
}

/// Search bounds and stopping rules.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct SearchParams {
    pub min_rate: f64,
    pub max_rate: f64,
    /// A probe passes when at least this fraction of its requests are good.
    pub attainment: f64,
    /// Stop when the bracket's upper end is within this relative distance of its lower end.
    pub precision: f64,
    pub max_probes: u32,
}

/// Why the search stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Stopped {
    /// The bracket is within the precision.
    Converged,
    /// `max_probes` probes ran first.
    ProbeLimit,
    /// Even `max_rate` passed: the capacity is at least that.
    MaxRatePassed,
    /// Even `min_rate` failed: the capacity is below it.
    MinRateFailed,
}

/// One probe: its rate, what it returned, whether it passed.
#[derive(Debug, Clone, PartialEq)]
pub struct Probe<P> {
    pub rate: f64,
    pub passed: bool,
    pub result: P,
}

/// The search's answer and every probe on the way.
#[derive(Debug, Clone, PartialEq)]
pub struct SearchResult<P> {
    pub probes: Vec<Probe<P>>,
    /// Highest passing rate below every failing one (`None`: `min_rate` failed).
    pub capacity: Option<f64>,
    /// Lowest failing rate (`None`: no probe failed).
    pub lowest_failing: Option<f64>,
    pub stopped: Stopped,
}

/// Runs the search; see the module documentation.
pub async fn search<P, F, Fut>(
    params: &SearchParams,
    mut probe: F,
) -> anyhow::Result<SearchResult<P>>
where
    P: Attained,
    F: FnMut(usize, f64) -> Fut,
    Fut: Future<Output = anyhow::Result<P>>,
{
    let mut probes: Vec<Probe<P>> = Vec::new();
    let (mut lo, mut hi): (Option<f64>, Option<f64>) = (None, None);
    let mut rate = params.min_rate;
    let limit = params.max_probes as usize;
    // Phase 1: double from the minimum until a probe fails or the maximum passes.
    let stopped = loop {
        if probes.len() >= limit {
            break Some(Stopped::ProbeLimit);
        }
        let result = probe(probes.len(), rate).await?;
        let passed = result.fraction_good() >= params.attainment;
        probes.push(Probe {
            rate,
            passed,
            result,
        });
        if !passed {
            hi = Some(rate);
            break None;
        }
        lo = Some(rate);
        if rate >= params.max_rate {
            break Some(Stopped::MaxRatePassed);
        }
        rate = (rate * 2.0).min(params.max_rate);
    };
    let stopped = match (stopped, lo, hi) {
        (Some(s), _, _) => s,
        (None, None, _) => Stopped::MinRateFailed,
        (None, Some(mut l), Some(mut h)) => loop {
            // Phase 2: geometric bisection of [l, h].
            if h <= l * (1.0 + params.precision) {
                break Stopped::Converged;
            }
            if probes.len() >= limit {
                break Stopped::ProbeLimit;
            }
            let mid = (l * h).sqrt();
            let result = probe(probes.len(), mid).await?;
            let passed = result.fraction_good() >= params.attainment;
            probes.push(Probe {
                rate: mid,
                passed,
                result,
            });
            if passed {
                l = mid;
                lo = Some(mid);
            } else {
                h = mid;
                hi = Some(mid);
            }
        },
        // Phase 1 ends with a failure (hi set) or a stop reason; nothing else reaches here.
        (None, Some(_), None) => Stopped::ProbeLimit,
    };
    Ok(SearchResult {
        probes,
        capacity: lo,
        lowest_failing: hi,
        stopped,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::prompt::SplitMix64;

    #[derive(Debug)]
    struct Fake(f64);

    impl Attained for Fake {
        fn fraction_good(&self) -> f64 {
            self.0
        }
    }

    fn params(max_probes: u32) -> SearchParams {
        SearchParams {
            min_rate: 0.05,
            max_rate: 8.0,
            attainment: 0.9,
            precision: 0.1,
            max_probes,
        }
    }

    /// A server whose good fraction falls linearly from 1 to 0 between `cap` and `2 · cap`: it
    /// crosses 0.9 at exactly `1.1 · cap`.
    fn monotone(cap: f64) -> impl Fn(f64) -> f64 {
        move |r: f64| (1.0 - (r - cap) / cap).clamp(0.0, 1.0)
    }

    async fn run_fake(p: SearchParams, model: impl Fn(f64) -> f64) -> SearchResult<Fake> {
        search(&p, |_, r| std::future::ready(Ok(Fake(model(r)))))
            .await
            .expect("search")
    }

    #[tokio::test]
    async fn bisection_converges_on_a_monotone_server() {
        for cap in [0.3, 1.0, 2.7, 5.0] {
            let truth = 1.1 * cap;
            let res = run_fake(params(30), monotone(cap)).await;
            assert_eq!(res.stopped, Stopped::Converged, "cap {cap}");
            let (lo, hi) = (res.capacity.expect("lo"), res.lowest_failing.expect("hi"));
            assert!(
                lo <= truth && truth < hi,
                "cap {cap}: [{lo}, {hi}] vs {truth}"
            );
            assert!(hi <= lo * 1.1 + 1e-12, "cap {cap}: bracket [{lo}, {hi}]");
            // Phase 1 doubled from the minimum: the first probes are 0.05, 0.1, 0.2, ...
            assert_eq!(res.probes[0].rate, 0.05);
            assert_eq!(res.probes[1].rate, 0.1);
        }
    }

    #[tokio::test]
    async fn the_probe_limit_stops_the_search() {
        let res = run_fake(params(5), monotone(3.0)).await;
        assert_eq!(res.probes.len(), 5);
        assert_eq!(res.stopped, Stopped::ProbeLimit);
        assert_eq!(res.capacity, Some(0.8));
    }

    #[tokio::test]
    async fn a_server_faster_than_the_maximum_reports_the_maximum() {
        let res = run_fake(params(20), |_| 1.0).await;
        assert_eq!(res.stopped, Stopped::MaxRatePassed);
        assert_eq!((res.capacity, res.lowest_failing), (Some(8.0), None));
        let rates: Vec<f64> = res.probes.iter().map(|p| p.rate).collect();
        assert_eq!(rates, vec![0.05, 0.1, 0.2, 0.4, 0.8, 1.6, 3.2, 6.4, 8.0]);
    }

    #[tokio::test]
    async fn a_server_slower_than_the_minimum_has_no_capacity() {
        let res = run_fake(params(20), |_| 0.5).await;
        assert_eq!(res.stopped, Stopped::MinRateFailed);
        assert_eq!((res.capacity, res.lowest_failing), (None, Some(0.05)));
        assert_eq!(res.probes.len(), 1);
    }

    #[tokio::test]
    async fn noisy_verdicts_never_put_the_answer_above_a_failed_probe() {
        // True crossing at 2.2; each probe's fraction is off by up to +-0.05 (seeded), so
        // verdicts between 2.1 and 2.3 flip.
        for seed in 0..50 {
            let rng = std::cell::RefCell::new(SplitMix64::new(seed));
            let model = monotone(2.0);
            let noisy =
                |r: f64| (model(r) + 0.1 * (rng.borrow_mut().next_f64() - 0.5)).clamp(0.0, 1.0);
            let res = run_fake(params(30), noisy).await;
            let lo = res.capacity.expect("0.05 always passes");
            assert!(
                res.probes.iter().any(|p| p.passed && p.rate == lo),
                "seed {seed}"
            );
            for p in res.probes.iter().filter(|p| !p.passed) {
                assert!(
                    lo < p.rate,
                    "seed {seed}: answer {lo} above failed probe {}",
                    p.rate
                );
            }
            // A pass is at most 2.3; the last failure is at least 2.1 and within 10% of the answer.
            assert!((2.1 / 1.1..=2.3).contains(&lo), "seed {seed}: {lo}");
        }
    }

    #[tokio::test]
    async fn a_probe_error_ends_the_search_with_that_error() {
        let err = search(&params(20), |k, _| {
            std::future::ready(if k == 2 {
                Err(anyhow::anyhow!("server went away"))
            } else {
                Ok(Fake(1.0))
            })
        })
        .await
        .expect_err("error");
        assert!(err.to_string().contains("server went away"), "{err}");
    }
}
