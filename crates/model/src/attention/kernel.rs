//! One attention task: queries `t0..t1` of a chunk, heads `h0..h1`, against the chunk's K/V
//! tiles, in three passes — scores tile by tile (K), the softmax of each (query, head), the
//! weighted sum of V tile by tile — into the task's run of the output.
//!
//! Design: tiles are the outer loop of both tile passes, so each tile's rows are converted (or,
//! for few queries, read as f16 directly) once for every query of the task that sees them. While
//! a tile is computed, the next one's cache lines are asked for a share at a time (`Ahead`).
//! `run_task` picks the form of `kernels::attn`'s helpers once per task: with AVX2/FMA/F16C it
//! enters a `#[target_feature]` function so the helpers inline with those features.
//!
//! Invariants:
//! - A (query, head) is computed whole here, visiting tiles and slots in position order, so its
//!   result does not depend on the task split (batch invariance).
//! - Both forms do the same arithmetic in the same order (`kernels::attn`), so results are the
//!   same bits with and without SIMD.
//! - A released tile is never read: only tiles wholly below every query's window are released
//!   (`Tiles::visible`).

use kernels::attn::{
    axpy_block, axpy_rows, dots, dots1, dots4, dots_own, dots_t, scale_round_f16, softmax_f16,
    transpose16, Avx2, Block, KvElem, Lanes, Portable, Wide, KEYS1, KEYS4, KEYS_PER_BLOCK, KEYS_T,
};
use kernels::HugeVec;

use super::ahead::Ahead;
use super::plan::Task;
use super::{AttnScratch, ChunkAttention, Heads};
use crate::kv::{KvPool, TileId};

/// Tasks with at most this many queries read f16 K/V tiles directly (converting as they load);
/// larger ones convert each tile to f32 once and reuse it.
const DIRECT_F16_QUERIES: usize = 2;

/// Runs one task into `out`, its run of the output (`Task::out_range`), with AVX2/FMA/F16C code
/// where the CPU has it (and `TESSERA_ISA` allows). Both paths do the same arithmetic in the
/// same order (fused multiply-adds; `f32::mul_add` in the portable path), so results are
/// identical. A task that reads its tiles row by row (`by_row`) has an entry of its own, so
/// each entry's loops are compiled without the other's: with both in one body, the head-by-head
/// loops of Qwen2.5-0.5B's decode shapes ran 11-12% slower in one build (code layout alone
/// moves them by about 5% from build to build).
pub(super) fn run_task(
    pool: &KvPool,
    c: &ChunkAttention,
    h: Heads<'_>,
    task: Task,
    q: &[f32],
    out: &mut [f32],
    s: &mut AttnScratch,
) {
    if let Some(simd) = Avx2::detect() {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: an `Avx2` value means AVX2, FMA and F16C were detected.
        unsafe {
            match by_row(h, task) {
                true => run_task_avx2::<true>(simd, pool, c, h, task, q, out, s),
                false => run_task_avx2::<false>(simd, pool, c, h, task, q, out, s),
            }
        };
        #[cfg(not(target_arch = "x86_64"))]
        match by_row(h, task) {
            true => run_task_body::<_, true>(simd, pool, c, h, task, q, out, s),
            false => run_task_body::<_, false>(simd, pool, c, h, task, q, out, s),
        }
        return;
    }
    run_task_body::<_, false>(Portable, pool, c, h, task, q, out, s);
}

/// Whether a task with the SIMD helpers reads its tiles row by row (`scores_rows`,
/// `values_rows`): a decode (its tiles read as stored) of two or more heads that each have
/// their own KV head.
fn by_row(h: Heads<'_>, task: Task) -> bool {
    task.t1 - task.t0 <= DIRECT_F16_QUERIES && h.n_heads == h.n_kv_heads && task.h1 - task.h0 > 1
}

/// # Safety
/// AVX2, FMA and F16C must be available (an `Avx2` value proves it).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c")]
#[allow(clippy::too_many_arguments)]
unsafe fn run_task_avx2<const ROWS: bool>(
    simd: Avx2,
    pool: &KvPool,
    c: &ChunkAttention,
    h: Heads<'_>,
    task: Task,
    q: &[f32],
    out: &mut [f32],
    s: &mut AttnScratch,
) {
    run_task_body::<_, ROWS>(simd, pool, c, h, task, q, out, s);
}

