//! x86-64 SIMD kernels: AVX2 (+FMA, F16C) and AVX-512 VNNI.
//!
//! Structure: each format has a [`Body`] — an `#[inline(always)]` kernel generic over the integer
//! dot primitive [`IDot`] and the number of activation rows `N`. `#[target_feature]` entry points
//! (one per instruction set) run the shared row loop over a range of weight rows with the body
//! inlined, so the intrinsics compile with the entry's features (the pattern `memchr` uses) and
//! nothing per row crosses a call boundary.
//!
//! Soundness: [`Simd`] / [`Simd512`] values are only created in [`visit`] after run-time
//! detection has confirmed the entry point's features, and only their `rows` calls the entries.
//!
//! With AVX-512 VNNI, Q4_0 / Q5_0 / Q8_0, MXFP4 / IQ4_NL / IQ4_XS, Q2_K ... Q6_K and the float
//! formats use a 512-bit body (`legacy512`, `nonlinear512`: two blocks per vector; `kquants512`,
//! `kquants_low512`, `nonlinear512_xs`: 64 quants per vector; `float512`:
//! sixteen columns per vector, tiles of four weight rows by four activation rows); Q4_1 / Q5_1
//! run their 256-bit bodies with the VNNI integer primitive.
//!
//! With AVX2 alone, the float formats run `float_tiled`: tiles of four weight rows by three
//! activation rows over blocks of activation rows held in L2 (the per-row `float` bodies for
//! batches under three rows), with the per-row bodies' bits.
//!
//! Numerics: every path forms the same exact integer lanes (products are bounded so that AVX2's
//! 16-bit intermediate sums cannot saturate) and associates the float sums the same way, so the
//! AVX2 and AVX-512 paths return identical bits. Per (weight row, activation row) pair the
//! sequence of float operations does not depend on `N`, which gives the matmul its batch
//! invariance.

use std::arch::x86_64::*;
use std::marker::PhantomData;
use std::ops::Range;

use super::{rows_loop, DotKernel, Isa, KernelVisitor, RowDot, RowsJob};
use crate::act::Activation;
use crate::dtype::Format;
use crate::quant::{
    BlockIq4Nl, BlockMxfp4, BlockQ2K, BlockQ3K, BlockQ4K, BlockQ4_0, BlockQ4_1, BlockQ5K,
    BlockQ5_0, BlockQ5_1, BlockQ8_0, PodBlock,
};

pub(crate) mod amx;
pub(crate) mod amx_bf16;
mod amx_q4k;
mod amx_q6k;
pub(crate) mod attn;
pub(crate) mod bf16dot;
mod float;
mod float512;
mod float_tiled;
mod kquants;
mod kquants512;
mod kquants_low;
mod kquants_low512;
mod legacy;
mod legacy512;
mod legacy_min;
mod nonlinear;
mod nonlinear512;
mod nonlinear512_xs;
pub(crate) mod ops;
/// Packed legacy formats, as const parameters of the packed passes (`packed256`, `packed512`).
const Q8: u8 = 0;
const Q5: u8 = 1;
const Q4: u8 = 2;
// They index `ActQ8_0::neg_offset_sums` and `quant::legacy::PACKED_OFFSETS`.
const _: () = assert!(Q8 == 0 && Q5 == 1 && Q4 == 2);
/// Packed Q4_1 and Q5_1: no offset (their quants are unsigned), a minimum per row and block.
const Q41: u8 = 3;
const Q51: u8 = 4;
/// Packed MXFP4 and IQ4_NL: Q4_0 records whose nibbles index a table (`crate::packed`).
const MX: u8 = 5;
const NL: u8 = 6;

/// The format of a packed legacy pass's const parameter.
const fn legacy_format(f: u8) -> Format {
    match f {
        Q8 => Format::Q8_0,
        Q5 => Format::Q5_0,
        Q4 => Format::Q4_0,
        Q41 => Format::Q4_1,
        Q51 => Format::Q5_1,
        MX => Format::MXFP4,
        NL => Format::IQ4_NL,
        _ => panic!("not a packed legacy format"),
    }
}

/// Where a packed format's `-offset * sum(x)` sits in `ActQ8_0::neg_offset_sums`: the index of
/// its offset in `quant::legacy::PACKED_OFFSETS` (MXFP4 shares Q5_0's, IQ4_NL Q8_0's; see
/// `crate::packed`). Only for the formats with an offset.
const fn offset_slot(f: u8) -> usize {
    match f {
        Q8 | NL => 0,
        Q5 | MX => 1,
        Q4 => 2,
        _ => panic!("a packed format without an offset"),
    }
}

