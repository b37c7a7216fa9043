//! The inner loops of paged attention: blocked dot products of queries with K rows (`dots`,
//! `dots4`), the f16-rounded softmax (`softmax_f16`, with `exp_neg`), the rounding of scaled
//! queries (`scale_round_f16`) and the weighted sums of V rows (`axpy_block`).
//!
//! Numerics follow llama.cpp's CPU path with an f16 cache: dots and V sums are fused
//! multiply-adds over eight lanes in element order (as ggml's AVX2 f16 dot), the softmax sums in
//! f64, and `exp` is a polynomial good to a few ulp.
//!
//! Dispatch: every function has a portable form and an x86 SIMD form (`kernel::x86::attn`) that
//! does the same operations per lane in the same order, so both give the same bits. Which one
//! runs is a type parameter, [`Lanes`]: [`Portable`], or [`Avx2`], a value of which exists only
//! once run-time detection ([`crate::isa`], capped by `TESSERA_ISA`) found AVX2, FMA and F16C.
//! The choice is made once per attention task, not per call: the caller detects, enters its own
//! `#[target_feature(enable = "avx2,fma,f16c")]` function and runs its loops there with `Avx2`,
//! so these `#[inline(always)]` functions and their intrinsics compile inline with those
//! features. (Per-call dispatch, as `crate::ops` does for whole rows, would put a call and a
//! feature check around every block of a few dot products.) The AVX-512 forms (`dots4`,
//! the 512-bit V sums) additionally need a [`Wide`] value or check for it themselves.
//!
//! K/V rows come as f32 or as raw f16 bits ([`KvElem`]); the SIMD forms convert f16 as they
//! load, exactly, so both element types give the same bits for the same values.

use std::ops::Range;

#[cfg(target_arch = "x86_64")]
use crate::kernel::x86::attn as x86;
#[cfg(target_arch = "x86_64")]
use crate::kernel::{isa, Isa};

#[cfg(test)]
mod tests;

mod sealed {
    pub trait Sealed {}
    impl Sealed for f32 {}
    impl Sealed for u16 {}
    impl Sealed for super::Portable {}
    impl Sealed for super::Avx2 {}
}

/// Which form of the helpers runs (see the module docs).
pub trait Lanes: Copy + sealed::Sealed {
    /// True only for [`Avx2`].
    const SIMD: bool;
}

/// The portable forms (`f32::mul_add` where the SIMD forms fuse).
#[derive(Clone, Copy, Debug, Default)]
pub struct Portable;

impl Lanes for Portable {
    const SIMD: bool = false;
}

/// The AVX2 + FMA + F16C forms. A value exists only where the CPU has them and `TESSERA_ISA`
/// allows them, which is what makes the safe helpers sound when they run the SIMD forms.
#[derive(Clone, Copy, Debug)]
pub struct Avx2(());

impl Lanes for Avx2 {
    const SIMD: bool = true;
}

impl Avx2 {
    /// `Some` where [`crate::isa`] is at least AVX2.
    pub fn detect() -> Option<Avx2> {
        #[cfg(target_arch = "x86_64")]
        if isa() >= Isa::Avx2 {
            return Some(Avx2(()));
        }
        None
    }
}

/// AVX-512 F/VL on top of [`Avx2`]: [`dots4`] and the 512-bit V sums. Not used when
/// `TESSERA_ISA` caps the kernels at `avx2`, so such a run is AVX2 throughout.
#[derive(Clone, Copy, Debug)]
pub struct Wide(());

impl Wide {
    /// `Some` where [`crate::isa`] is AVX-512 VNNI (which includes F and VL).
    pub fn detect() -> Option<Wide> {
        #[cfg(target_arch = "x86_64")]
        if isa() >= Isa::Avx512Vnni {
            return Some(Wide(()));
        }
        None
    }
}

/// A cached K/V element: f32 (a converted tile) or raw f16 bits, converted as loaded (exactly).
pub trait KvElem: Copy + sealed::Sealed {
    fn to_f32(self) -> f32;
}

impl KvElem for f32 {
    #[inline(always)]
    fn to_f32(self) -> f32 {
        self
    }
}

