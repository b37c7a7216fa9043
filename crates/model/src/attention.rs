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
//! before the weighted sum of V. Dots and V sums use fused multiply-adds over eight lanes (as
//! ggml's AVX2 f16 dot does); `exp` is a polynomial good to a few ulp (`exp_neg`).
//!
//! Batch invariance: a (query, head) is always computed whole by one task, visiting tiles and
//! slots in the same order, so its result does not depend on the task split or on what else is
//! in the batch.
//!
//! Visibility: a query at position p sees key positions `lo(p)..=p`, where `lo(p) = 0` on a
//! global layer and `p + 1 - window` on a sliding-window layer (llama.cpp's "standard" SWA).

use std::cell::Cell;
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

/// Keys per block of score dot products: with two query heads, six accumulators of 8 lanes plus
/// the five loaded vectors stay within AVX2's 16 registers.
const KEYS_PER_BLOCK: usize = 3;

/// Tasks with at most this many queries read f16 K/V tiles directly (converting as they load);
/// larger ones convert each tile to f32 once and reuse it.
const DIRECT_F16_QUERIES: usize = 2;

/// Most queries per task (a chunk is cut into ranges of this many, and ranges with a large share
/// of the step's work are cut further, see `attend_all`).
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
    // Work of queries t0..t1 of a chunk: queries times the keys the last one sees.
    let cost = |c: &ChunkAttention, t0: usize, t1: usize| {
        let last = c.start_pos + t1;
        (t1 - t0) * c.window.map_or(last, |w| w.min(last))
    };
    let total: usize = chunks.iter().map(|c| cost(c, 0, c.len)).sum();
    // No task should be a large share of the step: a prefill chunk deep into a long prompt
    // beside short decodes would otherwise be one task that a single thread runs alone.
    let target = (total / (threads.n() * 4)).max(1);
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
    // Largest first: each home share below starts with its largest, and a thread done with its
    // own takes the others' next ones, so small tasks fill in at the end. A (query, head) is
    // computed whole by one task whatever the split and the order, so results do not change.
    tasks.sort_by_key(|t| std::cmp::Reverse(cost(&chunks[t.chunk], t.t0, t.t1)));
    while scratch.len() < threads.n() {
        scratch.push(Mutex::new(AttnScratch::default()));
    }
    let out_ptr = SharedOut(out.as_mut_ptr(), out.len());
    // Home shares (`Threads::for_each_range`): in decode a thread attends the same
    // sequences step after step, the ones whose query rows it normed and roped.
    threads.for_each_range(tasks.len(), 1, &|w, r| {
        let mut s = scratch[w].lock().unwrap_or_else(|e| e.into_inner());
        for i in r {
            let task = tasks[i];
            run_task(pool, &chunks[task.chunk], heads, task, q, &out_ptr, &mut s);
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

/// Whether the 512-bit V sums and the four-head scores may run: AVX-512 F/VL as the kernels
/// detect them, and not capped by `TESSERA_ISA` (so an `avx2` run is AVX2 throughout).
#[cfg(target_arch = "x86_64")]
fn wide_simd() -> bool {
    kernels::isa() >= kernels::Isa::Avx512Vnni
}

/// Runs one task, with AVX2/FMA/F16C code where the CPU has it (and `TESSERA_ISA` allows). Both paths do the same
/// arithmetic in the same order (fused multiply-adds; `f32::mul_add` in the portable path), so
/// results are identical.
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
    if kernels::isa() >= kernels::Isa::Avx2 {
        // SAFETY: the features were just detected.
        unsafe { run_task_avx2(pool, c, h, task, q, out, s) };
        return;
    }
    run_task_body::<false>(pool, c, h, task, q, out, s);
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn run_task_avx2(
    pool: &KvPool,
    c: &ChunkAttention,
    h: Heads,
    task: Task,
    q: &[f32],
    out: &SharedOut,
    s: &mut AttnScratch,
) {
    run_task_body::<true>(pool, c, h, task, q, out, s);
}

/// The task; `SIMD` only in the AVX2 + FMA entry point, where `dots`, `axpy_block`, the softmax
/// and the f16 rounding use SIMD intrinsics (same operations per lane as their portable forms,
/// so the same bits).
#[inline(always)]
fn run_task_body<const SIMD: bool>(
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

    grow(&mut s.scores, nq * nh * span);
    // Scaled queries rounded to f16, as llama.cpp's f16 K·Q product sees them.
    let qr = grow(&mut s.m, nq * nh * hd);
    for t in 0..nq {
        let row = c.first_row + task.t0 + t;
        for hi in 0..nh {
            let head = task.h0 + hi;
            let src = &q[row * q_dim + head * hd..row * q_dim + (head + 1) * hd];
            let dst = &mut qr[(t * nh + hi) * hd..(t * nh + hi + 1) * hd];
            dst.copy_from_slice(src);
            scale_round_f16::<SIMD>(dst, h.scale);
        }
    }

    let shape = TileSpan {
        start: 0,
        first_pos,
        nq,
        nh,
        hd,
        kv_dim,
        group,
        h0: task.h0,
        span,
        base,
    };

    // Few queries (decode): read f16 K/V tiles as they are stored; many (prefill): convert each
    // tile once and reuse it (`tile_rows`).
    let direct = SIMD && nq <= DIRECT_F16_QUERIES;

    // Pass 1: scores, tile by tile (`scores_tile`). A decode reads each K/V row once, from
    // memory: while a tile is computed, the next one (after the last K tile, the first V tile) is
    // asked for a share at a time (`Ahead`).
    let tiles = base / ts..=last_pos / ts;
    let last = last_pos / ts;
    let ahead = |side, ti| match direct {
        true => Ahead::of(f16_rows(pool, side, c, ti, last_pos, base)),
        false => Ahead::none(),
    };
    for ti in tiles.clone() {
        let Some((tile_start, n_slots)) = visible_tile(c, ti, ts, last_pos, base) else {
            continue;
        };
        let tile = TileSpan {
            start: tile_start,
            ..shape
        };
        let next = match ti < last {
            true => ahead(Side::K, ti + 1),
            false => ahead(Side::V, base / ts),
        };
        let rows = tile_rows(pool, Side::K, c, ti, n_slots, direct, &mut s.k);
        match rows {
            TileRows::F16(k) => scores_tile::<SIMD, u16>(&tile, k, &s.m, &mut s.scores, &lo, &next),
            TileRows::F32(k) => scores_tile::<SIMD, f32>(&tile, k, &s.m, &mut s.scores, &lo, &next),
        }
        next.upto(1, 1);
    }

    // Pass 2: softmax over each query's visible keys (sum in f64, as ggml), probabilities
    // rounded to f16 as llama.cpp's f16 V product sees them.
    for t in 0..nq {
        let p = first_pos + t;
        let (v_lo, v_hi) = (lo(p) - base, p + 1 - base);
        for hi in 0..nh {
            let sc = &mut s.scores[(t * nh + hi) * span..(t * nh + hi + 1) * span][v_lo..v_hi];
            softmax_f16::<SIMD>(sc);
        }
    }

    // Pass 3: weighted sum of V, tile by tile (`values_tile`), straight into the output when the
    // task has every head of its queries (their rows are then one run of `out`).
    let first_out = (c.first_row + task.t0) * q_dim;
    let acc = if nh == h.n_heads {
        // SAFETY: this task alone owns rows t0..t1 of its chunk, all heads.
        unsafe { out.slice(first_out, nq * q_dim) }
    } else {
        grow(&mut s.acc, nq * nh * hd)
    };
    acc.fill(0.0);
    for ti in tiles {
        let Some((tile_start, n_slots)) = visible_tile(c, ti, ts, last_pos, base) else {
            continue;
        };
        let tile = TileSpan {
            start: tile_start,
            ..shape
        };
        let next = match ti < last {
            true => ahead(Side::V, ti + 1),
            false => Ahead::none(),
        };
        let rows = tile_rows(pool, Side::V, c, ti, n_slots, direct, &mut s.v);
        match rows {
            TileRows::F16(v) => values_tile::<SIMD, u16>(&tile, v, &s.scores, acc, &lo, &next),
            TileRows::F32(v) => values_tile::<SIMD, f32>(&tile, v, &s.scores, acc, &lo, &next),
        }
        next.upto(1, 1);
    }
    if nh < h.n_heads {
        for t in 0..nq {
            let row = c.first_row + task.t0 + t;
            // SAFETY: this task alone owns heads h0..h1 of rows t0..t1 of its chunk.
            let dst = unsafe { out.slice(row * q_dim + task.h0 * hd, nh * hd) };
            dst.copy_from_slice(&s.acc[t * nh * hd..(t + 1) * nh * hd]);
        }
    }
}

/// Which half of the cache a tile read is for.
#[derive(Clone, Copy)]
enum Side {
    K,
    V,
}

/// One tile's K or V rows as the per-tile loops read them.
enum TileRows<'a> {
    F16(&'a [u16]),
    F32(&'a [f32]),
}

/// The first `n_slots` K or V rows of tile `ti` of chunk `c`: the pool's f16 bits when `direct`
/// and the pool stores f16, else converted into `buf` (grown as needed).
fn tile_rows<'a>(
    pool: &'a KvPool,
    side: Side,
    c: &ChunkAttention,
    ti: usize,
    n_slots: usize,
    direct: bool,
    buf: &'a mut Vec<f32>,
) -> TileRows<'a> {
    let (tile, g) = (c.tiles[ti], c.in_group);
    if direct {
        let raw = match side {
            Side::K => pool.keys_f16(tile, g, n_slots),
            Side::V => pool.values_f16(tile, g, n_slots),
        };
        if let Some(raw) = raw {
            return TileRows::F16(raw);
        }
    }
    let dst = grow(buf, n_slots * pool.layout().kv_dim);
    match side {
        Side::K => pool.read_keys(tile, g, n_slots, dst),
        Side::V => pool.read_values(tile, g, n_slots, dst),
    }
    TileRows::F32(dst)
}

/// Tile `ti`'s visible K or V rows as f16 bits, if the pool stores f16 and a query sees them.
fn f16_rows<'a>(
    pool: &'a KvPool,
    side: Side,
    c: &ChunkAttention,
    ti: usize,
    last_pos: usize,
    base: usize,
) -> Option<&'a [u16]> {
    let (_, n_slots) = visible_tile(c, ti, pool.layout().tile_size, last_pos, base)?;
    let (tile, g) = (c.tiles[ti], c.in_group);
    match side {
        Side::K => pool.keys_f16(tile, g, n_slots),
        Side::V => pool.values_f16(tile, g, n_slots),
    }
}

