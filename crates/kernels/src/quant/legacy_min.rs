//! Q4_1 and Q5_1: the 32-element legacy formats with a minimum, multiplied with the same Q8_0
//! activation blocks ([`ActQ8_0`]) as Q4_0 / Q5_0 / Q8_0.
//!
//! Element `j` of a block decodes as `d * q_j + m` with unsigned quants `q_j` (4 or 5 bits); the
//! nibble order and Q5_1's fifth bits are Q4_0's and Q5_0's. A block times an activation block
//! (scale `d_x`, quants `x_j`) is `d * d_x * sum(q_j x_j) + m * d_x * sum(x_j)`.
//!
//! Numerics (the reference every kernel of these formats matches bit for bit, row-major and
//! packed, scalar, AVX2 and AVX-512 alike): per block, in block order,
//! `acc = fma(isum, d * d_x, acc)` then `acc = fma(sum(x), m * d_x, acc)`, where `isum` is the
//! exact integer `sum(q_j x_j)` and `sum(x)` the activation block's exact integer sum.

use super::legacy::{ActQ8_0, QK8_0};
use super::{f16_to_f32, PodBlock};

/// Q4_1 weight block: f16 scale, f16 minimum, 32 unsigned nibbles (20 bytes).
#[allow(non_camel_case_types)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(C)]
pub struct BlockQ4_1 {
    pub d: [u8; 2],
    pub m: [u8; 2],
    pub qs: [u8; QK8_0 / 2],
}

/// Q5_1 weight block: f16 scale, f16 minimum, 32 fifth bits, 32 low nibbles (24 bytes).
#[allow(non_camel_case_types)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(C)]
pub struct BlockQ5_1 {
    pub d: [u8; 2],
    pub m: [u8; 2],
    pub qh: [u8; 4],
    pub qs: [u8; QK8_0 / 2],
}

const _: () = assert!(std::mem::size_of::<BlockQ4_1>() == 20);
const _: () = assert!(std::mem::size_of::<BlockQ5_1>() == 24);

// SAFETY: repr(C) structs of byte arrays: alignment 1, no padding, any bit pattern valid.
unsafe impl PodBlock for BlockQ4_1 {}
// SAFETY: as above.
unsafe impl PodBlock for BlockQ5_1 {}

/// A block with a scale and a minimum, decoded to unsigned quants in element order.
pub trait MinBlock: PodBlock {
    /// The f16 scale bytes.
    fn d(&self) -> [u8; 2];
    /// The f16 minimum bytes.
    fn m(&self) -> [u8; 2];
    /// The 32 unsigned quants in element order.
    fn quants(&self) -> [u8; QK8_0];
}

/// Low nibbles (elements 0..16) then high nibbles (elements 16..32).
#[inline]
fn nibbles(qs: &[u8; QK8_0 / 2]) -> [u8; QK8_0] {
    std::array::from_fn(|e| {
        if e < 16 {
            qs[e] & 0x0F
        } else {
            qs[e - 16] >> 4
        }
    })
}

impl MinBlock for BlockQ4_1 {
    fn d(&self) -> [u8; 2] {
        self.d
    }
    fn m(&self) -> [u8; 2] {
        self.m
    }
    #[inline]
    fn quants(&self) -> [u8; QK8_0] {
        nibbles(&self.qs)
    }
}

impl MinBlock for BlockQ5_1 {
    fn d(&self) -> [u8; 2] {
        self.d
    }
    fn m(&self) -> [u8; 2] {
        self.m
    }
    /// Bit `j` of `qh` is the fifth bit of element `j`.
    #[inline]
    fn quants(&self) -> [u8; QK8_0] {
        let qh = u32::from_le_bytes(self.qh);
        let mut q = nibbles(&self.qs);
        for (j, v) in q.iter_mut().enumerate() {
            *v |= (((qh >> j) & 1) as u8) << 4;
        }
        q
    }
}

/// Decodes blocks to f32: `d * q + m`.
pub fn dequantize<B: MinBlock>(blocks: &[B], out: &mut [f32]) {
    assert_eq!(
        out.len(),
        blocks.len() * QK8_0,
        "dequantize (Q4_1/Q5_1): length mismatch"
    );
    for (b, y) in blocks.iter().zip(out.chunks_exact_mut(QK8_0)) {
        let (d, m) = (f16_to_f32(b.d()), f16_to_f32(b.m()));
        for (o, q) in y.iter_mut().zip(b.quants()) {
            *o = f32::from(q) * d + m;
        }
    }
}

/// One block's contribution, the step every kernel of these formats reproduces exactly.
#[inline(always)]
pub fn fold_block(acc: f32, isum: i32, d: f32, m: f32, x: &ActQ8_0) -> f32 {
    let acc = (isum as f32).mul_add(d * x.d, acc);
    (x.sum as f32).mul_add(m * x.d, acc)
}

/// Scalar reference: a Q4_1 / Q5_1 weight row dot a Q8_0 activation row.
pub fn dot<B: MinBlock>(w: &[B], x: &[ActQ8_0]) -> f32 {
    assert_eq!(w.len(), x.len(), "dot (Q4_1/Q5_1): block count mismatch");
    let mut acc = 0.0f32;
    for (b, a) in w.iter().zip(x) {
        let isum: i32 = b
            .quants()
            .iter()
            .zip(&a.qs)
            .map(|(&q, &v)| i32::from(q) * i32::from(v))
            .sum();
        acc = fold_block(acc, isum, f16_to_f32(b.d()), f16_to_f32(b.m()), a);
    }
    acc
}

/// Scalar reference for Q4_1 rows (a plain `fn` for the kernel table).
pub fn dot_q4_1(w: &[BlockQ4_1], x: &[ActQ8_0]) -> f32 {
    dot(w, x)
}

/// Scalar reference for Q5_1 rows.
pub fn dot_q5_1(w: &[BlockQ5_1], x: &[ActQ8_0]) -> f32 {
    dot(w, x)
}
