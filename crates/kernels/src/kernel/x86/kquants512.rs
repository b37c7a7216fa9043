//! 512-bit bodies for Q4_K, Q5_K and Q6_K weights against Q8_K activations.
//!
//! One vector holds 64 quants (a Q4_K/Q5_K chunk of two sub-blocks, or four Q6_K groups), so each
//! activation row costs one `maddubs` and one `dpwssd` per 64 products. Before conversion the
//! 16 i32 lanes are folded to 8 by adding the two 256-bit halves; integer sums are exact and each
//! folded lane covers the same elements as the matching lane of the 256-bit bodies, so the float
//! work — and the result — is bit-identical to them.

// Index loops address several parallel arrays (registers per activation row); the iterator forms
// would hide the unrolled structure the compiler needs to see.
#![allow(clippy::needless_range_loop)]

use std::arch::x86_64::*;
use std::marker::PhantomData;

use super::{at, f16_to_f32, hsum_ps, load32, load32_at, Body512};
use crate::quant::kquants::k4_scales_mins;
use crate::quant::{BlockQ4K, BlockQ5K, BlockQ6K, BlockQ8K};

/// Loads 64 activation quants starting at element `offset`.
///
/// # Safety
/// The CPU must support AVX-512F (the 512-bit bodies inline this only into entry points that enable
/// it, after detection). The range is checked: `offset + 64 > 256` panics.
#[inline(always)]
pub(super) unsafe fn load64(x: &BlockQ8K, offset: usize) -> __m512i {
    let s = &x.qs[offset..offset + 64];
    // SAFETY: `s` holds exactly 64 bytes, read by an unaligned load; AVX-512F per this
    // function's contract.
    unsafe { _mm512_loadu_si512(s.as_ptr().cast()) }
}

/// Adds the two 256-bit halves of 16 i32 lanes.
///
/// # Safety
/// The CPU must support AVX2 and AVX-512F (the 512-bit bodies inline this only into entry points
/// that enable them, after detection).
#[inline(always)]
pub(super) unsafe fn fold(v: __m512i) -> __m256i {
    // SAFETY: register operations only; AVX2 and AVX-512F per this function's contract.
    unsafe { _mm256_add_epi32(_mm512_castsi512_si256(v), _mm512_extracti64x4_epi64::<1>(v)) }
}

/// The 16 block sums of an activation block.
///
/// # Safety
/// The CPU must support AVX (the 512-bit bodies inline this only into entry points that enable
/// AVX2, after detection).
#[inline(always)]
unsafe fn bsums(x: &BlockQ8K) -> __m256i {
    // SAFETY: an unaligned load of the 16 i16 (32 bytes) of `bsums`; AVX per this function's
    // contract.
    unsafe { _mm256_loadu_si256(x.bsums.as_ptr().cast()) }
}

/// A Q4_K-like block (6-bit scales and mins, 4 chunks of 64 unsigned quants).
pub(crate) trait ScaleMinBlock: crate::quant::PodBlock {
    fn header(&self) -> ([u8; 2], [u8; 2], &[u8; 12]);
    /// Unsigned quants of chunk `c` (elements 64c..64c+64) in element order.
    ///
    /// # Safety
    /// The CPU must support AVX2 and AVX-512 F/BW (the 512-bit bodies inline this only into
    /// entry points that enable them, after detection). (`c > 3` panics at a checked load.)
    unsafe fn chunk(&self, c: usize) -> __m512i;
}

/// `[low nibbles | high nibbles]` of 32 packed bytes.
///
/// # Safety
/// The CPU must support AVX2 and AVX-512F (the 512-bit bodies inline this only into entry points
/// that enable them, after detection).
#[inline(always)]
unsafe fn nibbles64(raw: __m256i) -> __m512i {
    // SAFETY: register operations only; AVX2 and AVX-512F per this function's contract.
    unsafe {
        let both =
            _mm512_inserti64x4::<1>(_mm512_castsi256_si512(raw), _mm256_srli_epi16::<4>(raw));
        _mm512_and_si512(both, _mm512_set1_epi8(0x0F))
    }
}

