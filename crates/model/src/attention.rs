//! Paged attention: the queries of each sequence chunk against K/V read through its tile table.
//!
//! Work is cut into tasks of (chunk, query range, head range) that threads take from a shared
//! counter. Inside a task, tiles are the outer loop: each tile's rows are converted once and used
//! by every query of the task that can see them. Three passes: scores (K), softmax, weighted sum
//! (V). Nothing is copied into a contiguous per-sequence buffer.
//!
//! Numerics follow llama.cpp's CPU path with an f16 cache (flash attention off), because greedy
//! decoding of small models flips on differences of a few ulps: the scaled query is rounded to
//! f16 before the K·Q dots, the softmax sums in f64, and the probabilities are rounded to f16
//! before the weighted sum of V.
//!
//! Batch invariance: a (query, head) is always computed whole by one task, visiting tiles and
//! slots in the same order, so its result does not depend on the task split or on what else is
//! in the batch.
//!
//! Visibility: a query at position p sees key positions `lo(p)..=p`, where `lo(p) = 0` on a
//! global layer and `p + 1 - window` on a sliding-window layer (llama.cpp's "standard" SWA).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use kernels::Threads;

use crate::kv::{KvPool, TileId};

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
pub struct Heads {
    pub n_heads: usize,
    pub n_kv_heads: usize,
    pub head_dim: usize,
    /// Multiplies q.k before the softmax.
    pub scale: f32,
}

/// Per-thread reusable buffers; grown, never shrunk.
#[derive(Default)]
pub struct AttnScratch {
    k: Vec<f32>,
    v: Vec<f32>,
    /// Scores, then f16-rounded probabilities, per (query, head) and visible key.
    scores: Vec<f32>,
    /// The task's queries, scaled and rounded to f16.
    m: Vec<f32>,
    acc: Vec<f32>,
}

fn grow(v: &mut Vec<f32>, n: usize) -> &mut [f32] {
    if v.len() < n {
        v.resize(n, 0.0);
    }
    &mut v[..n]
}

#[derive(Clone, Copy)]
struct Task {
    chunk: usize,
    t0: usize,
    t1: usize,
    h0: usize,
    h1: usize,
}

/// Queries per task when a chunk is split for prefill.
const TASK_QUERIES: usize = 16;

/// `out` rows get the attention output of the matching `q` rows (`[rows][n_heads*head_dim]`).
pub fn attend_all(
    threads: &Threads,
    pool: &KvPool,
    chunks: &[ChunkAttention],
    heads: Heads,
    q: &[f32],
    out: &mut [f32],
    scratch: &mut Vec<Mutex<AttnScratch>>,
) {
    let mut tasks = Vec::new();
    let split_heads = chunks.len() < threads.n();
    for (ci, c) in chunks.iter().enumerate() {
        let mut t0 = 0;
        while t0 < c.len {
            let t1 = (t0 + TASK_QUERIES).min(c.len);
            if split_heads && c.len == 1 {
                // A lone decode: split the heads so every thread has work.
                let per = heads.n_heads.div_ceil(threads.n()).max(1);
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
                tasks.push(Task {
                    chunk: ci,
                    t0,
                    t1,
                    h0: 0,
                    h1: heads.n_heads,
                });
            }
            t0 = t1;
        }
    }
    while scratch.len() < threads.n() {
        scratch.push(Mutex::new(AttnScratch::default()));
    }
    let next = AtomicUsize::new(0);
    let out_ptr = SharedOut(out.as_mut_ptr(), out.len());
    threads.run(&|worker| {
        let mut s = scratch[worker].lock().unwrap_or_else(|e| e.into_inner());
        loop {
            let i = next.fetch_add(1, Ordering::Relaxed);
            let Some(task) = tasks.get(i) else {
                break;
            };
            run_task(pool, &chunks[task.chunk], heads, *task, q, &out_ptr, &mut s);
        }
    });
}

/// The output buffer, written by tasks at disjoint (row, head) places.
struct SharedOut(*mut f32, usize);
// SAFETY: tasks write disjoint (query row, head) regions of the buffer, and `attend_all` holds the
// `&mut` borrow it came from until every task has finished (`Threads::run` returns after all).
unsafe impl Sync for SharedOut {}