/// The sixteen bytes a pass of a table format (`MX`, `NL`) shuffles its nibbles through to
/// get unsigned weights: the table biased by the format's offset (`crate::packed::MXFP4_BIASED`,
/// `IQ4NL_BIASED`).
const fn biased_table(f: u8) -> &'static [u8; 16] {
    match f {
        MX => &crate::packed::MXFP4_BIASED,
        NL => &crate::packed::IQ4NL_BIASED,
        _ => panic!("a packed format without a table"),
    }
}

/// Asks for the record `ahead` records after `r` (of `rec` bytes) to be brought into L2 while
/// this one is computed, in one burst (the AMX passes; the others spread theirs, [`Ahead`]).
/// L2 rather than L1 (`prefetcht1`): a prefetch into L1 holds one of its few miss buffers for
/// the whole trip from memory. Past the last record the addresses are only hints: a prefetch
/// never faults.
#[inline(always)]
pub(super) fn prefetch_record(r: *const u8, rec: usize, ahead: usize) {
    let next = r.wrapping_add(ahead * rec);
    for line in (0..rec).step_by(64) {
        // SAFETY: a prefetch is a hint and cannot fault, whatever the address.
        unsafe { _mm_prefetch::<_MM_HINT_T1>(next.wrapping_add(line).cast()) };
    }
}

/// How far ahead of the record being computed the packed passes' prefetches point, in bytes
/// (rounded up to whole records): four Q4_K records, 17 Q8_0, 27 Q5_0. On an AVX2-only Zen 3
/// two to eight Q4_K records measured alike; on an AVX-512 Zen 5 (one decode step of the 1.5B
/// Qwen's matmuls, `examples/kquant_speed -- 2 7 model`, alternated) one record ahead left the
/// matmuls 0.94-1.16x a plain read of the same bytes at one activation row, 9216 bytes
/// 0.91-1.01x, 18432 and 36864 no better.
pub(super) const PREFETCH_BYTES: usize = 9216;

/// The prefetches of the record about `distance` bytes (rounded up to whole records) after the
/// one being computed, asked for into L2 in `parts` slices spread over the record's compute: a
/// core on its own keeps too few misses in flight to stream weights at the memory's rate, and
/// with the requests spread over the compute the memory works while the core multiplies (a burst
/// of a whole record's prefetches at its start leaves it idle between bursts). Slot `k` asks for
/// slice `first + k`.
#[derive(Clone, Copy)]
pub(super) struct Ahead {
    next: *const u8,
    rec: usize,
    parts: usize,
    first: usize,
}

impl Ahead {
    /// The slices of the record about `distance` bytes after `r` (records of `rec` bytes).
    #[inline(always)]
    pub(super) fn new(
        r: *const u8,
        rec: usize,
        distance: usize,
        parts: usize,
        first: usize,
    ) -> Self {
        Ahead {
            next: r.wrapping_add(distance.div_ceil(rec) * rec),
            rec,
            parts,
            first,
        }
    }

    /// Asks for slice `first + k` into L2 (`prefetcht1`; past the weights' end the addresses are
    /// only hints: a prefetch never faults).
    #[inline(always)]
    pub(super) fn slot(self, k: usize) {
        let part = self.first + k;
        let (lo, hi) = (
            self.rec * part / self.parts,
            self.rec * (part + 1) / self.parts,
        );
        for off in (lo..hi).step_by(64) {
            // SAFETY: a prefetch is a hint and cannot fault, whatever the address.
            unsafe { _mm_prefetch::<_MM_HINT_T1>(self.next.wrapping_add(off).cast()) };
        }
    }
}

/// A packed pass kernel (sixteen weight rows by `N` activation rows), so one driver serves every
/// format of both widths (`packed256`, `packed512`).
trait Pass {
    /// Activation rows per pass when the batch allows (16, 8 or 4), as registers permit.
    const GROUP: usize;
    /// # Safety
    /// The CPU must support the implementor's instruction set (AVX2, FMA and F16C for
    /// `packed256`'s passes; also AVX-512 F/BW/VL/VNNI for `packed512`'s and `amx`'s, whose
    /// tiles must also be configured for the format's sub-blocks on this thread). `job` is a
    /// job of the pass's format with consistent shapes (as `packed512::groups` states),
    /// `g < job.rows / 16`, `i + N <= job.m`, and no other thread writes group `g`'s outputs.
    unsafe fn pass<const N: usize>(job: &crate::packed::PackedJob, g: usize, i: usize);
}

