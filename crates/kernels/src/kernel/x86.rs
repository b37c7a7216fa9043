//! x86-64 SIMD kernels (AVX2 and AVX-512 VNNI). Placeholder until the SIMD kernels land: every
//! format falls back to the scalar reference.

use super::{Isa, KernelVisitor};
use crate::dtype::Format;
use crate::quant::{ActQ8_0, BlockQ8K};

pub(crate) fn avx2_available() -> bool {
    is_x86_feature_detected!("avx2")
        && is_x86_feature_detected!("fma")
        && is_x86_feature_detected!("f16c")
}

pub(crate) fn avx512vnni_available() -> bool {
    avx2_available()
        && is_x86_feature_detected!("avx512f")
        && is_x86_feature_detected!("avx512bw")
        && is_x86_feature_detected!("avx512vl")
        && is_x86_feature_detected!("avx512vnni")
}

pub(crate) fn visit_f32<V: KernelVisitor<f32>>(_isa: Isa, _format: Format, v: V) -> Result<(), V> {
    Err(v)
}

pub(crate) fn visit_q8_0<V: KernelVisitor<ActQ8_0>>(
    _isa: Isa,
    _format: Format,
    v: V,
) -> Result<(), V> {
    Err(v)
}

pub(crate) fn visit_q8_k<V: KernelVisitor<BlockQ8K>>(
    _isa: Isa,
    _format: Format,
    v: V,
) -> Result<(), V> {
    Err(v)
}