/// The cache lines of the next tile's f16 rows, asked for into L2 a share at a time as the
/// loops over the current tile progress (`upto`). A decode reads its K/V from memory, and the
/// hardware prefetchers alone left it streaming at ~5 GB/s per thread; a whole tile's
/// prefetches issued at once stall the loads behind them. Criterion attention (cold K/V):
/// `decode_16x512_18_layers` 11.2-11.6 ms with the whole next tile asked for at the start of
/// each tile, 5.8-6.4 ms spread; `decode_16x128_18_layers` 2.4-2.8 -> 1.6-1.9 ms. Into L1
/// gained less, and asking for every tile of the task up front was worse (12.2-12.6 ms).
struct Ahead {
    /// First line's address and the end of the rows (0, 0 when there is nothing to fetch).
    start: usize,
    end: usize,
    /// The next line not yet asked for.
    next: Cell<usize>,
}

impl Ahead {
    /// Nothing to ask for.
    fn none() -> Ahead {
        Ahead {
            start: 0,
            end: 0,
            next: Cell::new(0),
        }
    }

    fn of(rows: Option<&[u16]>) -> Ahead {
        let Some(r) = rows else {
            return Ahead::none();
        };
        let start = r.as_ptr() as usize & !63;
        Ahead {
            start,
            end: r.as_ptr_range().end as usize,
            next: Cell::new(start),
        }
    }

    /// Asks for the lines of the first `num / den` of the rows not yet asked for (the last,
    /// partly filled line included when `num == den`).
    #[inline(always)]
    fn upto(&self, num: usize, den: usize) {
        let target = self.start + (self.end - self.start) * num / den.max(1);
        let mut line = self.next.get();
        #[cfg(target_arch = "x86_64")]
        while line < target {
            use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T1};
            // SAFETY: a prefetch is a hint and never faults, whatever the address.
            unsafe { _mm_prefetch::<_MM_HINT_T1>(line as *const i8) };
            line += 64;
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            line = line.max(target);
        }
        self.next.set(line);
    }
}

/// One tile's place in a task: what the per-tile loops need.
#[derive(Clone, Copy)]
struct TileSpan {
    start: usize,
    first_pos: usize,
    nq: usize,
    nh: usize,
    hd: usize,
    kv_dim: usize,
    group: usize,
    h0: usize,
    span: usize,
    base: usize,
}

/// A cached K/V element as the loops read it: f32 (a converted tile) or raw f16 bits, which the
/// SIMD path converts as it loads (the conversion is exact, so the bits are the same).
trait KvElem: Copy {
    fn to_f32(self) -> f32;
}

impl KvElem for f32 {
    #[inline(always)]
    fn to_f32(self) -> f32 {
        self
    }
}

impl KvElem for u16 {
    #[inline(always)]
    fn to_f32(self) -> f32 {
        half::f16::from_bits(self).to_f32()
    }
}

