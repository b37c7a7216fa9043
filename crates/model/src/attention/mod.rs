//! Paged attention: the queries of each sequence chunk against K/V read through its tile table.
//!
//! Work is cut into tasks of (chunk, query range, head range) (`plan`) that the pool's threads
//! run from their home shares (`Threads::for_each_range`). Inside a task (`kernel`), tiles are
//! the outer loop: each tile's rows are converted once and used by every query of the task that
//! can see them. Three passes: scores (K), softmax, weighted sum (V). Nothing is copied into a
//! contiguous per-sequence buffer. The inner loops (dots, softmax, V sums) are
//! `kernels::attn`'s; the next tile's cache lines are asked for while a tile is computed
//! (`ahead`).
//!
//! Numerics follow llama.cpp's CPU path with an f16 cache (flash attention off), because greedy
//! decoding of small models flips on differences of a few ulps: the scaled query is rounded to
//! f16 before the K·Q dots, the softmax sums in f64, and the probabilities are rounded to f16
//! before the weighted sum of V. Dots and V sums use fused multiply-adds over eight lanes (as
//! ggml's AVX2 f16 dot does); `exp` is a polynomial good to a few ulp (`exp_neg`).
//!
//! Batch invariance: a (query, head) is always computed whole by one task, visiting tiles and
//! slots in the same order, so its result does not depend on the task split or on what else is
//! in the batch.
//!
//! Output: each task writes one contiguous run of `out`, disjoint from every other task's
//! (`plan::Task::out_range`); `kernels::Shares` lends each task its run as a `&mut` slice.
//!
//! Sinks (gpt-oss): a head's sink logit counts in its softmax as one more score, unscaled, and
//! is then dropped, so the head's probabilities sum to less than one.
//!
//! Visibility: a query at position p sees key positions `lo(p)..=p`, where `lo(p) = 0` on a
//! global layer and `p + 1 - window` on a sliding-window layer (llama.cpp's "standard" SWA).

use std::sync::Mutex;

use kernels::{HugeVec, Shares, Threads};

use crate::kv::{KvPool, TileId};

mod ahead;
mod kernel;
mod plan;
#[cfg(test)]
mod tests;

/// `e^x` for `x <= 0`, as the attention softmax computes it (the sampler's softmax uses it too).
pub(crate) use kernels::attn::exp_neg;

/// One sequence chunk's attention on one layer.
pub struct ChunkAttention<'a> {
    /// The layer's tile table (its KV group's) for this sequence.
    pub tiles: &'a [TileId],
    /// The layer's index inside its KV group.
    pub in_group: usize,
    /// Position of the chunk's first query.
    pub start_pos: usize,
    /// Row of the chunk's first query in `q` / `out`.
    pub first_row: usize,
    /// Number of queries.
    pub len: usize,
    pub window: Option<usize>,
}

/// Shapes shared by every chunk of a layer.
#[derive(Clone, Copy)]
pub struct Heads<'a> {
    pub n_heads: usize,
    pub n_kv_heads: usize,
    pub head_dim: usize,
    /// Multiplies q.k before the softmax.
    pub scale: f32,
    /// Gemma 2: scaled scores become `softcap * tanh(s / softcap)` before the softmax (0: off).
    pub softcap: f32,
    /// gpt-oss: one logit per query head that joins its softmax's denominator (and max) as a
    /// key with no value would (llama.cpp's attention sinks).
    pub sinks: Option<&'a [f32]>,
}

/// Per-thread reusable buffers; grown, never shrunk.
#[derive(Default)]
pub struct AttnScratch {
    k: HugeVec<f32>,
    v: HugeVec<f32>,
    /// Scores, then f16-rounded probabilities, per (query, head) and visible key.
    scores: HugeVec<f32>,
    /// The task's queries, scaled and rounded to f16.
    m: HugeVec<f32>,
    acc: HugeVec<f32>,
    /// A converted tile's keys transposed (`kernel::transpose_keys`).
    kt: HugeVec<f32>,
}

/// `out` rows get the attention output of the matching `q` rows (`[rows][n_heads*head_dim]`).
pub fn attend_all(
    threads: &Threads,
    pool: &KvPool,
    chunks: &[ChunkAttention],
    heads: Heads<'_>,
    q: &[f32],
    out: &mut [f32],
    scratch: &mut Vec<Mutex<AttnScratch>>,
) {
    let tasks = plan::plan(chunks, heads, threads.n());
    while scratch.len() < threads.n() {
        scratch.push(Mutex::new(AttnScratch::default()));
    }
    let runs: Vec<_> = tasks
        .iter()
        .map(|t| t.out_range(&chunks[t.chunk], heads))
        .collect();
    let outs = Shares::new(out, &runs);
    // Home shares (`Threads::for_each_range`): in decode a thread attends the same
    // sequences step after step, the ones whose query rows it normed and roped.
    threads.for_each_range(tasks.len(), 1, &|w, r| {
        let mut s = scratch[w].lock().unwrap_or_else(|e| e.into_inner());
        for i in r {
            let task = tasks[i];
            let out = outs.take(i);
            kernel::run_task(pool, &chunks[task.chunk], heads, task, q, out, &mut s);
        }
    });
}
