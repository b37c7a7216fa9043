//! SIMD bodies for Q2_K and Q3_K weights against Q8_K activations.
//!
//! Per half (128 elements) one 32-byte load of `qs` holds four vectors of 32 two-bit quants
//! (shifts 0, 2, 4, 6); Q3_K ORs in its third bits from `hmask` as 4, so both formats multiply
//! small *unsigned* quants (`maddubs` pairs stay far below 2^15) by the group scales
//! (`scales_16_of`). Q3_K's offset of 4 enters the same integers through the activation's
//! 16-element sums, Q2_K's mins a second integer through the same sums. The lanes are summed to
//! the super-block's exact integers and folded with [`fold_k`], the float step of the scalar
//! reference, so every ISA returns the reference's bits.

// Index loops address several parallel arrays (registers per activation row, per half); the
// iterator forms would hide the unrolled structure the compiler needs to see.
#![allow(clippy::needless_range_loop)]

use std::arch::x86_64::*;
use std::marker::PhantomData;

use super::legacy_min::hsum_epi32;
use super::{at, f16_to_f32, load32, load32_at, Body, IDot};
use crate::quant::kquants_low::{fold_k, q3_k_scales};
use crate::quant::{BlockQ2K, BlockQ3K, BlockQ8K};

/// Loads the 16 block sums of an activation block.
///
/// # Safety
/// The CPU must support AVX (the bodies inline this only into entry points that enable AVX2, after
/// detection).
#[inline(always)]
pub(super) unsafe fn bsums(x: &BlockQ8K) -> __m256i {
    // SAFETY: an unaligned load of the 16 i16 (32 bytes) of `bsums`; AVX per this function's
    // contract.
    unsafe { _mm256_loadu_si256(x.bsums.as_ptr().cast()) }
}

/// The four vectors of two-bit quants of half `h` (elements `128h + 32k..128h + 32k + 32`).
///
/// # Safety
/// The CPU must support AVX2 (the bodies inline this only into entry points that enable it, after
/// detection). The load is checked: `h > 1` panics.
#[inline(always)]
unsafe fn low2_half(qs: &[u8; 64], h: usize) -> [__m256i; 4] {
    // SAFETY: AVX2 per this function's contract; the load is a checked slice of `qs`.
    unsafe {
        let raw = load32_at(qs, 32 * h);
        let m3 = _mm256_set1_epi8(3);
        // 16-bit shifts are safe: the masked field stays inside its own byte.
        [
            _mm256_and_si256(raw, m3),
            _mm256_and_si256(_mm256_srli_epi16::<2>(raw), m3),
            _mm256_and_si256(_mm256_srli_epi16::<4>(raw), m3),
            _mm256_and_si256(_mm256_srli_epi16::<6>(raw), m3),
        ]
    }
}

/// A Q2_K / Q3_K block as both widths' bodies consume it.
pub(crate) trait LowK: crate::quant::PodBlock {
    /// The 16 signed byte group scales.
    ///
    /// # Safety
    /// The CPU must support AVX2 (the bodies inline this only into entry points that enable it,
    /// after detection).
    unsafe fn scales(&self) -> __m128i;
    /// Half `h`'s four vectors of unsigned quants (elements `128h + 32k..128h + 32k + 32`).
    ///
    /// # Safety
    /// As [`LowK::scales`]: the CPU must support AVX2. (`h > 1` panics at a checked load.)
    unsafe fn quants(&self, h: usize) -> [__m256i; 4];
    /// The i32 lanes the integer sum starts from (Q3_K's offset term).
    ///
    /// # Safety
    /// As [`LowK::scales`]: the CPU must support AVX2.
    unsafe fn offset(&self, sc8: __m128i, x: &BlockQ8K) -> __m256i;
    /// Folds the super-block's exact integer sum into `acc` ([`fold_k`]).
    ///
    /// # Safety
    /// The CPU must support AVX2 and F16C (the scales are f16).
    unsafe fn fold(&self, acc: f32, isum: i32, x: &BlockQ8K) -> f32;
}

