//! SIMD bodies for Q4_0, Q5_0 and Q8_0 weights against Q8_0 activations.
//!
//! One block is 32 quants = one 256-bit vector. Quants are made signed (`q - offset`, offset 8 /
//! 16 / 0) once per block and multiplied with the sign-transfer trick (`|w| . sign(x, w)`), so
//! every i32 lane is an exact sum of four products. Each pair accumulates blocks alternately into
//! two f32 vectors to hide FMA latency; the alternation depends only on the block index, never on
//! `N`.

use std::arch::x86_64::*;

use super::{at, f16_to_f32, hsum_ps, load32, Body, IDot};
use crate::quant::{ActQ8_0, BlockQ4_0, BlockQ5_0, BlockQ8_0};

/// Expands 16 packed nibbles to 32 bytes: low nibbles (elements 0..16) then high nibbles.
///
/// # Safety
/// The CPU must support AVX2 (the bodies inline this only into entry points that enable it, after
/// detection).
#[inline(always)]
pub(super) unsafe fn unpack_nibbles(qs: &[u8; 16]) -> __m256i {
    // SAFETY: an unaligned load of the 16-byte array; AVX2 per this function's contract.
    unsafe {
        let raw = _mm_loadu_si128(qs.as_ptr().cast());
        _mm256_and_si256(
            _mm256_set_m128i(_mm_srli_epi16::<4>(raw), raw),
            _mm256_set1_epi8(0x0F),
        )
    }
}

/// Spreads 32 bits to 32 bytes: byte `i` is 0x10 if bit `i` of `bits` is set, else 0.
///
/// # Safety
/// The CPU must support AVX2 (the bodies inline this only into entry points that enable it, after
/// detection).
#[inline(always)]
pub(super) unsafe fn high_bits_x16(bits: u32) -> __m256i {
    // SAFETY: register operations only; AVX2 per this function's contract.
    unsafe {
        // Byte i takes byte i / 8 of `bits` (each 128-bit lane holds all four after the broadcast).
        let spread = _mm256_shuffle_epi8(
            _mm256_set1_epi32(bits as i32),
            _mm256_set_epi64x(
                0x0303_0303_0303_0303,
                0x0202_0202_0202_0202,
                0x0101_0101_0101_0101,
                0,
            ),
        );
        let select = _mm256_set1_epi64x(0x8040_2010_0804_0201_u64 as i64);
        let set = _mm256_cmpeq_epi8(_mm256_and_si256(spread, select), select);
        _mm256_and_si256(set, _mm256_set1_epi8(0x10))
    }
}

/// The shared block loop: `signed(block)` gives the 32 signed quants (`q - offset`) of a block.
/// Each pair multiplies `|w|` with `x` carrying the sign of `w`, so every i32 lane holds the
/// exact sum of four products `w_i * x_i` (the same lanes the 512-bit bodies produce).
///
/// # Safety
/// The CPU must support AVX2, FMA, F16C and the instruction set `D` needs (see [`IDot`]); every row
/// of `a` holds at least `w.len()` blocks (they are read unchecked). [`Body::run`]'s contract gives
/// both.
#[inline(always)]
unsafe fn signed_quant_dot<W, D: IDot, const N: usize>(
    w: &[W],
    a: [&[ActQ8_0]; N],
    scale: impl Fn(&W) -> [u8; 2],
    signed: impl Fn(&W) -> __m256i,
) -> [f32; N] {
    // SAFETY: the instruction sets per this function's contract; `at(a[j], b)` reads block
    // b < w.len() of rows that hold w.len() blocks (the contract); `signed` and `scale` are
    // closures over a block reference.
    unsafe {
        let mut acc = [[_mm256_setzero_ps(); 2]; N];
        for (b, blk) in w.iter().enumerate() {
            let wq = signed(blk);
            let aw = _mm256_sign_epi8(wq, wq);
            let dw = f16_to_f32(scale(blk));
            for j in 0..N {
                let x = at(a[j], b);
                let sx = _mm256_sign_epi8(load32(&x.qs), wq);
                let isum = D::dot_acc(_mm256_setzero_si256(), aw, sx);
                let s = _mm256_set1_ps(dw * x.d);
                acc[j][b & 1] = _mm256_fmadd_ps(s, _mm256_cvtepi32_ps(isum), acc[j][b & 1]);
            }
        }
        let mut out = [0f32; N];
        for j in 0..N {
            out[j] = hsum_ps(_mm256_add_ps(acc[j][0], acc[j][1]));
        }
        out
    }
}

pub(crate) struct Q4_0Body;

impl Body for Q4_0Body {
    type W = BlockQ4_0;
    type A = ActQ8_0;
    #[inline(always)]
    unsafe fn run<D: IDot, const N: usize>(w: &[BlockQ4_0], a: [&[ActQ8_0]; N]) -> [f32; N] {
        // SAFETY: forwarded from the caller's contract.
        unsafe {
            signed_quant_dot::<_, D, N>(
                w,
                a,
                |b| b.d,
                |b| _mm256_sub_epi8(unpack_nibbles(&b.qs), _mm256_set1_epi8(8)),
            )
        }
    }
}

pub(crate) struct Q5_0Body;

impl Body for Q5_0Body {
    type W = BlockQ5_0;
    type A = ActQ8_0;
    #[inline(always)]
    unsafe fn run<D: IDot, const N: usize>(w: &[BlockQ5_0], a: [&[ActQ8_0]; N]) -> [f32; N] {
        // SAFETY: forwarded from the caller's contract.
        unsafe {
            signed_quant_dot::<_, D, N>(
                w,
                a,
                |b| b.d,
                |b| {
                    let q = _mm256_or_si256(
                        unpack_nibbles(&b.qs),
                        high_bits_x16(u32::from_le_bytes(b.qh)),
                    );
                    _mm256_sub_epi8(q, _mm256_set1_epi8(16))
                },
            )
        }
    }
}

pub(crate) struct Q8_0Body;

impl Body for Q8_0Body {
    type W = BlockQ8_0;
    type A = ActQ8_0;
    #[inline(always)]
    unsafe fn run<D: IDot, const N: usize>(w: &[BlockQ8_0], a: [&[ActQ8_0]; N]) -> [f32; N] {
        // SAFETY: forwarded from the caller's contract.
        unsafe { signed_quant_dot::<_, D, N>(w, a, |b| b.d, |b| load32(&b.qs)) }
    }
}
