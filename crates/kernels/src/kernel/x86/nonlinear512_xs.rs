//! 512-bit body for IQ4_XS weights against Q8_K activations.
//!
//! One vector holds two sub-blocks of 32 (64 quants): their table values (one byte shuffle
//! each) are multiplied by the sign-transfer trick (`|w|` against `x` negated where `w < 0`),
//! one `maddubs` and one `dpwssd` with the two sub-block scales per 64 products and activation
//! row. The lanes are summed to the super-block's exact integer (the same integer whatever the
//! order) and folded as the 256-bit body and the scalar reference do, so the bits are theirs.
//! Below four activation rows it hands the rows to the 256-bit body (with VNNI), which is faster
//! there.

// Index loops address several parallel arrays (registers per activation row); the iterator forms
// would hide the unrolled structure the compiler needs to see.
#![allow(clippy::needless_range_loop)]

use std::arch::x86_64::*;

use super::kquants512::{fold as fold_lanes, load64};
use super::legacy::unpack_nibbles;
use super::legacy_min::hsum_epi32;
use super::nonlinear::Iq4XsBody;
use super::{at, f16_to_f32, Body, Body512, VnniDot};
use crate::quant::nonlinear::{fold, iq4_xs_nibbles, iq4_xs_scales, KVALUES_IQ4NL};
use crate::quant::{BlockIq4Xs, BlockQ8K};

/// The IQ4_XS kernel.
pub(crate) struct Iq4XsBody512;

impl Body512 for Iq4XsBody512 {
    type W = BlockIq4Xs;
    type A = BlockQ8K;
    const GROUP: usize = 8;

    fn act_len(w_len: usize) -> usize {
        w_len
    }

    #[inline(always)]
    unsafe fn run<const N: usize>(w: &[BlockIq4Xs], a: [&[BlockQ8K]; N]) -> [f32; N] {
        if N < 4 {
            // Below four activation rows the 256-bit body is faster (it does not join and
            // sign-mask two sub-blocks per vector), and gives the same bits.
            // SAFETY: the entry point enables AVX2/FMA/F16C and AVX-512 VL + VNNI.
            return unsafe { <Iq4XsBody as Body>::run::<VnniDot, N>(w, a) };
        }
        // SAFETY: AVX2/FMA/F16C/AVX-512 F/BW/VNNI enabled by the entry point; activation rows
        // hold w.len() blocks.
        unsafe {
            let table = _mm256_broadcastsi128_si256(_mm_loadu_si128(KVALUES_IQ4NL.as_ptr().cast()));
            let zero = _mm512_setzero_si512();
            let mut acc = [0f32; N];
            for (b, blk) in w.iter().enumerate() {
                let sc = iq4_xs_scales(blk);
                // Two exact accumulators per pair (even / odd sub-block pairs).
                let mut isum = [[zero; 2]; N];
                for p in 0..4 {
                    let va = _mm256_shuffle_epi8(table, unpack_nibbles(iq4_xs_nibbles(blk, 2 * p)));
                    let vb =
                        _mm256_shuffle_epi8(table, unpack_nibbles(iq4_xs_nibbles(blk, 2 * p + 1)));
                    let wq = _mm512_inserti64x4::<1>(_mm512_castsi256_si512(va), vb);
                    let aw = _mm512_abs_epi8(wq);
                    let neg = _mm512_movepi8_mask(wq);
                    let s = _mm512_inserti64x4::<1>(
                        _mm512_castsi256_si512(_mm256_set1_epi16(i16::from(sc[2 * p]))),
                        _mm256_set1_epi16(i16::from(sc[2 * p + 1])),
                    );
                    for j in 0..N {
                        let x = load64(at(a[j], b), 64 * p);
                        let sx = _mm512_mask_sub_epi8(x, neg, zero, x);
                        let prod = _mm512_maddubs_epi16(aw, sx);
                        isum[j][p & 1] = _mm512_dpwssd_epi32(isum[j][p & 1], prod, s);
                    }
                }
                let d = f16_to_f32(blk.d);
                for j in 0..N {
                    let lanes = fold_lanes(_mm512_add_epi32(isum[j][0], isum[j][1]));
                    acc[j] = fold(acc[j], hsum_epi32(lanes), d, at(a[j], b).d);
                }
            }
            acc
        }
    }
}