/// Runs `P` over row groups `groups` for all activation rows: 16 at a time and then 8 where
/// `P::GROUP` allows, then 4, then the rest. The grouping never changes a result (each pair's
/// sums are the same). Inlined into each kernel file's `target_feature` entry.
///
/// # Safety
/// [`Pass::pass`]'s contract for every group of `groups` and every activation row: `P`'s
/// instruction set (and tiles) enabled, `job` of `P`'s format with consistent shapes, `groups`
/// within `0..job.rows / 16`, and no other thread writing these groups' outputs.
#[inline(always)]
unsafe fn drive_passes<P: Pass>(job: &crate::packed::PackedJob, groups: std::ops::Range<usize>) {
    for g in groups {
        let mut i = 0;
        // SAFETY: every pass below covers rows i..i + N within 0..m (the loop bounds); the rest
        // of `P::pass`'s contract is this function's.
        unsafe {
            if P::GROUP >= 16 {
                while i + 16 <= job.m {
                    P::pass::<16>(job, g, i);
                    i += 16;
                }
            }
            drive_rest::<P>(job, g, i);
        }
    }
}

/// Group `g`'s activation rows from `i` on as [`drive_passes`] runs them after its sixteens: 8 at a
/// time where `P::GROUP` allows, then 4, then the rest.
///
/// # Safety
/// As [`drive_passes`], for group `g` and rows `i..job.m`.
#[inline(always)]
unsafe fn drive_rest<P: Pass>(job: &crate::packed::PackedJob, g: usize, mut i: usize) {
    // SAFETY: every pass below covers rows i..i + N within 0..m (the loop bounds); the rest of
    // `P::pass`'s contract is this function's.
    unsafe {
        if P::GROUP >= 8 {
            while i + 8 <= job.m {
                P::pass::<8>(job, g, i);
                i += 8;
            }
        }
        while i + 4 <= job.m {
            P::pass::<4>(job, g, i);
            i += 4;
        }
        match job.m - i {
            3 => P::pass::<3>(job, g, i),
            2 => P::pass::<2>(job, g, i),
            1 => P::pass::<1>(job, g, i),
            _ => {}
        }
    }
}

pub(crate) mod packed256;
pub(crate) mod packed512;

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

/// Unsigned-by-signed byte dot products, optionally with 16-bit per-lane scales, in 8 i32 lanes,
/// for the 256-bit bodies. (The 512-bit bodies use VNNI directly.)
///
/// Products go through `maddubs` (pairs of `q * x` as i16) and then `madd` with the scales (or
/// ones) to i32; this is exact provided the i16 pair sums cannot saturate, i.e. `q <= 128` with
/// `|x| <= 127` (and in practice `q <= 63` for scaled use). The trait is the seam where another
/// integer primitive can be slotted in without touching the bodies.
///
/// Every method needs the implementor's instruction set: AVX2 for [`Avx2Dot`], AVX2 and
/// AVX-512 VL + VNNI for [`VnniDot`]. The bodies call them only inside the `#[target_feature]`
/// entry points of the matching [`Simd`] kernel, which [`visit`] builds after detecting them.
pub(crate) trait IDot {
    /// Scale vector for 32 quants that all use scale `a` (|a| < 2^15).
    ///
    /// # Safety
    /// The CPU must support the implementor's instruction set (see [`IDot`]).
    unsafe fn scales_32(a: i32) -> __m256i;
    /// Scale vector for 32 quants whose first 16 use `s[g]` and last 16 use `s[g + 1]`, from 16
    /// signed byte scales in an xmm register; `g` is a constant after unrolling, so this is one
    /// shuffle and one widening.
    ///
    /// # Safety
    /// The CPU must support the implementor's instruction set (see [`IDot`]).
    unsafe fn scales_16_of(s: __m128i, g: usize) -> __m256i;
    /// `acc` plus i32 lanes whose total is `sum_i q_i * x_i * scale(i)`.
    ///
    /// # Safety
    /// The CPU must support the implementor's instruction set (see [`IDot`]).
    unsafe fn scaled_dot_acc(acc: __m256i, q: __m256i, x: __m256i, scales: __m256i) -> __m256i;
    /// `acc` plus i32 lanes (each the sum of four adjacent products) of `q . x`.
    ///
    /// # Safety
    /// The CPU must support the implementor's instruction set (see [`IDot`]).
    unsafe fn dot_acc(acc: __m256i, q: __m256i, x: __m256i) -> __m256i;
}

