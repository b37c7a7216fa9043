//! Unquantized weight rows (F32, F16, BF16) stored as little-endian bytes.
//!
//! Rows come straight from a memory-mapped file, so they are read bytewise (no alignment
//! assumption). Dot products take plain f32 activations.

use super::f16_to_f32;

#[inline]
fn bf16_to_f32(bits: [u8; 2]) -> f32 {
    f32::from_bits(u32::from(u16::from_le_bytes(bits)) << 16)
}

pub fn dequantize_f32(src: &[u8], out: &mut [f32]) {
    assert_eq!(src.len(), out.len() * 4, "dequantize_f32: length mismatch");
    for (o, b) in out.iter_mut().zip(src.chunks_exact(4)) {
        *o = f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
    }
}

pub fn dequantize_f16(src: &[u8], out: &mut [f32]) {
    assert_eq!(src.len(), out.len() * 2, "dequantize_f16: length mismatch");
    for (o, b) in out.iter_mut().zip(src.chunks_exact(2)) {
        *o = f16_to_f32([b[0], b[1]]);
    }
}

pub fn dequantize_bf16(src: &[u8], out: &mut [f32]) {
    assert_eq!(src.len(), out.len() * 2, "dequantize_bf16: length mismatch");
    for (o, b) in out.iter_mut().zip(src.chunks_exact(2)) {
        *o = bf16_to_f32([b[0], b[1]]);
    }
}

/// Dot of decoded weights with `x`, summed in 8 interleaved lanes (the same association the SIMD
/// kernels use, which keeps scalar and SIMD results close).
#[inline]
fn lane_dot(weights: impl Iterator<Item = f32>, x: &[f32]) -> f32 {
    let mut lanes = [0.0f32; 8];
    for (i, (w, &v)) in weights.zip(x).enumerate() {
        lanes[i % 8] += w * v;
    }
    lanes.iter().sum()
}

/// Scalar reference: F32 weight row (bytes) dot f32 activations.
pub fn dot_f32(w: &[u8], x: &[f32]) -> f32 {
    assert_eq!(w.len(), x.len() * 4, "dot_f32: length mismatch");
    lane_dot(
        w.chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])),
        x,
    )
}

/// Scalar reference: F16 weight row (bytes) dot f32 activations.
pub fn dot_f16(w: &[u8], x: &[f32]) -> f32 {
    assert_eq!(w.len(), x.len() * 2, "dot_f16: length mismatch");
    lane_dot(w.chunks_exact(2).map(|b| f16_to_f32([b[0], b[1]])), x)
}

/// Scalar reference: BF16 weight row (bytes) dot f32 activations.
pub fn dot_bf16(w: &[u8], x: &[f32]) -> f32 {
    assert_eq!(w.len(), x.len() * 2, "dot_bf16: length mismatch");
    lane_dot(w.chunks_exact(2).map(|b| bf16_to_f32([b[0], b[1]])), x)
}
