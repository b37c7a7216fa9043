//! The draws of a step: each sequence whose chunk completed its known tokens draws its next
//! token from its logit rows, through its own sampler (logits processors, then the draw).
//!
//! A chunk that carried a draft has one row per fed token; the draws walk them in order and go
//! on while the token drawn equals the drafted one (so every accepted token is exactly the one
//! decoding without the draft would have drawn, with the same generator state: the output does
//! not depend on the draft, only the number of steps does). A sampled draft (drawn by a draft
//! model from its distribution `q`) is verified by speculative sampling instead
//! (`verify_sampled`): the output is then distributed as without the draft, token for token,
//! though not the same tokens a seed gives without it. Sequences draw in parallel on the
//! runner's workers: each has its own sampler, so the draws are the same as one by one.

use std::ops::Range;
use std::sync::Mutex;

use model::{SampleScratch, Sampler};

use crate::request::TokenLogprob;
use crate::runner::Runner;
use crate::speculate::Dist;

/// A token drawn for a sequence and its logprobs, if asked for.
pub(crate) type Drawn = (u32, Option<TokenLogprob>);

/// Draws the next token from `row` and, when `top` asks for them, its logprobs with the `top`
/// most likely alternatives (of the row as the model gave it); the sampler accepts the token.
pub(crate) fn draw(
    sampler: &mut Sampler,
    row: &[f32],
    top: Option<usize>,
    scratch: &mut SampleScratch,
) -> Drawn {
    let token = sampler.sample(row, scratch);
    sampler.accept(token);
    let logprob = top.map(|n| TokenLogprob::of(row, token, n));
    (token, logprob)
}

/// Draws from `rows` (`[draft.len() + 1][vocab]`, the rows of a token and its draft) while
/// the token drawn from row `i` equals `draft[i]`; returns every token drawn (1 to
/// `draft.len() + 1`), the last being the first that disagreed or the one after the draft.
pub(crate) fn verify(
    sampler: &mut Sampler,
    rows: &[f32],
    vocab: usize,
    draft: &[u32],
    top: Option<usize>,
    scratch: &mut SampleScratch,
) -> Vec<Drawn> {
    let mut out = Vec::with_capacity(draft.len() + 1);
    for (i, row) in rows.chunks_exact(vocab).enumerate() {
        let d = draw(sampler, row, top, scratch);
        let agrees = draft.get(i) == Some(&d.0);
        out.push(d);
        if !agrees {
            break;
        }
    }
    out
}

/// Speculative sampling of a draft drawn from the drafter's distributions `q` (one per drafted
/// token; `rows` as for `verify`). At drafted position `i` with the target's distribution `p`
/// (the sampler's own, after its processors): `draft[i]` is kept with probability
/// `min(1, p(x) / q(x))`; otherwise the token is drawn from `normalize(max(0, p - q))` and the
/// walk stops. After a fully kept draft one more token is drawn from the last row. Each token
/// is thus distributed as `p` (Leviathan et al., Chen et al. 2023), whatever `q` is.
pub(crate) fn verify_sampled(
    sampler: &mut Sampler,
    rows: &[f32],
    vocab: usize,
    draft: &[u32],
    q: &[Dist],
    top: Option<usize>,
    scratch: &mut SampleScratch,
) -> Vec<Drawn> {
    let mut out = Vec::with_capacity(draft.len() + 1);
    for (i, row) in rows.chunks_exact(vocab).enumerate() {
        let (Some(&x), Some(qi)) = (draft.get(i), q.get(i)) else {
            out.push(draw(sampler, row, top, scratch));
            break;
        };
        let p = sampler.distribution(row, scratch);
        let prob = |d: &[(u32, f32)], t: u32| d.iter().find(|c| c.0 == t).map_or(0.0, |c| c.1);
        let (px, qx) = (prob(&p, x), prob(qi, x));
        // u < p/q, written without the division (q(x) = 0 cannot have been drawn; reject).
        let kept = qx > 0.0 && sampler.uniform() * qx < px;
        let token = if kept {
            x
        } else {
            sampler.draw_from(&residual(&p, qi, vocab))
        };
        sampler.accept(token);
        let logprob = top.map(|n| TokenLogprob::of(row, token, n));
        out.push((token, logprob));
        if !kept {
            break;
        }
    }
    out
}

