//! The 32-element "legacy" formats: Q4_0, Q5_0 and Q8_0 weights, and the Q8_0 activation format
//! they are multiplied with.
//!
//! Element `j` of a block decodes as `d * (q_j - offset)` with offset 8 (Q4_0), 16 (Q5_0) or 0
//! (Q8_0). Nibble order follows ggml: byte `j` holds element `j` in its low nibble and element
//! `j + 16` in its high nibble; Q5_0 keeps the fifth bit of element `j` in bit `j` of `qh`.
//!
//! Activations are quantized to [`ActQ8_0`], which is ggml's `block_q8_0` with the scale already
//! rounded through f16 and widened (so it decodes to the same values as llama.cpp's block) plus the
//! block's integer sum, which the SIMD kernels use to fold the weight offset into one correction.

use super::{f16_to_f32, f32_to_f16, round_half_even, PodBlock};

/// Elements per block of the legacy formats.
pub const QK8_0: usize = 32;

/// Q8_0 weight block: f16 scale and 32 signed bytes (34 bytes).
#[allow(non_camel_case_types)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(C)]
pub struct BlockQ8_0 {
    pub d: [u8; 2],
    pub qs: [i8; QK8_0],
}

/// Q4_0 weight block: f16 scale and 32 unsigned nibbles, value `d * (q - 8)` (18 bytes).
#[allow(non_camel_case_types)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(C)]
pub struct BlockQ4_0 {
    pub d: [u8; 2],
    pub qs: [u8; QK8_0 / 2],
}

/// Q5_0 weight block: f16 scale, 32 high bits, 32 low nibbles, value `d * (q - 16)` (22 bytes).
#[allow(non_camel_case_types)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(C)]
pub struct BlockQ5_0 {
    pub d: [u8; 2],
    pub qh: [u8; 4],
    pub qs: [u8; QK8_0 / 2],
}

/// Quantized activation block for the legacy formats. The quants come first and the block is
/// 64-byte aligned (64 bytes), so they lie in one cache line: the AMX passes load them as tile
/// rows, and a row that straddles two lines costs a second access.
#[allow(non_camel_case_types)]
#[derive(Debug, Clone, Copy, PartialEq, Default)]
#[repr(C, align(64))]
pub struct ActQ8_0 {
    pub qs: [i8; QK8_0],
    /// Scale, already rounded to f16 precision.
    pub d: f32,
    /// Sum of `qs`, used to apply the weight offset once per block.
    pub sum: i32,
    /// `-offset * sum` for each of `PACKED_OFFSETS`, so the packed kernels broadcast it from
    /// memory instead of computing and moving it into a vector register for every block and
    /// row (Q8_0 262144x640 at m = 16: 9.6 -> 9.0 ms).
    pub neg_offset_sums: [i32; 3],
}

/// The quant offsets of the packed legacy formats Q8_0, Q5_0 and Q4_0, in that order: their
/// weights are stored unsigned, `u = q + offset`. Packed IQ4_NL and MXFP4 bias their table
/// values by Q8_0's and Q5_0's (`crate::packed`).
pub(crate) const PACKED_OFFSETS: [i32; 3] = [128, 16, 8];

impl ActQ8_0 {
    /// The block of quants `qs` with scale `d`: their sum and its offset multiples.
    pub fn new(d: f32, qs: [i8; QK8_0], sum: i32) -> ActQ8_0 {
        ActQ8_0 {
            d,
            sum,
            neg_offset_sums: PACKED_OFFSETS.map(|o| -o * sum),
            qs,
        }
    }
}

/// Two consecutive activation blocks laid out for 512-bit kernels: 64 contiguous quants stored
/// biased as unsigned bytes (`q + 128`, so VNNI's unsigned-by-signed `dpbusd` takes them as they
/// are and the weights keep their sign) and each block's scale repeated over the eight i32 lanes
/// its products land in. A row with an odd number of blocks ends in a pair whose second half is
/// zero (quants `0`, i.e. bytes `128`, and scale).
#[allow(non_camel_case_types)]
#[derive(Debug, Clone, Copy, PartialEq)]
#[repr(C, align(64))]
pub struct ActQ8_0x2 {
    /// `q + 128` for each of the 64 quants.
    pub qs: [u8; 2 * QK8_0],
    /// `d` of the first block in lanes 0..8, of the second in lanes 8..16.
    pub d: [f32; 16],
}

impl Default for ActQ8_0x2 {
    fn default() -> Self {
        Self {
            qs: [128; 2 * QK8_0],
            d: [0.0; 16],
        }
    }
}

