//! SIMD bodies for Q4_K, Q5_K and Q6_K weights against Q8_K activations.
//!
//! Per super-block of 256 the whole weighted integer sum `sum_i sc(i) * q_i * x_i` is formed
//! exactly in i32 lanes (bounded well below 2^31), converted once and FMA'd with `d_w * d_x`.
//! Min terms (Q4_K/Q5_K) and the Q6_K offset of 32 use the activation's 16-element sums, also in
//! exact integers. Weight unpacking happens once per block and feeds all `N` activation rows.

use std::arch::x86_64::*;

use super::{f16_to_f32, hsum_ps, load32, load32_at, Body, IDot};
use crate::quant::kquants::k4_scales_mins;
use crate::quant::{BlockQ4K, BlockQ5K, BlockQ6K, BlockQ8K};

/// `sum_k mins[k] * (bsums[2k] + bsums[2k + 1])`.
#[inline(always)]
fn min_sum(mins: &[u8; 8], x: &BlockQ8K) -> i32 {
    let mut s = 0i32;
    for (m, pair) in mins.iter().zip(x.bsums.chunks_exact(2)) {
        s += i32::from(*m) * (i32::from(pair[0]) + i32::from(pair[1]));
    }
    s
}

/// Shared loop of Q4_K/Q5_K: `chunk(blk, c)` yields the 64 unsigned quants of chunk `c` as
/// (elements 64c..64c+32, elements 64c+32..64c+64).
#[inline(always)]
unsafe fn scale_min_dot<W, D: IDot, const N: usize>(
    w: &[W],
    a: [&[BlockQ8K]; N],
    header: impl Fn(&W) -> ([u8; 2], [u8; 2], &[u8; 12]),
    chunk: impl Fn(&W, usize) -> (__m256i, __m256i),
) -> [f32; N] {
    // SAFETY: AVX2/FMA/F16C enabled by the entry points; loads are from in-bounds blocks.
    unsafe {
        let mut acc = [_mm256_setzero_ps(); N];
        let mut macc = [0f32; N];
        for (b, blk) in w.iter().enumerate() {
            let (d, dmin, scales) = header(blk);
            let (sc, mn) = k4_scales_mins(scales);
            let mut isum = [_mm256_setzero_si256(); N];
            for c in 0..4 {
                let (lo, hi) = chunk(blk, c);
                let s_lo = D::scales_32(i32::from(sc[2 * c]));
                let s_hi = D::scales_32(i32::from(sc[2 * c + 1]));
                for j in 0..N {
                    let x = &a[j][b];
                    let p = D::scaled_dot(lo, load32_at(&x.qs, 64 * c), s_lo);
                    let q = D::scaled_dot(hi, load32_at(&x.qs, 64 * c + 32), s_hi);
                    isum[j] = _mm256_add_epi32(isum[j], _mm256_add_epi32(p, q));
                }
            }
            let (d, dmin) = (f16_to_f32(d), f16_to_f32(dmin));
            for j in 0..N {
                let x = &a[j][b];
                acc[j] =
                    _mm256_fmadd_ps(_mm256_set1_ps(x.d * d), _mm256_cvtepi32_ps(isum[j]), acc[j]);
                macc[j] += (x.d * dmin) * min_sum(&mn, x) as f32;
            }
        }
        let mut out = [0f32; N];
        for j in 0..N {
            out[j] = hsum_ps(acc[j]) - macc[j];
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
#[inline(always)]
unsafe fn fifth_bit(qh: __m256i, bit: usize) -> __m256i {
    // SAFETY: AVX2 enabled by the entry points.
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

pub(crate) struct Q6KBody;

impl Body for Q6KBody {
    type W = BlockQ6K;
    type A = BlockQ8K;
    #[inline(always)]
    unsafe fn run<D: IDot, const N: usize>(w: &[BlockQ6K], a: [&[BlockQ8K]; N]) -> [f32; N] {
        // SAFETY: AVX2/FMA/F16C enabled by the entry points; loads are from in-bounds blocks.
        unsafe {
            let m4 = _mm256_set1_epi8(0x0F);
            let mut acc = [_mm256_setzero_ps(); N];
            for (b, blk) in w.iter().enumerate() {
                let sc = blk.scales.map(i32::from);
                let mut isum = [_mm256_setzero_si256(); N];
                for h in 0..2 {
                    let ql0 = load32_at(&blk.ql, 64 * h);
                    let ql1 = load32_at(&blk.ql, 64 * h + 32);
                    let qh = load32_at(&blk.qh, 32 * h);
                    let hi = |mask: i8| _mm256_and_si256(qh, _mm256_set1_epi8(mask));
                    let q = [
                        _mm256_or_si256(
                            _mm256_and_si256(ql0, m4),
                            _mm256_slli_epi16::<4>(hi(0x03)),
                        ),
                        _mm256_or_si256(
                            _mm256_and_si256(ql1, m4),
                            _mm256_slli_epi16::<2>(hi(0x0C)),
                        ),
                        _mm256_or_si256(
                            _mm256_and_si256(_mm256_srli_epi16::<4>(ql0), m4),
                            hi(0x30),
                        ),
                        _mm256_or_si256(
                            _mm256_and_si256(_mm256_srli_epi16::<4>(ql1), m4),
                            _mm256_srli_epi16::<2>(hi(0xC0_u8 as i8)),
                        ),
                    ];
                    for (k, &qk) in q.iter().enumerate() {
                        let g = 8 * h + 2 * k;
                        let s = D::scales_16(sc[g], sc[g + 1]);
                        for j in 0..N {
                            let p = D::scaled_dot(qk, load32_at(&a[j][b].qs, 128 * h + 32 * k), s);
                            isum[j] = _mm256_add_epi32(isum[j], p);
                        }
                    }
                }
                let d = f16_to_f32(blk.d);
                for j in 0..N {
                    let x = &a[j][b];
                    let mut offset = 0i32;
                    for (s, &bs) in sc.iter().zip(&x.bsums) {
                        offset += s * i32::from(bs);
                    }
                    let seed = _mm256_zextsi128_si256(_mm_cvtsi32_si128(-32 * offset));
                    let total = _mm256_add_epi32(isum[j], seed);
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
