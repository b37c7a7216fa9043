//! CPU compute kernels of the forward pass.
//!
//! - [`quant`]: ggml-compatible block formats (F32/F16/BF16, Q4_0/Q4_1/Q5_0/Q5_1/Q8_0,
//!   Q2_K/Q3_K/Q4_K/Q5_K/Q6_K, MXFP4/IQ4_NL/IQ4_XS) with scalar dequantization, activation
//!   quantization and reference dot products.
//! - [`matmul()`]: threaded, batch-invariant weight x activation multiplication over a fixed
//!   [`Threads`] pool, with SIMD kernels chosen at run time ([`isa`]); [`matmul_shared()`]
//!   for several matrices of one input, [`matmul_segments()`] for several weight sets each over
//!   its own rows of one input (a mixture of experts' step), each in one parallel region.
//! - [`packed`]: Q8_0/Q5_0/Q4_0/Q4_1/Q5_1/MXFP4/IQ4_NL/Q4_K/Q6_K weights repacked sixteen rows
//!   per block for the batched kernels (AVX2, AVX-512 VNNI, AMX-INT8).
//! - [`bf16dot`]: float weights multiplied in BF16 numerics (`vdpbf16ps` where the CPU has it).
//! - [`ops`]: norms, activations, softmax and f16 helpers for attention.
//! - [`attn`]: the inner loops of paged attention (blocked dots, f16-rounded softmax, V sums).
//! - [`shares`]: a mutable buffer cut into disjoint parts lent to the pool's calls.
//!
//! Dependency direction: this crate knows nothing about models; it takes byte slices and shapes.

mod act;
pub mod aligned;
pub mod attn;
pub mod bf16dot;
pub mod dtype;
pub mod error;
pub mod hugebuf;
mod kernel;
pub mod matmul;
pub mod ops;
pub mod packed;
pub mod quant;
pub mod shares;
pub mod threads;

pub use dtype::{Format, GgmlType};
pub use error::KernelError;
pub use hugebuf::{plain_bytes, plain_bytes_mut, HugeBuf, HugeVec, Plain};
pub use kernel::{detect_isa, isa, Isa};
pub use matmul::{
    dequantize_row, matmul, matmul_segments, matmul_shared, matmul_with_isa, MatmulScratch,
    Segment, Weights,
};
pub use ops::{
    add, axpy_f16, dot_f16_f32, f16_to_f32_row, f32_to_f16_row, gelu_tanh, gelu_tanh_exact,
    layer_norm_rows_in_place, mul, rms_norm, rms_norm_in_place, rms_norm_rows,
    rms_norm_rows_in_place, scale, silu, silu_mul, softmax, swiglu_oai,
};
pub use packed::{pack, pack_stacked, packable, Layout, PackedBytes};
pub use shares::Shares;
pub use threads::Threads;