impl ScaleMinBlock for BlockQ4K {
    fn header(&self) -> ([u8; 2], [u8; 2], &[u8; 12]) {
        (self.d, self.dmin, &self.scales)
    }
    #[inline(always)]
    unsafe fn chunk(&self, c: usize) -> __m512i {
        // SAFETY: forwarded from the caller's contract; loads stay in `qs`.
        unsafe { nibbles64(load32_at(&self.qs, 32 * c)) }
    }
}

impl ScaleMinBlock for BlockQ5K {
    fn header(&self) -> ([u8; 2], [u8; 2], &[u8; 12]) {
        (self.d, self.dmin, &self.scales)
    }
    #[inline(always)]
    unsafe fn chunk(&self, c: usize) -> __m512i {
        // SAFETY: forwarded from the caller's contract; loads stay in `qs` / `qh`.
        unsafe {
            let q = nibbles64(load32_at(&self.qs, 32 * c));
            let qh = load32(&self.qh);
            let qh2 = _mm512_inserti64x4::<1>(_mm512_castsi256_si512(qh), qh);
            // Bit 2c of qh[l] is the fifth bit of element l, bit 2c + 1 that of element 32 + l.
            let lo_bit = _mm256_set1_epi8((1u8 << (2 * c)) as i8);
            let hi_bit = _mm256_set1_epi8((1u8 << (2 * c + 1)) as i8);
            let bits = _mm512_inserti64x4::<1>(_mm512_castsi256_si512(lo_bit), hi_bit);
            let set = _mm512_test_epi8_mask(qh2, bits);
            _mm512_or_si512(q, _mm512_maskz_mov_epi8(set, _mm512_set1_epi8(0x10)))
        }
    }
}

/// The Q4_K/Q5_K kernel.
pub(crate) struct ScaleMinBody<W>(PhantomData<fn() -> W>);

impl<W: ScaleMinBlock> Body512 for ScaleMinBody<W> {
    type W = W;
    type A = BlockQ8K;
    const GROUP: usize = 4;

    fn act_len(w_len: usize) -> usize {
        w_len
    }

