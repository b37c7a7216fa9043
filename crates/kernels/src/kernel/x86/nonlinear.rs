//! SIMD bodies for the 4-bit table formats: MXFP4 and IQ4_NL against Q8_0 activations, IQ4_XS
//! against Q8_K.
//!
//! A block's 32 nibbles become table values with one byte shuffle (the 16-entry table sits in
//! both 128-bit lanes). The values are signed, so they are multiplied with the sign-transfer
//! trick (`|w| . sign(x, w)`): every i32 lane is an exact sum of four products, through
//! `maddubs` + `madd` (AVX2; `|w|, |x| <= 127` keeps the i16 pair sums below 2^15) or `dpbusd`
//! (VNNI). MXFP4 / IQ4_NL accumulate those lanes in f32 as their scalar reference does (two
//! alternating sets of eight lanes); IQ4_XS sums them to the super-block's exact integer and
//! folds it with [`fold`]. Either way every ISA returns the reference's bits.

// Index loops address several parallel arrays (registers per activation row); the iterator
// forms would hide the unrolled structure the compiler needs to see.
#![allow(clippy::needless_range_loop)]

use std::arch::x86_64::*;
use std::marker::PhantomData;

use super::legacy::unpack_nibbles;
use super::legacy_min::hsum_epi32;
use super::{at, f16_to_f32, hsum_ps, load32, load32_at, Body, IDot};
use crate::quant::nonlinear::{fold, iq4_xs_nibbles, TableBlock, KVALUES_IQ4NL};
use crate::quant::{ActQ8_0, BlockIq4Xs, BlockQ8K};

/// The 16-entry table in both 128-bit lanes, for `_mm256_shuffle_epi8`.
///
/// # Safety
/// The CPU must support AVX2 (the bodies inline this only into entry points that enable it, after
/// detection).
#[inline(always)]
unsafe fn table256(t: &[i8; 16]) -> __m256i {
    // SAFETY: an unaligned load of the 16-byte array; AVX2 per this function's contract.
    unsafe { _mm256_broadcastsi128_si256(_mm_loadu_si128(t.as_ptr().cast())) }
}

/// The 32 signed table values of 16 nibble bytes, in element order.
///
/// # Safety
/// The CPU must support AVX2 (the bodies inline this only into entry points that enable it, after
/// detection).
#[inline(always)]
unsafe fn lookup(table: __m256i, qs: &[u8; 16]) -> __m256i {
    // SAFETY: AVX2 per this function's contract, all `unpack_nibbles` needs too.
    unsafe { _mm256_shuffle_epi8(table, unpack_nibbles(qs)) }
}

/// The MXFP4 / IQ4_NL kernel: per pair, even and odd blocks accumulate into two f32 vectors
/// (`fma(d_w * d_x, lanes, acc)`), added and summed horizontally at the end: the lane order of
/// the scalar reference `dot_table`.
pub(crate) struct TableBody<W>(PhantomData<fn() -> W>);

impl<W: TableBlock> Body for TableBody<W> {
    type W = W;
    type A = ActQ8_0;
    #[inline(always)]
    unsafe fn run<D: IDot, const N: usize>(w: &[W], a: [&[ActQ8_0]; N]) -> [f32; N] {
        // SAFETY: AVX2/FMA/F16C (and VNNI for its primitive) enabled by the entry points;
        // activation rows have w.len() blocks.
        unsafe {
            let table = table256(&W::TABLE);
            let mut acc = [[_mm256_setzero_ps(); 2]; N];
            for (b, blk) in w.iter().enumerate() {
                let wq = lookup(table, blk.nibbles());
                let aw = _mm256_sign_epi8(wq, wq);
                let dw = blk.scale();
                for j in 0..N {
                    let x = at(a[j], b);
                    let sx = _mm256_sign_epi8(load32(&x.qs), wq);
                    let lanes = D::dot_acc(_mm256_setzero_si256(), aw, sx);
                    let s = _mm256_set1_ps(dw * x.d);
                    acc[j][b & 1] = _mm256_fmadd_ps(s, _mm256_cvtepi32_ps(lanes), acc[j][b & 1]);
                }
            }
            let mut out = [0f32; N];
            for j in 0..N {
                out[j] = hsum_ps(_mm256_add_ps(acc[j][0], acc[j][1]));
            }
            out
        }
    }
}

/// The IQ4_XS kernel.
pub(crate) struct Iq4XsBody;

impl Body for Iq4XsBody {
    type W = BlockIq4Xs;
    type A = BlockQ8K;
    #[inline(always)]
    unsafe fn run<D: IDot, const N: usize>(w: &[BlockIq4Xs], a: [&[BlockQ8K]; N]) -> [f32; N] {
        // SAFETY: AVX2/FMA/F16C (and VNNI for its primitive) enabled by the entry points;
        // activation rows have w.len() blocks.
        unsafe {
            let table = table256(&KVALUES_IQ4NL);
            let mut acc = [0f32; N];
            for (b, blk) in w.iter().enumerate() {
                let sc = crate::quant::nonlinear::iq4_xs_scales(blk);
                // Two exact integer accumulators per pair keep the dependency chains short.
                let mut isum = [[_mm256_setzero_si256(); 2]; N];
                for i in 0..8 {
                    let wq = lookup(table, iq4_xs_nibbles(blk, i));
                    let aw = _mm256_sign_epi8(wq, wq);
                    let s = D::scales_32(i32::from(sc[i]));
                    for j in 0..N {
                        let x = load32_at(&at(a[j], b).qs, 32 * i);
                        let sx = _mm256_sign_epi8(x, wq);
                        isum[j][i & 1] = D::scaled_dot_acc(isum[j][i & 1], aw, sx, s);
                    }
                }
                let d = f16_to_f32(blk.d);
                for j in 0..N {
                    let total = hsum_epi32(_mm256_add_epi32(isum[j][0], isum[j][1]));
                    acc[j] = fold(acc[j], total, d, at(a[j], b).d);
                }
            }
            acc
        }
    }
}