impl SharedOut {
    /// # Safety
    /// No two live slices may overlap; `start + len` must be within the buffer.
    #[allow(clippy::mut_from_ref)]
    unsafe fn slice(&self, start: usize, len: usize) -> &mut [f32] {
        assert!(
            start + len <= self.1,
            "attention output out of bounds: this is a bug"
        );
        // SAFETY: in bounds (checked) and disjoint from other live slices (caller's contract).
        unsafe { std::slice::from_raw_parts_mut(self.0.add(start), len) }
    }
}

/// Runs one task, with the AVX2/FMA/F16C code generation where the CPU has it. Both paths do
/// the same arithmetic in the same order (no FMA contraction), so results are identical.
fn run_task(
    pool: &KvPool,
    c: &ChunkAttention,
    h: Heads,
    task: Task,
    q: &[f32],
    out: &SharedOut,
    s: &mut AttnScratch,
) {
    #[cfg(target_arch = "x86_64")]
    if std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("f16c") {
        // SAFETY: the features were just detected.
        unsafe { run_task_avx2(pool, c, h, task, q, out, s) };
        return;
    }
    run_task_body(pool, c, h, task, q, out, s);
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,f16c")]
unsafe fn run_task_avx2(
    pool: &KvPool,
    c: &ChunkAttention,
    h: Heads,
    task: Task,
    q: &[f32],
    out: &SharedOut,
    s: &mut AttnScratch,
) {
    run_task_body(pool, c, h, task, q, out, s);
}

#[inline(always)]
fn run_task_body(
    pool: &KvPool,
    c: &ChunkAttention,
    h: Heads,
    task: Task,
    q: &[f32],
    out: &SharedOut,
    s: &mut AttnScratch,
) {
    let layout = pool.layout();
    let ts = layout.tile_size;
    let kv_dim = layout.kv_dim;
    let hd = h.head_dim;
    let q_dim = h.n_heads * hd;
    let group = h.n_heads / h.n_kv_heads;
    let nq = task.t1 - task.t0;
    let nh = task.h1 - task.h0;
    let lo = |p: usize| c.window.map_or(0, |w| (p + 1).saturating_sub(w));
    let first_pos = c.start_pos + task.t0;
    let last_pos = c.start_pos + task.t1 - 1;
    // Scores are kept per (query, head) for key positions base..=last_pos.
    let base = lo(first_pos);
    let span = last_pos + 1 - base;

    grow(&mut s.k, ts * kv_dim);
    grow(&mut s.v, ts * kv_dim);
    grow(&mut s.scores, nq * nh * span);
    grow(&mut s.acc, nq * nh * hd).fill(0.0);
    // Scaled queries rounded to f16, as llama.cpp's f16 K·Q product sees them.
    let qr = grow(&mut s.m, nq * nh * hd);
    for t in 0..nq {
        let row = c.first_row + task.t0 + t;
        for hi in 0..nh {
            let head = task.h0 + hi;
            let src = &q[row * q_dim + head * hd..row * q_dim + (head + 1) * hd];
            for (d, &x) in qr[(t * nh + hi) * hd..(t * nh + hi + 1) * hd]
                .iter_mut()
                .zip(src)
            {
                *d = round_f16(x * h.scale);
            }
        }
    }

    // Pass 1: scores, tile by tile.
    let tiles = base / ts..=last_pos / ts;
    for ti in tiles.clone() {
        let Some((tile_start, n_slots)) = visible_tile(c, ti, ts, last_pos, base) else {
            continue;
        };
        let kf = &mut s.k[..n_slots * kv_dim];
        pool.read_keys(c.tiles[ti], c.in_group, n_slots, kf);
        for t in 0..nq {
            let p = first_pos + t;
            let (s_lo, s_hi) = (lo(p).max(tile_start), (p + 1).min(tile_start + n_slots));
            for hi in 0..nh {
                let g = (task.h0 + hi) / group;
                let qh = &s.m[(t * nh + hi) * hd..(t * nh + hi + 1) * hd];
                let sc = &mut s.scores[(t * nh + hi) * span..(t * nh + hi + 1) * span];
                for pos in s_lo..s_hi {
                    let slot = pos - tile_start;
                    let kr = &kf[slot * kv_dim + g * hd..slot * kv_dim + (g + 1) * hd];
                    sc[pos - base] = dot(qh, kr);
                }
            }
        }
    }

    // Pass 2: softmax over each query's visible keys (sum in f64, as ggml), probabilities
    // rounded to f16 as llama.cpp's f16 V product sees them.
    for t in 0..nq {
        let p = first_pos + t;
        let (v_lo, v_hi) = (lo(p) - base, p + 1 - base);
        for hi in 0..nh {
            let sc = &mut s.scores[(t * nh + hi) * span..(t * nh + hi + 1) * span][v_lo..v_hi];
            let max = sc.iter().copied().fold(f32::NEG_INFINITY, f32::max);
            let mut sum = 0.0f64;
            for x in sc.iter_mut() {
                *x = (*x - max).exp();
                sum += f64::from(*x);
            }
            let inv = (1.0 / sum) as f32;
            for x in sc.iter_mut() {
                *x = round_f16(*x * inv);
            }
        }
    }

    // Pass 3: weighted sum of V, tile by tile.
    for ti in tiles {
        let Some((tile_start, n_slots)) = visible_tile(c, ti, ts, last_pos, base) else {
            continue;
        };
        let vf = &mut s.v[..n_slots * kv_dim];
        pool.read_values(c.tiles[ti], c.in_group, n_slots, vf);
        for t in 0..nq {
            let p = first_pos + t;
            let (s_lo, s_hi) = (lo(p).max(tile_start), (p + 1).min(tile_start + n_slots));
            for hi in 0..nh {
                let g = (task.h0 + hi) / group;
                let st = t * nh + hi;
                let sc = &s.scores[st * span..(st + 1) * span];
                let acc = &mut s.acc[st * hd..(st + 1) * hd];
                for pos in s_lo..s_hi {
                    let w = sc[pos - base];
                    let slot = pos - tile_start;
                    let vr = &vf[slot * kv_dim + g * hd..slot * kv_dim + (g + 1) * hd];
                    for (a, x) in acc.iter_mut().zip(vr) {
                        *a += w * x;
                    }
                }
            }
        }
    }
    for t in 0..nq {
        let row = c.first_row + task.t0 + t;
        // SAFETY: this task alone owns heads h0..h1 of rows t0..t1 of its chunk.
        let dst = unsafe { out.slice(row * q_dim + task.h0 * hd, nh * hd) };
        dst.copy_from_slice(&s.acc[t * nh * hd..(t + 1) * nh * hd]);
    }
}

/// The start and the number of filled slots of tile `ti`, or `None` if no query of the task
/// sees it (released tiles are only ever below every query's window).
#[inline(always)]
fn visible_tile(
    c: &ChunkAttention,
    ti: usize,
    ts: usize,
    last_pos: usize,
    base: usize,
) -> Option<(usize, usize)> {
    let tile_start = ti * ts;
    if c.tiles[ti] == TileId::RELEASED {
        debug_assert!(tile_start + ts <= base, "a visible tile was released");
        return None;
    }
    Some((tile_start, ts.min(last_pos + 1 - tile_start)))
}

#[inline(always)]
fn round_f16(x: f32) -> f32 {
    half::f16::from_f32(x).to_f32()
}

#[inline(always)]
fn dot(a: &[f32], b: &[f32]) -> f32 {
    // Eight independent partial sums let the compiler vectorize without reassociation.
    let mut acc = [0.0f32; 8];
    let (ca, cb) = (a.chunks_exact(8), b.chunks_exact(8));
    let (ra, rb) = (ca.remainder(), cb.remainder());
    for (x, y) in ca.zip(cb) {
        for j in 0..8 {
            acc[j] += x[j] * y[j];
        }
    }
    let tail: f32 = ra.iter().zip(rb).map(|(x, y)| x * y).sum();
    acc.iter().sum::<f32>() + tail
}
