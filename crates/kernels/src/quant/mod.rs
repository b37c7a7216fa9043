//! Block formats: byte layouts identical to ggml's, scalar dequantization, activation quantization
//! and scalar reference dot products.
//!
//! Invariants:
//! - Weight blocks are `#[repr(C)]` structs of byte arrays only, so they have alignment 1 and every
//!   bit pattern is valid; a byte slice of whole blocks can therefore be viewed as a block slice
//!   without copying ([`cast_blocks`]). Sizes are pinned at compile time.
//! - Half-precision scales are stored as little-endian `[u8; 2]` and converted with [`f16_to_f32`].
//! - The scalar dot products here are the reference the SIMD kernels are tested against; they sum
//!   each block exactly in integers and accumulate blocks in order in f32.

pub mod float;
pub mod kquants;
pub mod kquants_low;
pub mod legacy;
pub mod legacy_min;
pub mod nonlinear;

pub use kquants::{BlockQ4K, BlockQ5K, BlockQ6K, BlockQ8K, QK_K};
pub use kquants_low::{BlockQ2K, BlockQ3K};
pub use legacy::{ActQ8_0, ActQ8_0x2, BlockQ4_0, BlockQ5_0, BlockQ8_0, QK8_0};
pub use legacy_min::{BlockQ4_1, BlockQ5_1};
pub use nonlinear::{BlockIq4Nl, BlockIq4Xs, BlockMxfp4};

/// Converts an IEEE half stored little-endian to f32.
#[inline]
pub fn f16_to_f32(bits: [u8; 2]) -> f32 {
    half::f16::from_le_bytes(bits).to_f32()
}

/// Rounds an f32 to the nearest IEEE half (ties to even) and returns its little-endian bytes.
#[inline]
pub fn f32_to_f16(v: f32) -> [u8; 2] {
    half::f16::from_f32(v).to_le_bytes()
}

/// Rounds to the nearest integer, ties to even, for `|v| < 2^22` (ggml's `nearest_int`).
///
/// Adding 1.5 * 2^23 moves `v` into the binade where the f32 spacing is exactly 1, so the
/// addition itself rounds (ties to even); the integer is then read from the mantissa. This is
/// what `f32::round_ties_even` computes, without the libm call it compiles to on baseline x86-64.
#[inline]
pub fn round_half_even(v: f32) -> i32 {
    debug_assert!(v.abs() < 4_194_304.0);
    const MAGIC: f32 = 12_582_912.0;
    (v + MAGIC).to_bits() as i32 - MAGIC.to_bits() as i32
}

/// Marker for block structs that consist only of byte arrays (alignment 1, no invalid values).
///
/// # Safety
/// Implementors must be `#[repr(C)]`, have alignment 1, contain no padding and accept any bit
/// pattern.
pub unsafe trait PodBlock: Copy + Sync + 'static {}

/// Views a byte slice holding whole blocks as a block slice.
///
/// Panics if `bytes` is not a whole number of blocks: callers validate sizes before they get here.
pub fn cast_blocks<B: PodBlock>(bytes: &[u8]) -> &[B] {
    let size = std::mem::size_of::<B>();
    assert!(
        bytes.len().is_multiple_of(size),
        "byte length {} is not a multiple of block size {size}; this is a bug",
        bytes.len()
    );
    const { assert!(std::mem::align_of::<B>() == 1) };
    // SAFETY: B has alignment 1, no padding and no invalid bit patterns (PodBlock contract), and
    // the length is a whole number of blocks, so every B in range is a valid read of `bytes`.
    unsafe { std::slice::from_raw_parts(bytes.as_ptr().cast::<B>(), bytes.len() / size) }
}

/// Views a block slice as bytes (for tests and for building weights in memory).
pub fn blocks_as_bytes<B: PodBlock>(blocks: &[B]) -> &[u8] {
    // SAFETY: PodBlock types have no padding, so all bytes are initialized.
    unsafe {
        std::slice::from_raw_parts(blocks.as_ptr().cast::<u8>(), std::mem::size_of_val(blocks))
    }
}

// SAFETY: byte arrays have alignment 1, no padding and no invalid values; they serve as the
// one-element "blocks" of F32 (4 bytes) and F16/BF16 (2 bytes) rows.
unsafe impl PodBlock for [u8; 2] {}
// SAFETY: as above.
unsafe impl PodBlock for [u8; 4] {}
