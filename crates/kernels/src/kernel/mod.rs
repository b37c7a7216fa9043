//! Per-format dot-product kernels behind one trait, and their selection for this CPU.
//!
//! A [`DotKernel`] multiplies one weight row with `N <= 4` activation rows at once. Scalar kernels
//! wrap the reference dot products in `quant`; SIMD kernels live in `x86` and are only
//! constructed after run-time feature detection, which is what makes calling their
//! `#[target_feature]` functions sound.
//!
//! Invariant: for every kernel, `dot::<N>` returns for each activation row exactly the bits that
//! `dot::<1>` returns for that row alone (the matmul's batch invariance rests on this).

use std::sync::OnceLock;

use crate::act::Activation;
use crate::dtype::Format;
use crate::quant::{float, kquants, legacy, PodBlock};

#[cfg(target_arch = "x86_64")]
pub(crate) mod x86;

/// One weight row times up to four activation rows.
pub(crate) trait DotKernel: Sync {
    /// Weight block type (a byte array of one element for float formats).
    type W: PodBlock;
    /// Activation element or block type.
    type A: Activation;
    /// `out[j] = dot(w, a[j])`; all slices hold the same number of elements.
    fn dot<const N: usize>(&self, w: &[Self::W], a: [&[Self::A]; N]) -> [f32; N];
}

/// Receives the kernel selected for a format (a generic callback, since kernels differ in type).
pub(crate) trait KernelVisitor {
    fn visit<K: DotKernel>(self, k: &K);
}

/// The instruction sets the kernels can use, best last.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Isa {
    Scalar,
    /// AVX2 + FMA + F16C.
    Avx2,
    /// The above plus AVX-512 F/BW/VL and VNNI.
    Avx512Vnni,
}

/// The instruction set the kernels use on this machine, detected once. Setting the environment
/// variable `TESSERA_ISA` to `scalar` or `avx2` caps it (for debugging and comparisons).
pub fn isa() -> Isa {
    static ISA: OnceLock<Isa> = OnceLock::new();
    *ISA.get_or_init(|| {
        let detected = detect_isa();
        match std::env::var("TESSERA_ISA").as_deref() {
            Ok("scalar") => Isa::Scalar,
            Ok("avx2") => detected.min(Isa::Avx2),
            _ => detected,
        }
    })
}

/// The best instruction set this CPU supports (ignores `TESSERA_ISA`).
pub fn detect_isa() -> Isa {
    #[cfg(target_arch = "x86_64")]
    {
        if x86::avx512vnni_available() {
            return Isa::Avx512Vnni;
        }
        if x86::avx2_available() {
            return Isa::Avx2;
        }
    }
    Isa::Scalar
}

/// A kernel that calls a scalar reference dot once per activation row.
pub(crate) struct Scalar<W: 'static, A: 'static> {
    pub f: fn(&[W], &[A]) -> f32,
}

impl<W: PodBlock, A: Activation> DotKernel for Scalar<W, A> {
    type W = W;
    type A = A;
    fn dot<const N: usize>(&self, w: &[W], a: [&[A]; N]) -> [f32; N] {
        std::array::from_fn(|j| (self.f)(w, a[j]))
    }
}

fn scalar_f32(w: &[[u8; 4]], x: &[f32]) -> f32 {
    float::dot_f32(w.as_flattened(), x)
}
fn scalar_f16(w: &[[u8; 2]], x: &[f32]) -> f32 {
    float::dot_f16(w.as_flattened(), x)
}
fn scalar_bf16(w: &[[u8; 2]], x: &[f32]) -> f32 {
    float::dot_bf16(w.as_flattened(), x)
}

/// Hands `v` the kernel for `format` at instruction set `isa` (SIMD where available).
pub(crate) fn visit<V: KernelVisitor>(isa: Isa, format: Format, v: V) {
    #[cfg(target_arch = "x86_64")]
    let v = match x86::visit(isa, format, v) {
        Ok(()) => return,
        Err(v) => v,
    };
    #[cfg(not(target_arch = "x86_64"))]
    let _ = isa;
    match format {
        Format::F32 => v.visit(&Scalar { f: scalar_f32 }),
        Format::F16 => v.visit(&Scalar { f: scalar_f16 }),
        Format::BF16 => v.visit(&Scalar { f: scalar_bf16 }),
        Format::Q4_0 => v.visit(&Scalar {
            f: legacy::dot_q4_0,
        }),
        Format::Q5_0 => v.visit(&Scalar {
            f: legacy::dot_q5_0,
        }),
        Format::Q8_0 => v.visit(&Scalar {
            f: legacy::dot_q8_0,
        }),
        Format::Q4_K => v.visit(&Scalar {
            f: kquants::dot_q4_k,
        }),
        Format::Q5_K => v.visit(&Scalar {
            f: kquants::dot_q5_k,
        }),
        Format::Q6_K => v.visit(&Scalar {
            f: kquants::dot_q6_k,
        }),
    }
}
