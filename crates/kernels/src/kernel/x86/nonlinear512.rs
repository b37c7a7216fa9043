//! 512-bit body for MXFP4 and IQ4_NL weights: two 32-element blocks per vector against
//! [`ActQ8_0x2`] activation pairs (as `legacy512` does for Q4_0).
//!
//! Per block pair the nibbles become signed table values with one byte shuffle and a per-lane
//! correction for the activations' +128 bias is formed; every activation row then costs one
//! `dpbusd` (starting from the correction), one conversion, one multiply and one multiply-add
//! for 64 products. Lanes 0..8 carry the even block and lanes 8..16 the odd one, each lane
//! summing the same four products as the 256-bit body's lanes; the two halves are added before
//! the final horizontal sum: the 256-bit body's two alternating accumulators exactly, and so the
//! scalar reference's bits. A row with an odd number of blocks ends in a pair whose second block
//! has zero weights and a zero activation scale, which leaves the odd lanes unchanged.

use std::arch::x86_64::*;
use std::marker::PhantomData;

use super::legacy::unpack_nibbles;
use super::{at, hsum_ps, Body512};
use crate::quant::nonlinear::TableBlock;
use crate::quant::ActQ8_0x2;

/// The MXFP4 / IQ4_NL pair kernel.
pub(crate) struct TablePairBody<W>(PhantomData<fn() -> W>);

impl<W: TableBlock> Body512 for TablePairBody<W> {
    type W = W;
    type A = ActQ8_0x2;
    // 32 zmm registers hold sixteen accumulators plus the table values and their correction.
    const GROUP: usize = 16;

    fn act_len(w_len: usize) -> usize {
        w_len.div_ceil(2)
    }

    #[inline(always)]
    unsafe fn run<const N: usize>(w: &[W], a: [&[ActQ8_0x2]; N]) -> [f32; N] {
        // SAFETY: AVX2/FMA/F16C/AVX-512 F/BW/VNNI enabled by the entry point; every activation
        // row holds ceil(w.len() / 2) pairs, so `at(a[j], p)` is in bounds for 2p < w.len().
        unsafe {
            let table = _mm256_broadcastsi128_si256(_mm_loadu_si128(W::TABLE.as_ptr().cast()));
            let zero = _mm512_setzero_si512();
            let bias = _mm512_set1_epi8(-128i8);
            let mut acc = [_mm512_setzero_ps(); N];
            for (p, pair) in w.chunks(2).enumerate() {
                let (wa, wb) = (&pair[0], pair.get(1));
                let va = _mm256_shuffle_epi8(table, unpack_nibbles(wa.nibbles()));
                let vb = wb.map_or(_mm256_setzero_si256(), |b| {
                    _mm256_shuffle_epi8(table, unpack_nibbles(b.nibbles()))
                });
                let wq = _mm512_inserti64x4::<1>(_mm512_castsi256_si512(va), vb);
                // The activations arrive biased by 128; starting each lane at -128 times the sum
                // of its four weights makes `dpbusd(corr, x + 128, w)` the exact `w . x`.
                let corr = _mm512_sub_epi32(zero, _mm512_dpbusd_epi32(zero, bias, wq));
                let (da, db) = (wa.scale(), wb.map_or(0.0, |b| b.scale()));
                let dw = _mm512_castpd_ps(_mm512_insertf64x4::<1>(
                    _mm512_castps_pd(_mm512_castps256_ps512(_mm256_set1_ps(da))),
                    _mm256_castps_pd(_mm256_set1_ps(db)),
                ));
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