/// Pass 1 for one tile: scores of every (query, head) of the task against the tile's visible
/// keys, in blocks of four heads by four keys (`simd::dots4`, where AVX-512VL gives the registers)
/// or two heads by `KEYS_PER_BLOCK` keys (`dots`); keys a query cannot see are
/// computed with the block and never stored.
#[inline(always)]
fn scores_tile<const SIMD: bool, E: KvElem>(
    t: &TileSpan,
    keys: &[E],
    qr: &[f32],
    scores: &mut [f32],
    lo: &impl Fn(usize) -> usize,
    next: &Ahead,
) {
    let n_slots = keys.len() / t.kv_dim;
    let (hd, nh) = (t.hd, t.nh);
    #[cfg(target_arch = "x86_64")]
    let four = SIMD && t.group >= 4 && wide_simd();
    for qi in 0..t.nq {
        let p = t.first_pos + qi;
        let (s_lo, s_hi) = (lo(p).max(t.start), (p + 1).min(t.start + n_slots));
        if s_lo >= s_hi {
            continue;
        }
        let mut hi = 0;
        while hi < nh {
            let g = (t.h0 + hi) / t.group;
            let key = |pos: usize| {
                let slot = pos - t.start;
                &keys[slot * t.kv_dim + g * hd..slot * t.kv_dim + (g + 1) * hd]
            };
            // Four heads of one KV head together where the registers allow (same bits).
            #[cfg(target_arch = "x86_64")]
            if four && hi + 4 <= nh && (t.h0 + hi + 3) / t.group == g {
                let qs: [&[f32]; 4] = std::array::from_fn(|j| {
                    &qr[(qi * nh + hi + j) * hd..(qi * nh + hi + j + 1) * hd]
                });
                let mut pos = s_lo;
                while pos < s_hi {
                    let nk = (s_hi - pos).min(simd::KEYS4);
                    let ks: [&[E]; simd::KEYS4] = std::array::from_fn(|j| key(pos + j.min(nk - 1)));
                    next.upto(pos + nk - t.start, n_slots);
                    // SAFETY: `four` checked AVX-512 F/VL (`wide_simd`); `SIMD` means
                    // AVX2/FMA/F16C.
                    let d = unsafe { simd::dots4::<E>(qs, ks) };
                    for (j, dj) in d.iter().enumerate() {
                        let row = (qi * nh + hi + j) * t.span + pos - t.base;
                        scores[row..row + nk].copy_from_slice(&dj[..nk]);
                    }
                    pos += nk;
                }
                hi += 4;
                continue;
            }
            // Heads hi and hi + 1 together when they share a KV head, else hi alone.
            let n_pairs = if hi + 1 < nh && (t.h0 + hi + 1) / t.group == g {
                2
            } else {
                1
            };
            let qs: [&[f32]; 2] = std::array::from_fn(|j| {
                let hj = hi + j.min(n_pairs - 1);
                &qr[(qi * nh + hj) * hd..(qi * nh + hj + 1) * hd]
            });
            let mut pos = s_lo;
            while pos < s_hi {
                let nk = (s_hi - pos).min(KEYS_PER_BLOCK);
                let ks: [&[E]; KEYS_PER_BLOCK] = std::array::from_fn(|j| key(pos + j.min(nk - 1)));
                next.upto(pos + nk - t.start, n_slots);
                let d = dots::<SIMD, E>(qs, ks);
                for (j, dj) in d.iter().enumerate().take(n_pairs) {
                    let row = (qi * nh + hi + j) * t.span + pos - t.base;
                    scores[row..row + nk].copy_from_slice(&dj[..nk]);
                }
                pos += nk;
            }
            hi += n_pairs;
        }
    }
}