impl LowK for BlockQ2K {
    #[inline(always)]
    unsafe fn scales(&self) -> __m128i {
        // SAFETY: 16-byte array, unaligned load.
        unsafe {
            _mm_and_si128(
                _mm_loadu_si128(self.scales.as_ptr().cast()),
                _mm_set1_epi8(0x0F),
            )
        }
    }
    #[inline(always)]
    unsafe fn quants(&self, h: usize) -> [__m256i; 4] {
        // SAFETY: forwarded from the caller's contract.
        unsafe { low2_half(&self.qs, h) }
    }
    #[inline(always)]
    unsafe fn offset(&self, _: __m128i, _: &BlockQ8K) -> __m256i {
        // SAFETY: forwarded from the caller's contract.
        unsafe { _mm256_setzero_si256() }
    }
    #[inline(always)]
    unsafe fn fold(&self, acc: f32, isum: i32, x: &BlockQ8K) -> f32 {
        // SAFETY: forwarded from the caller's contract; 16-byte array, unaligned load.
        unsafe {
            let raw = _mm_loadu_si128(self.scales.as_ptr().cast());
            let mins =
                _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16::<4>(raw), _mm_set1_epi8(0x0F)));
            let msum = hsum_epi32(_mm256_madd_epi16(bsums(x), mins));
            fold_k(
                acc,
                isum,
                msum,
                f16_to_f32(self.d),
                f16_to_f32(self.dmin),
                x.d,
            )
        }
    }
}

/// Bytes of 4 where bit `bit` of the corresponding `hmask` byte is set.
///
/// # Safety
/// The CPU must support AVX2 (the bodies inline this only into entry points that enable it, after
/// detection).
#[inline(always)]
unsafe fn third_bit(hm: __m256i, bit: usize) -> __m256i {
    // SAFETY: register operations only; AVX2 per this function's contract.
    unsafe {
        let mask = _mm256_set1_epi8((1u8 << bit) as i8);
        _mm256_and_si256(
            _mm256_cmpeq_epi8(_mm256_and_si256(hm, mask), mask),
            _mm256_set1_epi8(4),
        )
    }
}

impl LowK for BlockQ3K {
    #[inline(always)]
    unsafe fn scales(&self) -> __m128i {
        let sc = q3_k_scales(&self.scales);
        // SAFETY: 16-byte array, unaligned load.
        unsafe { _mm_loadu_si128(sc.as_ptr().cast()) }
    }
    #[inline(always)]
    unsafe fn quants(&self, h: usize) -> [__m256i; 4] {
        // SAFETY: forwarded from the caller's contract.
        unsafe {
            let hm = load32(&self.hmask);
            let mut q = low2_half(&self.qs, h);
            for (k, v) in q.iter_mut().enumerate() {
                *v = _mm256_or_si256(*v, third_bit(hm, 4 * h + k));
            }
            q
        }
    }
    #[inline(always)]
    unsafe fn offset(&self, sc8: __m128i, x: &BlockQ8K) -> __m256i {
        // SAFETY: forwarded from the caller's contract.
        unsafe {
            // -4 * scale per group of 16: the offset term -4 * sc_g * bsums_g.
            let neg4 = _mm256_sub_epi16(
                _mm256_setzero_si256(),
                _mm256_slli_epi16::<2>(_mm256_cvtepi8_epi16(sc8)),
            );
            _mm256_madd_epi16(bsums(x), neg4)
        }
    }
    #[inline(always)]
    unsafe fn fold(&self, acc: f32, isum: i32, x: &BlockQ8K) -> f32 {
        // SAFETY: forwarded from the caller's contract (F16C).
        unsafe { fold_k(acc, isum, 0, f16_to_f32(self.d), 0.0, x.d) }
    }
}

/// The 256-bit Q2_K / Q3_K kernel.
pub(crate) struct LowBody<W>(PhantomData<fn() -> W>);

impl<W: LowK> Body for LowBody<W> {
    type W = W;
    type A = BlockQ8K;
    #[inline(always)]
    unsafe fn run<D: IDot, const N: usize>(w: &[W], a: [&[BlockQ8K]; N]) -> [f32; N] {
        // SAFETY: AVX2/FMA/F16C enabled by the entry points; activation rows have w.len()
        // blocks.
        unsafe {
            let mut acc = [0f32; N];
            for (b, blk) in w.iter().enumerate() {
                let sc8 = blk.scales();
                // Two exact integer accumulators per pair (one per half) for shorter chains.
                let mut isum = [[_mm256_setzero_si256(); 2]; N];
                for j in 0..N {
                    isum[j][0] = blk.offset(sc8, at(a[j], b));
                }
                for h in 0..2 {
                    let q = blk.quants(h);
                    for (k, &qk) in q.iter().enumerate() {
                        let s = D::scales_16_of(sc8, 8 * h + 2 * k);
                        for j in 0..N {
                            let x = load32_at(&at(a[j], b).qs, 128 * h + 32 * k);
                            isum[j][h] = D::scaled_dot_acc(isum[j][h], qk, x, s);
                        }
                    }
                }
                for j in 0..N {
                    let total = hsum_epi32(_mm256_add_epi32(isum[j][0], isum[j][1]));
                    acc[j] = blk.fold(acc[j], total, at(a[j], b));
                }
            }
            acc
        }
    }
}
