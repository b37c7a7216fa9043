//! Latency targets (`--slo-ttft-ms`, `--slo-tpot-ms`) and how each step plans with them.
//!
//! Goodput is the rate of requests that meet both a time-to-first-token (TTFT) and a
//! time-per-output-token (TPOT) target. Without targets the engine caps a decoding step's
//! prefill at a fixed multiple of a decode-only step (`--max-itl-slowdown`), which keeps the
//! running streams far under any TPOT a user would set while new requests wait for their
//! first token. With targets:
//!
//! - **TPOT → the step's prefill budget.** A stream that has sent `n` tokens, the first
//!   `since_first` seconds ago, meets its TPOT target `T` as long as its next token comes
//!   within `T * n - since_first` seconds (TPOT is its average gap, as vLLM's benchmark and
//!   the latency targets measure it). The next step may take the least of that over the
//!   decoding streams, aiming at `AIM * T` rather than `T` (time outside the step, estimate
//!   error) and never more than `MAX_STRETCH` times it (no long stalls on any stream). The
//!   prefill tokens that fit in what is left after the decode-only step follow from the
//!   affine fit of what prefill adds to a step (`StepCost::cap_within`). So a step whose
//!   streams are ahead of their targets (decode-only steps are cheaper than `T`) carries one
//!   large chunk instead of many small ones, each paying the few-row-to-many-row jump.
//! - **TTFT → the prefill order.** Each request gets a deadline, its arrival plus the TTFT
//!   target. Prompts that can still make theirs are prefilled first, in the order of the
//!   deadlines (earliest first, within a priority level); those that cannot (the deadline
//!   passed, or the prompt's remaining tokens at the measured per-token cost overrun it) go
//!   after them: a late request is late whatever happens, while one still on time can be
//!   saved. See `Scheduler::set_deadline_clock`.
//!
//! A prompt always progresses: after `STARVED_STEPS` decoding steps in a row without
//! prefill while a prompt waits (a decode-only step alone overruns the budget), a step
//! carries the floor chunk anyway.

use std::time::{Duration, Instant};

/// The latency targets the scheduler aims at (each optional).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct SloTargets {
    /// Time to first token, from arrival.
    pub ttft: Option<Duration>,
    /// Time per output token after the first: a stream's average gap.
    pub tpot: Option<Duration>,
}

impl SloTargets {
    pub fn is_set(&self) -> bool {
        self.ttft.is_some() || self.tpot.is_some()
    }

    /// The deadline for the first token of a request that arrived at `arrived`.
    pub fn deadline(&self, arrived: Instant) -> Option<Instant> {
        self.ttft.map(|t| arrived + t)
    }
}

/// Share of the TPOT target that steps aim at: the rest is time outside the step (drawing,
/// sending, the engine's own turn) and the error of the step-cost estimate.
pub const AIM: f64 = 0.85;

/// A step takes at most this many times the aimed TPOT, however far ahead the streams are.
pub const MAX_STRETCH: f64 = 2.0;

/// Decoding steps in a row with no prefill, while a prompt waits, before one carries the
/// floor chunk whatever the budget says.
pub const STARVED_STEPS: u32 = 8;

/// How far along a decoding stream is.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Pace {
    /// Tokens sent so far (at least 1: it is decoding).
    pub sent: usize,
    /// Seconds since its first token.
    pub since_first: f64,
    /// Tokens it may still send (its length limit; it may end sooner).
    pub remaining: usize,
}

impl Pace {
    /// Whether it misses `tpot` even if each of its remaining tokens takes one decode-only
    /// step of `decode_step` seconds: then no plan saves it, and it sets no budget.
    fn lost(&self, tpot: f64, decode_step: f64) -> bool {
        let gaps = (self.sent + self.remaining).saturating_sub(1).max(1) as f64;
        self.since_first + decode_step * self.remaining as f64 > tpot * gaps
    }
}

/// The longest the next step may take so that every stream in `paces` keeps its average gap
/// within `AIM * tpot` (at most `MAX_STRETCH` times that), given that a decode-only step
/// takes `decode_step` seconds (if known): streams that miss the target whatever happens
/// are left out. `None` when no stream is left, or none decodes. May be negative: a stream
/// is behind, and decode-only steps let it catch up.
pub fn step_budget(
    tpot: Duration,
    decode_step: Option<f64>,
    paces: impl IntoIterator<Item = Pace>,
) -> Option<f64> {
    let target = tpot.as_secs_f64();
    let aim = target * AIM;
    paces
        .into_iter()
        .filter(|p| !decode_step.is_some_and(|d| p.lost(target, d)))
        .map(|p| aim * p.sent as f64 - p.since_first)
        .reduce(f64::min)
        .map(|b| b.min(MAX_STRETCH * aim))
}