/// The task, with the helpers' form `L` (inlined into `run_task_avx2` for `Avx2`); `ROWS` is
/// `by_row(h, task)` for the SIMD forms, false for the portable one.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn run_task_body<L: Lanes, const ROWS: bool>(
    lanes: L,
    pool: &KvPool,
    c: &ChunkAttention,
    h: Heads<'_>,
    task: Task,
    q: &[f32],
    out: &mut [f32],
    s: &mut AttnScratch,
) {
    let layout = pool.layout();
    let hd = h.head_dim;
    let q_dim = h.n_heads * hd;
    let nq = task.t1 - task.t0;
    let nh = task.h1 - task.h0;
    let lo = |p: usize| c.window.map_or(0, |w| (p + 1).saturating_sub(w));
    let first_pos = c.start_pos + task.t0;
    let last_pos = c.start_pos + task.t1 - 1;
    // Scores are kept per (query, head) for key positions base..=last_pos.
    let base = lo(first_pos);
    let span = last_pos + 1 - base;
    // Few queries (decode): read f16 K/V tiles as they are stored; many (prefill): convert each
    // tile once and reuse it (`Tiles::rows`).
    let direct = L::SIMD && nq <= DIRECT_F16_QUERIES;
    let group = h.n_heads / h.n_kv_heads;
    debug_assert_eq!(ROWS, L::SIMD && by_row(h, task), "row-by-row entry");
    let shape = TileSpan {
        start: 0,
        first_pos,
        nq,
        nh,
        hd,
        kv_dim: layout.kv_dim,
        group,
        h0: task.h0,
        span,
        base,
    };

    s.scores.sized(nq * nh * span);
    load_queries(lanes, c, h, task, q, &mut s.m);
    let tiles = Tiles {
        pool,
        c,
        last_pos,
        direct,
    };
    let bufs = ScoreBufs {
        k: &mut s.k,
        kt: &mut s.kt,
    };
    scores_pass::<L, ROWS>(lanes, &tiles, &shape, &s.m, &mut s.scores, bufs, &lo);
    let sinks = h.sinks.map(|s| &s[task.h0..task.h1]);
    softmax_pass(lanes, &shape, h.softcap, sinks, &mut s.scores, &lo);

    // Pass 3 goes straight into the output when the task has every head of its queries (their
    // rows are then its whole run of `out`).
    let acc: &mut [f32] = if nh == h.n_heads {
        assert_eq!(out.len(), nq * q_dim, "attention output run: this is a bug");
        &mut *out
    } else {
        s.acc.sized(nq * nh * hd)
    };
    acc.fill(0.0);
    values_pass::<L, ROWS>(lanes, &tiles, &shape, &s.scores, acc, &mut s.v, &lo);
    if nh < h.n_heads {
        // The run starts at head h0 of the first query; each query's heads are q_dim apart.
        for t in 0..nq {
            let dst = &mut out[t * q_dim..t * q_dim + nh * hd];
            dst.copy_from_slice(&s.acc[t * nh * hd..(t + 1) * nh * hd]);
        }
    }
}

/// Scaled queries of the task rounded to f16, as llama.cpp's f16 K·Q product sees them, into
/// `m` as `[query][head][head_dim]`.
#[inline(always)]
fn load_queries<L: Lanes>(
    lanes: L,
    c: &ChunkAttention,
    h: Heads<'_>,
    task: Task,
    q: &[f32],
    m: &mut HugeVec<f32>,
) {
    let hd = h.head_dim;
    let q_dim = h.n_heads * hd;
    let (nq, nh) = (task.t1 - task.t0, task.h1 - task.h0);
    let qr = m.sized(nq * nh * hd);
    for t in 0..nq {
        let row = c.first_row + task.t0 + t;
        for hi in 0..nh {
            let head = task.h0 + hi;
            let src = &q[row * q_dim + head * hd..row * q_dim + (head + 1) * hd];
            let dst = &mut qr[(t * nh + hi) * hd..(t * nh + hi + 1) * hd];
            dst.copy_from_slice(src);
            scale_round_f16(lanes, dst, h.scale);
        }
    }
}