impl KvElem for u16 {
    #[inline(always)]
    fn to_f32(self) -> f32 {
        half::f16::from_bits(self).to_f32()
    }
}

/// Keys per block of [`dots`]: with two query heads, six accumulators of 8 lanes plus the five
/// loaded vectors stay within AVX2's 16 registers.
pub const KEYS_PER_BLOCK: usize = 3;

/// Keys per block of [`dots4`].
pub const KEYS4: usize = 4;

/// Keys per block of [`dots1`]: one query row's eight accumulators, its load and a key's stay
/// within AVX2's 16 registers.
pub const KEYS1: usize = 8;

/// Keys per block of [`dots_t`]: one 512-bit register of scores.
pub const KEYS_T: usize = 16;

/// Floats of each head's accumulator per pass of the 512-bit `axpy_block`.
#[cfg(target_arch = "x86_64")]
pub(crate) const WIDE: usize = 64;

/// Told how far an [`axpy_block`] has come, after each slice of the heads' accumulators
/// (`upto(d, hd)`: the first `d` of `hd` floats are done), so a caller can pace work of its own
/// (the attention kernel asks for the next tile's cache lines) over the block. Only the SIMD
/// forms report.
pub trait Progress {
    fn upto(&self, num: usize, den: usize);
}

/// Nothing to pace.
impl Progress for () {
    #[inline(always)]
    fn upto(&self, _: usize, _: usize) {}
}

/// Shapes of one [`axpy_block`] call.
pub struct Block<'a, P> {
    /// Distance between the heads' score rows.
    pub span: usize,
    pub hd: usize,
    /// Key position of score index 0.
    pub base: usize,
    pub positions: Range<usize>,
    /// Told of the progress through the heads' values.
    pub next: &'a P,
}

#[inline(always)]
pub(crate) fn round_f16(x: f32) -> f32 {
    half::f16::from_f32(x).to_f32()
}

/// `x[i] = round_f16(x[i] * s)`; the SIMD form converts eight at a time with F16C, which rounds
/// to nearest even as `half` does: the same bits.
#[inline(always)]
pub fn scale_round_f16<L: Lanes>(lanes: L, x: &mut [f32], s: f32) {
    let _ = lanes;
    #[cfg(target_arch = "x86_64")]
    if L::SIMD {
        // SAFETY: `L::SIMD` means an `Avx2` value exists: AVX2, FMA and F16C were detected.
        return unsafe { x86::scale_round_f16(x, s) };
    }
    for v in x {
        *v = round_f16(*v * s);
    }
}

/// One (query, head)'s scores over its visible keys become probabilities rounded to f16: the
/// max taken off, `exp_neg`, the sum in f64 over eight lanes (`exp_sum`), each scaled by the
/// sum's f32 inverse. The SIMD form runs the same operations per element eight at a time.
///
/// With a `sink` (gpt-oss's per-head attention sink, a logit with no value), the softmax runs
/// as if the sink were one more score, as ggml's `soft_max` with sinks does: it joins the max,
/// and its exponential joins the sum (after the lanes), but it gets no probability of its own.
#[inline(always)]
pub fn softmax_f16<L: Lanes>(lanes: L, sc: &mut [f32], sink: Option<f32>) {
    let _ = lanes;
    #[cfg(target_arch = "x86_64")]
    if L::SIMD {
        // SAFETY: `L::SIMD` means an `Avx2` value exists: AVX2, FMA and F16C were detected.
        return unsafe { x86::softmax_f16(sc, sink) };
    }
    let mut max = sc.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    if let Some(s) = sink {
        max = max.max(s);
    }
    let mut sum = exp_sum(sc, max);
    if let Some(s) = sink {
        sum += f64::from(exp_neg(s - max));
    }
    let inv = (1.0 / sum) as f32;
    scale_round_f16(Portable, sc, inv);
}

