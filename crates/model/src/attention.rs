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

/// Keys per block of score dot products (with two query heads: eight accumulators of 8 lanes;
/// 2, 3 and 4 measured the same on a 2,048-token prefill).
const KEYS_PER_BLOCK: usize = 4;

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

    // Pass 1: scores, tile by tile, in blocks of two (query, head) pairs by four keys so each
    // loaded query and key vector serves several dot products (`dots`). Keys a query cannot see
    // are computed with the block and never stored.
    let tiles = base / ts..=last_pos / ts;
    for ti in tiles.clone() {
        let Some((tile_start, n_slots)) = visible_tile(c, ti, ts, last_pos, base) else {
            continue;
        };
        let kf = &mut s.k[..n_slots * kv_dim];
        pool.read_keys(c.tiles[ti], c.in_group, n_slots, kf);
        let kf = &s.k[..n_slots * kv_dim];
        for t in 0..nq {
            let p = first_pos + t;
            let (s_lo, s_hi) = (lo(p).max(tile_start), (p + 1).min(tile_start + n_slots));
            if s_lo >= s_hi {
                continue;
            }
            let mut hi = 0;
            while hi < nh {
                // Heads hi and hi + 1 together when they share a KV head, else hi alone.
                let g = (task.h0 + hi) / group;
                let n_pairs = if hi + 1 < nh && (task.h0 + hi + 1) / group == g {
                    2
                } else {
                    1
                };
                let qs: [&[f32]; 2] = std::array::from_fn(|j| {
                    let hj = hi + j.min(n_pairs - 1);
                    &s.m[(t * nh + hj) * hd..(t * nh + hj + 1) * hd]
                });
                let key = |pos: usize| {
                    let slot = pos - tile_start;
                    &kf[slot * kv_dim + g * hd..slot * kv_dim + (g + 1) * hd]
                };
                let mut pos = s_lo;
                while pos < s_hi {
                    let nk = (s_hi - pos).min(KEYS_PER_BLOCK);
                    let ks: [&[f32]; KEYS_PER_BLOCK] =
                        std::array::from_fn(|j| key(pos + j.min(nk - 1)));
                    let d = dots(qs, ks);
                    for (j, dj) in d.iter().enumerate().take(n_pairs) {
                        let row = (t * nh + hi + j) * span + pos - base;
                        s.scores[row..row + nk].copy_from_slice(&dj[..nk]);
                    }
                    pos += nk;
                }
                hi += n_pairs;
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

    // Pass 3: weighted sum of V, tile by tile. The heads of a query that share a KV head run
    // together over 16-float slices of their accumulators, so each V slice loaded from the tile
    // feeds all of them (`axpy_block`); per element the sum still runs over positions in order.
    for ti in tiles {
        let Some((tile_start, n_slots)) = visible_tile(c, ti, ts, last_pos, base) else {
            continue;
        };
        let vf = &mut s.v[..n_slots * kv_dim];
        pool.read_values(c.tiles[ti], c.in_group, n_slots, vf);
        let vf = &s.v[..n_slots * kv_dim];
        for t in 0..nq {
            let p = first_pos + t;
            let (s_lo, s_hi) = (lo(p).max(tile_start), (p + 1).min(tile_start + n_slots));
            if s_lo >= s_hi {
                continue;
            }
            let mut hi = 0;
            while hi < nh {
                let g = (task.h0 + hi) / group;
                let mut n = 1;
                while n < 4 && hi + n < nh && (task.h0 + hi + n) / group == g {
                    n += 1;
                }
                let st = t * nh + hi;
                let weights = &s.scores[st * span..(st + n) * span];
                let acc = &mut s.acc[st * hd..(st + n) * hd];
                let values = |pos: usize| {
                    let slot = pos - tile_start;
                    &vf[slot * kv_dim + g * hd..slot * kv_dim + (g + 1) * hd]
                };
                let blk = Block {
                    span,
                    hd,
                    base,
                    positions: s_lo..s_hi,
                };
                match n {
                    4 => axpy_block::<4>(acc, weights, &blk, values),
                    3 => axpy_block::<3>(acc, weights, &blk, values),
                    2 => axpy_block::<2>(acc, weights, &blk, values),
                    _ => axpy_block::<1>(acc, weights, &blk, values),
                }
                hi += n;
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

/// `dot(q[i], k[j])` for two query rows by four key rows, each computed as a lone dot product
/// would be (eight lanes of mul-then-add in element order, the lanes then summed in order): the
/// blocking only shares the loads.
#[inline(always)]
fn dots<const P: usize, const K: usize>(q: [&[f32]; P], k: [&[f32]; K]) -> [[f32; K]; P] {
    let n = q[0].len();
    debug_assert!(q.iter().chain(&k).all(|r| r.len() == n));
    let qc: [&[[f32; 8]]; P] = q.map(|r| r.as_chunks::<8>().0);
    let kc: [&[[f32; 8]]; K] = k.map(|r| r.as_chunks::<8>().0);
    let nb = qc[0].len();
    assert!(
        qc.iter().chain(&kc).all(|c| c.len() == nb),
        "dots: ragged rows"
    );
    let mut acc = [[[0.0f32; 8]; K]; P];
    for i in 0..nb {
        let qv: [[f32; 8]; P] = std::array::from_fn(|a| qc[a][i]);
        let kv: [[f32; 8]; K] = std::array::from_fn(|b| kc[b][i]);
        for a in 0..P {
            for b in 0..K {
                for j in 0..8 {
                    acc[a][b][j] += qv[a][j] * kv[b][j];
                }
            }
        }
    }
    let body = nb * 8;
    std::array::from_fn(|a| {
        std::array::from_fn(|b| {
            let tail: f32 = q[a][body..]
                .iter()
                .zip(&k[b][body..])
                .map(|(x, y)| x * y)
                .sum();
            acc[a][b].iter().sum::<f32>() + tail
        })
    })
}

/// Shapes of one `axpy_block` call.
struct Block {
    /// Distance between the heads' score rows.
    span: usize,
    hd: usize,
    /// Key position of score index 0.
    base: usize,
    positions: std::ops::Range<usize>,
}

/// For `N` heads sharing one KV head: `acc[h] += w[h][pos] * v(pos)` over the positions in
/// order, with `acc` holding the heads' `hd`-float accumulators back to back and `w` their score
/// rows. 16-float slices of all `N` accumulators stay in registers across the positions.
#[inline(always)]
fn axpy_block<'v, const N: usize>(
    acc: &mut [f32],
    w: &[f32],
    b: &Block,
    v: impl Fn(usize) -> &'v [f32],
) {
    const W: usize = 16;
    let (hd, span, base) = (b.hd, b.span, b.base);
    let body = hd - hd % W;
    let mut d = 0;
    while d < body {
        let mut a = [[0.0f32; W]; N];
        for (h, ah) in a.iter_mut().enumerate() {
            ah.copy_from_slice(&acc[h * hd + d..h * hd + d + W]);
        }
        for pos in b.positions.clone() {
            let vr = &v(pos)[d..d + W];
            for (h, ah) in a.iter_mut().enumerate() {
                let wt = w[h * span + pos - base];
                for j in 0..W {
                    ah[j] += wt * vr[j];
                }
            }
        }
        for (h, ah) in a.iter().enumerate() {
            acc[h * hd + d..h * hd + d + W].copy_from_slice(ah);
        }
        d += W;
    }
    if body < hd {
        for pos in b.positions.clone() {
            let vr = &v(pos)[body..];
            for h in 0..N {
                let wt = w[h * span + pos - base];
                for (x, y) in acc[h * hd + body..(h + 1) * hd].iter_mut().zip(vr) {
                    *x += wt * y;
                }
            }
        }
    }
}