/// `v` repeated in every byte of a u64.
#[inline(always)]
const fn rep8(v: usize) -> i64 {
    (v as i64 & 0xFF) * 0x0101_0101_0101_0101
}

/// i16 scale vector: lanes 0..8 (elements 0..16 after `maddubs`) take `s[g]`, lanes 8..16 `s[g+1]`.
///
/// # Safety
/// The CPU must support AVX2 (the bodies inline this only into entry points that enable it).
#[inline(always)]
unsafe fn scales_16_i16(s: __m128i, g: usize) -> __m256i {
    // SAFETY: AVX2 per this function's contract; register operations only.
    unsafe { _mm256_cvtepi8_epi16(_mm_shuffle_epi8(s, _mm_set_epi64x(rep8(g + 1), rep8(g)))) }
}

/// AVX2: `maddubs` to i16 pairs, then `madd` with scales (or ones) to i32.
pub(crate) struct Avx2Dot;

impl IDot for Avx2Dot {
    #[inline(always)]
    unsafe fn scales_32(a: i32) -> __m256i {
        // SAFETY: AVX2 per the trait's contract for `Avx2Dot`.
        unsafe { _mm256_set1_epi16(a as i16) }
    }
    #[inline(always)]
    unsafe fn scales_16_of(s: __m128i, g: usize) -> __m256i {
        // SAFETY: as above.
        unsafe { scales_16_i16(s, g) }
    }
    #[inline(always)]
    unsafe fn scaled_dot_acc(acc: __m256i, q: __m256i, x: __m256i, scales: __m256i) -> __m256i {
        // SAFETY: as above.
        unsafe { _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(q, x), scales)) }
    }
    #[inline(always)]
    unsafe fn dot_acc(acc: __m256i, q: __m256i, x: __m256i) -> __m256i {
        // SAFETY: as above.
        unsafe {
            _mm256_add_epi32(
                acc,
                _mm256_madd_epi16(_mm256_maddubs_epi16(q, x), _mm256_set1_epi16(1)),
            )
        }
    }
}

/// AVX-512 VNNI on 256-bit vectors: `dpbusd` forms the same i32 lanes as [`Avx2Dot::dot_acc`]
/// in one instruction (exact, no i16 intermediate); the scaled forms are AVX2's.
pub(crate) struct VnniDot;

impl IDot for VnniDot {
    #[inline(always)]
    unsafe fn scales_32(a: i32) -> __m256i {
        // SAFETY: `VnniDot`'s instruction set includes AVX2, all `Avx2Dot` needs.
        unsafe { Avx2Dot::scales_32(a) }
    }
    #[inline(always)]
    unsafe fn scales_16_of(s: __m128i, g: usize) -> __m256i {
        // SAFETY: as above.
        unsafe { Avx2Dot::scales_16_of(s, g) }
    }
    #[inline(always)]
    unsafe fn scaled_dot_acc(acc: __m256i, q: __m256i, x: __m256i, scales: __m256i) -> __m256i {
        // SAFETY: as above.
        unsafe { Avx2Dot::scaled_dot_acc(acc, q, x, scales) }
    }
    #[inline(always)]
    unsafe fn dot_acc(acc: __m256i, q: __m256i, x: __m256i) -> __m256i {
        // SAFETY: AVX-512 VL + VNNI per the trait's contract for `VnniDot`.
        unsafe { _mm256_dpbusd_epi32(acc, q, x) }
    }
}

/// A format's SIMD kernel body, generic over the integer primitive and the row count.
pub(crate) trait Body {
    type W: PodBlock;
    type A: Activation;
    /// # Safety
    /// Must only be inlined into a function with AVX2, FMA and F16C enabled (and AVX-512 VL+VNNI
    /// when `D` needs them). All slices hold the same number of elements/blocks.
    unsafe fn run<D: IDot, const N: usize>(w: &[Self::W], a: [&[Self::A]; N]) -> [f32; N];
}

/// Adapts a [`Body`] with integer primitive `D` to the shared row loop.
struct WithDot<B, D>(PhantomData<fn() -> (B, D)>);

