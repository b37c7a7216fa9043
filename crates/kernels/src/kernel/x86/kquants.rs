//! SIMD bodies for Q4_K, Q5_K and Q6_K weights against Q8_K activations.
//!
//! Per super-block of 256 the weighted integer sum `sum_i sc(i) * q_i * x_i` is formed exactly in
//! i32 lanes (bounded well below 2^31), converted once and FMA'd with `d_w * d_x`. The Q6_K
//! offset of 32 is folded into the same integers through the activation's 16-element sums; the
//! Q4_K/Q5_K min terms go through those sums into a second f32 accumulator scaled by
//! `dmin * d_x`. Weight unpacking happens once per block and feeds all `N` activation rows.

// Index loops address several parallel arrays (registers per activation row, per half); the
// iterator forms would hide the unrolled structure the compiler needs to see.
#![allow(clippy::needless_range_loop)]

use std::arch::x86_64::*;

use super::{at, f16_to_f32, hsum_ps, load32, load32_at, Body, IDot};
use crate::quant::kquants::k4_scales_mins;
use crate::quant::{BlockQ4K, BlockQ5K, BlockQ6K, BlockQ8K};

/// Loads the 16 block sums of an activation block.
///
/// # Safety
/// The CPU must support AVX (the bodies inline this only into entry points that enable AVX2, after
/// detection).
#[inline(always)]
unsafe fn bsums(x: &BlockQ8K) -> __m256i {
    // SAFETY: an unaligned load of the 16 i16 (32 bytes) of `bsums`; AVX per this function's
    // contract.
    unsafe { _mm256_loadu_si256(x.bsums.as_ptr().cast()) }
}

/// Shared loop of Q4_K/Q5_K: `chunk(blk, c)` yields the 64 unsigned quants of chunk `c` as
/// (elements 64c..64c+32, elements 64c+32..64c+64).
///
/// # Safety
/// The CPU must support AVX2, FMA, F16C and the instruction set `D` needs (see [`IDot`]); every row
/// of `a` holds at least `w.len()` blocks (they are read unchecked). [`Body::run`]'s contract gives
/// both.
#[inline(always)]
unsafe fn scale_min_dot<W, D: IDot, const N: usize>(
    w: &[W],
    a: [&[BlockQ8K]; N],
    header: impl Fn(&W) -> ([u8; 2], [u8; 2], &[u8; 12]),
    chunk: impl Fn(&W, usize) -> (__m256i, __m256i),
) -> [f32; N] {
    // SAFETY: the instruction sets per this function's contract; `at(a[j], b)` reads block
    // b < w.len() of rows that hold w.len() blocks (the contract); the other loads are checked
    // or of whole arrays.
    unsafe {
        let mut acc = [_mm256_setzero_ps(); N];
        let mut acc_min = [_mm256_setzero_ps(); N];
        for (b, blk) in w.iter().enumerate() {
            let (d, dmin, scales) = header(blk);
            let (sc, mn) = k4_scales_mins(scales);
            // Two integer accumulators per pair keep the dependency chains short; integer sums
            // are exact, so how they are split does not affect the result.
            let mut isum = [[_mm256_setzero_si256(); 2]; N];
            for c in 0..4 {
                let (lo, hi) = chunk(blk, c);
                let s_lo = D::scales_32(i32::from(sc[2 * c]));
                let s_hi = D::scales_32(i32::from(sc[2 * c + 1]));
                for j in 0..N {
                    let x = at(a[j], b);
                    isum[j][0] = D::scaled_dot_acc(isum[j][0], lo, load32_at(&x.qs, 64 * c), s_lo);
                    isum[j][1] =
                        D::scaled_dot_acc(isum[j][1], hi, load32_at(&x.qs, 64 * c + 32), s_hi);
                }
            }
            // Lane k of madd(bsums, mins) is m_k * (bsums[2k] + bsums[2k + 1]).
            let mn_bytes = _mm_loadl_epi64(mn.as_ptr().cast());
            let mins = _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(mn_bytes, mn_bytes));
            let (d, dmin) = (f16_to_f32(d), f16_to_f32(dmin));
            for j in 0..N {
                let x = at(a[j], b);
                let total = _mm256_add_epi32(isum[j][0], isum[j][1]);
                acc[j] =
                    _mm256_fmadd_ps(_mm256_set1_ps(x.d * d), _mm256_cvtepi32_ps(total), acc[j]);
                let msum = _mm256_madd_epi16(bsums(x), mins);
                acc_min[j] = _mm256_fmadd_ps(
                    _mm256_set1_ps(x.d * dmin),
                    _mm256_cvtepi32_ps(msum),
                    acc_min[j],
                );
            }
        }
        let mut out = [0f32; N];
        for j in 0..N {
            out[j] = hsum_ps(acc[j]) - hsum_ps(acc_min[j]);
        }
        out
    }
}

pub(crate) struct Q4KBody;

impl Body for Q4KBody {
    type W = BlockQ4K;
    type A = BlockQ8K;
    #[inline(always)]
    unsafe fn run<D: IDot, const N: usize>(w: &[BlockQ4K], a: [&[BlockQ8K]; N]) -> [f32; N] {
        // SAFETY: forwarded from the caller's contract.
        unsafe {
            scale_min_dot::<_, D, N>(
                w,
                a,
                |b| (b.d, b.dmin, &b.scales),
                |b, c| {
                    let m4 = _mm256_set1_epi8(0x0F);
                    let raw = load32_at(&b.qs, 32 * c);
                    (
                        _mm256_and_si256(raw, m4),
                        _mm256_and_si256(_mm256_srli_epi16::<4>(raw), m4),
                    )
                },
            )
        }
    }
}

