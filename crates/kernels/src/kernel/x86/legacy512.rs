//! 512-bit bodies for Q4_0, Q5_0 and Q8_0 weights: two 32-element blocks per vector against
//! [`ActQ8_0x2`] activation pairs.
//!
//! Per block pair the weights are unpacked once to signed bytes (`q - offset`) and a per-lane
//! correction for the activations' +128 bias is formed; every activation row then costs one
//! `dpbusd` (starting from the correction), one conversion, one multiply and one multiply-add for
//! 64 products. Lanes 0..8 carry the even block and lanes 8..16 the odd one, each lane summing the
//! same four products as the 256-bit bodies, and the two halves are added before the final
//! horizontal sum — exactly the association of the 256-bit bodies' two accumulators, so results
//! are bit-identical across the paths.

use std::arch::x86_64::*;
use std::marker::PhantomData;

use super::{at, hsum_ps, load32, Body512};
use crate::quant::{ActQ8_0x2, BlockQ4_0, BlockQ5_0, BlockQ8_0, PodBlock};

/// A legacy weight block that can be unpacked in pairs.
pub(crate) trait LegacyPair: PodBlock {
    /// Signed quants (`q - offset`) of `a` in bytes 0..32 and of `b` (or zeros) in bytes 32..64.
    ///
    /// # Safety
    /// The CPU must support AVX2 and AVX-512 F/BW (the 512-bit bodies inline this only into
    /// entry points that enable them, after detection).
    unsafe fn signed_pair(a: &Self, b: Option<&Self>) -> __m512i;
    /// The block's f16 scale bytes.
    fn scale(&self) -> [u8; 2];
}

/// Packs two 16-byte nibble arrays to 64 unsigned quants: low nibbles of `a`, high nibbles of
/// `a`, then the same for `b`.
///
/// # Safety
/// The CPU must support AVX2 and AVX-512F (the 512-bit bodies inline this only into entry points
/// that enable them, after detection).
#[inline(always)]
unsafe fn nibble_pair(a: &[u8; 16], b: Option<&[u8; 16]>) -> __m512i {
    // SAFETY: unaligned loads of whole 16-byte arrays; AVX2 and AVX-512F per this function's
    // contract.
    unsafe {
        let la = _mm_loadu_si128(a.as_ptr().cast());
        let lb = b.map_or(_mm_setzero_si128(), |b| _mm_loadu_si128(b.as_ptr().cast()));
        let raw = _mm256_set_m128i(lb, la);
        let m4 = _mm256_set1_epi8(0x0F);
        let lo = _mm256_and_si256(raw, m4); // [a_lo | b_lo]
        let hi = _mm256_and_si256(_mm256_srli_epi16::<4>(raw), m4); // [a_hi | b_hi]
        let z = _mm512_inserti64x4::<1>(_mm512_castsi256_si512(lo), hi); // [a_lo b_lo a_hi b_hi]
        _mm512_shuffle_i64x2::<0b11_01_10_00>(z, z) // [a_lo a_hi b_lo b_hi]
    }
}

impl LegacyPair for BlockQ4_0 {
    #[inline(always)]
    unsafe fn signed_pair(a: &Self, b: Option<&Self>) -> __m512i {
        // SAFETY: forwarded from the caller's contract.
        unsafe { _mm512_sub_epi8(nibble_pair(&a.qs, b.map(|b| &b.qs)), _mm512_set1_epi8(8)) }
    }
    fn scale(&self) -> [u8; 2] {
        self.d
    }
}

impl LegacyPair for BlockQ5_0 {
    #[inline(always)]
    unsafe fn signed_pair(a: &Self, b: Option<&Self>) -> __m512i {
        // SAFETY: forwarded from the caller's contract.
        unsafe {
            let q = nibble_pair(&a.qs, b.map(|b| &b.qs));
            // Bit i of the 64-bit mask is the fifth bit of element i of the pair.
            let bits = u64::from(u32::from_le_bytes(a.qh))
                | (b.map_or(0, |b| u64::from(u32::from_le_bytes(b.qh))) << 32);
            let high = _mm512_maskz_mov_epi8(bits, _mm512_set1_epi8(0x10));
            _mm512_sub_epi8(_mm512_or_si512(q, high), _mm512_set1_epi8(16))
        }
    }
    fn scale(&self) -> [u8; 2] {
        self.d
    }
}

impl LegacyPair for BlockQ8_0 {
    #[inline(always)]
    unsafe fn signed_pair(a: &Self, b: Option<&Self>) -> __m512i {
        // SAFETY: forwarded from the caller's contract.
        unsafe {
            let hi = b.map_or(_mm256_setzero_si256(), |b| load32(&b.qs));
            _mm512_inserti64x4::<1>(_mm512_castsi256_si512(load32(&a.qs)), hi)
        }
    }
    fn scale(&self) -> [u8; 2] {
        self.d
    }
}

/// The pair kernel for any legacy block type.
pub(crate) struct PairBody<W>(PhantomData<fn() -> W>);

impl<W: LegacyPair> Body512 for PairBody<W> {
    type W = W;
    type A = ActQ8_0x2;
    // 32 zmm registers hold sixteen accumulators plus the unpacked weights and their correction.
    const GROUP: usize = 16;

    fn act_len(w_len: usize) -> usize {
        w_len.div_ceil(2)
    }

    #[inline(always)]
    unsafe fn run<const N: usize>(w: &[W], a: [&[ActQ8_0x2]; N]) -> [f32; N] {
        // SAFETY: AVX2/FMA/F16C/AVX-512 F/BW/VNNI enabled by the entry point; every activation row
        // holds ceil(w.len() / 2) pairs, so `at(a[j], p)` is in bounds for 2p < w.len().
        unsafe {
            let zero = _mm512_setzero_si512();
            let bias = _mm512_set1_epi8(-128i8);
            let mut acc = [_mm512_setzero_ps(); N];
            for (p, pair) in w.chunks(2).enumerate() {
                let (wa, wb) = (&pair[0], pair.get(1));
                let wq = W::signed_pair(wa, wb);
                // The activations arrive biased by 128; starting each lane at -128 times the sum
                // of its four weights makes `dpbusd(corr, x + 128, w)` the exact `w . x`.
                let corr = _mm512_sub_epi32(zero, _mm512_dpbusd_epi32(zero, bias, wq));
                let da = i16::from_le_bytes(wa.scale());
                let db = wb.map_or(0, |b| i16::from_le_bytes(b.scale()));
                let dw = _mm512_cvtph_ps(_mm256_set_m128i(_mm_set1_epi16(db), _mm_set1_epi16(da)));
                for j in 0..N {
                    let x = at(a[j], p);
                    let xv = _mm512_load_si512(x.qs.as_ptr().cast());
                    let isum = _mm512_dpbusd_epi32(corr, xv, wq);
                    let s = _mm512_mul_ps(dw, _mm512_load_ps(x.d.as_ptr()));
                    acc[j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), s, acc[j]);
                }
            }
            let mut out = [0f32; N];
            for j in 0..N {
                let lo = _mm512_castps512_ps256(acc[j]);
                let hi = _mm256_castpd_ps(_mm512_extractf64x4_pd::<1>(_mm512_castps_pd(acc[j])));
                out[j] = hsum_ps(_mm256_add_ps(lo, hi));
            }
            out
        }
    }
}
