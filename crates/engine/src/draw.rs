//! The draws of a step: each sequence whose chunk completed its known tokens draws its next
//! token from its logit rows, through its own sampler (logits processors, then the draw).
//!
//! A chunk that carried a draft has one row per fed token; the draws walk them in order and go
//! on while the token drawn equals the drafted one (so every accepted token is exactly the one
//! decoding without the draft would have drawn, with the same generator state: the output does
//! not depend on the draft, only the number of steps does). Sequences draw in parallel on the
//! runner's workers: each has its own sampler, so the draws are the same as one by one.

use std::ops::Range;
use std::sync::Mutex;

use model::{SampleScratch, Sampler};

use crate::request::TokenLogprob;
use crate::runner::Runner;

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
    let logprob = top.map(|n| {
        let (logprob, top) = model::sampler::logprobs(row, token, n);
        TokenLogprob {
            token,
            logprob,
            top,
        }
    });
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

/// One sequence's draws in a step.
pub(crate) struct DrawJob<'a> {
    /// Index of its chunk in the step's plan.
    pub chunk: usize,
    pub sampler: &'a mut Sampler,
    /// Its rows in the step's logits: one per token of `draft`, plus one.
    pub rows: Range<usize>,
    pub draft: &'a [u32],
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
        job.out = crate::engine::contain(|| verify(sampler, rows, vocab, draft, top, &mut s)).ok();
    });
}
