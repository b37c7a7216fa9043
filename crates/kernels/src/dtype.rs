//! Weight element types and what the kernels know about them.
//!
//! `GgmlType` is the tensor type tag as stored in GGUF files, re-exported from the `gguf` crate.
//!
//! [`Format`] is the kernels' own view: only the types we can compute with, with their block
//! geometry and the activation format their dot product consumes.

use crate::error::KernelError;

pub use gguf::GgmlType;

/// A weight format the kernels can dequantize and multiply.
#[allow(non_camel_case_types)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Format {
    F32,
    F16,
    BF16,
    Q4_0,
    Q4_1,
    Q5_0,
    Q5_1,
    Q8_0,
    Q4_K,
    Q5_K,
    Q6_K,
    Q2_K,
    Q3_K,
    MXFP4,
    IQ4_NL,
    IQ4_XS,
}

/// How activations are prepared before they meet a weight row of a given format.
#[allow(non_camel_case_types)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ActKind {
    /// Plain f32 activations (float weight formats).
    F32,
    /// Blocks of 32 quantized to i8 with one scale each (legacy quant formats).
    Q8_0,
    /// Super-blocks of 256 quantized to i8 with one f32 scale and 16 partial sums.
    Q8_K,
}

impl Format {
    /// Maps a GGUF type tag to a supported format.
    pub fn from_ggml(ty: GgmlType) -> Result<Self, KernelError> {
        Ok(match ty {
            GgmlType::F32 => Format::F32,
            GgmlType::F16 => Format::F16,
            GgmlType::BF16 => Format::BF16,
            GgmlType::Q4_0 => Format::Q4_0,
            GgmlType::Q4_1 => Format::Q4_1,
            GgmlType::Q5_1 => Format::Q5_1,
            GgmlType::Q5_0 => Format::Q5_0,
            GgmlType::Q8_0 => Format::Q8_0,
            GgmlType::Q4_K => Format::Q4_K,
            GgmlType::Q5_K => Format::Q5_K,
            GgmlType::Q6_K => Format::Q6_K,
            GgmlType::Q2_K => Format::Q2_K,
            GgmlType::Q3_K => Format::Q3_K,
            GgmlType::MXFP4 => Format::MXFP4,
            GgmlType::IQ4_NL => Format::IQ4_NL,
            GgmlType::IQ4_XS => Format::IQ4_XS,
            _ => return Err(KernelError::UnsupportedType { ty }),
        })
    }

    /// Number of elements per block.
    pub const fn block_size(self) -> usize {
        match self {
            Format::F32 | Format::F16 | Format::BF16 => 1,
            Format::Q4_0
            | Format::Q4_1
            | Format::Q5_0
            | Format::Q5_1
            | Format::Q8_0
            | Format::MXFP4
            | Format::IQ4_NL => 32,
            Format::Q4_K
            | Format::Q5_K
            | Format::Q6_K
            | Format::Q2_K
            | Format::Q3_K
            | Format::IQ4_XS => 256,
        }
    }

    /// Number of bytes per block.
    pub const fn block_bytes(self) -> usize {
        match self {
            Format::F32 => 4,
            Format::F16 | Format::BF16 => 2,
            Format::Q4_0 => 18,
            Format::Q4_1 => 20,
            Format::Q5_1 => 24,
            Format::Q5_0 => 22,
            Format::Q8_0 => 34,
            Format::Q4_K => 144,
            Format::Q5_K => 176,
            Format::Q6_K => 210,
            Format::Q2_K => 84,
            Format::Q3_K => 110,
            Format::MXFP4 => 17,
            Format::IQ4_NL => 18,
            Format::IQ4_XS => 136,
        }
    }

    /// The activation format this weight format's dot product consumes.
    pub const fn act_kind(self) -> ActKind {
        match self {
            Format::F32 | Format::F16 | Format::BF16 => ActKind::F32,
            Format::Q4_0
            | Format::Q4_1
            | Format::Q5_0
            | Format::Q5_1
            | Format::Q8_0
            | Format::MXFP4
            | Format::IQ4_NL => ActKind::Q8_0,
            Format::Q4_K
            | Format::Q5_K
            | Format::Q6_K
            | Format::Q2_K
            | Format::Q3_K
            | Format::IQ4_XS => ActKind::Q8_K,
        }
    }

    /// Bytes taken by a row of `cols` elements, or an error if `cols` is not a whole number of blocks.
    pub fn row_bytes(self, ty: GgmlType, cols: usize) -> Result<usize, KernelError> {
        let block = self.block_size();
        if cols == 0 || !cols.is_multiple_of(block) {
            return Err(KernelError::RaggedRow { ty, cols, block });
        }
        Ok(cols / block * self.block_bytes())
    }
}