/// `max(0, p - q)` over `p`'s tokens (the only ones where it can be above 0), unnormalized;
/// `p` itself when that leaves nothing (p = q up to rounding).
fn residual(p: &[(u32, f32)], q: &[(u32, f32)], vocab: usize) -> Dist {
    let mut qv = vec![0.0f32; vocab];
    for &(t, w) in q {
        if let Some(v) = qv.get_mut(t as usize) {
            *v = w;
        }
    }
    let r: Dist = p
        .iter()
        .map(|&(t, w)| (t, (w - qv.get(t as usize).copied().unwrap_or(0.0)).max(0.0)))
        .filter(|c| c.1 > 0.0)
        .collect();
    if r.is_empty() {
        p.to_vec()
    } else {
        r
    }
}

/// One sequence's draws in a step.
pub(crate) struct DrawJob<'a> {
    /// Index of its chunk in the step's plan.
    pub chunk: usize,
    pub sampler: &'a mut Sampler,
    /// Its rows in the step's logits: one per token of `draft`, plus one.
    pub rows: Range<usize>,
    pub draft: &'a [u32],
    /// The drafter's distributions for a sampled draft (`verify_sampled`), else `None`.
    pub q: Option<&'a [Dist]>,
    pub top: Option<usize>,
    /// The draws; `None` if they panicked (the request fails alone).
    pub out: Option<Vec<Drawn>>,
}

