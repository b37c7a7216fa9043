//! Speculative decoding, the engine's side: a `Drafter` proposes tokens likely to follow each
//! decoding sequence, the step feeds them after the sequence's last token, and the draws keep
//! the prefix the target model agrees with (`draw.rs`).
//!
//! Two kinds of drafts:
//! - a *point* draft (tokens only: prompt lookup, or a draft model's greedy choices) is kept
//!   while the token the sequence draws itself equals the drafted one, so the output is exactly
//!   the output without speculation, greedy or seeded sampling alike;
//! - a *sampled* draft (a draft model drawing from its own distribution `q` for a request that
//!   samples) carries `q` at every drafted position, and the draws run speculative sampling:
//!   a drafted `x` is kept with probability `min(1, p(x) / q(x))`, and on rejection the token
//!   is drawn from `normalize(max(0, p - q))`, so every output token is distributed as `p`, the
//!   target's own sampling distribution.
//!
//! How many tokens a sequence drafts (`draft_len`) follows its acceptance rate and what one
//! more token costs: the extra share of a target step (`StepCost::extra_token_share`) plus the
//! drafter's own measured time per drafted position (a draft model's forward pass) as a share
//! of a decode step.

use std::collections::HashMap;
use std::sync::atomic::Ordering::Relaxed;
use std::time::Instant;

use model::SamplingParams;

use crate::emit::SpecState;
use crate::engine::{contain, Engine};
use crate::runner::Runner;
use crate::sequence::SeqId;

/// A probability distribution over tokens: (token, probability) pairs, probabilities above 0.
pub type Dist = Vec<(u32, f32)>;

/// One sequence a drafter is asked to draft for.
#[derive(Clone, Copy, Debug)]
pub struct DraftAsk<'a> {
    pub id: SeqId,
    /// Prompt and output so far.
    pub tokens: &'a [u32],
    /// Most tokens to propose.
    pub max: usize,
    /// How the request samples (a drafter that draws may draw the same way).
    pub sampling: &'a SamplingParams,
}

/// A drafter's proposal for one sequence.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Draft {
    pub tokens: Vec<u32>,
    /// For a sampled draft, the distribution each token was drawn from (one per token); `None`
    /// for a point draft, kept only where the sequence's own draw agrees.
    pub dists: Option<Vec<Dist>>,
}

/// Proposes tokens likely to follow a decoding sequence (speculative decoding's drafter).
/// The engine feeds them after the sequence's last token and keeps what the target model's
/// draws accept (see the module docs), so a proposal changes how many steps a reply takes,
/// never the distribution of the reply.
pub trait Drafter: Send {
    /// Up to `max` tokens to follow `tokens` (prompt and output so far) of sequence `id`.
    fn propose(&mut self, id: SeqId, tokens: &[u32], max: usize) -> Vec<u32>;

    /// Drafts for every sequence of a step at once, one result per ask (`Err` fails that
    /// request alone). The default asks `propose` sequence by sequence.
    fn propose_all(&mut self, asks: &[DraftAsk]) -> Vec<Result<Draft, ()>> {
        asks.iter()
            .map(|a| {
                contain(|| self.propose(a.id, a.tokens, a.max)).map(|tokens| Draft {
                    tokens,
                    dists: None,
                })
            })
            .collect()
    }

    /// Sequence `id` ended or was preempted: whatever the drafter keeps for it can go.
    fn release(&mut self, _id: SeqId) {}

    /// Seconds one drafted position of a step costs, when the drafter measures it itself
    /// (a draft model, apart from its one-off catch-up of new prompts); `None` lets the engine
    /// time `propose_all` per position.
    fn secs_per_position(&self) -> Option<f64> {
        None
    }
}

/// How the engine drafts: the drafter, the most tokens per sequence and step, and whether the
/// number follows measured costs and acceptance (`draft_len`) or is always the most.
pub struct Speculation {
    pub drafter: Box<dyn Drafter>,
    pub max_tokens: usize,
    pub adaptive: bool,
}

/// Drafted tokens worth feeding for a sequence whose drafted tokens are each accepted with
/// probability about `acceptance` (given the ones before were): the j-th is accepted with
/// probability `acceptance^j`, and it pays when that beats `share`, what one more token costs
/// the step as a share of what the step produces (`StepCost::extra_token_share`, plus a draft
/// model's own time per drafted token). At most `max`.
pub fn draft_len(acceptance: f64, share: f64, max: usize) -> usize {
    let mut p = 1.0;
    (0..max)
        .take_while(|_| {
            p *= acceptance;
            p > share
        })
        .count()
}