const _: () = assert!(std::mem::size_of::<BlockQ8_0>() == 34);
const _: () = assert!(std::mem::size_of::<ActQ8_0x2>() == 128);
const _: () = assert!(std::mem::size_of::<BlockQ4_0>() == 18);
const _: () = assert!(std::mem::size_of::<BlockQ5_0>() == 22);
const _: () = assert!(std::mem::size_of::<ActQ8_0>() == 64);

// SAFETY: repr(C) structs of byte arrays: alignment 1, no padding, any bit pattern valid.
unsafe impl PodBlock for BlockQ8_0 {}
// SAFETY: as above.
unsafe impl PodBlock for BlockQ4_0 {}
// SAFETY: as above.
unsafe impl PodBlock for BlockQ5_0 {}

/// Quantizes 32 floats the way llama.cpp's x86 `quantize_row_q8_0` does: scale `amax / 127`
/// stored as f16, multiplier `127 / amax` (unrounded), round half to even.
/// Returns the f16 scale bits and the quants.
#[inline]
fn quantize_block_q8_0(x: &[f32]) -> ([u8; 2], [i8; QK8_0]) {
    debug_assert_eq!(x.len(), QK8_0);
    let amax = x.iter().fold(0.0f32, |m, v| m.max(v.abs()));
    let d = amax / 127.0;
    let id = if amax != 0.0 { 127.0 / amax } else { 0.0 };
    let mut qs = [0i8; QK8_0];
    for (q, &v) in qs.iter_mut().zip(x) {
        // |v * id| <= 127 up to rounding, so the cast cannot saturate meaningfully.
        *q = round_half_even(v * id) as i8;
    }
    (f32_to_f16(d), qs)
}

/// Quantizes a row of f32 into ggml `block_q8_0` blocks (`x.len() == 32 * out.len()`).
pub fn quantize_row_q8_0(x: &[f32], out: &mut [BlockQ8_0]) {
    assert_eq!(
        x.len(),
        out.len() * QK8_0,
        "quantize_row_q8_0: length mismatch"
    );
    for (chunk, block) in x.chunks_exact(QK8_0).zip(out.iter_mut()) {
        let (d, qs) = quantize_block_q8_0(chunk);
        *block = BlockQ8_0 { d, qs };
    }
}

/// Quantizes a row of f32 into activation blocks (`x.len() == 32 * out.len()`); AVX2 where the
/// CPU has it (the same bits).
pub fn quantize_act_q8_0(x: &[f32], out: &mut [ActQ8_0]) {
    assert_eq!(
        x.len(),
        out.len() * QK8_0,
        "quantize_act_q8_0: length mismatch"
    );
    #[cfg(target_arch = "x86_64")]
    if crate::kernel::isa() >= crate::kernel::Isa::Avx2 {
        // SAFETY: AVX2/FMA/F16C detected; lengths checked above.
        unsafe { crate::kernel::x86::ops::quantize_act_q8_0(x, out) };
        return;
    }
    quantize_act_q8_0_scalar(x, out);
}

/// The portable [`quantize_act_q8_0`] (and the reference its SIMD form is tested against).
pub(crate) fn quantize_act_q8_0_scalar(x: &[f32], out: &mut [ActQ8_0]) {
    for (chunk, block) in x.chunks_exact(QK8_0).zip(out.iter_mut()) {
        let (d, qs) = quantize_block_q8_0(chunk);
        let sum = qs.iter().map(|&q| i32::from(q)).sum();
        *block = ActQ8_0::new(f16_to_f32(d), qs, sum);
    }
}

/// Quantizes a row of f32 into block pairs (`out.len() == ceil(x.len() / 64)`), with exactly the
/// quants (biased by 128) and scales [`quantize_act_q8_0`] produces.
pub fn quantize_act_q8_0x2(x: &[f32], out: &mut [ActQ8_0x2]) {
    assert_eq!(x.len() % QK8_0, 0, "quantize_act_q8_0x2: ragged row");
    assert_eq!(
        out.len(),
        x.len().div_ceil(2 * QK8_0),
        "quantize_act_q8_0x2: length mismatch"
    );
    for (chunk, pair) in x.chunks(2 * QK8_0).zip(out.iter_mut()) {
        *pair = ActQ8_0x2::default();
        for (half, block) in chunk.chunks_exact(QK8_0).enumerate() {
            let (d, qs) = quantize_block_q8_0(block);
            for (dst, q) in pair.qs[half * QK8_0..(half + 1) * QK8_0].iter_mut().zip(qs) {
                *dst = (q as u8) ^ 0x80;
            }
            pair.d[half * 8..half * 8 + 8].fill(f16_to_f32(d));
        }
    }
}