impl<B: Body, D: IDot> RowDot for WithDot<B, D> {
    type W = B::W;
    type A = B::A;
    #[inline(always)]
    unsafe fn dot<const N: usize>(w: &[B::W], a: [&[B::A]; N]) -> [f32; N] {
        // SAFETY: forwarded; the entry points below enable the features `D` needs.
        unsafe { B::run::<D, N>(w, a) }
    }
}

/// Adapts a [`Body512`] to the shared row loop.
struct Wide<B>(PhantomData<fn() -> B>);

impl<B: Body512> RowDot for Wide<B> {
    type W = B::W;
    type A = B::A;
    const GROUP: usize = B::GROUP;
    #[inline(always)]
    unsafe fn dot<const N: usize>(w: &[B::W], a: [&[B::A]; N]) -> [f32; N] {
        // SAFETY: forwarded; the entry point below enables AVX-512.
        unsafe { B::run::<N>(w, a) }
    }
}

/// # Safety
/// The CPU must support AVX2, FMA and F16C (only a `Simd<B, Avx2Dot>` or a float `Tiled` kernel
/// calls this, built after detection), and [`DotKernel::rows`]'s contract holds for `job` and
/// `range` with `act_len == job.per_row`.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn rows_avx2<B: Body>(job: &RowsJob<B::W, B::A>, range: Range<usize>) {
    // SAFETY: this function's features are the ones `Body::run` requires for `Avx2Dot`; the
    // job contract is forwarded.
    unsafe { rows_loop::<WithDot<B, Avx2Dot>>(job, range) }
}

/// # Safety
/// The CPU must support AVX2, FMA, F16C and AVX-512 F/BW/VL/VNNI (only a `Simd<B, VnniDot>` calls
/// this, built after detection), and [`DotKernel::rows`]'s contract holds for `job` and `range`
/// with `act_len == job.per_row`.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn rows_vnni<B: Body>(job: &RowsJob<B::W, B::A>, range: Range<usize>) {
    // SAFETY: this function's features include those `Body::run` requires for `VnniDot`; the
    // job contract is forwarded.
    unsafe { rows_loop::<WithDot<B, VnniDot>>(job, range) }
}

/// A 512-bit kernel body (AVX-512 F/BW/VL + VNNI), generic over the row count.
pub(crate) trait Body512 {
    type W: PodBlock;
    type A: Activation;
    /// Activation rows per pass when the batch allows (see `RowDot::GROUP`).
    const GROUP: usize;
    /// Activation elements per weight row of `w_len` blocks.
    fn act_len(w_len: usize) -> usize;
    /// # Safety
    /// Must only be inlined into a function with AVX2, FMA, F16C and AVX-512 F/BW/VL/VNNI
    /// enabled; every activation row holds `act_len(w.len())` elements.
    unsafe fn run<const N: usize>(w: &[Self::W], a: [&[Self::A]; N]) -> [f32; N];
}

/// # Safety
/// The CPU must support AVX2, FMA, F16C and AVX-512 F/BW/VL/VNNI (only a `Simd512<B>` calls this,
/// built after detection), and [`DotKernel::rows`]'s contract holds for `job` and `range` with
/// `act_len == B::act_len(job.per_row)`.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn rows_512<B: Body512>(job: &RowsJob<B::W, B::A>, range: Range<usize>) {
    // SAFETY: this function's features are the ones `Body512::run` requires.
    unsafe { rows_loop::<Wide<B>>(job, range) }
}

/// A SIMD kernel; only constructed after feature detection (see module docs).
pub(crate) struct Simd<B, D>(PhantomData<fn() -> (B, D)>);

/// A 512-bit SIMD kernel; only constructed after feature detection (see module docs).
pub(crate) struct Simd512<B>(PhantomData<fn() -> B>);

impl<B: Body> DotKernel for Simd<B, Avx2Dot> {
    type W = B::W;
    type A = B::A;
    fn act_len(&self, per_row: usize) -> usize {
        per_row
    }
    unsafe fn rows(&self, job: &RowsJob<B::W, B::A>, range: Range<usize>) {
        // SAFETY: a `Simd<_, Avx2Dot>` exists only if AVX2/FMA/F16C were detected; the job
        // contract is the caller's.
        unsafe { rows_avx2::<B>(job, range) }
    }
}