/// How many tokens a stream drafts this step under the adaptive rule: `draft_len` from its
/// acceptance estimate, or a short probe when it has not drafted for a while and drafting could
/// pay at all (`SpecState::probe_due`). A step it does not draft in is counted (`forget`).
pub(crate) fn planned_len(spec: &mut SpecState, share: f64, max: usize) -> usize {
    let mut k = draft_len(spec.acceptance, share, max);
    if k == 0 && spec.probe_due(share) {
        k = PROBE_TOKENS.min(max);
    }
    if k == 0 {
        // Not drafting, nothing is measured: drift back towards trying again.
        spec.forget();
    }
    k
}

/// Tokens a stream that stopped drafting drafts now and then to measure its acceptance again
/// (`SpecState::probe_due`): enough for an accepted run to show, few enough to cost little.
const PROBE_TOKENS: usize = 3;

/// A drafter's answer for one sequence (`Err`: drafting it panicked).
type DraftResult = Result<Draft, ()>;

/// Weight of the newest step in the drafter's measured time per drafted position.
const DRAFT_COST_ALPHA: f64 = 0.2;

/// The engine's drafting state beside the drafter.
#[derive(Default)]
pub(crate) struct DraftState {
    /// This step's sampled drafts' distributions, by sequence (consumed by the draws).
    pub dists: HashMap<SeqId, Vec<Dist>>,
    /// Moving average of the drafter's seconds per drafted position (all sequences of a step
    /// draft a position together).
    pub secs_per_position: Option<f64>,
}

impl<R: Runner> Engine<R> {
    /// Asks the drafter, if any, for the next tokens of every decoding sequence, as many as
    /// `draft_len` finds worth feeding. Phases: what one drafted token costs (`draft_share`),
    /// how many each sequence drafts (`draft_lengths`), the drafter's call (`run_drafter`), the
    /// drafts handed to the scheduler (`apply_drafts`).
    pub(crate) fn propose_drafts(&mut self) {
        self.drafts.dists.clear();
        let Some((adaptive, max_tokens)) = self.spec.as_ref().map(|s| (s.adaptive, s.max_tokens))
        else {
            return;
        };
        let ids = self.sched.decoding_ids();
        let Some(share) = self.draft_share(adaptive, ids.len()) else {
            return;
        };
        let wanted = self.draft_lengths(ids, share, adaptive, max_tokens);
        let Some((ids, out)) = self.run_drafter(&wanted) else {
            return;
        };
        self.apply_drafts(ids, out);
    }

    /// What one drafted token costs as a share of what a decode step produces (0 when not
    /// adaptive), or `None` when nothing is drafted this step: prompts wait for prefill, or no
    /// fresh decode-only baseline exists yet (this step measures one).
    fn draft_share(&self, adaptive: bool, decoding: usize) -> Option<f64> {
        if !adaptive {
            return Some(0.0);
        }
        if self.sched.prefill_backlog() > 0 {
            // Prompts are waiting for compute, so every step is compute-bound: a drafted token
            // would take the place of a prompt token that must be computed anyway, saving
            // nothing when accepted and wasting its share when not (and a draft model would
            // compute each new prompt a second time).
            tracing::trace!("no drafts while prompts wait for prefill");
            return None;
        }
        let share = self.cost.extra_token_share(decoding)?;
        let draft_share = match (self.drafts.secs_per_position, self.cost.decode_step_secs()) {
            (Some(d), Some(t)) if t > 0.0 => d / t,
            _ => 0.0,
        };
        tracing::debug!(
            share,
            draft_share,
            "drafting cost as a share of a decode step"
        );
        Some(share + draft_share)
    }

    /// How many tokens each sequence drafts (the request states are updated here): the
    /// sequences that draft, with their lengths, each within its room to `max_total_len`.
    fn draft_lengths(
        &mut self,
        ids: Vec<SeqId>,
        share: f64,
        adaptive: bool,
        max_tokens: usize,
    ) -> Vec<(SeqId, usize)> {
        let mut wanted = Vec::new();
        for id in ids {
            let (Some(s), Some(r)) = (self.sched.get(id), self.reqs.get_mut(&id)) else {
                continue;
            };
            if r.req.no_speculation {
                continue;
            }
            let room = s.max_total_len.saturating_sub(s.tokens.len() + 1);
            let k = if adaptive {
                planned_len(&mut r.spec, share, max_tokens)
            } else {
                max_tokens
            };
            tracing::trace!(seq = ?id, acceptance = r.spec.acceptance, k, "draft length");
            if k == 0 {
                continue;
            }
            if k.min(room) > 0 {
                wanted.push((id, k.min(room)));
            }
        }
        wanted
    }

