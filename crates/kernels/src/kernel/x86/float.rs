//! SIMD bodies for unquantized weights (F32, F16, BF16) against f32 activations.
//!
//! Eight columns per step, alternating between two accumulators per pair; a tail shorter than
//! eight is added sequentially after the horizontal sum, identically for every `N`.

use std::arch::x86_64::*;

use super::{f16_to_f32, hsum_ps, Body, IDot};

/// Shared loop: `load8(k)` decodes weights `k..k + 8`, `one(k)` decodes weight `k`.
///
/// # Safety
/// The CPU must support AVX2 and FMA, and whatever `load8` and `one` use (the bodies inline this
/// only into entry points that enable AVX2, FMA and F16C). Every row of `a` should hold `n` floats:
/// a shorter one panics at a checked slice.
#[inline(always)]
unsafe fn float_dot<const N: usize>(
    n: usize,
    a: [&[f32]; N],
    load8: impl Fn(usize) -> __m256,
    one: impl Fn(usize) -> f32,
) -> [f32; N] {
    // SAFETY: AVX2 and FMA per this function's contract; every load reads a checked slice of
    // eight floats.
    unsafe {
        let mut acc = [[_mm256_setzero_ps(); 2]; N];
        let mut k = 0;
        while k + 8 <= n {
            let wv = load8(k);
            let t = (k / 8) & 1;
            for j in 0..N {
                let xv = _mm256_loadu_ps(a[j][k..k + 8].as_ptr());
                acc[j][t] = _mm256_fmadd_ps(wv, xv, acc[j][t]);
            }
            k += 8;
        }
        let mut out = [0f32; N];
        for j in 0..N {
            out[j] = hsum_ps(_mm256_add_ps(acc[j][0], acc[j][1]));
            for (kk, &x) in a[j].iter().enumerate().take(n).skip(k) {
                out[j] += one(kk) * x;
            }
        }
        out
    }
}

pub(crate) struct F32Body;

impl Body for F32Body {
    type W = [u8; 4];
    type A = f32;
    #[inline(always)]
    unsafe fn run<D: IDot, const N: usize>(w: &[[u8; 4]], a: [&[f32]; N]) -> [f32; N] {
        // SAFETY: loads read 32 in-bounds bytes (unaligned loads; the pointer is never dereferenced
        // as an aligned f32).
        unsafe {
            float_dot(
                w.len(),
                a,
                |k| _mm256_loadu_ps(w[k..k + 8].as_ptr().cast()),
                |k| f32::from_le_bytes(w[k]),
            )
        }
    }
}

pub(crate) struct F16Body;

impl Body for F16Body {
    type W = [u8; 2];
    type A = f32;
    #[inline(always)]
    unsafe fn run<D: IDot, const N: usize>(w: &[[u8; 2]], a: [&[f32]; N]) -> [f32; N] {
        // SAFETY: loads read 16 in-bounds bytes; F16C enabled by the entry points.
        unsafe {
            float_dot(
                w.len(),
                a,
                |k| _mm256_cvtph_ps(_mm_loadu_si128(w[k..k + 8].as_ptr().cast())),
                |k| f16_to_f32(w[k]),
            )
        }
    }
}

pub(crate) struct Bf16Body;

impl Body for Bf16Body {
    type W = [u8; 2];
    type A = f32;
    #[inline(always)]
    unsafe fn run<D: IDot, const N: usize>(w: &[[u8; 2]], a: [&[f32]; N]) -> [f32; N] {
        // SAFETY: loads read 16 in-bounds bytes; AVX2 enabled by the entry points.
        unsafe {
            float_dot(
                w.len(),
                a,
                |k| {
                    let h = _mm256_cvtepu16_epi32(_mm_loadu_si128(w[k..k + 8].as_ptr().cast()));
                    _mm256_castsi256_ps(_mm256_slli_epi32::<16>(h))
                },
                |k| f32::from_bits(u32::from(u16::from_le_bytes(w[k])) << 16),
            )
        }
    }
}
