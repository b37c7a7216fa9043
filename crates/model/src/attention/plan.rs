//! Cutting one layer's attention into tasks for the thread pool.
//!
//! A task is (chunk, query range `t0..t1`, head range `h0..h1`). Chunks are cut into ranges of
//! at most `TASK_QUERIES` queries, and a range with a large share of the step's work is cut
//! further, so no single task is left running alone at the end; a lone decode beside fewer
//! chunks than threads is cut by heads instead, so every thread has work.
//!
//! Invariants:
//! - Every (query, head) of every chunk belongs to exactly one task, and a task computes its
//!   (query, head)s whole (`super::kernel`), so results do not depend on the cut or the order.
//! - A task has every head of its queries, or a single query (a head split only happens for a
//!   one-query chunk). Its output is therefore one contiguous run of `out` (`Task::out_range`),
//!   and the runs of different tasks are disjoint.

use std::ops::Range;

use super::{ChunkAttention, Heads};

/// Most queries per task.
const TASK_QUERIES: usize = 16;

/// One task: queries `t0..t1` of chunk `chunk`, heads `h0..h1`.
#[derive(Clone, Copy)]
pub(super) struct Task {
    pub chunk: usize,
    pub t0: usize,
    pub t1: usize,
    pub h0: usize,
    pub h1: usize,
}

impl Task {
    /// The elements of `out` (`[rows][n_heads * head_dim]`) the task writes: from its first
    /// query's head `h0` to its last query's head `h1` (all of it, see the module invariants).
    pub fn out_range(&self, c: &ChunkAttention, h: Heads<'_>) -> Range<usize> {
        let q_dim = h.n_heads * h.head_dim;
        let (first, last) = (c.first_row + self.t0, c.first_row + self.t1 - 1);
        first * q_dim + self.h0 * h.head_dim..last * q_dim + self.h1 * h.head_dim
    }
}

/// Work of queries `t0..t1` of a chunk: queries times the keys the last one sees.
fn cost(c: &ChunkAttention, t0: usize, t1: usize) -> usize {
    let last = c.start_pos + t1;
    (t1 - t0) * c.window.map_or(last, |w| w.min(last))
}

/// The tasks of one layer's attention over `chunks` on `n_threads` threads, largest first.
pub(super) fn plan(chunks: &[ChunkAttention], heads: Heads<'_>, n_threads: usize) -> Vec<Task> {
    let total: usize = chunks.iter().map(|c| cost(c, 0, c.len)).sum();
    // No task should be a large share of the step: a prefill chunk deep into a long prompt
    // beside short decodes would otherwise be one task that a single thread runs alone.
    let target = (total / (n_threads * 4)).max(1);
    let mut tasks = Vec::new();
    let split_heads = chunks.len() < n_threads;
    for (ci, c) in chunks.iter().enumerate() {
        let mut t0 = 0;
        while t0 < c.len {
            let t1 = (t0 + TASK_QUERIES).min(c.len);
            if split_heads && c.len == 1 {
                // A lone decode: split the heads so every thread has work.
                let per = heads.n_heads.div_ceil(n_threads).max(1);
                let mut h0 = 0;
                while h0 < heads.n_heads {
                    let h1 = (h0 + per).min(heads.n_heads);
                    tasks.push(Task {
                        chunk: ci,
                        t0,
                        t1,
                        h0,
                        h1,
                    });
                    h0 = h1;
                }
            } else {
                let pieces = ((cost(c, t0, t1) + target / 2) / target).clamp(1, t1 - t0);
                for k in 0..pieces {
                    tasks.push(Task {
                        chunk: ci,
                        t0: t0 + (t1 - t0) * k / pieces,
                        t1: t0 + (t1 - t0) * (k + 1) / pieces,
                        h0: 0,
                        h1: heads.n_heads,
                    });
                }
            }
            t0 = t1;
        }
    }
    // Largest first: each home share starts with its largest, and a thread done with its own
    // takes the others' next ones, so small tasks fill in at the end. A (query, head) is
    // computed whole by one task whatever the split and the order, so results do not change.
    tasks.sort_by_key(|t| std::cmp::Reverse(cost(&chunks[t.chunk], t.t0, t.t1)));
    tasks
}