/// `dot(q[i], k[j])` for two query rows by `KEYS_PER_BLOCK` key rows, each computed as a lone
/// dot product would be (eight lanes of fused multiply-adds in element order, the lanes then
/// summed in order): the blocking only shares the loads.
#[inline(always)]
pub fn dots<L: Lanes, E: KvElem>(
    lanes: L,
    q: [&[f32]; 2],
    k: [&[E]; KEYS_PER_BLOCK],
) -> [[f32; KEYS_PER_BLOCK]; 2] {
    let _ = lanes;
    #[cfg(target_arch = "x86_64")]
    if L::SIMD {
        // SAFETY: `L::SIMD` means an `Avx2` value exists: AVX2, FMA and F16C were detected.
        return unsafe { x86::dots(q, k) };
    }
    dots_portable(q, k)
}

/// [`dots`] for one query row (a head left alone by its KV head's pairs and fours) by
/// [`KEYS1`] key rows: the same bits per key, without a second row computed for nothing.
#[inline(always)]
pub fn dots1<L: Lanes, E: KvElem>(lanes: L, q: &[f32], k: [&[E]; KEYS1]) -> [f32; KEYS1] {
    let _ = lanes;
    #[cfg(target_arch = "x86_64")]
    if L::SIMD {
        // SAFETY: `L::SIMD` means an `Avx2` value exists: AVX2, FMA and F16C were detected.
        return unsafe { x86::dots1(q, k) };
    }
    dots_portable([q], k)[0]
}

/// Each query row's dot with its own key row, `q[a] · k[a]` (at most 16 pairs), each as
/// [`dots`] computes a pair: eight lanes of fused multiply-adds in element order, the lanes
/// then summed in order. For heads that each have their own KV head, the heads of one key row
/// in a row (`dots` pairs every query with every key).
#[inline(always)]
pub fn dots_own<L: Lanes, E: KvElem, const H: usize>(
    lanes: L,
    q: [&[f32]; H],
    k: [&[E]; H],
) -> [f32; H] {
    let _ = lanes;
    #[cfg(target_arch = "x86_64")]
    if L::SIMD {
        // SAFETY: `L::SIMD` means an `Avx2` value exists: AVX2, FMA and F16C were detected.
        return unsafe { x86::dots_own(q, k) };
    }
    std::array::from_fn(|a| dots_portable([q[a]], [k[a]])[0][0])
}

/// [`dots`] for four query rows (heads sharing a KV head) by `KEYS4` key rows: each key row
/// loaded and converted once for four heads (the same bits as [`dots`] per pair).
#[inline(always)]
pub fn dots4<E: KvElem>(wide: Wide, q: [&[f32]; 4], k: [&[E]; KEYS4]) -> [[f32; KEYS4]; 4] {
    let _ = wide;
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: a `Wide` value exists only where AVX-512 F/VL, AVX2, FMA and F16C were
        // detected.
        unsafe { x86::dots4(q, k) }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        dots_portable(q, k)
    }
}

/// [`dots`] for `H` query rows (heads sharing a KV head) by [`KEYS_T`] keys stored transposed:
/// `kt` holds `q[0].len()` rows `stride` floats apart, row `i` holding element `i` of the
/// sixteen keys. Each key's lane `j` (elements `j`, `j + 8`, ...) is one register of sixteen
/// keys, so no lane has to be reduced within a register; the sums are those of [`dots`] bit
/// for bit. The head dimension must be a multiple of eight (there is then no tail).
///
/// Panics if the shapes do not fit (a caller bug).
#[inline(always)]
pub fn dots_t<const H: usize>(
    wide: Wide,
    q: [&[f32]; H],
    kt: &[f32],
    stride: usize,
) -> [[f32; KEYS_T]; H] {
    let _ = wide;
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: a `Wide` value exists only where AVX-512 F/VL, AVX2, FMA and F16C were
        // detected.
        unsafe { x86::dots_t(q, kt, stride) }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        dots_t_portable(q, kt, stride)
    }
}