/// Pass 3 for one tile: the heads of a query that share a KV head run together over 16-float
/// slices of their accumulators, so each V slice feeds all of them (`axpy_block`); per element
/// the sum runs over positions in order.
#[inline(always)]
fn values_tile<const SIMD: bool, E: KvElem>(
    t: &TileSpan,
    vals: &[E],
    scores: &[f32],
    acc_all: &mut [f32],
    lo: &impl Fn(usize) -> usize,
    next: &Ahead,
) {
    let n_slots = vals.len() / t.kv_dim;
    let (hd, nh, span) = (t.hd, t.nh, t.span);
    for qi in 0..t.nq {
        let p = t.first_pos + qi;
        let (s_lo, s_hi) = (lo(p).max(t.start), (p + 1).min(t.start + n_slots));
        if s_lo >= s_hi {
            continue;
        }
        let mut hi = 0;
        while hi < nh {
            let g = (t.h0 + hi) / t.group;
            let mut n = 1;
            while n < 4 && hi + n < nh && (t.h0 + hi + n) / t.group == g {
                n += 1;
            }
            let st = qi * nh + hi;
            let weights = &scores[st * span..(st + n) * span];
            let acc = &mut acc_all[st * hd..(st + n) * hd];
            let values = |pos: usize| {
                let slot = pos - t.start;
                &vals[slot * t.kv_dim + g * hd..slot * t.kv_dim + (g + 1) * hd]
            };
            let blk = Block {
                span,
                hd,
                base: t.base,
                positions: s_lo..s_hi,
                next,
            };
            match n {
                4 => axpy_block::<4, SIMD, E>(acc, weights, &blk, values),
                3 => axpy_block::<3, SIMD, E>(acc, weights, &blk, values),
                2 => axpy_block::<2, SIMD, E>(acc, weights, &blk, values),
                _ => axpy_block::<1, SIMD, E>(acc, weights, &blk, values),
            }
            hi += n;
        }
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

/// `x[i] = round_f16(x[i] * s)`; `SIMD` (the AVX2 entry point) converts eight at a time with
/// F16C, which rounds to nearest even as `half` does: the same bits.
#[inline(always)]
fn scale_round_f16<const SIMD: bool>(x: &mut [f32], s: f32) {
    #[cfg(target_arch = "x86_64")]
    if SIMD {
        // SAFETY: `SIMD` is only set in the AVX2 + FMA + F16C entry point.
        return unsafe { simd::scale_round_f16(x, s) };
    }
    for v in x {
        *v = round_f16(*v * s);
    }
}

/// One (query, head)'s scores over its visible keys become probabilities rounded to f16: the
/// max taken off, `exp_neg`, the sum in f64 over eight lanes (`exp_sum`), each scaled by the
/// sum's f32 inverse. `SIMD` runs the same operations per element eight at a time.
#[inline(always)]
fn softmax_f16<const SIMD: bool>(sc: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if SIMD {
        // SAFETY: `SIMD` is only set in the AVX2 + FMA + F16C entry point.
        return unsafe { simd::softmax_f16(sc) };
    }
    let max = sc.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let sum = exp_sum(sc, max);
    let inv = (1.0 / sum) as f32;
    scale_round_f16::<false>(sc, inv);
}

/// `dot(q[i], k[j])` for two query rows by `KEYS_PER_BLOCK` key rows, each computed as a lone
/// dot product would be (eight lanes of fused multiply-adds in element order, the lanes then
/// summed in order): the blocking only shares the loads.
#[inline(always)]
fn dots<const SIMD: bool, E: KvElem>(
    q: [&[f32]; 2],
    k: [&[E]; KEYS_PER_BLOCK],
) -> [[f32; KEYS_PER_BLOCK]; 2] {
    #[cfg(target_arch = "x86_64")]
    if SIMD {
        // SAFETY: `SIMD` is only set in the AVX2 + FMA + F16C entry point.
        return unsafe { simd::dots(q, k) };
    }
    let n = q[0].len();
    assert!(
        q.iter().all(|r| r.len() == n) && k.iter().all(|r| r.len() == n),
        "dots: ragged rows"
    );
    let body = n - n % 8;
    let mut acc = [[[0.0f32; 8]; KEYS_PER_BLOCK]; 2];
    for i in 0..body {
        for a in 0..2 {
            for b in 0..KEYS_PER_BLOCK {
                acc[a][b][i % 8] = q[a][i].mul_add(k[b][i].to_f32(), acc[a][b][i % 8]);
            }
        }
    }
    let mut out = [[0.0f32; KEYS_PER_BLOCK]; 2];
    for a in 0..2 {
        for b in 0..KEYS_PER_BLOCK {
            let tail: f32 = q[a][body..]
                .iter()
                .zip(&k[b][body..])
                .map(|(x, y)| x * y.to_f32())
                .sum();
            out[a][b] = acc[a][b].iter().sum::<f32>() + tail;
        }
    }
    out
}

/// `exp_neg`'s constants, shared by its scalar and SIMD forms (which must agree to the bit).
mod exp_consts {
    pub const LOG2E: f32 = std::f32::consts::LOG2_E;
    /// ln 2 split so that `n * LN2_HI` is exact for the `n` that occur.
    pub const LN2_HI: f32 = 0.693_145_75;
    pub const LN2_LO: f32 = 1.428_606_8e-6;
    /// 1.5 * 2^23: added to a float of magnitude below 2^22 it rounds it to an integer (ties to
    /// even) and leaves that integer in the low mantissa bits.
    pub const MAGIC: f32 = 12_582_912.0;
    /// Below this `exp_neg` gives 0 (e^-87 is near the bottom of f32's normal range).
    pub const FLOOR: f32 = -87.0;
    /// Taylor coefficients of e^r, highest degree first (Horner's order).
    pub const POLY: [f32; 8] = [
        1.0 / 5040.0,
        1.0 / 720.0,
        1.0 / 120.0,
        1.0 / 24.0,
        1.0 / 6.0,
        0.5,
        1.0,
        1.0,
    ];
}

/// `e^x` for `x <= 0` (softmax arguments after the max is taken off) to within a few ulp:
/// `x = n ln 2 + r` with `|r| <= ln 2 / 2`, `e^r` by its Taylor polynomial to degree 7, `2^n`
/// through the exponent bits. Inputs below -87 (results near the bottom of f32's normal range)
/// give 0.
/// Written as plain arithmetic so loops over it vectorize inside the AVX2 entry point.
#[inline(always)]
pub(crate) fn exp_neg(x: f32) -> f32 {
    use exp_consts::*;
    // `n` and `2^n` come from float additions (MAGIC) and integer operations on the bits: no
    // float to int conversion, whose saturating form does not vectorize.
    let small = x < FLOOR;
    let x = x.max(FLOOR);
    let t = x * LOG2E + MAGIC;
    let n = t - MAGIC;
    let r = n.mul_add(-LN2_LO, n.mul_add(-LN2_HI, x));
    let mut p = POLY[0];
    for &c in &POLY[1..] {
        p = p.mul_add(r, c);
    }
    // n in -126..=0: its bits are t's minus MAGIC's.
    let e = t.to_bits().wrapping_sub(MAGIC.to_bits()).wrapping_add(127);
    let scale = f32::from_bits(e << 23);
    if small {
        0.0
    } else {
        p * scale
    }
}

/// Replaces `x` by `e^(x - max)` and returns the sum of the results, accumulated in f64 over
/// eight lanes (then the lanes in order, then the tail).
#[inline(always)]
fn exp_sum(x: &mut [f32], max: f32) -> f64 {
    let mut lanes = [0.0f64; 8];
    let (chunks, tail) = x.as_chunks_mut::<8>();
    for c in chunks {
        for j in 0..8 {
            c[j] = exp_neg(c[j] - max);
            lanes[j] += f64::from(c[j]);
        }
    }
    let mut sum = lanes.iter().sum::<f64>();
    for v in tail {
        *v = exp_neg(*v - max);
        sum += f64::from(*v);
    }
    sum
}

/// Shapes of one `axpy_block` call.
struct Block<'a> {
    /// Distance between the heads' score rows.
    span: usize,
    hd: usize,
    /// Key position of score index 0.
    base: usize,
    positions: std::ops::Range<usize>,
    /// The next tile's lines, asked for a share per slice of the head's values.
    next: &'a Ahead,
}

/// For `N` heads sharing one KV head: `acc[h] += w[h][pos] * v(pos)` over the positions in
/// order, with `acc` holding the heads' `hd`-float accumulators back to back and `w` their score
/// rows. 16-float slices of all `N` accumulators stay in registers across the positions.
#[inline(always)]
fn axpy_block<'v, const N: usize, const SIMD: bool, E: KvElem + 'v>(
    acc: &mut [f32],
    w: &[f32],
    b: &Block,
    v: impl Fn(usize) -> &'v [E],
) {
    #[cfg(target_arch = "x86_64")]
    if SIMD && b.hd.is_multiple_of(simd::WIDE) && wide_simd() {
        // SAFETY: `SIMD` is only set in the AVX2 + FMA + F16C entry point; AVX-512F detected.
        unsafe { simd::axpy_block_512::<N, E>(acc, w, b, v) };
        return;
    }
    #[cfg(target_arch = "x86_64")]
    if SIMD && b.hd.is_multiple_of(16) {
        // SAFETY: `SIMD` is only set in the AVX2 + FMA + F16C entry point.
        unsafe { simd::axpy_block::<N, E>(acc, w, b, v) };
        return;
    }
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
                    ah[j] = wt.mul_add(vr[j].to_f32(), ah[j]);
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
                    *x = wt.mul_add(y.to_f32(), *x);
                }
            }
        }
    }
}

/// SIMD forms of `dots`, `axpy_block`, `softmax_f16` and `scale_round_f16`: the same operations
/// per lane in the same order as the portable code, with the accumulators held in registers.
#[cfg(target_arch = "x86_64")]
mod simd {
    use std::arch::x86_64::*;

    use super::{Block, KvElem, KEYS_PER_BLOCK};

    /// Eight elements as f32 (f16 bits converted with F16C, exactly).
    ///
    /// # Safety
    /// Eight elements readable at `p`; AVX and F16C enabled in the inlining function.
    #[inline(always)]
    unsafe fn load8<E: KvElem>(p: *const E) -> __m256 {
        // SAFETY: per the contract; the element type decides the load.
        unsafe {
            if std::mem::size_of::<E>() == 2 {
                _mm256_cvtph_ps(_mm_loadu_si128(p.cast()))
            } else {
                _mm256_loadu_ps(p.cast())
            }
        }
    }

    /// `x[i] = round_f16(x[i] * s)`, eight at a time through F16C (round to nearest even).
    ///
    /// # Safety
    /// AVX2 and F16C must be enabled in the inlining function.
    #[inline(always)]
    pub(super) unsafe fn scale_round_f16(x: &mut [f32], s: f32) {
        let (chunks, tail) = x.as_chunks_mut::<8>();
        // SAFETY: each load and store covers one 8-float chunk; features per the contract.
        unsafe {
            let sv = _mm256_set1_ps(s);
            for c in chunks {
                let v = _mm256_mul_ps(_mm256_loadu_ps(c.as_ptr()), sv);
                let h = _mm256_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(v);
                _mm256_storeu_ps(c.as_mut_ptr(), _mm256_cvtph_ps(h));
            }
        }
        for v in tail {
            *v = super::round_f16(*v * s);
        }
    }