/// Pass 1: scores, tile by tile (`scores_tile`). A decode reads each K/V row once, from
/// memory: while a tile is computed, the next one (after the last K tile, the first V tile) is
/// asked for a share at a time (`Ahead`).
///
/// Converted tiles of many queries (prefill) with AVX-512 take `scores_tile_t` (keys transposed
/// once per tile) where the head dimension is a multiple of eight. Measured against `dots4`'s
/// four heads by four key rows (`cargo bench -p tessera-model --bench attention -- prefill`,
/// Xeon, best of five alternated runs): Qwen2.5-0.5B's shapes 4.54 against 6.20 ms (its seven
/// heads per KV head left three to the two-head `dots`), Gemma 3's 3.77 against 3.70; three
/// heads per `dots_t` call were slower than two (5.44 and 3.83).
#[inline(always)]
fn scores_pass<L: Lanes, const ROWS: bool>(
    lanes: L,
    tiles: &Tiles,
    shape: &TileSpan,
    qr: &[f32],
    scores: &mut [f32],
    bufs: ScoreBufs,
    lo: &impl Fn(usize) -> usize,
) {
    let ScoreBufs { k: buf, kt } = bufs;
    let transposed = match L::SIMD && !tiles.direct && shape.hd.is_multiple_of(8) {
        true => Wide::detect(),
        false => None,
    };
    let ts = tiles.pool.layout().tile_size;
    let (base, last) = (shape.base, tiles.last_pos / ts);
    for ti in base / ts..=last {
        let Some((tile_start, n_slots)) = tiles.visible(ti, base) else {
            continue;
        };
        let tile = TileSpan {
            start: tile_start,
            ..*shape
        };
        let next = match ti < last {
            true => tiles.ahead(Side::K, ti + 1, base),
            false => tiles.ahead(Side::V, base / ts, base),
        };
        match (tiles.rows(Side::K, ti, n_slots, buf), transposed) {
            (TileRows::F16(k), _) if ROWS => scores_rows(lanes, &tile, k, qr, scores, lo, &next),
            (TileRows::F32(k), _) if ROWS => scores_rows(lanes, &tile, k, qr, scores, lo, &next),
            (TileRows::F32(k), Some(wide)) => {
                scores_tile_t(wide, &tile, k, qr, scores, kt, lo);
            }
            (TileRows::F16(k), _) => scores_tile::<L, u16>(lanes, &tile, k, qr, scores, lo, &next),
            (TileRows::F32(k), _) => scores_tile::<L, f32>(lanes, &tile, k, qr, scores, lo, &next),
        }
        next.upto(1, 1);
    }
}

/// Scratch of pass 1: a tile's keys converted to f32, and transposed.
struct ScoreBufs<'a> {
    k: &'a mut HugeVec<f32>,
    kt: &'a mut HugeVec<f32>,
}

/// Pass 2: softmax over each query's visible keys (sum in f64, as ggml), probabilities
/// rounded to f16 as llama.cpp's f16 V product sees them; with `softcap` > 0 (Gemma 2) each
/// score first becomes `softcap * tanh(score / softcap)`, as llama.cpp computes it; `sinks`
/// (gpt-oss), one per head of the task, join each softmax of their head.
#[inline(always)]
fn softmax_pass<L: Lanes>(
    lanes: L,
    shape: &TileSpan,
    softcap: f32,
    sinks: Option<&[f32]>,
    scores: &mut [f32],
    lo: &impl Fn(usize) -> usize,
) {
    let (nh, span, base) = (shape.nh, shape.span, shape.base);
    for t in 0..shape.nq {
        let p = shape.first_pos + t;
        let (v_lo, v_hi) = (lo(p) - base, p + 1 - base);
        for hi in 0..nh {
            let sc = &mut scores[(t * nh + hi) * span..(t * nh + hi + 1) * span][v_lo..v_hi];
            if softcap > 0.0 {
                let inv = 1.0 / softcap;
                sc.iter_mut().for_each(|s| *s = softcap * (*s * inv).tanh());
            }
            softmax_f16(lanes, sc, sinks.map(|s| s[hi]));
        }
    }
}

