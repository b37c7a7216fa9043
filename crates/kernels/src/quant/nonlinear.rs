//! The 4-bit table formats: each quant is a nibble indexing a table of 16 signed byte values.
//!
//! - MXFP4 (gpt-oss's experts): blocks of 32 with one E8M0 exponent byte; the table holds the
//!   E2M1 values doubled (`0, 1, 2, 3, 4, 6, 8, 12` and their negatives), so the exponent is
//!   decoded as *half* the power of two it names ([`e8m0_to_f32_half`]). Dot with Q8_0.
//! - IQ4_NL: blocks of 32 with an f16 scale and a non-linear table ([`KVALUES_IQ4NL`]). Dot
//!   with Q8_0.
//! - IQ4_XS: super-blocks of 256 with an f16 scale and a 6-bit scale per 32 (stored minus 32,
//!   low nibbles in `scales_l`, top two bits in `scales_h`), the IQ4_NL table. Dot with Q8_K.
//!
//! In every block of 32, byte `j` of the quants holds element `j` in its low nibble and element
//! `j + 16` in its high nibble (Q4_0's order).
//!
//! Numerics (the references the SIMD kernels match bit for bit):
//! - MXFP4 / IQ4_NL ([`dot_table`]) follow the SIMD kernels' lanes: lane `l` (0..8) of a block
//!   is the exact integer `sum table[q_e] * x_e` over elements `4l..4l + 4`; even blocks
//!   accumulate into one set of eight f32 lanes and odd blocks into another, each as
//!   `fma(d_w * d_x, lane, acc)`; at the end the two sets are added lane by lane and summed as
//!   [`hsum8`] does (the 256-bit kernels' horizontal sum).
//! - IQ4_XS: per super-block the integer `sum_i s_i * (table[q] . x)_i` is formed exactly,
//!   then folded with [`fold`]: `acc + (d_x * d_w) * isum`, super-block after super-block.

use super::kquants::{BlockQ8K, QK_K};
use super::legacy::{ActQ8_0, QK8_0};
use super::{f16_to_f32, PodBlock};

/// MXFP4's E2M1 values, doubled.
pub const KVALUES_MXFP4: [i8; 16] = [0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12];

/// IQ4_NL's and IQ4_XS's non-linear table.
pub const KVALUES_IQ4NL: [i8; 16] = [
    -127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113,
];

/// MXFP4 weight block: E8M0 exponent and 32 nibbles (17 bytes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(C)]
pub struct BlockMxfp4 {
    pub e: u8,
    pub qs: [u8; QK8_0 / 2],
}

/// IQ4_NL weight block: f16 scale and 32 nibbles (18 bytes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(C)]
pub struct BlockIq4Nl {
    pub d: [u8; 2],
    pub qs: [u8; QK8_0 / 2],
}

/// IQ4_XS weight block: f16 scale, 6-bit sub-block scales, 256 nibbles (136 bytes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(C)]
pub struct BlockIq4Xs {
    pub d: [u8; 2],
    /// Little-endian u16: bits `2i..2i + 2` are the top bits of sub-block `i`'s scale.
    pub scales_h: [u8; 2],
    /// Nibble `i % 2` of byte `i / 2` is the low four bits of sub-block `i`'s scale.
    pub scales_l: [u8; QK_K / 64],
    pub qs: [u8; QK_K / 2],
}

const _: () = assert!(std::mem::size_of::<BlockMxfp4>() == 17);
const _: () = assert!(std::mem::size_of::<BlockIq4Nl>() == 18);
const _: () = assert!(std::mem::size_of::<BlockIq4Xs>() == 136);

// SAFETY: repr(C) structs of bytes and byte arrays: alignment 1, no padding, any bit pattern
// valid.
unsafe impl PodBlock for BlockMxfp4 {}
// SAFETY: as above.
unsafe impl PodBlock for BlockIq4Nl {}
// SAFETY: as above.
unsafe impl PodBlock for BlockIq4Xs {}

/// Half of `2^(e - 127)` as an f32 (exact: a subnormal for `e < 2`, `e == 255` gives 2^127).
#[inline]
pub fn e8m0_to_f32_half(e: u8) -> f32 {
    let bits = if e < 2 {
        0x0020_0000u32 << e
    } else {
        (u32::from(e) - 1) << 23
    };
    f32::from_bits(bits)
}

/// A 32-element table block: its scale as f32, and its nibbles.
pub trait TableBlock: PodBlock {
    /// The table its nibbles index.
    const TABLE: [i8; 16];
    /// The block's scale.
    fn scale(&self) -> f32;
    /// The 16 bytes of nibbles.
    fn nibbles(&self) -> &[u8; QK8_0 / 2];
}

impl TableBlock for BlockMxfp4 {
    const TABLE: [i8; 16] = KVALUES_MXFP4;
    #[inline]
    fn scale(&self) -> f32 {
        e8m0_to_f32_half(self.e)
    }
    fn nibbles(&self) -> &[u8; QK8_0 / 2] {
        &self.qs
    }
}

impl TableBlock for BlockIq4Nl {
    const TABLE: [i8; 16] = KVALUES_IQ4NL;
    #[inline]
    fn scale(&self) -> f32 {
        f16_to_f32(self.d)
    }
    fn nibbles(&self) -> &[u8; QK8_0 / 2] {
        &self.qs
    }
}

