//! The 256-element "k-quant" formats: Q4_K, Q5_K and Q6_K weights, and the Q8_K activation format
//! they are multiplied with.
//!
//! Layouts follow ggml exactly:
//! - Q4_K / Q5_K: 8 sub-blocks of 32, each with a 6-bit scale and 6-bit min packed into 12 bytes;
//!   value `d * sc * q - dmin * m`. Quants come in 4 chunks of 64: byte `l` of chunk `c` holds
//!   element `64c + l` in its low nibble and `64c + 32 + l` in its high nibble. Q5_K adds the fifth
//!   bit: bit `2c` (low nibble) / `2c + 1` (high nibble) of `qh[l]`.
//! - Q6_K: 16 groups of 16 with signed 8-bit scales; value `d * sc * (q - 32)` with 6-bit `q`.
//!   Two halves of 128: byte `l < 32` of `ql` holds elements `l` (low) and `l + 64` (high), byte
//!   `l + 32` holds `l + 32` and `l + 96`; `qh[l]` holds the top two bits of those four elements.
//! - Q8_K: f32 scale, 256 signed bytes, and the sums of each group of 16 quants (`bsums`), which
//!   let min/offset terms be applied once per group instead of per element.

use super::{f16_to_f32, round_half_even, PodBlock};

/// Elements per k-quant super-block.
pub const QK_K: usize = 256;

/// Q4_K weight block (144 bytes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(C)]
pub struct BlockQ4K {
    pub d: [u8; 2],
    pub dmin: [u8; 2],
    pub scales: [u8; 12],
    pub qs: [u8; QK_K / 2],
}

/// Q5_K weight block (176 bytes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(C)]
pub struct BlockQ5K {
    pub d: [u8; 2],
    pub dmin: [u8; 2],
    pub scales: [u8; 12],
    pub qh: [u8; QK_K / 8],
    pub qs: [u8; QK_K / 2],
}

/// Q6_K weight block (210 bytes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(C)]
pub struct BlockQ6K {
    pub ql: [u8; QK_K / 2],
    pub qh: [u8; QK_K / 4],
    pub scales: [i8; QK_K / 16],
    pub d: [u8; 2],
}

/// Q8_K activation block: ggml's `block_q8_K` and the sums of each 32 quants. The quants come
/// first and the block is 64-byte aligned (320 bytes), so a run of 64 quants is one cache line:
/// the AMX passes load them as tile rows, and a row that straddles two lines costs a second
/// access.
#[derive(Debug, Clone, Copy, PartialEq)]
#[repr(C, align(64))]
pub struct BlockQ8K {
    pub qs: [i8; QK_K],
    pub bsums: [i16; QK_K / 16],
    /// `bsums[2j] + bsums[2j + 1]` (at most 32 x 127 in magnitude): the sums Q4_K's mins
    /// multiply, formed once per activation block rather than once per weight record.
    pub sub_sums: [i16; QK_K / 32],
    pub d: f32,
}

impl Default for BlockQ8K {
    fn default() -> Self {
        Self {
            d: 0.0,
            qs: [0; QK_K],
            bsums: [0; QK_K / 16],
            sub_sums: [0; QK_K / 32],
        }
    }
}

const _: () = assert!(std::mem::size_of::<BlockQ4K>() == 144);
const _: () = assert!(std::mem::size_of::<BlockQ5K>() == 176);
const _: () = assert!(std::mem::size_of::<BlockQ6K>() == 210);
const _: () = assert!(std::mem::size_of::<BlockQ8K>() == 320);

// SAFETY: repr(C) structs of byte arrays: alignment 1, no padding, any bit pattern valid.
unsafe impl PodBlock for BlockQ4K {}
// SAFETY: as above.
unsafe impl PodBlock for BlockQ5K {}
// SAFETY: as above.
unsafe impl PodBlock for BlockQ6K {}

/// Quantizes a row of f32 into Q8_K blocks exactly as ggml's `quantize_row_q8_K_ref`: the scale
/// maps the signed value of largest magnitude to -127, quants round half to even and clamp at 127.
/// AVX2 where the CPU has it (the same bits).
pub fn quantize_row_q8_k(x: &[f32], out: &mut [BlockQ8K]) {
    assert_eq!(
        x.len(),
        out.len() * QK_K,
        "quantize_row_q8_k: length mismatch"
    );
    #[cfg(target_arch = "x86_64")]
    if crate::kernel::isa() >= crate::kernel::Isa::Avx2 {
        // SAFETY: AVX2/FMA/F16C detected; lengths checked above.
        unsafe { crate::kernel::x86::ops::quantize_row_q8_k(x, out) };
        return;
    }
    quantize_row_q8_k_scalar(x, out);
}