/// A block of sixteen rows by sixteen columns transposed: `dst[i * dst_stride + r] =
/// src[r * src_stride + i]` for `i, r` in `0..16`, rows `r >= rows` read as zeros (the keys of
/// a tile laid out for [`dots_t`]). Values are moved, not computed, so every form gives the
/// same bits.
///
/// Panics if `rows > 16` or the slices are too short (a caller bug).
#[inline(always)]
pub fn transpose16(
    wide: Wide,
    src: &[f32],
    src_stride: usize,
    rows: usize,
    dst: &mut [f32],
    dst_stride: usize,
) {
    let _ = wide;
    check_transpose16(src.len(), src_stride, rows, dst.len(), dst_stride);
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: a `Wide` value exists only where AVX-512 F was detected; the shapes are
        // checked above.
        unsafe { x86::transpose16(src, src_stride, rows, dst, dst_stride) }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        transpose16_portable(src, src_stride, rows, dst, dst_stride)
    }
}

/// The portable form of [`transpose16`].
pub fn transpose16_portable(
    src: &[f32],
    src_stride: usize,
    rows: usize,
    dst: &mut [f32],
    dst_stride: usize,
) {
    check_transpose16(src.len(), src_stride, rows, dst.len(), dst_stride);
    for i in 0..KEYS_T {
        for r in 0..KEYS_T {
            dst[i * dst_stride + r] = if r < rows {
                src[r * src_stride + i]
            } else {
                0.0
            };
        }
    }
}

/// Panics unless a [`transpose16`] of these shapes stays inside its slices.
pub(crate) fn check_transpose16(
    src_len: usize,
    src_stride: usize,
    rows: usize,
    dst_len: usize,
    dst_stride: usize,
) {
    assert!(
        rows <= KEYS_T
            && (rows == 0 || src_len >= (rows - 1) * src_stride + KEYS_T)
            && dst_len >= (KEYS_T - 1) * dst_stride + KEYS_T,
        "transpose16: shapes"
    );
}

/// The head dimension of a [`dots_t`] call, after checking its shapes: every query row as long,
/// a multiple of eight, and `kt` holding that many rows of [`KEYS_T`] keys `stride` apart.
///
/// Panics otherwise (a caller bug).
pub(crate) fn check_dots_t<const H: usize>(q: [&[f32]; H], kt: &[f32], stride: usize) -> usize {
    let n = q[0].len();
    assert!(
        n.is_multiple_of(8)
            && q.iter().all(|r| r.len() == n)
            && stride >= KEYS_T
            && (n == 0 || kt.len() >= (n - 1) * stride + KEYS_T),
        "dots_t: shapes"
    );
    n
}

/// The portable form of [`dots_t`]: the keys gathered back into rows, then [`dots`]'s
/// arithmetic.
pub fn dots_t_portable<const H: usize>(
    q: [&[f32]; H],
    kt: &[f32],
    stride: usize,
) -> [[f32; KEYS_T]; H] {
    let n = check_dots_t(q, kt, stride);
    let keys: Vec<Vec<f32>> = (0..KEYS_T)
        .map(|k| (0..n).map(|i| kt[i * stride + k]).collect())
        .collect();
    let mut out = [[0.0f32; KEYS_T]; H];
    for (k, key) in keys.iter().enumerate() {
        let d = dots_portable::<f32, H, 1>(q, [key]);
        for a in 0..H {
            out[a][k] = d[a][0];
        }
    }
    out
}

/// The portable form of [`dots`] for `H` query rows by `K` key rows.
#[inline(always)]
fn dots_portable<E: KvElem, const H: usize, const K: usize>(
    q: [&[f32]; H],
    k: [&[E]; K],
) -> [[f32; K]; H] {
    let n = q[0].len();
    assert!(
        q.iter().all(|r| r.len() == n) && k.iter().all(|r| r.len() == n),
        "dots: ragged rows"
    );
    let body = n - n % 8;
    let mut acc = [[[0.0f32; 8]; K]; H];
    for i in 0..body {
        for a in 0..H {
            for b in 0..K {
                acc[a][b][i % 8] = q[a][i].mul_add(k[b][i].to_f32(), acc[a][b][i % 8]);
            }
        }
    }
    let mut out = [[0.0f32; K]; H];
    for a in 0..H {
        for b in 0..K {
            let tail: f32 = q[a][body..]
                .iter()
                .zip(&k[b][body..])
                .map(|(x, y)| x * y.to_f32())
                .sum();
            out[a][b] = acc[a][b].iter().sum::<f32>() + tail;
        }
    }
    out
}

