//! When open-loop requests arrive: the arrival schedule as a pure, seeded generator.
//!
//! Design: the schedule is an iterator of arrival times in seconds from the start of the run,
//! computed before any request is sent and independent of how the server responds, so it can be
//! tested as a function (count arrivals, never measure wall time). Three kinds:
//! - `Gamma`: inter-arrival gaps drawn from a gamma distribution with shape `burstiness` and mean
//!   `1 / rate` (scale `1 / (rate · burstiness)`), as vLLM's `benchmark_serving.py` does:
//!   burstiness 1 is a Poisson process, below 1 burstier, above 1 more regular.
//! - `AllAtOnce`: `--request-rate inf`, every arrival at time 0.
//! - `Replay`: the arrival times of a trace file, as given.
//!
//! Invariants: times are finite, non-negative and non-decreasing; the same seed gives the same
//! times on every machine (the gaps come from `sampling::gamma` over `SplitMix64`).

use crate::{prompt::SplitMix64, sampling};

/// Seed salt of the arrival stream (kept apart from the prompt and length streams).
const SALT_ARRIVALS: u64 = 0x4152_5249_5641_4c53;

/// An arrival schedule; see the module documentation.
#[derive(Debug, Clone)]
pub enum Arrivals {
    Gamma {
        rng: SplitMix64,
        shape: f64,
        scale: f64,
        t: f64,
    },
    AllAtOnce,
    Replay {
        times: std::sync::Arc<[f64]>,
        next: usize,
    },
}

impl Arrivals {
    /// Gamma-distributed gaps with mean `1 / rate`; an infinite `rate` means all at once.
    /// `rate` and `burstiness` must be positive (validated by the config).
    pub fn open_loop(rate: f64, burstiness: f64, seed: u64) -> Self {
        if rate.is_infinite() {
            return Self::AllAtOnce;
        }
        Self::Gamma {
            rng: SplitMix64::new(seed ^ SALT_ARRIVALS),
            shape: burstiness,
            scale: 1.0 / (rate * burstiness),
            t: 0.0,
        }
    }

    /// The given times (non-decreasing, checked when the trace was read).
    pub fn replay(times: std::sync::Arc<[f64]>) -> Self {
        Self::Replay { times, next: 0 }
    }
}

impl Iterator for Arrivals {
    type Item = f64;

    fn next(&mut self) -> Option<f64> {
        match self {
            Self::Gamma {
                rng,
                shape,
                scale,
                t,
            } => {
                *t += sampling::gamma(rng, *shape, *scale);
                Some(*t)
            }
            Self::AllAtOnce => Some(0.0),
            Self::Replay { times, next } => {
                let t = times.get(*next).copied();
                *next += 1;
                t
            }
        }
    }
}

/// How many arrivals of `schedule` fall before `horizon_s` (for tests and reports).
pub fn count_before(schedule: Arrivals, horizon_s: f64) -> usize {
    schedule.take_while(|&t| t < horizon_s).count()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn poisson_schedule_honours_the_rate() {
        // 5/s over 2000 s: 10,000 expected arrivals, Poisson sd 100; +-3% is 3 sd.
        for seed in [0, 1, 2] {
            let n = count_before(Arrivals::open_loop(5.0, 1.0, seed), 2000.0);
            assert!((9_700..=10_300).contains(&n), "seed {seed}: {n} arrivals");
        }
    }

    #[test]
    fn bursty_and_regular_schedules_keep_the_mean_rate_but_not_the_spread() {
        // Gaps: Gamma(shape B, mean 0.5 s), so the gap variance is 0.25 / B.
        for (b, seed) in [(0.25, 3), (1.0, 4), (4.0, 5)] {
            let times: Vec<f64> = Arrivals::open_loop(2.0, b, seed).take(40_000).collect();
            let gaps: Vec<f64> = times
                .windows(2)
                .map(|w| w[1] - w[0])
                .chain(std::iter::once(times[0]))
                .collect();
            let n = gaps.len() as f64;
            let mean = gaps.iter().sum::<f64>() / n;
            let var = gaps.iter().map(|g| (g - mean).powi(2)).sum::<f64>() / (n - 1.0);
            assert!((mean - 0.5).abs() < 0.02, "B={b}: mean gap {mean}");
            let want = 0.25 / b;
            assert!(
                (var / want - 1.0).abs() < 0.1,
                "B={b}: gap variance {var}, want {want}"
            );
        }
    }

    #[test]
    fn schedule_is_deterministic_for_a_seed_and_differs_across_seeds() {
        let a: Vec<f64> = Arrivals::open_loop(3.0, 0.5, 7).take(50).collect();
        let b: Vec<f64> = Arrivals::open_loop(3.0, 0.5, 7).take(50).collect();
        let c: Vec<f64> = Arrivals::open_loop(3.0, 0.5, 8).take(50).collect();
        assert_eq!(a, b);
        assert_ne!(a, c);
        assert!(a.windows(2).all(|w| w[0] <= w[1]) && a[0] > 0.0);
    }

    #[test]
    fn infinite_rate_sends_everything_at_time_zero() {
        let t: Vec<f64> = Arrivals::open_loop(f64::INFINITY, 1.0, 0).take(5).collect();
        assert_eq!(t, vec![0.0; 5]);
    }

    #[test]
    fn replay_yields_the_given_times_then_ends() {
        let t: Vec<f64> = Arrivals::replay(vec![0.0, 0.5, 0.5, 2.0].into()).collect();
        assert_eq!(t, vec![0.0, 0.5, 0.5, 2.0]);
    }
}
