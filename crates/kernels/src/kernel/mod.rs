//! Per-format dot-product kernels behind one trait, and their selection for this CPU.
//!
//! A [`DotKernel`] computes all outputs of a range of weight rows; SIMD kernels run the shared
//! [`rows_loop`] (one weight row against four or eight activation rows per pass) inside their
//! `#[target_feature]` entry points so nothing per row crosses a call boundary. Scalar kernels
//! wrap the reference dot products in `quant`; SIMD kernels live in `x86` and are only
//! constructed after run-time feature detection, which is what makes calling their entry points
//! sound.
//!
//! Invariant: for every kernel, [`RowDot::dot`]`::<N>` returns for each activation row exactly the
//! bits `dot::<1>` returns for that row alone, and an output element depends only on its weight
//! row and activation row (the matmul's batch invariance rests on this).

use std::ops::Range;
use std::sync::OnceLock;

use crate::act::Activation;
use crate::dtype::Format;
use crate::quant::{float, kquants, kquants_low, legacy, legacy_min, nonlinear, PodBlock};

#[cfg(target_arch = "x86_64")]
pub(crate) mod x86;

/// Everything a row-range computation reads, built and validated once per matmul call.
pub(crate) struct RowsJob<'a, W, A> {
    /// All weight blocks, `rows * per_row` of them.
    pub w: &'a [W],
    /// Weight blocks per row.
    pub per_row: usize,
    /// Activation rows, `m * act_stride` elements.
    pub acts: &'a [A],
    /// Activation elements per row (the kernel's `act_len(per_row)`).
    pub act_stride: usize,
    pub m: usize,
    /// Output rows (`w.len() / per_row`), the stride of `out`.
    pub rows: usize,
    /// `m * rows` floats, row-major by activation row.
    pub out: *mut f32,
}

impl<W, A> RowsJob<'_, W, A> {
    /// Panics unless the slices agree with the shape (the row loops rely on it).
    pub fn validate(&self, act_len: usize) {
        assert_eq!(
            self.w.len(),
            self.rows * self.per_row,
            "weight blocks vs shape; this is a bug"
        );
        assert_eq!(
            self.act_stride, act_len,
            "activation row length; this is a bug"
        );
        assert_eq!(
            self.acts.len(),
            self.m * self.act_stride,
            "activation rows; this is a bug"
        );
    }
}

/// A per-format kernel: one weight row times up to four activation rows, run over row ranges.
pub(crate) trait DotKernel: Sync {
    /// Weight block type (a byte array of one element for float formats).
    type W: PodBlock;
    /// Activation element or block type.
    type A: Activation;
    /// Activation elements per row for weight rows of `per_row` blocks.
    fn act_len(&self, per_row: usize) -> usize;
    /// Writes `out[i * rows + r]` for every activation row `i` and every `r` in `range`.
    ///
    /// # Safety
    /// `job` must have passed `validate(self.act_len(job.per_row))`, `range` must lie within
    /// `0..job.rows`, `job.out` must be valid for `m * rows` writes, and no other thread may write
    /// the elements of these rows concurrently.
    unsafe fn rows(&self, job: &RowsJob<Self::W, Self::A>, range: Range<usize>);
}

/// One weight row times `N` activation rows, as an associated function so the row loop can be
/// instantiated (and fully inlined) inside a `#[target_feature]` entry point.
pub(crate) trait RowDot {
    type W;
    type A;
    /// Activation rows per pass when the batch allows (4, or 8 or 16 where registers suffice).
    const GROUP: usize = 4;
    /// # Safety
    /// The CPU must support the implementing kernel's instruction set (on x86 the `Body::run`
    /// or `Body512::run` it wraps states it), and every row of `a` holds as many elements as the
    /// kernel's [`DotKernel::act_len`] gives for `w.len()` weight blocks (some are read
    /// unchecked).
    unsafe fn dot<const N: usize>(w: &[Self::W], a: [&[Self::A]; N]) -> [f32; N];
}

/// Computes weight row `r` (blocks `wr`) against activation rows `i..i + N` and stores them.
///
/// # Safety
/// As [`rows_loop`]; additionally `i + N <= m`.
#[inline(always)]
unsafe fn group<R: RowDot, const N: usize>(
    job: &RowsJob<R::W, R::A>,
    wr: &[R::W],
    r: usize,
    i: usize,
) {
    debug_assert!(i + N <= job.m && r < job.rows);
    let a: [&[R::A]; N] = std::array::from_fn(|j| {
        // SAFETY: i + j < m and acts.len() == m * act_stride (validated).
        unsafe {
            job.acts
                .get_unchecked((i + j) * job.act_stride..(i + j + 1) * job.act_stride)
        }
    });
    // SAFETY: forwarded from this function's contract.
    let v = unsafe { R::dot::<N>(wr, a) };
    for (j, v) in v.into_iter().enumerate() {
        // SAFETY: i + j < m and r < rows keep the write inside the `m * rows` output; the caller
        // guarantees no other thread writes row `r`.
        unsafe { *job.out.add((i + j) * job.rows + r) = v };
    }
}