    /// `super::exp_neg` on eight lanes: the same operations, so the same bits.
    ///
    /// # Safety
    /// AVX2 and FMA must be enabled in the inlining function.
    #[inline(always)]
    pub(super) unsafe fn exp_neg8(x: __m256) -> __m256 {
        use super::exp_consts::*;
        // SAFETY: register-only intrinsics; features per the contract.
        unsafe {
            let floor = _mm256_set1_ps(FLOOR);
            let small = _mm256_cmp_ps::<_CMP_LT_OQ>(x, floor);
            // `f32::max(x, FLOOR)` gives FLOOR for a NaN x; `max_ps` returns its second operand.
            let x = _mm256_max_ps(x, floor);
            let magic = _mm256_set1_ps(MAGIC);
            let t = _mm256_add_ps(_mm256_mul_ps(x, _mm256_set1_ps(LOG2E)), magic);
            let n = _mm256_sub_ps(t, magic);
            let r = _mm256_fmadd_ps(
                n,
                _mm256_set1_ps(-LN2_LO),
                _mm256_fmadd_ps(n, _mm256_set1_ps(-LN2_HI), x),
            );
            let mut p = _mm256_set1_ps(POLY[0]);
            for &c in &POLY[1..] {
                p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(c));
            }
            let e = _mm256_add_epi32(
                _mm256_sub_epi32(
                    _mm256_castps_si256(t),
                    _mm256_set1_epi32(MAGIC.to_bits() as i32),
                ),
                _mm256_set1_epi32(127),
            );
            let scale = _mm256_castsi256_ps(_mm256_slli_epi32::<23>(e));
            _mm256_andnot_ps(small, _mm256_mul_ps(p, scale))
        }
    }

    /// `super::softmax_f16` eight elements at a time: the max over eight lanes (exact, so any
    /// order gives the scalar fold's value), `exp_neg8`, the f64 lane sums and the rounding as
    /// the portable code does them.
    ///
    /// # Safety
    /// AVX2, FMA and F16C must be enabled in the inlining function.
    #[inline(always)]
    pub(super) unsafe fn softmax_f16(sc: &mut [f32]) {
        let (chunks, tail) = sc.as_chunks_mut::<8>();
        // SAFETY: each load and store covers one 8-float chunk; features per the contract.
        let (mut max, mut lanes) = unsafe {
            let mut m = _mm256_set1_ps(f32::NEG_INFINITY);
            for c in chunks.iter() {
                // A NaN score is skipped, as `f32::max` skips it: `max_ps` returns its second
                // operand when either is NaN.
                m = _mm256_max_ps(_mm256_loadu_ps(c.as_ptr()), m);
            }
            let mut ms = [0.0f32; 8];
            _mm256_storeu_ps(ms.as_mut_ptr(), m);
            (
                ms.iter().copied().fold(f32::NEG_INFINITY, f32::max),
                [0.0f64; 8],
            )
        };
        max = tail.iter().copied().fold(max, f32::max);
        // SAFETY: as above.
        unsafe {
            let mv = _mm256_set1_ps(max);
            let (mut lo, mut hi) = (_mm256_setzero_pd(), _mm256_setzero_pd());
            for c in chunks.iter_mut() {
                let e = exp_neg8(_mm256_sub_ps(_mm256_loadu_ps(c.as_ptr()), mv));
                _mm256_storeu_ps(c.as_mut_ptr(), e);
                lo = _mm256_add_pd(lo, _mm256_cvtps_pd(_mm256_castps256_ps128(e)));
                hi = _mm256_add_pd(hi, _mm256_cvtps_pd(_mm256_extractf128_ps::<1>(e)));
            }
            _mm256_storeu_pd(lanes.as_mut_ptr(), lo);
            _mm256_storeu_pd(lanes.as_mut_ptr().add(4), hi);
        }
        let mut sum = lanes.iter().sum::<f64>();
        for v in tail.iter_mut() {
            *v = super::exp_neg(*v - max);
            sum += f64::from(*v);
        }
        let inv = (1.0 / sum) as f32;
        // SAFETY: features per the contract.
        unsafe { scale_round_f16(sc, inv) };
    }

    /// # Safety
    /// AVX2, FMA and F16C must be enabled in the inlining function.
    #[inline(always)]
    pub(super) unsafe fn dots<E: KvElem>(
        q: [&[f32]; 2],
        k: [&[E]; KEYS_PER_BLOCK],
    ) -> [[f32; KEYS_PER_BLOCK]; 2] {
        // SAFETY: forwarded.
        unsafe { dots_block(q, k) }
    }

    /// Keys per block of `dots4`.
    pub(super) const KEYS4: usize = 4;

    /// `dots` for four query rows (heads sharing a KV head) by `KEYS4` key rows: each key
    /// vector loaded (and converted) once for four heads. Sixteen accumulators plus the loads
    /// need AVX-512VL's 32 vector registers.
    ///
    /// # Safety
    /// AVX-512F/VL, AVX2, FMA and F16C must be available.
    #[target_feature(enable = "avx512f,avx512vl,avx2,fma,f16c")]
    pub(super) unsafe fn dots4<E: KvElem>(q: [&[f32]; 4], k: [&[E]; KEYS4]) -> [[f32; KEYS4]; 4] {
        // SAFETY: forwarded.
        unsafe { dots_block(q, k) }
    }

    /// `dot(q[a], k[b])` for `H` query rows by `K` key rows, each as a lone dot product would be
    /// (eight lanes of fused multiply-adds in element order, then the lanes summed in order):
    /// the blocking only shares the loads, so every block shape gives the same bits.
    ///
    /// # Safety
    /// AVX2, FMA and F16C must be enabled in the inlining function.
    #[inline(always)]
    unsafe fn dots_block<E: KvElem, const H: usize, const K: usize>(
        q: [&[f32]; H],
        k: [&[E]; K],
    ) -> [[f32; K]; H] {
        let n = q[0].len();
        assert!(
            q.iter().all(|r| r.len() == n) && k.iter().all(|r| r.len() == n),
            "dots: ragged rows"
        );
        let body = n - n % 8;
        // SAFETY: every load reads 8 elements at i < body <= len; features per the contract.
        unsafe {
            let mut acc = [[_mm256_setzero_ps(); K]; H];
            let mut i = 0;
            while i < body {
                let qv: [__m256; H] =
                    std::array::from_fn(|a| _mm256_loadu_ps(q[a].as_ptr().add(i)));
                for b in 0..K {
                    let kv = load8(k[b].as_ptr().add(i));
                    for a in 0..H {
                        acc[a][b] = _mm256_fmadd_ps(qv[a], kv, acc[a][b]);
                    }
                }
                i += 8;
            }
            // Each pair's lanes summed in order, eight pairs at a time (`lane_sums8`), into room
            // for the 16 pairs of the largest block (`dots4`).
            const { assert!(H * K <= 16, "dots_block: more pairs than lane-sum room") };
            let pairs = acc.as_flattened();
            let mut sums = [[0.0f32; 8]; 2];
            for (g, dst) in sums.iter_mut().enumerate().take((H * K).div_ceil(8)) {
                let v = std::array::from_fn(|j| {
                    pairs.get(8 * g + j).copied().unwrap_or(_mm256_setzero_ps())
                });
                *dst = lane_sums8(v);
            }
            let sums = sums.as_flattened();
            let mut out = [[0.0f32; K]; H];
            for a in 0..H {
                for b in 0..K {
                    let tail: f32 = q[a][body..]
                        .iter()
                        .zip(&k[b][body..])
                        .map(|(x, y)| x * y.to_f32())
                        .sum();
                    out[a][b] = sums[a * K + b] + tail;
                }
            }
            out
        }
    }

    /// `v[p]`'s eight lanes summed in lane order for each `p`, as `lanes.iter().sum::<f32>()`
    /// does it (from the same empty-sum value), by a transpose and seven vertical adds.
    ///
    /// # Safety
    /// AVX must be enabled in the inlining function.
    #[inline(always)]
    unsafe fn lane_sums8(v: [__m256; 8]) -> [f32; 8] {
        // SAFETY: register-only intrinsics and one 8-float store; features per the contract.
        unsafe {
            let t: [__m256; 8] = std::array::from_fn(|j| {
                let (x, y) = (v[j / 2 * 2], v[j / 2 * 2 + 1]);
                if j % 2 == 0 {
                    _mm256_unpacklo_ps(x, y) // x0 y0 x1 y1 | x4 y4 x5 y5
                } else {
                    _mm256_unpackhi_ps(x, y) // x2 y2 x3 y3 | x6 y6 x7 y7
                }
            });
            // s[4h + i]: lanes i and i + 4 of vectors 4h..4h + 4.
            let s = [
                _mm256_shuffle_ps::<0x44>(t[0], t[2]),
                _mm256_shuffle_ps::<0xEE>(t[0], t[2]),
                _mm256_shuffle_ps::<0x44>(t[1], t[3]),
                _mm256_shuffle_ps::<0xEE>(t[1], t[3]),
                _mm256_shuffle_ps::<0x44>(t[4], t[6]),
                _mm256_shuffle_ps::<0xEE>(t[4], t[6]),
                _mm256_shuffle_ps::<0x44>(t[5], t[7]),
                _mm256_shuffle_ps::<0xEE>(t[5], t[7]),
            ];
            let empty: f32 = [0.0f32; 0].iter().sum();
            let mut sum = _mm256_set1_ps(empty);
            for lane in 0..8 {
                let (lo, hi) = (s[lane % 4], s[4 + lane % 4]);
                let l = if lane < 4 {
                    _mm256_permute2f128_ps::<0x20>(lo, hi)
                } else {
                    _mm256_permute2f128_ps::<0x31>(lo, hi)
                };
                sum = _mm256_add_ps(sum, l);
            }
            let mut out = [0.0f32; 8];
            _mm256_storeu_ps(out.as_mut_ptr(), sum);
            out
        }
    }

    /// Floats of each head's accumulator per pass of `axpy_block_512`.
    pub(super) const WIDE: usize = 64;

    /// Sixteen elements as f32 (f16 bits converted exactly).
    ///
    /// # Safety
    /// Sixteen elements readable at `p`; AVX-512F enabled in the inlining function.
    #[inline(always)]
    unsafe fn load16<E: KvElem>(p: *const E) -> __m512 {
        // SAFETY: per the contract; the element type decides the load.
        unsafe {
            if std::mem::size_of::<E>() == 2 {
                _mm512_cvtph_ps(_mm256_loadu_si256(p.cast()))
            } else {
                _mm512_loadu_ps(p.cast())
            }
        }
    }

    /// 512-bit `axpy_block`: 64 floats of each of the `N` heads' accumulators stay in registers
    /// (16 at most) across the positions, so each broadcast weight feeds four multiply-adds and
    /// the loop carries no per-element bounds checks. Per element the same fused multiply-adds
    /// in the same position order as the portable form: the same bits.
    ///
    /// # Safety
    /// AVX-512F must be available; `b.hd % WIDE == 0`; slices as the portable `axpy_block`
    /// requires (checked here: out-of-range shapes panic).
    #[target_feature(enable = "avx512f,avx2,fma,f16c")]
    pub(super) unsafe fn axpy_block_512<'v, const N: usize, E: KvElem + 'v>(
        acc: &mut [f32],
        w: &[f32],
        b: &Block,
        v: impl Fn(usize) -> &'v [E],
    ) {
        let (hd, span, base) = (b.hd, b.span, b.base);
        let (p0, p1) = (b.positions.start, b.positions.end);
        if p0 >= p1 {
            return;
        }
        assert!(
            acc.len() >= N * hd
                && hd % WIDE == 0
                && p0 >= base
                && (N - 1) * span + p1 - base <= w.len(),
            "axpy_block_512: shapes"
        );
        let mut d = 0;
        while d < hd {
            // SAFETY: d + WIDE <= hd and acc holds N * hd floats; the weights read are
            // w[h * span + pos - base] for pos < p1, within `w` (asserted); each value row holds
            // hd elements (the slice indexing checks it); features per the contract.
            unsafe {
                let mut a = [[_mm512_setzero_ps(); 4]; N];
                for (h, ah) in a.iter_mut().enumerate() {
                    for (j, x) in ah.iter_mut().enumerate() {
                        *x = _mm512_loadu_ps(acc.as_ptr().add(h * hd + d + 16 * j));
                    }
                }
                let wp: [*const f32; N] =
                    std::array::from_fn(|h| w.as_ptr().add(h * span + p0 - base));
                for (i, pos) in (p0..p1).enumerate() {
                    let vr = v(pos)[d..d + WIDE].as_ptr();
                    let vs: [__m512; 4] = std::array::from_fn(|j| load16(vr.add(16 * j)));
                    for (h, ah) in a.iter_mut().enumerate() {
                        let wt = _mm512_set1_ps(*wp[h].add(i));
                        for j in 0..4 {
                            ah[j] = _mm512_fmadd_ps(wt, vs[j], ah[j]);
                        }
                    }
                }
                for (h, ah) in a.iter().enumerate() {
                    for (j, x) in ah.iter().enumerate() {
                        _mm512_storeu_ps(acc.as_mut_ptr().add(h * hd + d + 16 * j), *x);
                    }
                }
            }
            d += WIDE;
            b.next.upto(d, hd);
        }
    }

    /// # Safety
    /// AVX2 and FMA must be enabled in the inlining function; `b.hd % 16 == 0`; slices as the
    /// portable `axpy_block` requires.
    #[inline(always)]
    pub(super) unsafe fn axpy_block<'v, const N: usize, E: KvElem + 'v>(
        acc: &mut [f32],
        w: &[f32],
        b: &Block,
        v: impl Fn(usize) -> &'v [E],
    ) {
        let (hd, span, base) = (b.hd, b.span, b.base);
        assert!(acc.len() >= N * hd && hd % 16 == 0, "axpy_block: shapes");
        let mut d = 0;
        while d < hd {
            // SAFETY: d + 16 <= hd and acc holds N * hd floats; each value row holds hd floats
            // (the slice indexing below checks it); features per the contract.
            unsafe {
                let mut a = [[_mm256_setzero_ps(); 2]; N];
                for (h, ah) in a.iter_mut().enumerate() {
                    ah[0] = _mm256_loadu_ps(acc.as_ptr().add(h * hd + d));
                    ah[1] = _mm256_loadu_ps(acc.as_ptr().add(h * hd + d + 8));
                }
                for pos in b.positions.clone() {
                    let vr = &v(pos)[d..d + 16];
                    let v0 = load8(vr.as_ptr());
                    let v1 = load8(vr.as_ptr().add(8));
                    for (h, ah) in a.iter_mut().enumerate() {
                        let wt = _mm256_set1_ps(w[h * span + pos - base]);
                        ah[0] = _mm256_fmadd_ps(wt, v0, ah[0]);
                        ah[1] = _mm256_fmadd_ps(wt, v1, ah[1]);
                    }
                }
                for (h, ah) in a.iter().enumerate() {
                    _mm256_storeu_ps(acc.as_mut_ptr().add(h * hd + d), ah[0]);
                    _mm256_storeu_ps(acc.as_mut_ptr().add(h * hd + d + 8), ah[1]);
                }
            }
            d += 16;
            b.next.upto(d, hd);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exp_neg_takes_n_and_2_to_the_n_from_the_bits_exactly() {
        // The same polynomial with n from `round_ties_even` and 2^n from an integer cast.
        let reference = |x: f32| -> f32 {
            use exp_consts::*;
            let small = x < FLOOR;
            let x = x.max(FLOOR);
            let n = (x * LOG2E).round_ties_even();
            let r = n.mul_add(-LN2_LO, n.mul_add(-LN2_HI, x));
            let mut p = POLY[0];
            for &c in &POLY[1..] {
                p = p.mul_add(r, c);
            }
            let scale = f32::from_bits(((n as i32 + 127) as u32) << 23);
            if small {
                0.0
            } else {
                p * scale
            }
        };
        let mut x = -100.0f32;
        while x <= 0.0 {
            assert_eq!(exp_neg(x).to_bits(), reference(x).to_bits(), "x = {x}");
            x += 0.000_37;
        }
        for x in [
            0.0f32,
            -0.0,
            -87.0,
            -87.000_01,
            -86.999_99,
            f32::NEG_INFINITY,
            -0.346_573_6,
        ] {
            assert_eq!(exp_neg(x).to_bits(), reference(x).to_bits(), "x = {x}");
        }
    }

    #[test]
    fn exp_neg_is_within_a_few_ulp_of_exp() {
        let mut worst = 0.0f64;
        let mut x = -87.0f32;
        while x <= 0.0 {
            let want = f64::from(x).exp();
            let got = f64::from(exp_neg(x));
            worst = worst.max(((got - want) / want).abs());
            x += 0.000_731;
        }
        assert!(worst < 4e-7, "worst relative error {worst}");
        assert_eq!(exp_neg(0.0), 1.0);
        assert_eq!(exp_neg(-100.0), 0.0);
        assert_eq!(exp_neg(f32::NEG_INFINITY), 0.0);
    }

    /// The SIMD V sum and dots of one block, for f32 or raw f16 K/V rows.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn simd_pair<E: KvElem>(
        q: [&[f32]; 2],
        k: [&[E]; KEYS_PER_BLOCK],
        acc: &mut [f32],
        w: &[f32],
        b: &Block,
        v: &[E],
    ) -> [[f32; KEYS_PER_BLOCK]; 2] {
        axpy_block::<3, true, E>(acc, w, b, |p| &v[p * b.hd..(p + 1) * b.hd]);
        dots::<true, E>(q, k)
    }

    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn simd256_axpy(acc: &mut [f32], w: &[f32], b: &Block, v: &[f32]) {
        // SAFETY: features enabled here; hd % 16 == 0 in the test.
        unsafe { simd::axpy_block::<3, f32>(acc, w, b, |p| &v[p * b.hd..(p + 1) * b.hd]) };
    }

    #[test]
    fn simd_dots_and_value_sums_give_the_portable_bits() {
        #[cfg(target_arch = "x86_64")]
        if std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma") {
            let row = |seed: usize, n: usize| -> Vec<f32> {
                (0..n)
                    .map(|i| ((i * 7919 + seed * 31) % 997) as f32 / 500.0 - 1.0)
                    .collect()
            };
            let hd = 256;
            let (q0, q1) = (row(1, hd), row(2, hd));
            let ks: Vec<Vec<f32>> = (0..KEYS_PER_BLOCK).map(|j| row(10 + j, hd)).collect();
            let k: [&[f32]; KEYS_PER_BLOCK] = std::array::from_fn(|j| &ks[j][..]);
            let (span, n_pos) = (40, 37);
            let w = row(5, 3 * span);
            let v = row(6, n_pos * hd);
            let b = Block {
                span,
                hd,
                base: 0,
                positions: 0..n_pos,
                next: &Ahead::none(),
            };
            let mut acc_simd = row(7, 3 * hd);
            let mut acc_plain = acc_simd.clone();
            // SAFETY: features detected above.
            let d_simd = unsafe { simd_pair([&q0, &q1], k, &mut acc_simd, &w, &b, &v) };
            axpy_block::<3, false, f32>(&mut acc_plain, &w, &b, |p| &v[p * hd..(p + 1) * hd]);
            let d_plain = dots::<false, f32>([&q0, &q1], k);
            let bits = |x: &[f32]| x.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(d_simd.as_flattened()), bits(d_plain.as_flattened()));
            assert_eq!(bits(&acc_simd), bits(&acc_plain));
            // Both SIMD widths (`axpy_block` picks the 512-bit one where it can).
            let mut acc256 = row(7, 3 * hd);
            // SAFETY: features detected above.
            unsafe { simd256_axpy(&mut acc256, &w, &b, &v) };
            assert_eq!(bits(&acc256), bits(&acc_plain));
            if std::is_x86_feature_detected!("avx512f") {
                let mut acc512 = row(7, 3 * hd);
                // SAFETY: AVX-512F detected; hd = 256 is a multiple of WIDE.
                unsafe {
                    simd::axpy_block_512::<3, f32>(&mut acc512, &w, &b, |p| {
                        &v[p * hd..(p + 1) * hd]
                    })
                };
                assert_eq!(bits(&acc512), bits(&acc_plain));
            }
            // f16 rows read directly give the bits of the same rows converted first.
            let k16: Vec<Vec<u16>> = ks
                .iter()
                .map(|r| {
                    r.iter()
                        .map(|&x| half::f16::from_f32(x).to_bits())
                        .collect()
                })
                .collect();
            let kc: Vec<Vec<f32>> = k16
                .iter()
                .map(|r| {
                    r.iter()
                        .map(|&x| half::f16::from_bits(x).to_f32())
                        .collect()
                })
                .collect();
            let k16r: [&[u16]; KEYS_PER_BLOCK] = std::array::from_fn(|j| &k16[j][..]);
            let kcr: [&[f32]; KEYS_PER_BLOCK] = std::array::from_fn(|j| &kc[j][..]);
            let v16: Vec<u16> = v
                .iter()
                .map(|&x| half::f16::from_f32(x).to_bits())
                .collect();
            let vc: Vec<f32> = v16
                .iter()
                .map(|&x| half::f16::from_bits(x).to_f32())
                .collect();
            let mut acc16 = row(7, 3 * hd);
            let mut accc = acc16.clone();
            // SAFETY: features detected above.
            let d16 = unsafe { simd_pair([&q0, &q1], k16r, &mut acc16, &w, &b, &v16) };
            // SAFETY: as above.
            let dc = unsafe { simd_pair([&q0, &q1], kcr, &mut accc, &w, &b, &vc) };
            assert_eq!(bits(d16.as_flattened()), bits(dc.as_flattened()));
            assert_eq!(bits(&acc16), bits(&accc));
            let dp16 = dots::<false, u16>([&q0, &q1], k16r);
            assert_eq!(bits(dp16.as_flattened()), bits(dc.as_flattened()));
            if std::is_x86_feature_detected!("avx512f") && std::is_x86_feature_detected!("avx512vl")
            {
                // Four heads by four keys: each pair as `dots` computes it.
                let qs4: Vec<Vec<f32>> = (0..4).map(|a| row(20 + a, hd)).collect();
                let ks4: Vec<Vec<u16>> = (0..simd::KEYS4)
                    .map(|j| {
                        row(30 + j, hd)
                            .iter()
                            .map(|&x| half::f16::from_f32(x).to_bits())
                            .collect()
                    })
                    .collect();
                let q4: [&[f32]; 4] = std::array::from_fn(|a| &qs4[a][..]);
                let k4: [&[u16]; simd::KEYS4] = std::array::from_fn(|j| &ks4[j][..]);
                // SAFETY: AVX-512VL detected (and AVX2/FMA above).
                let d4 = unsafe { simd::dots4(q4, k4) };
                for a in 0..4 {
                    for b in 0..simd::KEYS4 {
                        let one = dots::<false, u16>([q4[a], q4[a]], [k4[b]; KEYS_PER_BLOCK]);
                        assert_eq!(d4[a][b].to_bits(), one[0][0].to_bits(), "head {a} key {b}");
                    }
                }
            }
        }
    }

    #[test]
    fn simd_softmax_and_f16_rounding_give_the_portable_bits() {
        #[cfg(target_arch = "x86_64")]
        if std::is_x86_feature_detected!("avx2")
            && std::is_x86_feature_detected!("fma")
            && std::is_x86_feature_detected!("f16c")
        {
            #[target_feature(enable = "avx2,fma,f16c")]
            unsafe fn both(x: &mut [f32], y: &mut [f32], s: f32) {
                softmax_f16::<true>(x);
                scale_round_f16::<true>(y, s);
            }
            #[target_feature(enable = "avx2,fma")]
            unsafe fn exp8(x: [f32; 8]) -> [f32; 8] {
                use std::arch::x86_64::*;
                let mut out = [0.0f32; 8];
                // SAFETY: 8 floats each way; features enabled here.
                unsafe {
                    let e = simd::exp_neg8(_mm256_loadu_ps(x.as_ptr()));
                    _mm256_storeu_ps(out.as_mut_ptr(), e);
                }
                out
            }
            let mut x = -100.0f32;
            while x <= 0.0 {
                let xs: [f32; 8] = std::array::from_fn(|j| x - j as f32 * 0.000_03);
                // SAFETY: features detected above.
                let got = unsafe { exp8(xs) };
                for j in 0..8 {
                    assert_eq!(got[j].to_bits(), exp_neg(xs[j]).to_bits(), "x = {}", xs[j]);
                }
                x += 0.000_71;
            }
            let odd = [
                f32::NEG_INFINITY,
                f32::NAN,
                -87.0,
                -87.000_01,
                0.0,
                -0.0,
                -1e-30,
                -88.0,
            ];
            // SAFETY: features detected above.
            let got = unsafe { exp8(odd) };
            for j in 0..8 {
                assert_eq!(
                    got[j].to_bits(),
                    exp_neg(odd[j]).to_bits(),
                    "x = {}",
                    odd[j]
                );
            }
            let bits = |x: &[f32]| x.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
            for n in [1usize, 5, 8, 9, 16, 100, 515, 1027] {
                // Scores spread over ~120 (so some fall below exp_neg's -87 cut and some
                // probabilities are f16 subnormals), and raw values spread past f16's range.
                let scores: Vec<f32> = (0..n)
                    .map(|i| ((i * 7919 + n) % 4001) as f32 * -0.03 + (i % 3) as f32 * 0.5)
                    .collect();
                let raw: Vec<f32> = (0..n)
                    .map(|i| ((i * 104_729 + 7) % 20_011) as f32 * 7.37 - 70_000.0)
                    .collect();
                let (mut x_simd, mut y_simd) = (scores.clone(), raw.clone());
                // SAFETY: features detected above.
                unsafe { both(&mut x_simd, &mut y_simd, 0.0625) };
                let (mut x_plain, mut y_plain) = (scores.clone(), raw.clone());
                softmax_f16::<false>(&mut x_plain);
                scale_round_f16::<false>(&mut y_plain, 0.0625);
                assert_eq!(bits(&x_simd), bits(&x_plain), "softmax, n = {n}");
                assert_eq!(bits(&y_simd), bits(&y_plain), "rounding, n = {n}");
                let total: f32 = x_plain.iter().sum();
                assert!(
                    (total - 1.0).abs() < 1e-2,
                    "n = {n}: probabilities sum to {total}"
                );
            }
        }
    }

    #[test]
    fn ahead_asks_for_each_line_once_and_the_last_partial_one() {
        // 200 f16 values from 6 bytes into a line: 400 bytes over 7 lines.
        let buf = vec![0u16; 300];
        let at = (64 - (buf.as_ptr() as usize % 64)) % 64 / 2 + 3;
        let rows = &buf[at..at + 200];
        let a = Ahead::of(Some(rows));
        let first = rows.as_ptr() as usize & !63;
        assert_eq!(a.next.get(), first);
        a.upto(1, 2);
        let half = a.next.get();
        assert!(half > first && half < rows.as_ptr_range().end as usize);
        a.upto(1, 4);
        assert_eq!(a.next.get(), half, "a smaller share asks for nothing more");
        a.upto(1, 1);
        assert_eq!((a.next.get() - first) / 64, 7);
        let none = Ahead::none();
        none.upto(1, 1);
        assert_eq!(none.next.get(), 0);
    }

    #[test]
    fn exp_sum_matches_a_plain_loop() {
        for n in [1usize, 7, 8, 9, 100, 1027] {
            let mut x: Vec<f32> = (0..n).map(|i| ((i * 37) % 101) as f32 * -0.3).collect();
            let max = x.iter().copied().fold(f32::NEG_INFINITY, f32::max);
            let want: f64 = x.iter().map(|&v| f64::from(v - max).exp()).sum();
            let got = exp_sum(&mut x, max);
            assert!(((got - want) / want).abs() < 1e-6, "n {n}: {got} vs {want}");
        }
    }
}