/// The portable [`quantize_row_q8_k`] (and the reference its SIMD form is tested against).
pub(crate) fn quantize_row_q8_k_scalar(x: &[f32], out: &mut [BlockQ8K]) {
    for (chunk, block) in x.chunks_exact(QK_K).zip(out.iter_mut()) {
        let (mut amax, mut max) = (0.0f32, 0.0f32);
        for &v in chunk {
            if v.abs() > amax {
                amax = v.abs();
                max = v;
            }
        }
        if amax == 0.0 {
            *block = BlockQ8K::default();
            continue;
        }
        let iscale = -127.0 / max;
        for (q, &v) in block.qs.iter_mut().zip(chunk) {
            *q = round_half_even(iscale * v).min(127) as i8;
        }
        for (s, group) in block.bsums.iter_mut().zip(block.qs.chunks_exact(16)) {
            *s = group.iter().map(|&q| i16::from(q)).sum();
        }
        for (j, s) in block.sub_sums.iter_mut().enumerate() {
            *s = block.bsums[2 * j] + block.bsums[2 * j + 1];
        }
        block.d = 1.0 / iscale;
    }
}

pub fn dequantize_q8_k(blocks: &[BlockQ8K], out: &mut [f32]) {
    assert_eq!(
        out.len(),
        blocks.len() * QK_K,
        "dequantize_q8_k: length mismatch"
    );
    for (b, y) in blocks.iter().zip(out.chunks_exact_mut(QK_K)) {
        for (o, &q) in y.iter_mut().zip(&b.qs) {
            *o = b.d * f32::from(q);
        }
    }
}

/// Unpacks the eight 6-bit scales and eight 6-bit mins of a Q4_K/Q5_K block.
///
/// Packing: bytes 0..4 hold scales 0..4 in their low 6 bits, bytes 4..8 mins 0..4; bytes 8..12
/// hold the low nibbles of scales 4..8 (low half) and mins 4..8 (high half), whose top two bits
/// sit in bits 6..8 of bytes 0..4 (scales) and 4..8 (mins). Decoded four at a time in u32 words.
#[inline]
pub fn k4_scales_mins(s: &[u8; 12]) -> ([u8; 8], [u8; 8]) {
    const LOW6: u32 = 0x3F3F_3F3F;
    const LOW4: u32 = 0x0F0F_0F0F;
    const LOW2: u32 = 0x0303_0303;
    let w = |i: usize| u32::from_le_bytes([s[i], s[i + 1], s[i + 2], s[i + 3]]);
    let (w0, w1, w2) = (w(0), w(4), w(8));
    let sc_lo = w0 & LOW6;
    let sc_hi = (w2 & LOW4) | (((w0 >> 6) & LOW2) << 4);
    let mn_lo = w1 & LOW6;
    let mn_hi = ((w2 >> 4) & LOW4) | (((w1 >> 6) & LOW2) << 4);
    let join = |lo: u32, hi: u32| (u64::from(lo) | (u64::from(hi) << 32)).to_le_bytes();
    (join(sc_lo, sc_hi), join(mn_lo, mn_hi))
}

/// Q4_K quants (0..=15) in element order.
pub fn q4_k_quants(b: &BlockQ4K) -> [u8; QK_K] {
    let mut q = [0u8; QK_K];
    for c in 0..4 {
        for l in 0..32 {
            let byte = b.qs[32 * c + l];
            q[64 * c + l] = byte & 0x0F;
            q[64 * c + 32 + l] = byte >> 4;
        }
    }
    q
}

/// Q5_K quants (0..=31) in element order.
pub fn q5_k_quants(b: &BlockQ5K) -> [u8; QK_K] {
    let mut q = [0u8; QK_K];
    for c in 0..4 {
        for l in 0..32 {
            let byte = b.qs[32 * c + l];
            let hi = b.qh[l] >> (2 * c);
            q[64 * c + l] = (byte & 0x0F) | ((hi & 1) << 4);
            q[64 * c + 32 + l] = (byte >> 4) | (((hi >> 1) & 1) << 4);
        }
    }
    q
}

/// Q6_K quants (0..=63, offset 32 not yet removed) in element order.
pub fn q6_k_quants(b: &BlockQ6K) -> [u8; QK_K] {
    let mut q = [0u8; QK_K];
    for half in 0..2 {
        let ql = &b.ql[64 * half..64 * half + 64];
        let qh = &b.qh[32 * half..32 * half + 32];
        let y = &mut q[128 * half..128 * half + 128];
        for l in 0..32 {
            let h = qh[l];
            y[l] = (ql[l] & 0x0F) | ((h & 3) << 4);
            y[l + 32] = (ql[l + 32] & 0x0F) | (((h >> 2) & 3) << 4);
            y[l + 64] = (ql[l] >> 4) | (((h >> 4) & 3) << 4);
            y[l + 96] = (ql[l + 32] >> 4) | (((h >> 6) & 3) << 4);
        }
    }
    q
}

/// Shared decode for Q4_K/Q5_K: `d * sc * q - dmin * m` per sub-block of 32.
fn dequantize_scaled_mins(d: f32, dmin: f32, scales: &[u8; 12], q: &[u8; QK_K], y: &mut [f32]) {
    let (sc, mn) = k4_scales_mins(scales);
    for (j, (ys, qs)) in y.chunks_exact_mut(32).zip(q.chunks_exact(32)).enumerate() {
        let d1 = d * f32::from(sc[j]);
        let m1 = dmin * f32::from(mn[j]);
        for (o, &v) in ys.iter_mut().zip(qs) {
            *o = d1 * f32::from(v) - m1;
        }
    }
}

