//! SIMD bodies for Q4_1 and Q5_1 weights (row-major) against Q8_0 activations.
//!
//! One block is 32 unsigned quants = one 256-bit vector, multiplied with the activation bytes by
//! the integer primitive (`maddubs` + `madd` with AVX2, `dpbusd` with VNNI: the same exact i32
//! lanes). Each block's lanes are summed to the exact integer `sum(q x)` and folded with
//! [`fold_block`], the float steps of the scalar reference, so every ISA returns its bits.

use std::arch::x86_64::*;
use std::marker::PhantomData;

use super::legacy::{high_bits_x16, unpack_nibbles};
use super::{at, f16_to_f32, load32, Body, IDot};
use crate::quant::legacy_min::{fold_block, MinBlock};
use crate::quant::{ActQ8_0, BlockQ4_1, BlockQ5_1};

/// A Q4_1 / Q5_1 block's unsigned quants as one vector.
pub(crate) trait MinQuants: MinBlock {
    /// # Safety
    /// The CPU must support AVX2 (the bodies inline this only into entry points that enable it,
    /// after detection).
    unsafe fn unsigned(&self) -> __m256i;
}

impl MinQuants for BlockQ4_1 {
    #[inline(always)]
    unsafe fn unsigned(&self) -> __m256i {
        // SAFETY: forwarded from the caller's contract.
        unsafe { unpack_nibbles(&self.qs) }
    }
}

impl MinQuants for BlockQ5_1 {
    #[inline(always)]
    unsafe fn unsigned(&self) -> __m256i {
        // SAFETY: forwarded from the caller's contract.
        unsafe {
            _mm256_or_si256(
                unpack_nibbles(&self.qs),
                high_bits_x16(u32::from_le_bytes(self.qh)),
            )
        }
    }
}

/// Sum of eight i32 lanes (exact: the lanes are bounded far below overflow).
///
/// # Safety
/// The CPU must support AVX2 (the bodies inline this only into entry points that enable it, after
/// detection).
#[inline(always)]
pub(super) unsafe fn hsum_epi32(v: __m256i) -> i32 {
    // SAFETY: register operations only; AVX2 per this function's contract.
    unsafe {
        let s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256::<1>(v));
        let s = _mm_add_epi32(s, _mm_shuffle_epi32::<0b01_00_11_10>(s));
        let s = _mm_add_epi32(s, _mm_shuffle_epi32::<0b10_11_00_01>(s));
        _mm_cvtsi128_si32(s)
    }
}

/// The kernel body for either format.
pub(crate) struct MinBody<W>(PhantomData<fn() -> W>);

impl<W: MinQuants> Body for MinBody<W> {
    type W = W;
    type A = ActQ8_0;
    #[inline(always)]
    unsafe fn run<D: IDot, const N: usize>(w: &[W], a: [&[ActQ8_0]; N]) -> [f32; N] {
        // SAFETY: AVX2/FMA/F16C (and VNNI for its primitive) enabled by the entry points;
        // activation rows have w.len() blocks.
        unsafe {
            let mut acc = [0f32; N];
            for (b, blk) in w.iter().enumerate() {
                let q = blk.unsigned();
                let (d, m) = (f16_to_f32(blk.d()), f16_to_f32(blk.m()));
                for j in 0..N {
                    let x = at(a[j], b);
                    let lanes = D::dot_acc(_mm256_setzero_si256(), q, load32(&x.qs));
                    acc[j] = fold_block(acc[j], hsum_epi32(lanes), d, m, x);
                }
            }
            acc
        }
    }
}
