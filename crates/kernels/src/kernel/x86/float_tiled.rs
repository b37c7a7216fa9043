//! Tiled 256-bit kernel for unquantized weights (F32, F16, BF16) against many f32 activation rows.
//!
//! The per-row bodies (`float.rs`) meet one weight row with up to four activation rows and run
//! over *all* activation rows for each weight row: with hundreds of rows (an encoder's batch, a
//! long prefill) the activations stream from L3 or memory once per weight row, and every weight
//! vector is decoded (F16C / BF16 shift) once per four activation rows. This kernel instead:
//! - blocks the activation rows ([`act_block_rows`]: about 96 KiB of them, kept in L2) and runs
//!   the thread's weight rows against one block before the next;
//! - computes tiles of [`R`] weight rows by [`N`] activation rows in registers, so each decoded
//!   weight vector meets `N` activation vectors and each activation vector `R` weight vectors.
//!
//! Numerics, bit-identical to the per-row bodies: those accumulate eight-column block `b` of a
//! pair into accumulator `b % 2` with one fused multiply-add, add the two accumulators, sum the
//! eight lanes (`hsum_ps`) and add the tail shorter than eight sequentially. A tile here runs the
//! even blocks (accumulator 0 of every pair) and then the odd ones (accumulator 1), which keeps
//! `R × N` accumulators live instead of twice that, with every accumulator receiving the same
//! fused multiply-adds in the same order; the end is the same add, sum and tail. So every
//! output has the bits of the per-row bodies (and of the AVX-512 `float512` tiles), whatever the
//! batch, the block or the tile it lands in.

// Index loops address several parallel arrays (registers per weight and activation row); the
// iterator forms would hide the unrolled structure the compiler needs to see.
#![allow(clippy::needless_range_loop)]

use std::arch::x86_64::*;

use std::marker::PhantomData;
use std::ops::Range;

use super::{f16_to_f32, hsum_ps, rows_avx2, Body};
use crate::kernel::{DotKernel, RowsJob};

/// Weight rows per tile.
pub(crate) const R: usize = 4;
/// Activation rows per tile.
pub(crate) const N: usize = 3;

/// Activation rows per block: about 96 KiB of f32 rows (at least one tile's worth).
fn act_block_rows(cols: usize) -> usize {
    crate::kernel::act_block_rows(96 * 1024, 4 * cols, N)
}

/// How a float weight format decodes: eight weights, or one, from column `k`.
pub(crate) trait Decode8: 'static {
    type W: crate::quant::PodBlock;
    /// # Safety
    /// AVX2/F16C enabled in the caller; `k + 8 <= w.len()`.
    unsafe fn load8(w: &[Self::W], k: usize) -> __m256;
    /// # Safety
    /// As [`Decode8::load8`], with `k < w.len()`.
    unsafe fn one(w: &[Self::W], k: usize) -> f32;
}

/// Accumulator `parity` of every pair of the tile: blocks `parity`, `parity + 2`, ... below
/// `blocks`.
///
/// # Safety
/// AVX2/FMA/F16C enabled in the caller; every row of `w` and `a` holds `8 * blocks` elements or
/// more.
#[inline(always)]
unsafe fn pass<D: Decode8, const RR: usize, const NN: usize>(
    blocks: usize,
    parity: usize,
    w: &[&[D::W]; RR],
    a: &[&[f32]; NN],
) -> [[__m256; NN]; RR] {
    // SAFETY: the features are the caller's; block `b < blocks` reads columns 8b..8b + 8.
    unsafe {
        let mut acc = [[_mm256_setzero_ps(); NN]; RR];
        let mut b = parity;
        while b < blocks {
            let k = 8 * b;
            let mut xv = [_mm256_setzero_ps(); NN];
            for j in 0..NN {
                xv[j] = _mm256_loadu_ps(a[j].as_ptr().add(k));
            }
            for r in 0..RR {
                let wv = D::load8(w[r], k);
                for j in 0..NN {
                    acc[r][j] = _mm256_fmadd_ps(wv, xv[j], acc[r][j]);
                }
            }
            b += 2;
        }
        acc
    }
}

/// `RR` weight rows against `NN` activation rows (see the module docs for the order).
///
/// # Safety
/// AVX2/FMA/F16C enabled in the caller; every row of `w` and `a` holds `n` elements.
#[inline(always)]
unsafe fn tile<D: Decode8, const RR: usize, const NN: usize>(
    n: usize,
    w: [&[D::W]; RR],
    a: [&[f32]; NN],
) -> [[f32; NN]; RR] {
    let blocks = n / 8;
    // SAFETY: the features are the caller's; rows hold `n >= 8 * blocks` elements.
    unsafe {
        let even = pass::<D, RR, NN>(blocks, 0, &w, &a);
        let odd = pass::<D, RR, NN>(blocks, 1, &w, &a);
        let mut out = [[0f32; NN]; RR];
        for r in 0..RR {
            for j in 0..NN {
                let mut s = hsum_ps(_mm256_add_ps(even[r][j], odd[r][j]));
                for kk in 8 * blocks..n {
                    s += D::one(w[r], kk) * a[j][kk];
                }
                out[r][j] = s;
            }
        }
        out
    }
}