/// Decodes the 32 quants of a Q5_0 block to unsigned 5-bit values in element order.
#[inline]
pub fn q5_0_quants(b: &BlockQ5_0) -> [u8; QK8_0] {
    let qh = u32::from_le_bytes(b.qh);
    let mut q = [0u8; QK8_0];
    for j in 0..QK8_0 / 2 {
        let hi0 = ((qh >> j) & 1) as u8;
        let hi1 = ((qh >> (j + 16)) & 1) as u8;
        q[j] = (b.qs[j] & 0x0F) | (hi0 << 4);
        q[j + 16] = (b.qs[j] >> 4) | (hi1 << 4);
    }
    q
}

/// Decodes the 32 quants of a Q4_0 block to unsigned 4-bit values in element order.
#[inline]
pub fn q4_0_quants(b: &BlockQ4_0) -> [u8; QK8_0] {
    let mut q = [0u8; QK8_0];
    for j in 0..QK8_0 / 2 {
        q[j] = b.qs[j] & 0x0F;
        q[j + 16] = b.qs[j] >> 4;
    }
    q
}

pub fn dequantize_q8_0(blocks: &[BlockQ8_0], out: &mut [f32]) {
    assert_eq!(
        out.len(),
        blocks.len() * QK8_0,
        "dequantize_q8_0: length mismatch"
    );
    for (b, y) in blocks.iter().zip(out.chunks_exact_mut(QK8_0)) {
        let d = f16_to_f32(b.d);
        for (o, &q) in y.iter_mut().zip(&b.qs) {
            *o = f32::from(q) * d;
        }
    }
}

pub fn dequantize_q4_0(blocks: &[BlockQ4_0], out: &mut [f32]) {
    assert_eq!(
        out.len(),
        blocks.len() * QK8_0,
        "dequantize_q4_0: length mismatch"
    );
    for (b, y) in blocks.iter().zip(out.chunks_exact_mut(QK8_0)) {
        let d = f16_to_f32(b.d);
        for (o, q) in y.iter_mut().zip(q4_0_quants(b)) {
            *o = f32::from(i16::from(q) - 8) * d;
        }
    }
}

pub fn dequantize_q5_0(blocks: &[BlockQ5_0], out: &mut [f32]) {
    assert_eq!(
        out.len(),
        blocks.len() * QK8_0,
        "dequantize_q5_0: length mismatch"
    );
    for (b, y) in blocks.iter().zip(out.chunks_exact_mut(QK8_0)) {
        let d = f16_to_f32(b.d);
        for (o, q) in y.iter_mut().zip(q5_0_quants(b)) {
            *o = f32::from(i16::from(q) - 16) * d;
        }
    }
}

/// Integer dot of unsigned quants with an activation block, minus `offset * sum(x)`.
#[inline]
fn block_idot(q: &[u8; QK8_0], offset: i32, x: &ActQ8_0) -> i32 {
    let raw: i32 = q
        .iter()
        .zip(&x.qs)
        .map(|(&w, &a)| i32::from(w) * i32::from(a))
        .sum();
    raw - offset * x.sum
}

/// Scalar reference: Q8_0 weight row dot Q8_0 activation row.
pub fn dot_q8_0(w: &[BlockQ8_0], x: &[ActQ8_0]) -> f32 {
    assert_eq!(w.len(), x.len(), "dot_q8_0: block count mismatch");
    let mut acc = 0.0f32;
    for (b, a) in w.iter().zip(x) {
        let isum: i32 =
            b.qs.iter()
                .zip(&a.qs)
                .map(|(&p, &q)| i32::from(p) * i32::from(q))
                .sum();
        acc += f16_to_f32(b.d) * a.d * isum as f32;
    }
    acc
}

/// Scalar reference: Q4_0 weight row dot Q8_0 activation row.
pub fn dot_q4_0(w: &[BlockQ4_0], x: &[ActQ8_0]) -> f32 {
    assert_eq!(w.len(), x.len(), "dot_q4_0: block count mismatch");
    let mut acc = 0.0f32;
    for (b, a) in w.iter().zip(x) {
        acc += f16_to_f32(b.d) * a.d * block_idot(&q4_0_quants(b), 8, a) as f32;
    }
    acc
}

/// Scalar reference: Q5_0 weight row dot Q8_0 activation row.
pub fn dot_q5_0(w: &[BlockQ5_0], x: &[ActQ8_0]) -> f32 {
    assert_eq!(w.len(), x.len(), "dot_q5_0: block count mismatch");
    let mut acc = 0.0f32;
    for (b, a) in w.iter().zip(x) {
        acc += f16_to_f32(b.d) * a.d * block_idot(&q5_0_quants(b), 16, a) as f32;
    }
    acc
}