/// Bytes of 0x10 where bit `bit` of the corresponding `qh` byte is set.
///
/// # Safety
/// The CPU must support AVX2 (the bodies inline this only into entry points that enable it, after
/// detection).
#[inline(always)]
unsafe fn fifth_bit(qh: __m256i, bit: usize) -> __m256i {
    // SAFETY: register operations only; AVX2 per this function's contract.
    unsafe {
        let mask = _mm256_set1_epi8((1u8 << bit) as i8);
        _mm256_and_si256(
            _mm256_cmpeq_epi8(_mm256_and_si256(qh, mask), mask),
            _mm256_set1_epi8(0x10),
        )
    }
}

pub(crate) struct Q5KBody;

impl Body for Q5KBody {
    type W = BlockQ5K;
    type A = BlockQ8K;
    #[inline(always)]
    unsafe fn run<D: IDot, const N: usize>(w: &[BlockQ5K], a: [&[BlockQ8K]; N]) -> [f32; N] {
        // SAFETY: forwarded from the caller's contract.
        unsafe {
            scale_min_dot::<_, D, N>(
                w,
                a,
                |b| (b.d, b.dmin, &b.scales),
                |b, c| {
                    let m4 = _mm256_set1_epi8(0x0F);
                    let raw = load32_at(&b.qs, 32 * c);
                    let qh = load32(&b.qh);
                    let lo = _mm256_or_si256(_mm256_and_si256(raw, m4), fifth_bit(qh, 2 * c));
                    let hi = _mm256_or_si256(
                        _mm256_and_si256(_mm256_srli_epi16::<4>(raw), m4),
                        fifth_bit(qh, 2 * c + 1),
                    );
                    (lo, hi)
                },
            )
        }
    }
}

/// The four vectors of 32 six-bit quants of one half (128 elements) of a Q6_K block.
///
/// # Safety
/// The CPU must support AVX2 (the bodies inline this only into entry points that enable it, after
/// detection). The loads are checked: `h > 1` panics.
#[inline(always)]
unsafe fn q6_half(blk: &BlockQ6K, h: usize) -> [__m256i; 4] {
    // SAFETY: AVX2 per this function's contract; the loads are checked slices of the block.
    unsafe {
        let m4 = _mm256_set1_epi8(0x0F);
        let ql0 = load32_at(&blk.ql, 64 * h);
        let ql1 = load32_at(&blk.ql, 64 * h + 32);
        let qh = load32_at(&blk.qh, 32 * h);
        let hi = |mask: u8| _mm256_and_si256(qh, _mm256_set1_epi8(mask as i8));
        // 16-bit shifts are safe here: every masked field stays inside its own byte.
        [
            _mm256_or_si256(_mm256_and_si256(ql0, m4), _mm256_slli_epi16::<4>(hi(0x03))),
            _mm256_or_si256(_mm256_and_si256(ql1, m4), _mm256_slli_epi16::<2>(hi(0x0C))),
            _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16::<4>(ql0), m4), hi(0x30)),
            _mm256_or_si256(
                _mm256_and_si256(_mm256_srli_epi16::<4>(ql1), m4),
                _mm256_srli_epi16::<2>(hi(0xC0)),
            ),
        ]
    }
}

pub(crate) struct Q6KBody;

impl Body for Q6KBody {
    type W = BlockQ6K;
    type A = BlockQ8K;
    #[inline(always)]
    unsafe fn run<D: IDot, const N: usize>(w: &[BlockQ6K], a: [&[BlockQ8K]; N]) -> [f32; N] {
        // SAFETY: AVX2/FMA/F16C enabled by the entry points; activation rows have w.len() blocks.
        unsafe {
            let mut acc = [_mm256_setzero_ps(); N];
            for (b, blk) in w.iter().enumerate() {
                let sc8 = _mm_loadu_si128(blk.scales.as_ptr().cast());
                // -32 * scale per group of 16, for the offset term sum_g -32 * sc_g * bsums_g.
                let neg32 = _mm256_sub_epi16(
                    _mm256_setzero_si256(),
                    _mm256_slli_epi16::<5>(_mm256_cvtepi8_epi16(sc8)),
                );
                // Two exact integer accumulators per pair (one per half) for shorter chains.
                let mut isum = [[_mm256_setzero_si256(); 2]; N];
                for j in 0..N {
                    isum[j][0] = _mm256_madd_epi16(bsums(at(a[j], b)), neg32);
                }
                for h in 0..2 {
                    let q = q6_half(blk, h);
                    for (k, &qk) in q.iter().enumerate() {
                        let s = D::scales_16_of(sc8, 8 * h + 2 * k);
                        for j in 0..N {
                            let x = load32_at(&at(a[j], b).qs, 128 * h + 32 * k);
                            isum[j][h] = D::scaled_dot_acc(isum[j][h], qk, x, s);
                        }
                    }
                }
                let d = f16_to_f32(blk.d);
                for j in 0..N {
                    let x = at(a[j], b);
                    let total = _mm256_add_epi32(isum[j][0], isum[j][1]);
                    acc[j] =
                        _mm256_fmadd_ps(_mm256_set1_ps(x.d * d), _mm256_cvtepi32_ps(total), acc[j]);
                }
            }
            let mut out = [0f32; N];
            for j in 0..N {
                out[j] = hsum_ps(acc[j]);
            }
            out
        }
    }
}