impl<B: Body> DotKernel for Simd<B, VnniDot> {
    type W = B::W;
    type A = B::A;
    fn act_len(&self, per_row: usize) -> usize {
        per_row
    }
    unsafe fn rows(&self, job: &RowsJob<B::W, B::A>, range: Range<usize>) {
        // SAFETY: a `Simd<_, VnniDot>` exists only if AVX-512 F/BW/VL/VNNI (and AVX2) were
        // detected; the job contract is the caller's.
        unsafe { rows_vnni::<B>(job, range) }
    }
}

impl<B: Body512> DotKernel for Simd512<B> {
    type W = B::W;
    type A = B::A;
    fn act_len(&self, per_row: usize) -> usize {
        B::act_len(per_row)
    }
    unsafe fn rows(&self, job: &RowsJob<B::W, B::A>, range: Range<usize>) {
        // SAFETY: a `Simd512` exists only if AVX-512 F/BW/VL/VNNI (and AVX2) were detected.
        unsafe { rows_512::<B>(job, range) }
    }
}

/// Hands `v` the SIMD kernel for body `B` at instruction set `isa` (already capped by the CPU).
fn visit_body<B: Body, V: KernelVisitor>(isa: Isa, v: V) -> Result<(), V> {
    match isa {
        Isa::Amx | Isa::Avx512Vnni | Isa::Avx2 => v.visit(&Simd::<B, Avx2Dot>(PhantomData)),
        Isa::Scalar => return Err(v),
    }
    Ok(())
}

/// Like [`visit_body`], but with a 512-bit body where the CPU has AVX-512 VNNI.
fn visit_body_512<B: Body, B5: Body512, V: KernelVisitor>(isa: Isa, v: V) -> Result<(), V> {
    match isa {
        Isa::Amx | Isa::Avx512Vnni => {
            v.visit(&Simd512::<B5>(PhantomData));
            Ok(())
        }
        _ => visit_body::<B, V>(isa, v),
    }
}

/// The float kernels: the tiled 512-bit one where the CPU has AVX-512, else the tiled 256-bit one
/// (which runs body `B` for batches of fewer rows than a tile).
fn visit_float<B, D, T, V>(isa: Isa, v: V) -> Result<(), V>
where
    B: Body<W = D::W, A = f32>,
    D: float512::Decode,
    T: float_tiled::Decode8<W = D::W>,
    V: KernelVisitor,
{
    match isa {
        Isa::Amx | Isa::Avx512Vnni => v.visit(&float512::Tiled::<D>(PhantomData)),
        Isa::Avx2 => v.visit(&float_tiled::Tiled::<T, B>(PhantomData)),
        Isa::Scalar => return Err(v),
    }
    Ok(())
}

/// Like [`visit_body`], but with the VNNI integer primitive where the CPU has AVX-512 VNNI.
fn visit_body_vnni<B: Body, V: KernelVisitor>(isa: Isa, v: V) -> Result<(), V> {
    match isa {
        Isa::Amx | Isa::Avx512Vnni => {
            v.visit(&Simd::<B, VnniDot>(PhantomData));
            Ok(())
        }
        _ => visit_body::<B, V>(isa, v),
    }
}

