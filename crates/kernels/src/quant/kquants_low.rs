//! The low-bit k-quants Q2_K and Q3_K: super-blocks of 256 in 16 groups of 16, multiplied with
//! Q8_K activations.
//!
//! Both store their quants in two halves of 128: byte `l` (`l < 32`) of half `h`'s 32 bytes of
//! `qs` holds, at bits `2k..2k + 2`, the two low bits of element `128h + 32k + l`.
//! - Q2_K: group `g` has a 4-bit scale (low nibble of `scales[g]`) and a 4-bit min (high
//!   nibble); value `d * sc * q - dmin * m` with `q` in 0..=3.
//! - Q3_K: the third bit of element `e` is bit `e / 32` of `hmask[e % 32]`, and a *clear* bit
//!   subtracts 4: value `d * (sc - 32) * (q2 + 4 h - 4)`. The 16 six-bit scales are packed in
//!   12 bytes: scale `i` has its low nibble in nibble `i / 8` of byte `i % 8` and its top two
//!   bits at bits `2 (i / 4)` of byte `8 + i % 4`.
//!
//! Numerics (the reference the SIMD kernels match bit for bit): per super-block the exact
//! integer sums `isum = sum_g sc_g * (q . x)_g` (Q3_K: with `q` the unsigned 3-bit value and the
//! offset folded in as `-4 * sc_g * bsums_g`) and, for Q2_K, `msum = sum_g m_g * bsums_g`; then
//! `acc += (d_x * d) * isum - (d_x * dmin) * msum`, super-block after super-block in order.

use super::kquants::{BlockQ8K, QK_K};
use super::{f16_to_f32, PodBlock};

/// Q2_K weight block (84 bytes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(C)]
pub struct BlockQ2K {
    pub scales: [u8; QK_K / 16],
    pub qs: [u8; QK_K / 4],
    pub d: [u8; 2],
    pub dmin: [u8; 2],
}

/// Q3_K weight block (110 bytes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(C)]
pub struct BlockQ3K {
    pub hmask: [u8; QK_K / 8],
    pub qs: [u8; QK_K / 4],
    pub scales: [u8; 12],
    pub d: [u8; 2],
}

const _: () = assert!(std::mem::size_of::<BlockQ2K>() == 84);
const _: () = assert!(std::mem::size_of::<BlockQ3K>() == 110);

// SAFETY: repr(C) structs of byte arrays: alignment 1, no padding, any bit pattern valid.
unsafe impl PodBlock for BlockQ2K {}
// SAFETY: as above.
unsafe impl PodBlock for BlockQ3K {}

/// The two low bits of every element (0..=3), in element order.
#[inline]
pub fn low2_quants(qs: &[u8; QK_K / 4]) -> [u8; QK_K] {
    std::array::from_fn(|e| {
        let (h, k, l) = (e / 128, (e % 128) / 32, e % 32);
        (qs[32 * h + l] >> (2 * k)) & 3
    })
}

/// Q3_K quants as unsigned 3-bit values `q2 + 4 h` (0..=7; the value is this minus 4).
#[inline]
pub fn q3_k_quants(b: &BlockQ3K) -> [u8; QK_K] {
    let mut q = low2_quants(&b.qs);
    for (e, v) in q.iter_mut().enumerate() {
        *v |= ((b.hmask[e % 32] >> (e / 32)) & 1) << 2;
    }
    q
}

/// The 16 Q3_K group scales, offset removed (-32..=31).
#[inline]
pub fn q3_k_scales(s: &[u8; 12]) -> [i8; 16] {
    std::array::from_fn(|i| {
        let lo = (s[i % 8] >> (4 * (i / 8))) & 0x0F;
        let hi = (s[8 + i % 4] >> (2 * (i / 4))) & 3;
        ((lo | (hi << 4)) as i8) - 32
    })
}