/// Pass 3: weighted sum of V into `acc` (`[query][head][head_dim]` of the task's heads), tile
/// by tile (`values_tile`), the next V tile asked for as each is computed.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn values_pass<L: Lanes, const ROWS: bool>(
    lanes: L,
    tiles: &Tiles,
    shape: &TileSpan,
    scores: &[f32],
    acc: &mut [f32],
    buf: &mut HugeVec<f32>,
    lo: &impl Fn(usize) -> usize,
) {
    let ts = tiles.pool.layout().tile_size;
    let (base, last) = (shape.base, tiles.last_pos / ts);
    for ti in base / ts..=last {
        let Some((tile_start, n_slots)) = tiles.visible(ti, base) else {
            continue;
        };
        let tile = TileSpan {
            start: tile_start,
            ..*shape
        };
        let next = match ti < last {
            true => tiles.ahead(Side::V, ti + 1, base),
            false => Ahead::none(),
        };
        match tiles.rows(Side::V, ti, n_slots, buf) {
            TileRows::F16(v) if ROWS => values_rows(lanes, &tile, v, scores, acc, lo, &next),
            TileRows::F32(v) if ROWS => values_rows(lanes, &tile, v, scores, acc, lo, &next),
            TileRows::F16(v) => values_tile::<L, u16>(lanes, &tile, v, scores, acc, lo, &next),
            TileRows::F32(v) => values_tile::<L, f32>(lanes, &tile, v, scores, acc, lo, &next),
        }
        next.upto(1, 1);
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

/// The task's view of its chunk's tiles.
struct Tiles<'a> {
    pool: &'a KvPool,
    c: &'a ChunkAttention<'a>,
    /// Position of the task's last query.
    last_pos: usize,
    /// Read f16 rows as stored (few queries) rather than convert each tile first.
    direct: bool,
}

impl<'a> Tiles<'a> {
    /// The start and the number of filled slots of tile `ti`, or `None` if no query of the task
    /// sees it (released tiles are only ever below every query's window, which starts at
    /// `base` or later).
    #[inline(always)]
    fn visible(&self, ti: usize, base: usize) -> Option<(usize, usize)> {
        let ts = self.pool.layout().tile_size;
        let tile_start = ti * ts;
        if self.c.tiles[ti] == TileId::RELEASED {
            debug_assert!(tile_start + ts <= base, "a visible tile was released");
            return None;
        }
        Some((tile_start, ts.min(self.last_pos + 1 - tile_start)))
    }

    /// The first `n_slots` K or V rows of tile `ti`: the pool's f16 bits when `direct` and the
    /// pool stores f16, else converted into `buf` (grown as needed).
    fn rows<'b>(
        &self,
        side: Side,
        ti: usize,
        n_slots: usize,
        buf: &'b mut HugeVec<f32>,
    ) -> TileRows<'b>
    where
        'a: 'b,
    {
        let (pool, tile, g) = (self.pool, self.c.tiles[ti], self.c.in_group);
        if self.direct {
            let raw = match side {
                Side::K => pool.keys_f16(tile, g, n_slots),
                Side::V => pool.values_f16(tile, g, n_slots),
            };
            if let Some(raw) = raw {
                return TileRows::F16(raw);
            }
        }
        let dst = buf.sized(n_slots * pool.layout().kv_dim);
        match side {
            Side::K => pool.read_keys(tile, g, n_slots, dst),
            Side::V => pool.read_values(tile, g, n_slots, dst),
        }
        TileRows::F32(dst)
    }

    /// Tile `ti`'s visible f16 rows to ask for while the current tile is computed: nothing
    /// unless `direct` (converted tiles are read once, in order) and the pool stores f16.
    fn ahead(&self, side: Side, ti: usize, base: usize) -> Ahead {
        if !self.direct {
            return Ahead::none();
        }
        let rows = self.visible(ti, base).and_then(|(_, n_slots)| {
            let (tile, g) = (self.c.tiles[ti], self.c.in_group);
            match side {
                Side::K => self.pool.keys_f16(tile, g, n_slots),
                Side::V => self.pool.values_f16(tile, g, n_slots),
            }
        });
        Ahead::of(rows)
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

impl TileSpan {
    /// The key positions of this tile (`n_slots` filled) that query `qi` of the task sees, or
    /// `None` if it sees none of them.
    #[inline(always)]
    fn seen(
        &self,
        qi: usize,
        n_slots: usize,
        lo: &impl Fn(usize) -> usize,
    ) -> Option<(usize, usize)> {
        let p = self.first_pos + qi;
        let (s_lo, s_hi) = (lo(p).max(self.start), (p + 1).min(self.start + n_slots));
        (s_lo < s_hi).then_some((s_lo, s_hi))
    }

    /// How many of the task's heads from `hi` on, at most `max`, share head `hi`'s KV head.
    #[inline(always)]
    fn run(&self, hi: usize, max: usize) -> usize {
        let g = (self.h0 + hi) / self.group;
        let mut n = 1;
        while n < max && hi + n < self.nh && (self.h0 + hi + n) / self.group == g {
            n += 1;
        }
        n
    }
}

/// Pass 1 for one tile: scores of every (query, head) of the task against the tile's visible
/// keys, in blocks of four heads by four keys (`dots4`, where AVX-512VL gives the registers),
/// two heads by `KEYS_PER_BLOCK` keys (`dots`), or a head left alone by its KV head's fours
/// and pairs (Qwen2.5-0.5B's seventh, SmolLM2's third) by `KEYS1` keys (`dots1`); keys a query
/// cannot see are computed with the block and never stored.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn scores_tile<L: Lanes, E: KvElem>(
    lanes: L,
    t: &TileSpan,
    keys: &[E],
    qr: &[f32],
    scores: &mut [f32],
    lo: &impl Fn(usize) -> usize,
    next: &Ahead,
) {
    let n_slots = keys.len() / t.kv_dim;
    let (hd, nh) = (t.hd, t.nh);
    let wide = match L::SIMD && t.group >= 4 {
        true => Wide::detect(),
        false => None,
    };
    for qi in 0..t.nq {
        let Some((s_lo, s_hi)) = t.seen(qi, n_slots, lo) else {
            continue;
        };
        let mut hi = 0;
        while hi < nh {
            let g = (t.h0 + hi) / t.group;
            let key = |pos: usize| {
                let slot = pos - t.start;
                &keys[slot * t.kv_dim + g * hd..slot * t.kv_dim + (g + 1) * hd]
            };
            // Four heads of one KV head together where the registers allow (same bits).
            if let Some(wide) = wide.filter(|_| t.run(hi, 4) == 4) {
                let qs: [&[f32]; 4] = std::array::from_fn(|j| {
                    &qr[(qi * nh + hi + j) * hd..(qi * nh + hi + j + 1) * hd]
                });
                let mut pos = s_lo;
                while pos < s_hi {
                    let nk = (s_hi - pos).min(KEYS4);
                    let ks: [&[E]; KEYS4] = std::array::from_fn(|j| key(pos + j.min(nk - 1)));
                    next.upto(pos + nk - t.start, n_slots);
                    let d = dots4::<E>(wide, qs, ks);
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
            let n_pairs = t.run(hi, 2);
            if n_pairs == 1 {
                let q = &qr[(qi * nh + hi) * hd..(qi * nh + hi + 1) * hd];
                let row = (qi * nh + hi) * t.span;
                let mut pos = s_lo;
                while pos < s_hi {
                    let nk = (s_hi - pos).min(KEYS1);
                    let ks: [&[E]; KEYS1] = std::array::from_fn(|j| key(pos + j.min(nk - 1)));
                    next.upto(pos + nk - t.start, n_slots);
                    let d = dots1(lanes, q, ks);
                    let at = row + pos - t.base;
                    scores[at..at + nk].copy_from_slice(&d[..nk]);
                    pos += nk;
                }
                hi += 1;
                continue;
            }
            let qs: [&[f32]; 2] = std::array::from_fn(|j| {
                let hj = hi + j.min(n_pairs - 1);
                &qr[(qi * nh + hj) * hd..(qi * nh + hj + 1) * hd]
            });
            let mut pos = s_lo;
            while pos < s_hi {
                let nk = (s_hi - pos).min(KEYS_PER_BLOCK);
                let ks: [&[E]; KEYS_PER_BLOCK] = std::array::from_fn(|j| key(pos + j.min(nk - 1)));
                next.upto(pos + nk - t.start, n_slots);
                let d = dots(lanes, qs, ks);
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
#[allow(clippy::too_many_arguments)]
fn values_tile<L: Lanes, E: KvElem>(
    lanes: L,
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
        let Some((s_lo, s_hi)) = t.seen(qi, n_slots, lo) else {
            continue;
        };
        let mut hi = 0;
        while hi < nh {
            let g = (t.h0 + hi) / t.group;
            let n = t.run(hi, 4);
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
                4 => axpy_block::<4, L, E, Ahead>(lanes, acc, weights, &blk, values),
                3 => axpy_block::<3, L, E, Ahead>(lanes, acc, weights, &blk, values),
                2 => axpy_block::<2, L, E, Ahead>(lanes, acc, weights, &blk, values),
                _ => axpy_block::<1, L, E, Ahead>(lanes, acc, weights, &blk, values),
            }
            hi += n;
        }
    }
}

/// Pass 1 for one tile read row by row (a decode whose heads each have their own KV head, see
/// `by_row`): each key row's heads in turn, eight at a time (`dots_own`, the bits of `dots`),
/// so a task reads its columns of the tile in memory order. A lone decode's task holds half the heads, half
/// of every row: OLMoE's shapes (16 heads of 128) at 2,048 tokens of context, 16 layers' 268 MB
/// of K/V, took 9.7-9.8 ms head by head and 7.0-7.6 ms row by row (`cargo bench -p
/// tessera-model --bench attention -- olmoe`, AMD EPYC Zen 5, alternated twice); sixteen
/// sequences at 512 tokens, 36-42 against 25-32 ms.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn scores_rows<L: Lanes, E: KvElem>(
    lanes: L,
    t: &TileSpan,
    keys: &[E],
    qr: &[f32],
    scores: &mut [f32],
    lo: &impl Fn(usize) -> usize,
    next: &Ahead,
) {
    const HEADS: usize = 8;
    let n_slots = keys.len() / t.kv_dim;
    let (hd, nh) = (t.hd, t.nh);
    for qi in 0..t.nq {
        let Some((s_lo, s_hi)) = t.seen(qi, n_slots, lo) else {
            continue;
        };
        let q = |hi: usize| &qr[(qi * nh + hi) * hd..(qi * nh + hi + 1) * hd];
        for pos in s_lo..s_hi {
            let at = (pos - t.start) * t.kv_dim + t.h0 * hd;
            let row = &keys[at..at + nh * hd];
            let mut hi = 0;
            while hi < nh {
                // The last run of fewer than eight repeats its last head (computed, not stored).
                let n = (nh - hi).min(HEADS);
                let qs: [&[f32]; HEADS] = std::array::from_fn(|j| q(hi + j.min(n - 1)));
                let ks: [&[E]; HEADS] = std::array::from_fn(|j| {
                    let h = hi + j.min(n - 1);
                    &row[h * hd..(h + 1) * hd]
                });
                let d = dots_own(lanes, qs, ks);
                for (j, &dj) in d.iter().enumerate().take(n) {
                    scores[(qi * nh + hi + j) * t.span + pos - t.base] = dj;
                }
                hi += n;
            }
            next.upto(pos + 1 - t.start, n_slots);
        }
    }
}

/// Pass 3 for one tile read row by row (see `by_row`): every head of each value row in
/// turn (`axpy_rows`, the bits of `axpy_block`).
#[inline(always)]
fn values_rows<L: Lanes, E: KvElem>(
    lanes: L,
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
        let Some((s_lo, s_hi)) = t.seen(qi, n_slots, lo) else {
            continue;
        };
        let st = qi * nh;
        let values = |pos: usize| {
            let at = (pos - t.start) * t.kv_dim + t.h0 * hd;
            &vals[at..at + nh * hd]
        };
        let blk = Block {
            span,
            hd,
            base: t.base,
            positions: s_lo..s_hi,
            next,
        };
        let (acc, w) = (
            &mut acc_all[st * hd..(st + nh) * hd],
            &scores[st * span..(st + nh) * span],
        );
        axpy_rows(lanes, acc, w, &blk, nh, values);
    }
}

/// The task's KV heads of a converted tile's keys `[slot][kv_dim]`, transposed into `kt` as
/// `[kv head][element][slot]`, rows `stride` (the slots rounded up to [`KEYS_T`]) apart, the
/// slots past the tile's zero: in blocks of sixteen elements by sixteen slots (`transpose16`)
/// where the head dimension allows. Returns `stride`.
fn transpose_keys(wide: Wide, t: &TileSpan, keys: &[f32], kt: &mut HugeVec<f32>) -> usize {
    let n_slots = keys.len() / t.kv_dim;
    let stride = n_slots.next_multiple_of(KEYS_T);
    let (g0, g1) = (t.h0 / t.group, (t.h0 + t.nh - 1) / t.group + 1);
    let kt = kt.sized((g1 - g0) * t.hd * stride);
    if t.hd.is_multiple_of(KEYS_T) {
        for (gl, g) in (g0..g1).enumerate() {
            for i in (0..t.hd).step_by(KEYS_T) {
                for s in (0..stride).step_by(KEYS_T) {
                    let rows = n_slots.saturating_sub(s).min(KEYS_T);
                    let src = &keys[s * t.kv_dim + g * t.hd + i..];
                    let dst = &mut kt[(gl * t.hd + i) * stride + s..];
                    transpose16(wide, src, t.kv_dim, rows, dst, stride);
                }
            }
        }
        return stride;
    }
    for (gl, g) in (g0..g1).enumerate() {
        for i in 0..t.hd {
            let row = &mut kt[(gl * t.hd + i) * stride..(gl * t.hd + i + 1) * stride];
            for (slot, x) in row[..n_slots].iter_mut().enumerate() {
                *x = keys[slot * t.kv_dim + g * t.hd + i];
            }
            row[n_slots..].fill(0.0);
        }
    }
    stride
}

/// Pass 1 for one converted tile on AVX-512: its keys transposed once (`transpose_keys`), then
/// each query's heads, two of one KV head together, against sixteen keys at a time (`dots_t`,
/// the bits of `dots`). Keys a query cannot see are computed with the block and never stored.
#[inline(never)]
fn scores_tile_t(
    wide: Wide,
    t: &TileSpan,
    keys: &[f32],
    qr: &[f32],
    scores: &mut [f32],
    kt: &mut HugeVec<f32>,
    lo: &impl Fn(usize) -> usize,
) {
    let n_slots = keys.len() / t.kv_dim;
    let stride = transpose_keys(wide, t, keys, kt);
    let (hd, nh, g0) = (t.hd, t.nh, t.h0 / t.group);
    // Head runs outside, queries inside: a run's KV head and transposed keys are found once
    // per tile, not once per query.
    let mut hi = 0;
    while hi < nh {
        let g = (t.h0 + hi) / t.group;
        let n = t.run(hi, 2);
        let kg = &kt[(g - g0) * hd * stride..];
        for qi in 0..t.nq {
            let Some((s_lo, s_hi)) = t.seen(qi, n_slots, lo) else {
                continue;
            };
            let q = |j: usize| &qr[(qi * nh + hi + j) * hd..(qi * nh + hi + j + 1) * hd];
            for b in (s_lo - t.start) / KEYS_T..(s_hi - t.start).div_ceil(KEYS_T) {
                let block = &kg[b * KEYS_T..];
                let first = t.start + b * KEYS_T;
                let (from, to) = (s_lo.max(first), s_hi.min(first + KEYS_T));
                let mut put = |j: usize, d: &[f32; KEYS_T]| {
                    let row = (qi * nh + hi + j) * t.span;
                    let dst = &mut scores[row + from - t.base..row + to - t.base];
                    // A whole block (all but the edges of the visible span) as one fixed copy.
                    match <&mut [f32; KEYS_T]>::try_from(&mut *dst) {
                        Ok(whole) => *whole = *d,
                        Err(_) => dst.copy_from_slice(&d[from - first..to - first]),
                    }
                };
                if n == 2 {
                    let d = dots_t(wide, [q(0), q(1)], block, stride);
                    put(0, &d[0]);
                    put(1, &d[1]);
                } else {
                    put(0, &dots_t(wide, [q(0)], block, stride)[0]);
                }
            }
        }
        hi += n;
    }
}