/// The row loop shared by every kernel: each weight row meets the activation rows in groups of
/// `R::GROUP` (16, then 8, as the kernel allows), then 4, then the remainder as one group of 1–3. The grouping
/// never changes a result (see the module invariant).
///
/// # Safety
/// As [`DotKernel::rows`], plus the safety contract of `R::dot` for these slices.
#[inline(always)]
pub(crate) unsafe fn rows_loop<R: RowDot>(job: &RowsJob<R::W, R::A>, range: Range<usize>) {
    for r in range {
        debug_assert!(r < job.rows);
        // SAFETY: r < rows and w.len() == rows * per_row (validated).
        let wr = unsafe { job.w.get_unchecked(r * job.per_row..(r + 1) * job.per_row) };
        let mut i = 0;
        // SAFETY: every group call below covers rows i..i + N within 0..m (the loop bounds);
        // the rest of `group`'s contract is this function's.
        unsafe {
            if R::GROUP >= 16 {
                while i + 16 <= job.m {
                    group::<R, 16>(job, wr, r, i);
                    i += 16;
                }
            }
            if R::GROUP >= 8 {
                while i + 8 <= job.m {
                    group::<R, 8>(job, wr, r, i);
                    i += 8;
                }
            }
            while i + 4 <= job.m {
                group::<R, 4>(job, wr, r, i);
                i += 4;
            }
            match job.m - i {
                3 => group::<R, 3>(job, wr, r, i),
                2 => group::<R, 2>(job, wr, r, i),
                1 => group::<R, 1>(job, wr, r, i),
                _ => {}
            }
        }
    }
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
    /// The above plus AMX-TILE and AMX-INT8 with the OS's permission: the packed Q4_K / Q6_K
    /// matmuls multiply sixteen activation rows at a time in tiles (`x86::amx`).
    Amx,
}

/// The instruction set the kernels use on this machine, detected once. Setting the environment
/// variable `TESSERA_ISA` to `scalar`, `avx2` or `avx512` (AVX-512 VNNI without AMX) caps it (for
/// debugging and comparisons).
pub fn isa() -> Isa {
    static ISA: OnceLock<Isa> = OnceLock::new();
    *ISA.get_or_init(|| {
        let detected = detect_isa();
        match std::env::var("TESSERA_ISA").as_deref() {
            Ok("scalar") => Isa::Scalar,
            Ok("avx2") => detected.min(Isa::Avx2),
            Ok("avx512") => detected.min(Isa::Avx512Vnni),
            _ => detected,
        }
    })
}

/// The best instruction set this CPU supports (ignores `TESSERA_ISA`).
pub fn detect_isa() -> Isa {
    #[cfg(target_arch = "x86_64")]
    {
        if x86::amx::available() {
            return Isa::Amx;
        }
        if x86::avx512vnni_available() {
            return Isa::Avx512Vnni;
        }
        if x86::avx2_available() {
            return Isa::Avx2;
        }
    }
    Isa::Scalar
}

/// A kernel that calls a scalar reference dot once per (weight row, activation row) pair.
pub(crate) struct Scalar<W: 'static, A: 'static> {
    pub f: fn(&[W], &[A]) -> f32,
}

impl<W: PodBlock, A: Activation> DotKernel for Scalar<W, A> {
    type W = W;
    type A = A;
    fn act_len(&self, per_row: usize) -> usize {
        per_row
    }
    unsafe fn rows(&self, job: &RowsJob<W, A>, range: Range<usize>) {
        for r in range {
            let wr = &job.w[r * job.per_row..(r + 1) * job.per_row];
            for (i, x) in job.acts.chunks_exact(job.act_stride).enumerate() {
                // SAFETY: i < m and r < rows (caller's contract) keep the write in bounds; no
                // other thread writes row `r`.
                unsafe { *job.out.add(i * job.rows + r) = (self.f)(wr, x) };
            }
        }
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
/// Activation rows per block of a tiled matmul: as many rows of `row_bytes` as fit in about
/// `budget` bytes (so a block stays in L2 while every weight tile passes over it), rounded down
/// to a multiple of `tile_rows` and at least one tile's rows.
pub(crate) fn act_block_rows(budget: usize, row_bytes: usize, tile_rows: usize) -> usize {
    (budget / row_bytes.max(1)).max(tile_rows) / tile_rows * tile_rows
}

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
        Format::Q4_1 => v.visit(&Scalar {
            f: legacy_min::dot_q4_1,
        }),
        Format::Q5_1 => v.visit(&Scalar {
            f: legacy_min::dot_q5_1,
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
        Format::Q2_K => v.visit(&Scalar {
            f: kquants_low::dot_q2_k,
        }),
        Format::Q3_K => v.visit(&Scalar {
            f: kquants_low::dot_q3_k,
        }),
        Format::MXFP4 => v.visit(&Scalar {
            f: nonlinear::dot_mxfp4,
        }),
        Format::IQ4_NL => v.visit(&Scalar {
            f: nonlinear::dot_iq4_nl,
        }),
        Format::IQ4_XS => v.visit(&Scalar {
            f: nonlinear::dot_iq4_xs,
        }),
    }
}