/// Counts decoding steps that carried no prefill while a prompt waited (see `STARVED_STEPS`).
#[derive(Clone, Copy, Debug, Default)]
pub struct Starvation {
    steps: u32,
}

impl Starvation {
    /// The cap for a step given the budget's own (`cap`), the floor, and whether a prompt
    /// waits: the floor once `STARVED_STEPS` steps in a row gave it nothing.
    pub fn cap(&mut self, cap: usize, floor: usize, backlog: bool) -> usize {
        if cap > 0 || !backlog {
            self.steps = 0;
            return cap;
        }
        self.steps += 1;
        if self.steps > STARVED_STEPS {
            self.steps = 0;
            return floor;
        }
        0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(v: u64) -> Duration {
        Duration::from_millis(v)
    }

    #[test]
    fn the_stream_furthest_behind_sets_the_budget() {
        // Target 100 ms, aimed at 85: a stream that sent 10 tokens over 0.7 s may wait
        // 0.85 - 0.7 = 0.15 s; one that sent 10 over 0.8 s only 0.05 s.
        let b = step_budget(
            ms(100),
            Some(0.05),
            [
                Pace {
                    sent: 10,
                    since_first: 0.7,
                    remaining: 100,
                },
                Pace {
                    sent: 10,
                    since_first: 0.8,
                    remaining: 100,
                },
            ],
        )
        .expect("decoders");
        assert!((b - 0.05).abs() < 1e-9, "{b}");
    }

    #[test]
    fn a_fresh_stream_gets_one_aimed_gap_and_a_stream_far_ahead_is_capped() {
        let fresh = step_budget(
            ms(100),
            None,
            [Pace {
                sent: 1,
                since_first: 0.0,
                remaining: 10,
            }],
        );
        assert_eq!(fresh, Some(0.085));
        let ahead = step_budget(
            ms(100),
            None,
            [Pace {
                sent: 100,
                since_first: 1.0,
                remaining: 10,
            }],
        );
        assert_eq!(ahead, Some(MAX_STRETCH * 0.085));
        assert_eq!(step_budget(ms(100), None, []), None, "nobody decodes");
    }

    #[test]
    fn a_stream_behind_its_target_gives_a_negative_budget() {
        // 5 tokens in 1 s against 100 ms: behind, but 100 more 50 ms steps bring it back.
        let behind = Pace {
            sent: 5,
            since_first: 1.0,
            remaining: 100,
        };
        let b = step_budget(ms(100), Some(0.05), [behind]);
        assert!(b.is_some_and(|b| b < 0.0), "{b:?}");
    }

    #[test]
    fn a_stream_that_cannot_make_its_target_sets_no_budget() {
        // 5 tokens in 1 s with 5 to go: even 50 ms steps end at (1 + 0.25) / 9 > 100 ms.
        let lost = Pace {
            sent: 5,
            since_first: 1.0,
            remaining: 5,
        };
        let on_pace = Pace {
            sent: 5,
            since_first: 0.3,
            remaining: 5,
        };
        assert_eq!(step_budget(ms(100), Some(0.05), [lost]), None);
        let b = step_budget(ms(100), Some(0.05), [lost, on_pace]).expect("one on pace");
        assert!((b - (0.425 - 0.3)).abs() < 1e-9, "{b}");
        // Decode-only steps over the target: every stream is lost.
        let fresh = Pace {
            sent: 1,
            since_first: 0.0,
            remaining: 50,
        };
        assert_eq!(step_budget(ms(100), Some(0.12), [fresh]), None);
    }

    #[test]
    fn a_waiting_prompt_gets_the_floor_after_enough_empty_steps() {
        let mut s = Starvation::default();
        for _ in 0..STARVED_STEPS {
            assert_eq!(s.cap(0, 8, true), 0);
        }
        assert_eq!(s.cap(0, 8, true), 8, "starved long enough");
        assert_eq!(s.cap(0, 8, true), 0, "the count starts over");
        assert_eq!(s.cap(20, 8, true), 20, "the budget's own cap stands");
        for _ in 0..3 * STARVED_STEPS {
            assert_eq!(s.cap(0, 8, false), 0, "nothing waits: no floor");
        }
    }

    #[test]
    fn deadlines_follow_the_ttft_target() {
        let t0 = Instant::now();
        let slo = SloTargets {
            ttft: Some(ms(2000)),
            tpot: None,
        };
        assert_eq!(slo.deadline(t0), Some(t0 + ms(2000)));
        assert_eq!(SloTargets::default().deadline(t0), None);
        assert!(slo.is_set() && !SloTargets::default().is_set());
    }
}
