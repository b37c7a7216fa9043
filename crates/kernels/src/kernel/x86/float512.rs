//! 512-bit bodies for unquantized weights (F32, F16, BF16) against f32 activations.
//!
//! Tiles of four weight rows by up to four activation rows, sixteen columns per step: each
//! weight vector (decoded once) meets four activation vectors and each activation vector four
//! weight vectors, so a step loads eight vectors for sixteen fused multiply-adds (one weight
//! row against sixteen activation rows loads seventeen, and re-reads the activations from L2 for
//! every weight row, which bounds it by L2 bandwidth at large batches).
//!
//! Numerics: lane `l` of the low half accumulates columns `16i + l` and lane `l` of the high
//! half columns `16i + 8 + l`: exactly the two alternating accumulators of the 256-bit bodies
//! (`float.rs`), with the same fused multiply-adds in the same order. A last run of eight
//! columns goes to the low half (the 256-bit bodies' even accumulator), the halves are added and
//! summed horizontally, and the tail shorter than eight is added sequentially as there, so the
//! results are bit-identical to the 256-bit bodies.

// Index loops address several parallel arrays (registers per activation row); the iterator forms
// would hide the unrolled structure the compiler needs to see.
#![allow(clippy::needless_range_loop)]

use std::arch::x86_64::*;

use std::marker::PhantomData;
use std::ops::Range;

use super::{f16_to_f32, hsum_ps};
use crate::kernel::{DotKernel, RowsJob};

/// How a float weight format decodes: sixteen, eight or one weights from column `k`.
pub(crate) trait Decode: 'static {
    type W: crate::quant::PodBlock;
    /// # Safety
    /// AVX-512F/AVX2/F16C enabled in the caller; `k + 16 <= w.len()`.
    unsafe fn load16(w: &[Self::W], k: usize) -> __m512;
    /// # Safety
    /// As [`Decode::load16`], with `k + 8 <= w.len()`.
    unsafe fn load8(w: &[Self::W], k: usize) -> __m256;
    /// # Safety
    /// As [`Decode::load16`], with `k < w.len()`.
    unsafe fn one(w: &[Self::W], k: usize) -> f32;
}

/// `R` weight rows against `N` activation rows: for each pair exactly the float operations of
/// the 256-bit bodies (see the module docs).
///
/// # Safety
/// AVX-512F/AVX2/FMA/F16C enabled in the caller; every row of `w` and `a` holds `n` elements.
#[inline(always)]
unsafe fn tile<D: Decode, const R: usize, const N: usize>(
    n: usize,
    w: [&[D::W]; R],
    a: [&[f32]; N],
) -> [[f32; N]; R] {
    // SAFETY: the features are the caller's; loads stay within `k + 16 <= n` (or `k + 8 <= n`).
    unsafe {
        let mut acc = [[_mm512_setzero_ps(); N]; R];
        let mut k = 0;
        while k + 16 <= n {
            let mut wv = [_mm512_setzero_ps(); R];
            for r in 0..R {
                wv[r] = D::load16(w[r], k);
            }
            for j in 0..N {
                let xv = _mm512_loadu_ps(a[j][k..k + 16].as_ptr());
                for r in 0..R {
                    acc[r][j] = _mm512_fmadd_ps(wv[r], xv, acc[r][j]);
                }
            }
            k += 16;
        }
        // Plain loops, not `array::map` with closures: a closure is not compiled with this
        // function's target features, so the intrinsics in it would be calls (profiled: half
        // of an F16 matmul's time went to them).
        let mut lo = [[_mm256_setzero_ps(); N]; R];
        let mut hi = [[_mm256_setzero_ps(); N]; R];
        for r in 0..R {
            for j in 0..N {
                let v = acc[r][j];
                lo[r][j] = _mm512_castps512_ps256(v);
                hi[r][j] = _mm256_castpd_ps(_mm512_extractf64x4_pd::<1>(_mm512_castps_pd(v)));
            }
        }
        let tail8 = k + 8 <= n;
        if tail8 {
            for r in 0..R {
                let wv = D::load8(w[r], k);
                for j in 0..N {
                    let xv = _mm256_loadu_ps(a[j][k..k + 8].as_ptr());
                    lo[r][j] = _mm256_fmadd_ps(wv, xv, lo[r][j]);
                }
            }
            k += 8;
        }
        let mut out = [[0f32; N]; R];
        for r in 0..R {
            for j in 0..N {
                let mut s = hsum_ps(_mm256_add_ps(lo[r][j], hi[r][j]));
                for (kk, &x) in a[j].iter().enumerate().take(n).skip(k) {
                    s += D::one(w[r], kk) * x;
                }
                out[r][j] = s;
            }
        }
        out
    }
}

/// Weight rows `r..r + R` against activation rows `acts`, four at a time, then the rest.
///
/// # Safety
/// As [`tile`]; the job is validated, `r + R <= rows`, `acts` lies in `0..m`, and no other
/// thread writes these rows.
#[inline(always)]
unsafe fn weight_rows<D: Decode, const R: usize>(
    job: &RowsJob<D::W, f32>,
    r: usize,
    acts: Range<usize>,
) {
    let n = job.per_row;
    let w: [&[D::W]; R] = std::array::from_fn(|q| &job.w[(r + q) * n..(r + q + 1) * n]);
    let act = |i: usize| &job.acts[i * job.act_stride..(i + 1) * job.act_stride];
    let store = |i: usize, v: &[f32]| {
        for (q, &x) in v.iter().enumerate() {
            // SAFETY: i < m and r + q < rows keep the write inside the `m * rows` output; the
            // caller guarantees no other thread writes these rows.
            unsafe { *job.out.add(i * job.rows + r + q) = x };
        }
    };
    let mut i = acts.start;
    // SAFETY: every tile below takes activation rows i..i + N inside `acts` (the loop bounds);
    // the features and the rest are this function's contract.
    unsafe {
        while i + 4 <= acts.end {
            let t = tile::<D, R, 4>(n, w, std::array::from_fn(|j| act(i + j)));
            for j in 0..4 {
                store(i + j, &std::array::from_fn::<f32, R, _>(|q| t[q][j]));
            }
            i += 4;
        }
        for i in i..acts.end {
            let t = tile::<D, R, 1>(n, w, [act(i)]);
            store(i, &std::array::from_fn::<f32, R, _>(|q| t[q][0]));
        }
    }
}