/// `exp_neg`'s constants, shared by its scalar and SIMD forms (which must agree to the bit).
pub(crate) mod exp_consts {
    pub const LOG2E: f32 = std::f32::consts::LOG2_E;
    /// ln 2 split so that `n * LN2_HI` is exact for the `n` that occur.
    pub const LN2_HI: f32 = 0.693_145_75;
    pub const LN2_LO: f32 = 1.428_606_8e-6;
    /// 1.5 * 2^23: added to a float of magnitude below 2^22 it rounds it to an integer (ties to
    /// even) and leaves that integer in the low mantissa bits.
    pub const MAGIC: f32 = 12_582_912.0;
    /// Below this `exp_neg` gives 0 (e^-87 is near the bottom of f32's normal range).
    pub const FLOOR: f32 = -87.0;
    /// Taylor coefficients of e^r, highest degree first (Horner's order).
    pub const POLY: [f32; 8] = [
        1.0 / 5040.0,
        1.0 / 720.0,
        1.0 / 120.0,
        1.0 / 24.0,
        1.0 / 6.0,
        0.5,
        1.0,
        1.0,
    ];
}

/// `e^x` for `x <= 0` (softmax arguments after the max is taken off) to within a few ulp:
/// `x = n ln 2 + r` with `|r| <= ln 2 / 2`, `e^r` by its Taylor polynomial to degree 7, `2^n`
/// through the exponent bits. Inputs below -87 (results near the bottom of f32's normal range)
/// give 0.
/// Written as plain arithmetic so loops over it vectorize inside the AVX2 entry point.
#[inline(always)]
pub fn exp_neg(x: f32) -> f32 {
    use exp_consts::*;
    // `n` and `2^n` come from float additions (MAGIC) and integer operations on the bits: no
    // float to int conversion, whose saturating form does not vectorize.
    let small = x < FLOOR;
    let x = x.max(FLOOR);
    let t = x * LOG2E + MAGIC;
    let n = t - MAGIC;
    let r = n.mul_add(-LN2_LO, n.mul_add(-LN2_HI, x));
    let mut p = POLY[0];
    for &c in &POLY[1..] {
        p = p.mul_add(r, c);
    }
    // n in -126..=0: its bits are t's minus MAGIC's.
    let e = t.to_bits().wrapping_sub(MAGIC.to_bits()).wrapping_add(127);
    let scale = f32::from_bits(e << 23);
    if small {
        0.0
    } else {
        p * scale
    }
}

/// Replaces `x` by `e^(x - max)` and returns the sum of the results, accumulated in f64 over
/// eight lanes (then the lanes in order, then the tail).
#[inline(always)]
fn exp_sum(x: &mut [f32], max: f32) -> f64 {
    let mut lanes = [0.0f64; 8];
    let (chunks, tail) = x.as_chunks_mut::<8>();
    for c in chunks {
        for j in 0..8 {
            c[j] = exp_neg(c[j] - max);
            lanes[j] += f64::from(c[j]);
        }
    }
    let mut sum = lanes.iter().sum::<f64>();
    for v in tail {
        *v = exp_neg(*v - max);
        sum += f64::from(*v);
    }
    sum
}