/// The 32 table values of 16 nibble bytes, in element order.
#[inline]
pub fn table_values(table: &[i8; 16], qs: &[u8; 16]) -> [i8; QK8_0] {
    std::array::from_fn(|e| {
        let nib = if e < 16 {
            qs[e] & 0x0F
        } else {
            qs[e - 16] >> 4
        };
        table[usize::from(nib)]
    })
}

/// One block's contribution: `acc + (d_x * d_w) * isum` (the step every kernel reproduces).
#[inline(always)]
pub fn fold(acc: f32, isum: i32, dw: f32, dx: f32) -> f32 {
    acc + (dx * dw) * isum as f32
}

/// Decodes MXFP4 / IQ4_NL blocks: `d * table[q]`.
pub fn dequantize_table<B: TableBlock>(blocks: &[B], out: &mut [f32]) {
    assert_eq!(
        out.len(),
        blocks.len() * QK8_0,
        "dequantize (MXFP4/IQ4_NL): length mismatch"
    );
    for (b, y) in blocks.iter().zip(out.chunks_exact_mut(QK8_0)) {
        let d = b.scale();
        for (o, v) in y.iter_mut().zip(table_values(&B::TABLE, b.nibbles())) {
            *o = d * f32::from(v);
        }
    }
}

/// The sum of eight lanes in the order of the 256-bit kernels' horizontal sum: the two halves
/// added lane by lane, then lanes 0 + 2 and 1 + 3, then those two.
#[inline]
pub fn hsum8(v: [f32; 8]) -> f32 {
    let s: [f32; 4] = std::array::from_fn(|i| v[i] + v[i + 4]);
    (s[0] + s[2]) + (s[1] + s[3])
}

/// Scalar reference: an MXFP4 / IQ4_NL weight row dot a Q8_0 activation row (see the module
/// docs for the lane order it reproduces).
pub fn dot_table<B: TableBlock>(w: &[B], x: &[ActQ8_0]) -> f32 {
    assert_eq!(w.len(), x.len(), "dot (MXFP4/IQ4_NL): block count mismatch");
    let mut acc = [[0.0f32; 8]; 2];
    for (b, (blk, a)) in w.iter().zip(x).enumerate() {
        let v = table_values(&B::TABLE, blk.nibbles());
        let s = blk.scale() * a.d;
        for (l, lane) in acc[b & 1].iter_mut().enumerate() {
            let isum: i32 = (4 * l..4 * l + 4)
                .map(|e| i32::from(v[e]) * i32::from(a.qs[e]))
                .sum();
            *lane = s.mul_add(isum as f32, *lane);
        }
    }
    hsum8(std::array::from_fn(|l| acc[0][l] + acc[1][l]))
}

/// Scalar reference for MXFP4 rows (a plain `fn` for the kernel table).
pub fn dot_mxfp4(w: &[BlockMxfp4], x: &[ActQ8_0]) -> f32 {
    dot_table(w, x)
}

/// Scalar reference for IQ4_NL rows.
pub fn dot_iq4_nl(w: &[BlockIq4Nl], x: &[ActQ8_0]) -> f32 {
    dot_table(w, x)
}

/// The eight sub-block scales of an IQ4_XS block, offset removed (-32..=31).
#[inline]
pub fn iq4_xs_scales(b: &BlockIq4Xs) -> [i8; 8] {
    let h = u16::from_le_bytes(b.scales_h);
    std::array::from_fn(|i| {
        let lo = (b.scales_l[i / 2] >> (4 * (i % 2))) & 0x0F;
        let hi = ((h >> (2 * i)) & 3) as u8;
        ((lo | (hi << 4)) as i8) - 32
    })
}

/// The 16 nibble bytes of IQ4_XS sub-block `i`.
#[inline]
pub fn iq4_xs_nibbles(b: &BlockIq4Xs, i: usize) -> &[u8; 16] {
    b.qs[16 * i..16 * i + 16]
        .try_into()
        .expect("16 bytes of a 128-byte array")
}

pub fn dequantize_iq4_xs(blocks: &[BlockIq4Xs], out: &mut [f32]) {
    assert_eq!(
        out.len(),
        blocks.len() * QK_K,
        "dequantize_iq4_xs: length mismatch"
    );
    for (b, y) in blocks.iter().zip(out.chunks_exact_mut(QK_K)) {
        let d = f16_to_f32(b.d);
        for (i, (ys, &s)) in y.chunks_exact_mut(32).zip(&iq4_xs_scales(b)).enumerate() {
            let dl = d * f32::from(s);
            for (o, v) in ys
                .iter_mut()
                .zip(table_values(&KVALUES_IQ4NL, iq4_xs_nibbles(b, i)))
            {
                *o = dl * f32::from(v);
            }
        }
    }
}

/// Scalar reference: IQ4_XS weight row dot Q8_K activation row.
pub fn dot_iq4_xs(w: &[BlockIq4Xs], x: &[BlockQ8K]) -> f32 {
    assert_eq!(w.len(), x.len(), "dot_iq4_xs: block count mismatch");
    let mut acc = 0.0f32;
    for (b, a) in w.iter().zip(x) {
        let mut isum = 0i32;
        for (i, &s) in iq4_xs_scales(b).iter().enumerate() {
            let dot: i32 = table_values(&KVALUES_IQ4NL, iq4_xs_nibbles(b, i))
                .iter()
                .zip(&a.qs[32 * i..32 * i + 32])
                .map(|(&v, &q)| i32::from(v) * i32::from(q))
                .sum();
            isum += i32::from(s) * dot;
        }
        acc = fold(acc, isum, f16_to_f32(b.d), a.d);
    }
    acc
}