    /// Asks the drafter for every wanted sequence at once (a panic fails them all), and
    /// updates the measured time per drafted position. `None` when nothing was asked.
    fn run_drafter(&mut self, wanted: &[(SeqId, usize)]) -> Option<(Vec<SeqId>, Vec<DraftResult>)> {
        let spec = self.spec.as_mut()?;
        let asks: Vec<DraftAsk> = wanted
            .iter()
            .filter_map(|&(id, max)| {
                let (s, r) = (self.sched.get(id)?, self.reqs.get(&id)?);
                Some(DraftAsk {
                    id,
                    tokens: &s.tokens,
                    max,
                    sampling: &r.req.sampling,
                })
            })
            .collect();
        if asks.is_empty() {
            return None;
        }
        let positions = asks.iter().map(|a| a.max).max().unwrap_or(0);
        let t0 = Instant::now();
        let drafter = &mut spec.drafter;
        let out =
            contain(|| drafter.propose_all(&asks)).unwrap_or_else(|()| vec![Err(()); asks.len()]);
        let secs = t0.elapsed().as_secs_f64();
        self.stats
            .spec_draft_micros
            .fetch_add((secs * 1e6) as u64, Relaxed);
        let secs = secs / positions.max(1) as f64;
        let old = self.drafts.secs_per_position;
        self.drafts.secs_per_position = spec
            .drafter
            .secs_per_position()
            .or_else(|| Some(old.map_or(secs, |o| o + DRAFT_COST_ALPHA * (secs - o))));
        Some((asks.iter().map(|a| a.id).collect(), out))
    }

    /// Hands each draft to the scheduler (a sampled draft's distributions to the draws); a
    /// sequence whose drafting failed fails alone.
    fn apply_drafts(&mut self, ids: Vec<SeqId>, out: Vec<DraftResult>) {
        let mut failed = Vec::new();
        for (id, d) in ids.into_iter().zip(out) {
            match d {
                Ok(d) => {
                    if let Some(dists) = d.dists {
                        self.drafts.dists.insert(id, dists);
                    }
                    self.sched.set_draft(id, d.tokens);
                }
                Err(()) => failed.push(id),
            }
        }
        for id in failed {
            self.fail_one(id, "drafting panicked");
        }
    }

    /// Tells the drafter, if any, that `id` ended or was preempted.
    pub(crate) fn release_draft(&mut self, id: SeqId) {
        if let Some(spec) = self.spec.as_mut() {
            let drafter = &mut spec.drafter;
            let _ = contain(|| drafter.release(id));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn draft_len_feeds_tokens_while_their_chance_beats_their_cost() {
        assert_eq!(draft_len(0.9, 0.5, 8), 6); // 0.9^6 = 0.53 > 0.5 > 0.9^7
        assert_eq!(draft_len(0.9, 0.5, 3), 3);
        assert_eq!(draft_len(0.7, 0.8, 5), 0);
        assert_eq!(draft_len(1.0, 1.0, 5), 0);
    }

    #[test]
    fn a_stream_that_stopped_drafting_probes_and_takes_up_drafting_when_probes_are_accepted() {
        // Each drafted token costs 0.8 of what it could bring: the prior (0.7) says never.
        let mut s = SpecState::default();
        let mut lens = Vec::new();
        for _ in 0..40 {
            let k = planned_len(&mut s, 0.8, 5);
            lens.push(k);
            if k > 0 {
                s.record(k, k); // every drafted token accepted
            }
        }
        let first = lens.iter().position(|&k| k > 0);
        assert_eq!(first, Some(8), "a probe after 8 idle steps: {lens:?}");
        assert_eq!(lens[8], PROBE_TOKENS);
        // Accepted probes raise the estimate until drafting pays on its own, every step.
        assert!(lens[30..].iter().all(|&k| k > 0), "{lens:?}");
        assert!(s.acceptance > 0.95);
    }

    #[test]
    fn rejected_probes_stay_rare_and_nothing_is_probed_when_no_token_could_pay() {
        let mut s = SpecState::default();
        let mut drafted = 0;
        for _ in 0..90 {
            let k = planned_len(&mut s, 0.8, 5);
            if k > 0 {
                s.record(k, 0);
                drafted += 1;
            }
        }
        assert_eq!(drafted, 10, "one probe per 9 steps");
        // A compute-bound step: even a token sure to be accepted costs what it brings.
        let mut s = SpecState::default();
        assert!((0..100).all(|_| planned_len(&mut s, 1.0, 5) == 0));
    }
}