/// Runs every job's draws on the runner's workers, with a scratch per worker.
pub(crate) fn run_jobs<R: Runner>(
    runner: &R,
    jobs: &[Mutex<DrawJob>],
    logits: &[f32],
    vocab: usize,
    scratch: &[Mutex<SampleScratch>],
) {
    runner.parallel(jobs.len(), &|w, i| {
        let mut s = scratch[w].lock().unwrap_or_else(|e| e.into_inner());
        let mut job = jobs[i].lock().unwrap_or_else(|e| e.into_inner());
        let job = &mut *job;
        let rows = &logits[job.rows.clone()];
        let (sampler, draft, top) = (&mut *job.sampler, job.draft, job.top);
        let s = &mut *s;
        job.out = crate::engine::contain(|| match job.q {
            Some(q) if !draft.is_empty() => verify_sampled(sampler, rows, vocab, draft, q, top, s),
            _ => verify(sampler, rows, vocab, draft, top, s),
        })
        .ok();
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use model::SamplingParams;

    const V: usize = 6;
    /// Draws per test: large enough that a wrong rejection step is far outside the bound.
    const TRIALS: u64 = 30_000;
    /// Chi-square bound for 5 degrees of freedom at p ≈ 1e-4 (the seeds are fixed, so a pass
    /// is deterministic; the bound only says how unlikely a correct rule is to fail).
    const CHI2_BOUND: f64 = 25.7;

    fn params(seed: u64) -> SamplingParams {
        SamplingParams {
            temperature: 0.8,
            top_k: 5,
            seed: Some(seed),
            ..SamplingParams::default()
        }
    }

    /// Pearson's chi-square of `counts` against probabilities `p` (tokens of p = 0 must not
    /// occur at all).
    fn chi2(counts: &[u64], p: &[(u32, f32)]) -> f64 {
        let n: u64 = counts.iter().sum();
        let mut probs = [0.0f64; V];
        for &(t, w) in p {
            probs[t as usize] = f64::from(w);
        }
        let mut x = 0.0;
        for (t, &c) in counts.iter().enumerate() {
            if probs[t] == 0.0 {
                assert_eq!(c, 0, "token {t} has probability 0 but was drawn {c} times");
                continue;
            }
            let e = n as f64 * probs[t];
            x += (c as f64 - e).powi(2) / e;
        }
        x
    }

    /// Target rows (three positions) and the drafter's distributions (two positions), each
    /// far from the target's so that rejections are common.
    fn setup() -> (Vec<f32>, Vec<Dist>) {
        let rows: Vec<f32> = [
            [2.0, 1.0, 0.5, -1.0, 0.0, 1.5],
            [0.0, 0.3, 2.5, 1.0, -2.0, 0.2],
            [1.0, 1.0, 1.0, 1.0, 1.0, 1.0],
        ]
        .concat();
        let q = vec![
            vec![(0, 0.05), (1, 0.15), (3, 0.5), (4, 0.2), (5, 0.1)],
            vec![(0, 0.4), (1, 0.1), (2, 0.1), (3, 0.3), (5, 0.1)],
        ];
        (rows, q)
    }

    /// Runs `verify` (one rule or another) over `TRIALS` seeded draws of drafts from `q`;
    /// returns the counts of the first token, and of the second when the first was kept.
    fn sample_counts(
        rule: impl Fn(&mut Sampler, &[f32], &[u32], &[Dist], &mut SampleScratch) -> Vec<Drawn>,
    ) -> ([u64; V], [u64; V]) {
        let (rows, q) = setup();
        let mut scratch = SampleScratch::default();
        let (mut first, mut second) = ([0u64; V], [0u64; V]);
        let mut drafter = Sampler::new(params(999), 0);
        for trial in 0..TRIALS {
            let draft: Vec<u32> = q.iter().map(|d| drafter.draw_from(d)).collect();
            let mut sampler = Sampler::new(params(trial), 0);
            let out = rule(&mut sampler, &rows, &draft, &q, &mut scratch);
            first[out[0].0 as usize] += 1;
            if out.len() > 1 {
                second[out[1].0 as usize] += 1;
            }
        }
        (first, second)
    }

    fn target(row: usize) -> Dist {
        let (rows, _) = setup();
        Sampler::new(params(0), 0)
            .distribution(&rows[row * V..(row + 1) * V], &mut SampleScratch::default())
    }

    #[test]
    fn speculative_sampling_leaves_every_token_distributed_as_the_target() {
        let (first, second) =
            sample_counts(|s, rows, draft, q, scr| verify_sampled(s, rows, V, draft, q, None, scr));
        let (c1, c2) = (chi2(&first, &target(0)), chi2(&second, &target(1)));
        eprintln!("chi2 first {c1:.2}, second {c2:.2}");
        assert!(
            c1 < CHI2_BOUND,
            "first token: chi2 {c1:.1}, counts {first:?}"
        );
        assert!(
            c2 < CHI2_BOUND,
            "second token: chi2 {c2:.1}, counts {second:?}"
        );
        // Both paths ran often: kept drafts and rejections.
        let kept_first: u64 = second.iter().sum();
        assert!(
            kept_first > TRIALS / 5 && kept_first < TRIALS * 4 / 5,
            "{kept_first}"
        );
    }

    #[test]
    fn the_same_test_catches_a_rejection_that_draws_from_the_target_instead_of_the_residual() {
        // On rejection this rule draws from p itself: tokens the draft favours come out too
        // rarely. The chi-square above must see it.
        let (first, _) = sample_counts(|s, rows, draft, q, scr| {
            let p = s.distribution(&rows[..V], scr);
            let prob = |d: &[(u32, f32)], t: u32| d.iter().find(|c| c.0 == t).map_or(0.0, |c| c.1);
            let (px, qx) = (prob(&p, draft[0]), prob(&q[0], draft[0]));
            let token = if s.uniform() * qx < px {
                draft[0]
            } else {
                s.draw_from(&p)
            };
            vec![(token, None)]
        });
        let c = chi2(&first, &target(0));
        eprintln!("chi2 of the wrong rule {c:.1}");
        assert!(
            c > 4.0 * CHI2_BOUND,
            "the wrong rule went unnoticed: chi2 {c:.1}"
        );
    }

    #[test]
    fn a_greedy_request_keeps_exactly_the_drafted_tokens_its_argmax_agrees_with() {
        let (rows, q) = setup();
        let mut s = Sampler::new(SamplingParams::default(), 0);
        let mut scratch = SampleScratch::default();
        // Row 0's argmax is 0, row 1's is 2, row 2's (a tie) is 0.
        let out = verify_sampled(&mut s, &rows, V, &[0, 2], &q, None, &mut scratch);
        assert_eq!(out.iter().map(|d| d.0).collect::<Vec<_>>(), vec![0, 2, 0]);
        let out = verify_sampled(&mut s, &rows, V, &[0, 3], &q, None, &mut scratch);
        assert_eq!(out.iter().map(|d| d.0).collect::<Vec<_>>(), vec![0, 2]);
    }
}