/// For `N` heads sharing one KV head: `acc[h] += w[h][pos] * v(pos)` over the positions in
/// order, with `acc` holding the heads' `hd`-float accumulators back to back and `w` their score
/// rows. 16-float slices of all `N` accumulators stay in registers across the positions (64-float
/// ones with AVX-512 where `hd` allows). The SIMD forms tell `b.next` after each slice.
#[inline(always)]
pub fn axpy_block<'v, const N: usize, L: Lanes, E: KvElem + 'v, P: Progress>(
    lanes: L,
    acc: &mut [f32],
    w: &[f32],
    b: &Block<P>,
    v: impl Fn(usize) -> &'v [E],
) {
    let _ = lanes;
    #[cfg(target_arch = "x86_64")]
    if L::SIMD && b.hd.is_multiple_of(WIDE) && Wide::detect().is_some() {
        // SAFETY: `L::SIMD` means AVX2, FMA and F16C were detected; `Wide` AVX-512F.
        unsafe { x86::axpy_block_512::<N, E, P>(acc, w, b, v) };
        return;
    }
    #[cfg(target_arch = "x86_64")]
    if L::SIMD && b.hd.is_multiple_of(16) {
        // SAFETY: `L::SIMD` means AVX2, FMA and F16C were detected.
        unsafe { x86::axpy_block::<N, E, P>(acc, w, b, v) };
        return;
    }
    const W: usize = 16;
    let (hd, span, base) = (b.hd, b.span, b.base);
    let body = hd - hd % W;
    let mut d = 0;
    while d < body {
        let mut a = [[0.0f32; W]; N];
        for (h, ah) in a.iter_mut().enumerate() {
            ah.copy_from_slice(&acc[h * hd + d..h * hd + d + W]);
        }
        for pos in b.positions.clone() {
            let vr = &v(pos)[d..d + W];
            for (h, ah) in a.iter_mut().enumerate() {
                let wt = w[h * span + pos - base];
                for j in 0..W {
                    ah[j] = wt.mul_add(vr[j].to_f32(), ah[j]);
                }
            }
        }
        for (h, ah) in a.iter().enumerate() {
            acc[h * hd + d..h * hd + d + W].copy_from_slice(ah);
        }
        d += W;
    }
    if body < hd {
        for pos in b.positions.clone() {
            let vr = &v(pos)[body..];
            for h in 0..N {
                let wt = w[h * span + pos - base];
                for (x, y) in acc[h * hd + body..(h + 1) * hd].iter_mut().zip(vr) {
                    *x = wt.mul_add(y.to_f32(), *x);
                }
            }
        }
    }
}

/// For `heads` heads that each have their own KV head: `acc[h] += w[h][pos] * v(pos)[h]` over
/// the positions in order, where `v(pos)` holds the heads' value rows back to back (`heads *
/// hd` elements), `acc` their accumulators back to back and `w` their score rows (`b.span`
/// apart). Position by position, each row's heads in turn, so the rows are read in memory
/// order (a decode streaming a tile whose rows hold many heads needs that; see the attention
/// kernel); the accumulators stay in L1 rather than registers. Per element the same fused
/// multiply-adds in the same position order as [`axpy_block`]: the same bits. The SIMD forms
/// tell `b.next` after each position.
///
/// Panics if the shapes do not fit (a caller bug).
#[inline(always)]
pub fn axpy_rows<'v, L: Lanes, E: KvElem + 'v, P: Progress>(
    lanes: L,
    acc: &mut [f32],
    w: &[f32],
    b: &Block<P>,
    heads: usize,
    v: impl Fn(usize) -> &'v [E],
) {
    let _ = lanes;
    let (hd, span, base) = (b.hd, b.span, b.base);
    let (p0, p1) = (b.positions.start, b.positions.end);
    if p0 >= p1 || heads == 0 {
        return;
    }
    assert!(
        acc.len() >= heads * hd && p0 >= base && (heads - 1) * span + p1 - base <= w.len(),
        "axpy_rows: shapes"
    );
    #[cfg(target_arch = "x86_64")]
    if L::SIMD && hd.is_multiple_of(16) && Wide::detect().is_some() {
        // SAFETY: `L::SIMD` means AVX2, FMA and F16C were detected, `Wide` AVX-512F; the
        // shapes were checked above.
        unsafe { x86::axpy_rows_512::<E, P>(acc, w, b, heads, v) };
        return;
    }
    #[cfg(target_arch = "x86_64")]
    if L::SIMD && hd.is_multiple_of(8) {
        // SAFETY: `L::SIMD` means AVX2, FMA and F16C were detected; shapes checked above.
        unsafe { x86::axpy_rows::<E, P>(acc, w, b, heads, v) };
        return;
    }
    for pos in p0..p1 {
        let row = &v(pos)[..heads * hd];
        for (h, vh) in row.chunks_exact(hd).enumerate() {
            let wt = w[h * span + pos - base];
            for (x, y) in acc[h * hd..(h + 1) * hd].iter_mut().zip(vh) {
                *x = wt.mul_add(y.to_f32(), *x);
            }
        }
    }
}
