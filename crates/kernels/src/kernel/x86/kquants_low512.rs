//! 512-bit body for Q2_K and Q3_K weights against Q8_K activations.
//!
//! One vector holds 64 quants (four groups of 16) of a half: the 256-bit body's quant vectors
//! `k = 0, 1` and `k = 2, 3` joined. Each activation row costs one `maddubs` and one `dpwssd`
//! (with the four groups' scales) per 64 products. The lanes are summed to the super-block's
//! exact integer (the same integer whatever the order) and folded as the 256-bit body does, so
//! the result is the scalar reference's bits.

// Index loops address several parallel arrays (registers per activation row, per half); the
// iterator forms would hide the unrolled structure the compiler needs to see.
#![allow(clippy::needless_range_loop)]

use std::arch::x86_64::*;
use std::marker::PhantomData;

use super::kquants512::{fold, load64, q6_scales64};
use super::kquants_low::LowK;
use super::legacy_min::hsum_epi32;
use super::{at, Body512};
use crate::quant::BlockQ8K;

/// The 512-bit Q2_K / Q3_K kernel.
pub(crate) struct LowBody512<W>(PhantomData<fn() -> W>);

impl<W: LowK> Body512 for LowBody512<W> {
    type W = W;
    type A = BlockQ8K;
    const GROUP: usize = 8;

    fn act_len(w_len: usize) -> usize {
        w_len
    }

    #[inline(always)]
    unsafe fn run<const N: usize>(w: &[W], a: [&[BlockQ8K]; N]) -> [f32; N] {
        // SAFETY: AVX2/FMA/F16C/AVX-512 F/BW/VNNI enabled by the entry point; activation rows
        // hold w.len() blocks.
        unsafe {
            let join =
                |a: __m256i, b: __m256i| _mm512_inserti64x4::<1>(_mm512_castsi256_si512(a), b);
            let mut acc = [0f32; N];
            for (b, blk) in w.iter().enumerate() {
                let sc8 = blk.scales();
                // Two exact accumulators per pair (one per half) halve the dpwssd chain.
                let mut isum = [[_mm512_setzero_si512(); 2]; N];
                for h in 0..2 {
                    let q = blk.quants(h);
                    let (q01, q23) = (join(q[0], q[1]), join(q[2], q[3]));
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
                for j in 0..N {
                    let x = at(a[j], b);
                    let lanes = _mm256_add_epi32(
                        fold(_mm512_add_epi32(isum[j][0], isum[j][1])),
                        blk.offset(sc8, x),
                    );
                    acc[j] = blk.fold(acc[j], hsum_epi32(lanes), x);
                }
            }
            acc
        }
    }
}