    #[inline(always)]
    unsafe fn run<const N: usize>(w: &[W], a: [&[BlockQ8K]; N]) -> [f32; N] {
        // SAFETY: AVX2/FMA/F16C/AVX-512 F/BW/VNNI enabled by the entry point; activation rows
        // hold w.len() blocks.
        unsafe {
            let mut acc = [_mm256_setzero_ps(); N];
            let mut acc_min = [_mm256_setzero_ps(); N];
            for (b, blk) in w.iter().enumerate() {
                let (d, dmin, scales) = blk.header();
                let (sc, mn) = k4_scales_mins(scales);
                // Two exact accumulators per pair (even / odd chunks) halve the dpwssd chain.
                let mut isum = [[_mm512_setzero_si512(); 2]; N];
                for c in 0..4 {
                    let q = blk.chunk(c);
                    let s_lo = _mm256_set1_epi16(i16::from(sc[2 * c]));
                    let s_hi = _mm256_set1_epi16(i16::from(sc[2 * c + 1]));
                    let s = _mm512_inserti64x4::<1>(_mm512_castsi256_si512(s_lo), s_hi);
                    for j in 0..N {
                        let p = _mm512_maddubs_epi16(q, load64(at(a[j], b), 64 * c));
                        isum[j][c & 1] = _mm512_dpwssd_epi32(isum[j][c & 1], p, s);
                    }
                }
                let mn_bytes = _mm_loadl_epi64(mn.as_ptr().cast());
                let mins = _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(mn_bytes, mn_bytes));
                let (d, dmin) = (f16_to_f32(d), f16_to_f32(dmin));
                for j in 0..N {
                    let x = at(a[j], b);
                    let total = fold(_mm512_add_epi32(isum[j][0], isum[j][1]));
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
}

/// i16 scales for 64 quants covering groups `g..g + 4` (16 quants each) of a Q6_K block.
///
/// # Safety
/// The CPU must support AVX2 and AVX-512BW (the 512-bit bodies inline this only into entry points
/// that enable them, after detection).
#[inline(always)]
pub(super) unsafe fn q6_scales64(sc8: __m128i, g: usize) -> __m512i {
    // SAFETY: register operations only; AVX2 and AVX-512BW per this function's contract.
    unsafe {
        let rep = |v: usize| (v as i64) * 0x0101_0101_0101_0101;
        let ctrl = _mm256_set_epi64x(rep(g + 3), rep(g + 2), rep(g + 1), rep(g));
        let bytes = _mm256_shuffle_epi8(_mm256_broadcastsi128_si256(sc8), ctrl);
        _mm512_cvtepi8_epi16(bytes)
    }
}

/// The Q6_K kernel.
pub(crate) struct Q6KBody;

impl Body512 for Q6KBody {
    type W = BlockQ6K;
    type A = BlockQ8K;
    const GROUP: usize = 8;

    fn act_len(w_len: usize) -> usize {
        w_len
    }

    #[inline(always)]
    unsafe fn run<const N: usize>(w: &[BlockQ6K], a: [&[BlockQ8K]; N]) -> [f32; N] {
        // SAFETY: AVX2/FMA/F16C/AVX-512 F/BW/VNNI enabled by the entry point; activation rows
        // hold w.len() blocks.
        unsafe {
            let m4 = _mm256_set1_epi8(0x0F);
            let mut acc = [_mm256_setzero_ps(); N];
            for (b, blk) in w.iter().enumerate() {
                let sc8 = _mm_loadu_si128(blk.scales.as_ptr().cast());
                // Two exact accumulators per pair (one per half) halve the dpwssd chain.
                let mut isum = [[_mm512_setzero_si512(); 2]; N];
                for h in 0..2 {
                    let ql0 = load32_at(&blk.ql, 64 * h);
                    let ql1 = load32_at(&blk.ql, 64 * h + 32);
                    let qh = load32_at(&blk.qh, 32 * h);
                    let hi = |mask: u8| _mm256_and_si256(qh, _mm256_set1_epi8(mask as i8));
                    let join = |a: __m256i, b: __m256i| {
                        _mm512_inserti64x4::<1>(_mm512_castsi256_si512(a), b)
                    };
                    // Elements 128h + 0..64, then 128h + 64..128 (see the 256-bit body).
                    let q01 = join(
                        _mm256_or_si256(
                            _mm256_and_si256(ql0, m4),
                            _mm256_slli_epi16::<4>(hi(0x03)),
                        ),
                        _mm256_or_si256(
                            _mm256_and_si256(ql1, m4),
                            _mm256_slli_epi16::<2>(hi(0x0C)),
                        ),
                    );
                    let q23 = join(
                        _mm256_or_si256(
                            _mm256_and_si256(_mm256_srli_epi16::<4>(ql0), m4),
                            hi(0x30),
                        ),
                        _mm256_or_si256(
                            _mm256_and_si256(_mm256_srli_epi16::<4>(ql1), m4),
                            _mm256_srli_epi16::<2>(hi(0xC0)),
                        ),
                    );
                    let s01 = q6_scales64(sc8, 8 * h);
                    let s23 = q6_scales64(sc8, 8 * h + 4);
                    for j in 0..N {
                        let x = at(a[j], b);
                        let p01 = _mm512_maddubs_epi16(q01, load64(x, 128 * h));
                        let p23 = _mm512_maddubs_epi16(q23, load64(x, 128 * h + 64));
                        let t = _mm512_dpwssd_epi32(isum[j][h], p01, s01);
                        isum[j][h] = _mm512_dpwssd_epi32(t, p23, s23);
                    }
                }
                let neg32 = _mm256_sub_epi16(
                    _mm256_setzero_si256(),
                    _mm256_slli_epi16::<5>(_mm256_cvtepi8_epi16(sc8)),
                );
                let d = f16_to_f32(blk.d);
                for j in 0..N {
                    let x = at(a[j], b);
                    let folded = fold(_mm512_add_epi32(isum[j][0], isum[j][1]));
                    let total = _mm256_add_epi32(folded, _mm256_madd_epi16(bsums(x), neg32));
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
