//! Shared test helpers: a seeded PRNG and generators of random weight rows in every format.
#![allow(dead_code)]

use kernels::quant::{f32_to_f16, QK_K};
use kernels::{Format, GgmlType};
use test_support::SplitMix64;

/// Test data from `test_support::SplitMix64`: tiny, seeded, the same everywhere.
pub struct Rng(SplitMix64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Self(SplitMix64::new(seed))
    }
    pub fn next_u64(&mut self) -> u64 {
        self.0.next_u64()
    }
    /// Uniform in [-1, 1).
    pub fn unit(&mut self) -> f32 {
        (self.next_u64() >> 40) as f32 / (1u64 << 23) as f32 - 1.0
    }
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }
    pub fn byte(&mut self) -> u8 {
        self.next_u64() as u8
    }
    /// Activation-like values: mostly small, a few outliers (as in real hidden states).
    pub fn activations(&mut self, n: usize) -> Vec<f32> {
        (0..n)
            .map(|_| {
                let v = self.unit();
                if self.below(50) == 0 {
                    v * 20.0
                } else {
                    v
                }
            })
            .collect()
    }
}

pub const ALL_TYPES: [GgmlType; 16] = [
    GgmlType::F32,
    GgmlType::F16,
    GgmlType::BF16,
    GgmlType::Q4_0,
    GgmlType::Q4_1,
    GgmlType::Q5_0,
    GgmlType::Q5_1,
    GgmlType::Q8_0,
    GgmlType::Q4_K,
    GgmlType::Q5_K,
    GgmlType::Q6_K,
    GgmlType::Q2_K,
    GgmlType::Q3_K,
    GgmlType::MXFP4,
    GgmlType::IQ4_NL,
    GgmlType::IQ4_XS,
];

/// The formats whose every kernel (scalar, AVX2, AVX-512) gives the scalar reference's bits.
pub const BIT_EXACT_TYPES: [GgmlType; 5] = [
    GgmlType::Q2_K,
    GgmlType::Q3_K,
    GgmlType::MXFP4,
    GgmlType::IQ4_NL,
    GgmlType::IQ4_XS,
];

/// A small positive f16 scale as stored bytes.
fn scale_bytes(rng: &mut Rng, magnitude: f32) -> [u8; 2] {
    f32_to_f16(magnitude * (0.25 + 0.75 * (rng.unit() + 1.0) / 2.0))
}

/// Random bytes of `rows` rows of `cols` elements of `ty`: every quant bit pattern can occur,
/// scales are finite and of a realistic size.
pub fn random_weights(rng: &mut Rng, ty: GgmlType, rows: usize, cols: usize) -> Vec<u8> {
    let format = Format::from_ggml(ty).expect("test uses supported types");
    let n_blocks = rows * cols / format.block_size();
    let bb = format.block_bytes();
    let mut data: Vec<u8> = (0..n_blocks * bb).map(|_| rng.byte()).collect();
    for block in data.chunks_exact_mut(bb) {
        match format {
            Format::F32 => block.copy_from_slice(&(rng.unit() * 0.5).to_le_bytes()),
            Format::F16 => block.copy_from_slice(&f32_to_f16(rng.unit() * 0.5)),
            Format::BF16 => {
                block.copy_from_slice(&((rng.unit() * 0.5).to_bits() >> 16).to_le_bytes()[..2])
            }
            Format::Q4_0 | Format::Q5_0 | Format::Q8_0 => {
                let s = scale_bytes(rng, 0.01);
                block[..2].copy_from_slice(&s);
            }
            Format::Q4_1 | Format::Q5_1 => {
                // The minimum is about -8 (or -16) steps, as a quantizer of centred weights
                // gives, with a random spread either side.
                let d = scale_bytes(rng, 0.01);
                let steps = if format == Format::Q4_1 { 8.0 } else { 16.0 };
                let m = -kernels::quant::f16_to_f32(d) * steps * (1.0 + 0.5 * rng.unit());
                block[..2].copy_from_slice(&d);
                block[2..4].copy_from_slice(&f32_to_f16(m));
            }
            Format::Q4_K | Format::Q5_K => {
                let d = scale_bytes(rng, 0.002);
                let dmin = scale_bytes(rng, 0.004);
                block[..2].copy_from_slice(&d);
                block[2..4].copy_from_slice(&dmin);
            }
            Format::Q6_K => {
                let d = scale_bytes(rng, 0.0005);
                block[208..210].copy_from_slice(&d);
            }
            Format::Q2_K => {
                block[80..82].copy_from_slice(&scale_bytes(rng, 0.002));
                block[82..84].copy_from_slice(&scale_bytes(rng, 0.002));
            }
            Format::Q3_K => block[108..110].copy_from_slice(&scale_bytes(rng, 0.0005)),
            // Exponent 117..=124: steps of 2^-11..2^-4 (the table's values are doubled).
            Format::MXFP4 => block[0] = 117 + rng.below(8) as u8,
            Format::IQ4_NL => block[..2].copy_from_slice(&scale_bytes(rng, 0.0002)),
            Format::IQ4_XS => block[..2].copy_from_slice(&scale_bytes(rng, 0.00001)),
        }
    }
    data
}

/// Columns that are a whole number of blocks for every format, with a few blocks per row.
pub const COLS: usize = 2 * QK_K;

/// f64 dot of two f32 slices.
pub fn dot64(a: &[f32], b: &[f32]) -> f64 {
    a.iter()
        .zip(b)
        .map(|(&x, &y)| f64::from(x) * f64::from(y))
        .sum()
}

/// Sum of |a_i * b_i|: the natural scale for a dot product's rounding error.
pub fn abs_dot64(a: &[f32], b: &[f32]) -> f64 {
    a.iter()
        .zip(b)
        .map(|(&x, &y)| (f64::from(x) * f64::from(y)).abs())
        .sum()
}