pub fn dequantize_q4_k(blocks: &[BlockQ4K], out: &mut [f32]) {
    assert_eq!(
        out.len(),
        blocks.len() * QK_K,
        "dequantize_q4_k: length mismatch"
    );
    for (b, y) in blocks.iter().zip(out.chunks_exact_mut(QK_K)) {
        dequantize_scaled_mins(
            f16_to_f32(b.d),
            f16_to_f32(b.dmin),
            &b.scales,
            &q4_k_quants(b),
            y,
        );
    }
}

pub fn dequantize_q5_k(blocks: &[BlockQ5K], out: &mut [f32]) {
    assert_eq!(
        out.len(),
        blocks.len() * QK_K,
        "dequantize_q5_k: length mismatch"
    );
    for (b, y) in blocks.iter().zip(out.chunks_exact_mut(QK_K)) {
        dequantize_scaled_mins(
            f16_to_f32(b.d),
            f16_to_f32(b.dmin),
            &b.scales,
            &q5_k_quants(b),
            y,
        );
    }
}

pub fn dequantize_q6_k(blocks: &[BlockQ6K], out: &mut [f32]) {
    assert_eq!(
        out.len(),
        blocks.len() * QK_K,
        "dequantize_q6_k: length mismatch"
    );
    for (b, y) in blocks.iter().zip(out.chunks_exact_mut(QK_K)) {
        let d = f16_to_f32(b.d);
        let q = q6_k_quants(b);
        for (g, (ys, qs)) in y.chunks_exact_mut(16).zip(q.chunks_exact(16)).enumerate() {
            let dg = d * f32::from(b.scales[g]);
            for (o, &v) in ys.iter_mut().zip(qs) {
                *o = dg * f32::from(i16::from(v) - 32);
            }
        }
    }
}

/// Exact integer parts of a Q4_K/Q5_K super-block dot: `(sum_j sc_j * q.x_j, sum_j m_j * sum x_j)`.
#[inline]
fn scaled_mins_idot(scales: &[u8; 12], q: &[u8; QK_K], x: &BlockQ8K) -> (i32, i32) {
    let (sc, mn) = k4_scales_mins(scales);
    let mut isum = 0i32;
    let mut msum = 0i32;
    for j in 0..8 {
        let dot: i32 = q[32 * j..32 * j + 32]
            .iter()
            .zip(&x.qs[32 * j..32 * j + 32])
            .map(|(&w, &a)| i32::from(w) * i32::from(a))
            .sum();
        isum += i32::from(sc[j]) * dot;
        msum += i32::from(mn[j]) * (i32::from(x.bsums[2 * j]) + i32::from(x.bsums[2 * j + 1]));
    }
    (isum, msum)
}

/// Scalar reference: Q4_K weight row dot Q8_K activation row.
pub fn dot_q4_k(w: &[BlockQ4K], x: &[BlockQ8K]) -> f32 {
    assert_eq!(w.len(), x.len(), "dot_q4_k: block count mismatch");
    let mut acc = 0.0f32;
    for (b, a) in w.iter().zip(x) {
        let (isum, msum) = scaled_mins_idot(&b.scales, &q4_k_quants(b), a);
        acc += a.d * f16_to_f32(b.d) * isum as f32 - a.d * f16_to_f32(b.dmin) * msum as f32;
    }
    acc
}

/// Scalar reference: Q5_K weight row dot Q8_K activation row.
pub fn dot_q5_k(w: &[BlockQ5K], x: &[BlockQ8K]) -> f32 {
    assert_eq!(w.len(), x.len(), "dot_q5_k: block count mismatch");
    let mut acc = 0.0f32;
    for (b, a) in w.iter().zip(x) {
        let (isum, msum) = scaled_mins_idot(&b.scales, &q5_k_quants(b), a);
        acc += a.d * f16_to_f32(b.d) * isum as f32 - a.d * f16_to_f32(b.dmin) * msum as f32;
    }
    acc
}

/// Scalar reference: Q6_K weight row dot Q8_K activation row.
pub fn dot_q6_k(w: &[BlockQ6K], x: &[BlockQ8K]) -> f32 {
    assert_eq!(w.len(), x.len(), "dot_q6_k: block count mismatch");
    let mut acc = 0.0f32;
    for (b, a) in w.iter().zip(x) {
        let q = q6_k_quants(b);
        let mut isum = 0i32;
        for g in 0..16 {
            let dot: i32 = q[16 * g..16 * g + 16]
                .iter()
                .zip(&a.qs[16 * g..16 * g + 16])
                .map(|(&w, &v)| i32::from(w) * i32::from(v))
                .sum();
            isum += i32::from(b.scales[g]) * (dot - 32 * i32::from(a.bsums[g]));
        }
        acc += a.d * f16_to_f32(b.d) * isum as f32;
    }
    acc
}