/// Weight rows `r..r + RR` against activation rows `acts`, `N` at a time, then the rest.
///
/// # Safety
/// As [`tile`]; the job is validated, `r + RR <= rows`, `acts` lies in `0..m`, and no other
/// thread writes these weight rows' outputs.
#[inline(always)]
unsafe fn weight_rows<D: Decode8, const RR: usize>(
    job: &RowsJob<D::W, f32>,
    r: usize,
    acts: Range<usize>,
) {
    let n = job.per_row;
    let w: [&[D::W]; RR] = std::array::from_fn(|q| &job.w[(r + q) * n..(r + q + 1) * n]);
    let act = |i: usize| &job.acts[i * job.act_stride..(i + 1) * job.act_stride];
    let store = |i: usize, q: usize, x: f32| {
        // SAFETY: i < m and r + q < rows keep the write inside the `m * rows` output; the
        // caller guarantees no other thread writes these rows.
        unsafe { *job.out.add(i * job.rows + r + q) = x };
    };
    macro_rules! run {
        ($nn:expr, $i:expr) => {{
            let t = tile::<D, RR, { $nn }>(n, w, std::array::from_fn(|j| act($i + j)));
            for j in 0..$nn {
                for q in 0..RR {
                    store($i + j, q, t[q][j]);
                }
            }
        }};
    }
    let mut i = acts.start;
    // SAFETY: every tile below takes activation rows i..i + NN inside `acts` (the loop bounds);
    // the features and the rest are this function's contract.
    unsafe {
        while i + N <= acts.end {
            run!(N, i);
            i += N;
        }
        match acts.end - i {
            3 => run!(3, i),
            2 => run!(2, i),
            1 => run!(1, i),
            _ => {}
        }
    }
}

/// # Safety
/// The CPU must support AVX2, FMA and F16C (only a `Tiled` kernel calls this, built after
/// detection), and [`DotKernel::rows`]'s contract holds for `job` and `range` with `act_len ==
/// job.per_row`.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn rows_tiled<D: Decode8>(job: &RowsJob<D::W, f32>, range: Range<usize>) {
    let block = act_block_rows(job.per_row);
    let mut i = 0;
    while i < job.m {
        let acts = i..(i + block).min(job.m);
        let mut r = range.start;
        // SAFETY: this function's features are those `tile` needs; rows stay within `range`,
        // which the caller guarantees lies in 0..rows and is written by this thread only, and
        // `acts` lies in 0..m.
        unsafe {
            while r + R <= range.end {
                weight_rows::<D, R>(job, r, acts.clone());
                r += R;
            }
            while r < range.end {
                weight_rows::<D, 1>(job, r, acts.clone());
                r += 1;
            }
        }
        i = acts.end;
    }
}

/// The tiled float kernel, with per-row body `B` (same format, same bits) for batches of fewer
/// than `N` rows; only constructed after AVX2/FMA/F16C detection (see the parent module).
pub(crate) struct Tiled<D, B>(pub(super) PhantomData<fn() -> (D, B)>);

impl<D: Decode8, B: Body<W = D::W, A = f32>> DotKernel for Tiled<D, B> {
    type W = D::W;
    type A = f32;
    fn act_len(&self, per_row: usize) -> usize {
        per_row
    }
    unsafe fn rows(&self, job: &RowsJob<D::W, f32>, range: Range<usize>) {
        // SAFETY: a `Tiled` exists only if AVX2/FMA/F16C were detected, the features both
        // entry points need; the job contract is the caller's.
        unsafe {
            if job.m < N {
                rows_avx2::<B>(job, range)
            } else {
                rows_tiled::<D>(job, range)
            }
        }
    }
}

pub(crate) struct F32;

impl Decode8 for F32 {
    type W = [u8; 4];
    #[inline(always)]
    unsafe fn load8(w: &[[u8; 4]], k: usize) -> __m256 {
        debug_assert!(k + 8 <= w.len());
        // SAFETY: 32 in-bounds bytes (the caller's contract), unaligned load.
        unsafe { _mm256_loadu_ps(w.as_ptr().add(k).cast()) }
    }
    #[inline(always)]
    unsafe fn one(w: &[[u8; 4]], k: usize) -> f32 {
        f32::from_le_bytes(w[k])
    }
}

pub(crate) struct F16;