pub fn dequantize_q2_k(blocks: &[BlockQ2K], out: &mut [f32]) {
    assert_eq!(
        out.len(),
        blocks.len() * QK_K,
        "dequantize_q2_k: length mismatch"
    );
    for (b, y) in blocks.iter().zip(out.chunks_exact_mut(QK_K)) {
        let (d, dmin) = (f16_to_f32(b.d), f16_to_f32(b.dmin));
        let q = low2_quants(&b.qs);
        for (g, (ys, qs)) in y.chunks_exact_mut(16).zip(q.chunks_exact(16)).enumerate() {
            let dl = d * f32::from(b.scales[g] & 0x0F);
            let ml = dmin * f32::from(b.scales[g] >> 4);
            for (o, &v) in ys.iter_mut().zip(qs) {
                *o = dl * f32::from(v) - ml;
            }
        }
    }
}

pub fn dequantize_q3_k(blocks: &[BlockQ3K], out: &mut [f32]) {
    assert_eq!(
        out.len(),
        blocks.len() * QK_K,
        "dequantize_q3_k: length mismatch"
    );
    for (b, y) in blocks.iter().zip(out.chunks_exact_mut(QK_K)) {
        let d = f16_to_f32(b.d);
        let sc = q3_k_scales(&b.scales);
        let q = q3_k_quants(b);
        for (g, (ys, qs)) in y.chunks_exact_mut(16).zip(q.chunks_exact(16)).enumerate() {
            let dl = d * f32::from(sc[g]);
            for (o, &v) in ys.iter_mut().zip(qs) {
                *o = dl * f32::from(i16::from(v) - 4);
            }
        }
    }
}

/// One super-block's contribution (the step every kernel reproduces).
#[inline(always)]
pub fn fold_k(acc: f32, isum: i32, msum: i32, d: f32, dmin: f32, dx: f32) -> f32 {
    acc + ((dx * d) * isum as f32 - (dx * dmin) * msum as f32)
}

/// `sum_g scale_g * (q . x)_g` over the 16 groups of 16.
#[inline]
fn group_idot(q: &[u8; QK_K], scale: impl Fn(usize) -> i32, x: &BlockQ8K) -> i32 {
    (0..16)
        .map(|g| {
            let dot: i32 = q[16 * g..16 * g + 16]
                .iter()
                .zip(&x.qs[16 * g..16 * g + 16])
                .map(|(&w, &a)| i32::from(w) * i32::from(a))
                .sum();
            scale(g) * dot
        })
        .sum()
}

/// Scalar reference: Q2_K weight row dot Q8_K activation row.
pub fn dot_q2_k(w: &[BlockQ2K], x: &[BlockQ8K]) -> f32 {
    assert_eq!(w.len(), x.len(), "dot_q2_k: block count mismatch");
    let mut acc = 0.0f32;
    for (b, a) in w.iter().zip(x) {
        let isum = group_idot(&low2_quants(&b.qs), |g| i32::from(b.scales[g] & 0x0F), a);
        let msum: i32 = (0..16)
            .map(|g| i32::from(b.scales[g] >> 4) * i32::from(a.bsums[g]))
            .sum();
        acc = fold_k(acc, isum, msum, f16_to_f32(b.d), f16_to_f32(b.dmin), a.d);
    }
    acc
}

/// Scalar reference: Q3_K weight row dot Q8_K activation row.
pub fn dot_q3_k(w: &[BlockQ3K], x: &[BlockQ8K]) -> f32 {
    assert_eq!(w.len(), x.len(), "dot_q3_k: block count mismatch");
    let mut acc = 0.0f32;
    for (b, a) in w.iter().zip(x) {
        let sc = q3_k_scales(&b.scales);
        let raw = group_idot(&q3_k_quants(b), |g| i32::from(sc[g]), a);
        let offset: i32 = (0..16)
            .map(|g| -4 * i32::from(sc[g]) * i32::from(a.bsums[g]))
            .sum();
        acc = fold_k(acc, raw + offset, 0, f16_to_f32(b.d), 0.0, a.d);
    }
    acc
}
