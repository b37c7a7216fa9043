//! 512-bit bodies for unquantized weights (F32, F16, BF16) against f32 activations.
//!
//! Sixteen columns per step: one weight vector (decoded once) feeds up to sixteen activation
//! rows (`GROUP` 16: sixteen accumulators, the weights and one activation vector fit in the 32
//! zmm registers), where the 256-bit bodies decode each eight columns once per four rows.
//!
//! Numerics: lane `l` of the low half accumulates columns `16i + l` and lane `l` of the high
//! half columns `16i + 8 + l`: exactly the two alternating accumulators of the 256-bit bodies
//! (`float.rs`), with the same fused multiply-adds in the same order. A last run of eight
//! columns goes to the low half (the 256-bit bodies' even accumulator), the halves are added and
//! summed horizontally, and the tail shorter than eight is added sequentially as there, so the
//! results are bit-identical to the 256-bit bodies.

// Index loops address several parallel arrays (registers per activation row); the iterator forms
// would hide the unrolled structure the compiler needs to see.
#![allow(clippy::needless_range_loop)]

use std::arch::x86_64::*;

use super::{f16_to_f32, hsum_ps, Body512};

/// Shared loop: `load16(k)` decodes weights `k..k + 16`, `load8(k)` weights `k..k + 8`,
/// `one(k)` weight `k`.
#[inline(always)]
unsafe fn float_dot512<const N: usize>(
    n: usize,
    a: [&[f32]; N],
    load16: impl Fn(usize) -> __m512,
    load8: impl Fn(usize) -> __m256,
    one: impl Fn(usize) -> f32,
) -> [f32; N] {
    // SAFETY: AVX-512F/AVX2/FMA enabled by the entry point; every activation row holds `n`
    // floats and the loads below stay within `k + 16 <= n` (or `k + 8 <= n`).
    unsafe {
        let mut acc = [_mm512_setzero_ps(); N];
        let mut k = 0;
        while k + 16 <= n {
            let wv = load16(k);
            for j in 0..N {
                let xv = _mm512_loadu_ps(a[j][k..k + 16].as_ptr());
                acc[j] = _mm512_fmadd_ps(wv, xv, acc[j]);
            }
            k += 16;
        }
        let mut lo = [_mm256_setzero_ps(); N];
        let mut hi = [_mm256_setzero_ps(); N];
        for j in 0..N {
            lo[j] = _mm512_castps512_ps256(acc[j]);
            hi[j] = _mm256_castpd_ps(_mm512_extractf64x4_pd::<1>(_mm512_castps_pd(acc[j])));
        }
        if k + 8 <= n {
            let wv = load8(k);
            for j in 0..N {
                let xv = _mm256_loadu_ps(a[j][k..k + 8].as_ptr());
                lo[j] = _mm256_fmadd_ps(wv, xv, lo[j]);
            }
            k += 8;
        }
        let mut out = [0f32; N];
        for j in 0..N {
            out[j] = hsum_ps(_mm256_add_ps(lo[j], hi[j]));
            for (kk, &x) in a[j].iter().enumerate().take(n).skip(k) {
                out[j] += one(kk) * x;
            }
        }
        out
    }
}

pub(crate) struct F32Body;

impl Body512 for F32Body {
    type W = [u8; 4];
    type A = f32;
    const GROUP: usize = 16;
    fn act_len(w_len: usize) -> usize {
        w_len
    }
    #[inline(always)]
    unsafe fn run<const N: usize>(w: &[[u8; 4]], a: [&[f32]; N]) -> [f32; N] {
        // SAFETY: loads read 64 or 32 in-bounds bytes (unaligned loads).
        unsafe {
            float_dot512(
                w.len(),
                a,
                |k| _mm512_loadu_ps(w[k..k + 16].as_ptr().cast()),
                |k| _mm256_loadu_ps(w[k..k + 8].as_ptr().cast()),
                |k| f32::from_le_bytes(w[k]),
            )
        }
    }
}

pub(crate) struct F16Body;

impl Body512 for F16Body {
    type W = [u8; 2];
    type A = f32;
    const GROUP: usize = 16;
    fn act_len(w_len: usize) -> usize {
        w_len
    }
    #[inline(always)]
    unsafe fn run<const N: usize>(w: &[[u8; 2]], a: [&[f32]; N]) -> [f32; N] {
        // SAFETY: loads read 32 or 16 in-bounds bytes; F16C / AVX-512F enabled by the entry.
        unsafe {
            float_dot512(
                w.len(),
                a,
                |k| _mm512_cvtph_ps(_mm256_loadu_si256(w[k..k + 16].as_ptr().cast())),
                |k| _mm256_cvtph_ps(_mm_loadu_si128(w[k..k + 8].as_ptr().cast())),
                |k| f16_to_f32(w[k]),
            )
        }
    }
}

pub(crate) struct Bf16Body;

impl Body512 for Bf16Body {
    type W = [u8; 2];
    type A = f32;
    const GROUP: usize = 16;
    fn act_len(w_len: usize) -> usize {
        w_len
    }
    #[inline(always)]
    unsafe fn run<const N: usize>(w: &[[u8; 2]], a: [&[f32]; N]) -> [f32; N] {
        // SAFETY: loads read 32 or 16 in-bounds bytes; AVX2 / AVX-512F enabled by the entry.
        unsafe {
            float_dot512(
                w.len(),
                a,
                |k| {
                    let h = _mm512_cvtepu16_epi32(_mm256_loadu_si256(w[k..k + 16].as_ptr().cast()));
                    _mm512_castsi512_ps(_mm512_slli_epi32::<16>(h))
                },
                |k| {
                    let h = _mm256_cvtepu16_epi32(_mm_loadu_si128(w[k..k + 8].as_ptr().cast()));
                    _mm256_castsi256_ps(_mm256_slli_epi32::<16>(h))
                },
                |k| f32::from_bits(u32::from(u16::from_le_bytes(w[k])) << 16),
            )
        }
    }
}