impl Decode8 for F16 {
    type W = [u8; 2];
    #[inline(always)]
    unsafe fn load8(w: &[[u8; 2]], k: usize) -> __m256 {
        debug_assert!(k + 8 <= w.len());
        // SAFETY: 16 in-bounds bytes (the caller's contract); F16C enabled by the caller.
        unsafe { _mm256_cvtph_ps(_mm_loadu_si128(w.as_ptr().add(k).cast())) }
    }
    #[inline(always)]
    unsafe fn one(w: &[[u8; 2]], k: usize) -> f32 {
        // SAFETY: F16C is enabled in the caller (its contract).
        unsafe { f16_to_f32(w[k]) }
    }
}

pub(crate) struct Bf16;

impl Decode8 for Bf16 {
    type W = [u8; 2];
    #[inline(always)]
    unsafe fn load8(w: &[[u8; 2]], k: usize) -> __m256 {
        debug_assert!(k + 8 <= w.len());
        // SAFETY: 16 in-bounds bytes (the caller's contract); AVX2 enabled by the caller.
        unsafe {
            let h = _mm256_cvtepu16_epi32(_mm_loadu_si128(w.as_ptr().add(k).cast()));
            _mm256_castsi256_ps(_mm256_slli_epi32::<16>(h))
        }
    }
    #[inline(always)]
    unsafe fn one(w: &[[u8; 2]], k: usize) -> f32 {
        f32::from_bits(u32::from(u16::from_le_bytes(w[k])) << 16)
    }
}

#[cfg(test)]
mod tests {
    use super::super::float::{Bf16Body, F16Body, F32Body};
    use super::*;

    /// Deterministic values in about [-1, 1] with varied magnitudes (so rounding matters).
    fn values(n: usize, seed: u64) -> Vec<f32> {
        let mut s = seed | 1;
        (0..n)
            .map(|_| {
                s ^= s << 13;
                s ^= s >> 7;
                s ^= s << 17;
                ((s >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * 2.0 / (1 + (s & 7)) as f32
            })
            .collect()
    }

    /// Runs `rows` weight rows (split in two thread-like ranges) against `m` activation rows
    /// with the tiled kernel and with the per-row body, and asserts the same bits.
    fn same_bits<D: Decode8, B: Body<W = D::W, A = f32>>(
        w: &[D::W],
        rows: usize,
        cols: usize,
        m: usize,
    ) {
        let x = values(m * cols, (rows * 131 + cols * 7 + m) as u64);
        let run = |tiled: bool| {
            let mut out = vec![f32::NAN; m * rows];
            let job = RowsJob {
                w,
                per_row: cols,
                acts: &x,
                act_stride: cols,
                m,
                rows,
                out: out.as_mut_ptr(),
            };
            job.validate(cols);
            let mid = rows / 2;
            for range in [0..mid, mid..rows] {
                // SAFETY: AVX2/FMA/F16C were detected by the caller; the job is validated, the
                // ranges lie in 0..rows and this thread alone writes `out`.
                unsafe {
                    if tiled {
                        rows_tiled::<D>(&job, range);
                    } else {
                        rows_avx2::<B>(&job, range);
                    }
                }
            }
            out.iter().map(|v| v.to_bits()).collect::<Vec<_>>()
        };
        assert_eq!(run(true), run(false), "rows {rows} cols {cols} m {m}");
    }

    #[test]
    fn tiles_give_the_bits_of_the_per_row_bodies() {
        if !super::super::avx2_available() {
            return;
        }
        for &cols in &[8, 13, 16, 24, 37, 64, 200, 771] {
            for &rows in &[1, 2, 3, 4, 7, 11] {
                let wf = values(rows * cols, (rows + cols) as u64);
                let w16: Vec<[u8; 2]> = wf.iter().map(|&v| crate::quant::f32_to_f16(v)).collect();
                let wb: Vec<[u8; 2]> = wf
                    .iter()
                    .map(|&v| ((v.to_bits() >> 16) as u16).to_le_bytes())
                    .collect();
                let w32: Vec<[u8; 4]> = wf.iter().map(|v| v.to_le_bytes()).collect();
                // Blocks of activation rows end inside and at tile edges for the larger `cols`.
                for &m in &[4, 5, 6, 7, 8, 9, 13, 40] {
                    same_bits::<F16, F16Body>(&w16, rows, cols, m);
                    same_bits::<Bf16, Bf16Body>(&wb, rows, cols, m);
                    same_bits::<F32, F32Body>(&w32, rows, cols, m);
                }
            }
        }
    }

    #[test]
    fn activation_blocks_cover_every_row_once() {
        for cols in [1, 8, 768, 3072, 100_000] {
            let b = act_block_rows(cols);
            assert!(b >= N && b.is_multiple_of(N), "cols {cols}: block {b}");
        }
    }
}