/// # Safety
/// The CPU must support AVX2, FMA, F16C and AVX-512 F/BW/VL (only a `Tiled` kernel calls this,
/// built after detection), and [`DotKernel::rows`]'s contract holds for `job` and `range` with
/// `act_len == job.per_row`.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl")]
unsafe fn rows_tiled<D: Decode>(job: &RowsJob<D::W, f32>, range: Range<usize>) {
    // Blocks of activation rows that stay in L2 while the thread's weight rows pass over them
    // (streaming all of a long batch's rows from L3 per four weight rows halved the speed).
    // About 128 KiB of f32 rows, a multiple of four (one tile's rows).
    let block = crate::kernel::act_block_rows(128 * 1024, 4 * job.per_row, 4);
    let mut i = 0;
    while i < job.m {
        let acts = i..(i + block).min(job.m);
        let mut r = range.start;
        // SAFETY: this function's features are those `tile` needs; rows stay within `range`,
        // which the caller guarantees lies in 0..rows and is written by this thread only, and
        // `acts` lies in 0..m.
        unsafe {
            while r + 4 <= range.end {
                weight_rows::<D, 4>(job, r, acts.clone());
                r += 4;
            }
            while r < range.end {
                weight_rows::<D, 1>(job, r, acts.clone());
                r += 1;
            }
        }
        i = acts.end;
    }
}

/// The tiled float kernel; only constructed after AVX-512 detection (see the parent module).
pub(crate) struct Tiled<D>(pub(super) PhantomData<fn() -> D>);

impl<D: Decode> DotKernel for Tiled<D> {
    type W = D::W;
    type A = f32;
    fn act_len(&self, per_row: usize) -> usize {
        per_row
    }
    unsafe fn rows(&self, job: &RowsJob<D::W, f32>, range: Range<usize>) {
        // SAFETY: a `Tiled` exists only if AVX-512 F/BW/VL (and AVX2/FMA/F16C) were detected;
        // the job contract is the caller's.
        unsafe { rows_tiled::<D>(job, range) }
    }
}

pub(crate) struct F32;

impl Decode for F32 {
    type W = [u8; 4];
    #[inline(always)]
    unsafe fn load16(w: &[[u8; 4]], k: usize) -> __m512 {
        // SAFETY: 64 in-bounds bytes, unaligned load.
        unsafe { _mm512_loadu_ps(w[k..k + 16].as_ptr().cast()) }
    }
    #[inline(always)]
    unsafe fn load8(w: &[[u8; 4]], k: usize) -> __m256 {
        // SAFETY: 32 in-bounds bytes, unaligned load.
        unsafe { _mm256_loadu_ps(w[k..k + 8].as_ptr().cast()) }
    }
    #[inline(always)]
    unsafe fn one(w: &[[u8; 4]], k: usize) -> f32 {
        f32::from_le_bytes(w[k])
    }
}

pub(crate) struct F16;

impl Decode for F16 {
    type W = [u8; 2];
    #[inline(always)]
    unsafe fn load16(w: &[[u8; 2]], k: usize) -> __m512 {
        // SAFETY: 32 in-bounds bytes; AVX-512F enabled by the caller.
        unsafe { _mm512_cvtph_ps(_mm256_loadu_si256(w[k..k + 16].as_ptr().cast())) }
    }
    #[inline(always)]
    unsafe fn load8(w: &[[u8; 2]], k: usize) -> __m256 {
        // SAFETY: 16 in-bounds bytes; F16C enabled by the caller.
        unsafe { _mm256_cvtph_ps(_mm_loadu_si128(w[k..k + 8].as_ptr().cast())) }
    }
    #[inline(always)]
    unsafe fn one(w: &[[u8; 2]], k: usize) -> f32 {
        // SAFETY: F16C is enabled in the caller (its contract).
        unsafe { f16_to_f32(w[k]) }
    }
}

pub(crate) struct Bf16;

impl Decode for Bf16 {
    type W = [u8; 2];
    #[inline(always)]
    unsafe fn load16(w: &[[u8; 2]], k: usize) -> __m512 {
        // SAFETY: 32 in-bounds bytes; AVX-512F enabled by the caller.
        unsafe {
            let h = _mm512_cvtepu16_epi32(_mm256_loadu_si256(w[k..k + 16].as_ptr().cast()));
            _mm512_castsi512_ps(_mm512_slli_epi32::<16>(h))
        }
    }
    #[inline(always)]
    unsafe fn load8(w: &[[u8; 2]], k: usize) -> __m256 {
        // SAFETY: 16 in-bounds bytes; AVX2 enabled by the caller.
        unsafe {
            let h = _mm256_cvtepu16_epi32(_mm_loadu_si128(w[k..k + 8].as_ptr().cast()));
            _mm256_castsi256_ps(_mm256_slli_epi32::<16>(h))
        }
    }
    #[inline(always)]
    unsafe fn one(w: &[[u8; 2]], k: usize) -> f32 {
        f32::from_bits(u32::from(u16::from_le_bytes(w[k])) << 16)
    }
}