/// Hands `v` the SIMD kernel for `format`, or returns it if `isa` (re-checked against the CPU)
/// has none.
pub(crate) fn visit<V: KernelVisitor>(isa: Isa, format: Format, v: V) -> Result<(), V> {
    let isa = isa.min(super::detect_isa());
    match format {
        Format::F32 => visit_float::<float::F32Body, float512::F32, float_tiled::F32, V>(isa, v),
        Format::F16 => visit_float::<float::F16Body, float512::F16, float_tiled::F16, V>(isa, v),
        Format::BF16 => {
            visit_float::<float::Bf16Body, float512::Bf16, float_tiled::Bf16, V>(isa, v)
        }
        Format::Q4_0 => {
            visit_body_512::<legacy::Q4_0Body, legacy512::PairBody<BlockQ4_0>, V>(isa, v)
        }
        Format::Q5_0 => {
            visit_body_512::<legacy::Q5_0Body, legacy512::PairBody<BlockQ5_0>, V>(isa, v)
        }
        Format::Q4_1 => visit_body_vnni::<legacy_min::MinBody<BlockQ4_1>, V>(isa, v),
        Format::Q5_1 => visit_body_vnni::<legacy_min::MinBody<BlockQ5_1>, V>(isa, v),
        Format::Q8_0 => {
            visit_body_512::<legacy::Q8_0Body, legacy512::PairBody<BlockQ8_0>, V>(isa, v)
        }
        Format::Q4_K => {
            visit_body_512::<kquants::Q4KBody, kquants512::ScaleMinBody<BlockQ4K>, V>(isa, v)
        }
        Format::Q5_K => {
            visit_body_512::<kquants::Q5KBody, kquants512::ScaleMinBody<BlockQ5K>, V>(isa, v)
        }
        Format::Q6_K => visit_body_512::<kquants::Q6KBody, kquants512::Q6KBody, V>(isa, v),
        Format::Q2_K => {
            visit_body_512::<kquants_low::LowBody<BlockQ2K>, kquants_low512::LowBody512<BlockQ2K>, V>(
                isa, v,
            )
        }
        Format::Q3_K => {
            visit_body_512::<kquants_low::LowBody<BlockQ3K>, kquants_low512::LowBody512<BlockQ3K>, V>(
                isa, v,
            )
        }
        Format::MXFP4 => visit_body_512::<
            nonlinear::TableBody<BlockMxfp4>,
            nonlinear512::TablePairBody<BlockMxfp4>,
            V,
        >(isa, v),
        Format::IQ4_NL => visit_body_512::<
            nonlinear::TableBody<BlockIq4Nl>,
            nonlinear512::TablePairBody<BlockIq4Nl>,
            V,
        >(isa, v),
        Format::IQ4_XS => {
            visit_body_512::<nonlinear::Iq4XsBody, nonlinear512_xs::Iq4XsBody512, V>(isa, v)
        }
    }
}

// ---- helpers shared by the bodies (all `#[inline(always)]`, AVX2 + FMA + F16C) ----

/// Horizontal sum of 8 floats in a fixed order.
///
/// # Safety
/// The CPU must support AVX (the bodies inline this only into entry points that enable AVX2).
#[inline(always)]
pub(crate) unsafe fn hsum_ps(v: __m256) -> f32 {
    // SAFETY: AVX per this function's contract; register operations only.
    unsafe {
        let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
        let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
        let s = _mm_add_ss(s, _mm_movehdup_ps(s));
        _mm_cvtss_f32(s)
    }
}

/// Converts one IEEE half (little-endian bytes) with F16C.
///
/// # Safety
/// The CPU must support F16C (enabled with AVX2 in every entry point).
#[inline(always)]
pub(crate) unsafe fn f16_to_f32(bits: [u8; 2]) -> f32 {
    // SAFETY: F16C per this function's contract; register operations only.
    unsafe {
        _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(i32::from(
            u16::from_le_bytes(bits),
        ))))
    }
}

/// `&s[i]` without a bounds check (checked in debug builds). The bodies index activation rows
/// with weight block indices: [`Body::run`]'s and [`Body512::run`]'s contracts make the rows
/// long enough, and `RowsJob::validate` asserts it for every kernel.
///
/// # Safety
/// `i < s.len()`.
#[inline(always)]
pub(crate) unsafe fn at<T>(s: &[T], i: usize) -> &T {
    debug_assert!(i < s.len());
    // SAFETY: `i < s.len()` is this function's contract.
    unsafe { s.get_unchecked(i) }
}

/// Loads 32 bytes from a 32-byte array.
///
/// # Safety
/// The CPU must support AVX (the bodies inline this only into entry points that enable AVX2).
#[inline(always)]
pub(crate) unsafe fn load32<T>(p: &[T; 32]) -> __m256i {
    const { assert!(std::mem::size_of::<T>() == 1) };
    // SAFETY: the array holds exactly 32 bytes, read by an unaligned load; AVX per this
    // function's contract.
    unsafe { _mm256_loadu_si256(p.as_ptr().cast()) }
}

/// Loads 32 bytes starting at `p[offset]`; panics if out of range.
///
/// # Safety
/// The CPU must support AVX (the bodies inline this only into entry points that enable AVX2). The
/// range is checked: `offset + 32 > p.len()` panics.
#[inline(always)]
pub(crate) unsafe fn load32_at<T>(p: &[T], offset: usize) -> __m256i {
    const { assert!(std::mem::size_of::<T>() == 1) };
    let s = &p[offset..offset + 32];
    // SAFETY: `s` holds exactly 32 bytes, read by an unaligned load; AVX per this function's
    // contract.
    unsafe { _mm256_loadu_si256(s.as_ptr().cast()) }
}
