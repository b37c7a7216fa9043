//! Small element-wise and reduction kernels of the forward pass, plus f16 helpers for a KV cache.
//!
//! Where llama.cpp's numerics are cheap to follow they are followed, since the model must
//! reproduce its greedy tokens: RMS norm sums squares in f64 and applies scale then weight as two
//! roundings; softmax sums in f64; [`gelu_tanh`] goes through ggml's f16 lookup table.
//! f16 values are passed as raw `u16` bits so callers need not depend on a half-float crate.
//! The f16 helpers and the GELU table lookup use F16C/FMA when the CPU has them (`kernel::isa`);
//! conversions round identically on both paths.

use std::sync::OnceLock;

#[cfg(target_arch = "x86_64")]
use crate::kernel::{isa, Isa};

/// True when the F16C/FMA paths may be used (checked once; see `kernel::isa`).
#[cfg(target_arch = "x86_64")]
#[inline]
fn simd() -> bool {
    isa() >= Isa::Avx2
}

/// `out = x / sqrt(mean(x^2) + eps) * weight`.
pub fn rms_norm(x: &[f32], weight: &[f32], eps: f32, out: &mut [f32]) {
    assert_eq!(x.len(), weight.len(), "rms_norm: weight length");
    assert_eq!(x.len(), out.len(), "rms_norm: out length");
    rms_norm_rows(x, weight, eps, out);
}

/// [`rms_norm`] of `x` into itself (the same bits).
pub fn rms_norm_in_place(x: &mut [f32], weight: &[f32], eps: f32) {
    assert_eq!(x.len(), weight.len(), "rms_norm: weight length");
    rms_norm_rows_in_place(x, weight, eps);
}

/// `1 / sqrt(mean(x^2) + eps)`, the squares summed in f64 as ggml does.
fn rms_scale(x: &[f32], eps: f32) -> f32 {
    scale_of(square_sums::<1>(x, x.len())[0], x.len(), eps)
}

fn scale_of(sum: f64, d: usize, eps: f32) -> f32 {
    let mean = (sum / d.max(1) as f64) as f32;
    1.0 / (mean + eps).sqrt()
}

/// The f64 sums of squares of the `R` rows of `d` values at the start of `x`, each in element
/// order as one row alone is summed. A row's sum is a chain of dependent additions; taking rows
/// side by side lets `R` chains overlap, with the same bits.
#[inline(always)]
fn square_sums<const R: usize>(x: &[f32], d: usize) -> [f64; R] {
    let rows: [&[f32]; R] = std::array::from_fn(|j| &x[j * d..(j + 1) * d]);
    let mut acc = [0.0f64; R];
    for i in 0..d {
        for (a, row) in acc.iter_mut().zip(&rows) {
            let v = row[i];
            *a += f64::from(v * v);
        }
    }
    acc
}

/// [`square_sums`] of eight rows, in SIMD lanes where the CPU has AVX2 (the same bits).
fn square_sums8(x: &[f32], d: usize) -> [f64; 8] {
    #[cfg(target_arch = "x86_64")]
    if simd() {
        // SAFETY: AVX2 detected; `x` holds eight rows (the callers' groups).
        return unsafe { crate::kernel::x86::ops::square_sums8(x, d) };
    }
    square_sums::<8>(x, d)
}

/// Rows whose sums [`rms_norm_rows`] runs side by side.
const ROWS_AT_ONCE: usize = 8;

/// The scales of the (at most `ROWS_AT_ONCE`) `d`-value rows of `x`, as [`rms_norm`] computes
/// them, into the start of `scales`.
fn group_scales(x: &[f32], d: usize, eps: f32, scales: &mut [f32; ROWS_AT_ONCE]) {
    let n = x.len() / d;
    let mut r = 0;
    if n == ROWS_AT_ONCE {
        let sums = square_sums8(x, d);
        for (s, sum) in scales.iter_mut().zip(sums) {
            *s = scale_of(sum, d, eps);
        }
        r = n;
    }
    while r + 2 <= n {
        let sums = square_sums::<2>(&x[r * d..], d);
        scales[r] = scale_of(sums[0], d, eps);
        scales[r + 1] = scale_of(sums[1], d, eps);
        r += 2;
    }
    if r < n {
        scales[r] = rms_scale(&x[r * d..(r + 1) * d], eps);
    }
}

/// [`rms_norm`] of each `weight.len()`-value row of `x` into the same row of `out`: the same
/// bits as row by row, with the sums of squares of eight rows run side by side.
pub fn rms_norm_rows(x: &[f32], weight: &[f32], eps: f32, out: &mut [f32]) {
    let d = weight.len();
    assert!(
        d > 0 && x.len().is_multiple_of(d) && out.len() == x.len(),
        "rms_norm_rows: shapes"
    );
    let mut scales = [0.0f32; ROWS_AT_ONCE];
    for (xg, og) in x
        .chunks(ROWS_AT_ONCE * d)
        .zip(out.chunks_mut(ROWS_AT_ONCE * d))
    {
        group_scales(xg, d, eps, &mut scales);
        for ((xr, or), &scale) in xg.chunks_exact(d).zip(og.chunks_exact_mut(d)).zip(&scales) {
            for ((o, &v), &w) in or.iter_mut().zip(xr).zip(weight) {
                *o = (v * scale) * w;
            }
        }
    }
}

/// [`rms_norm_rows`] of `x` into itself (the same bits).
pub fn rms_norm_rows_in_place(x: &mut [f32], weight: &[f32], eps: f32) {
    let d = weight.len();
    assert!(d > 0 && x.len().is_multiple_of(d), "rms_norm_rows: shapes");
    let mut scales = [0.0f32; ROWS_AT_ONCE];
    for g in x.chunks_mut(ROWS_AT_ONCE * d) {
        group_scales(g, d, eps, &mut scales);
        for (row, &scale) in g.chunks_exact_mut(d).zip(&scales) {
            for (v, &w) in row.iter_mut().zip(weight) {
                *v = (*v * scale) * w;
            }
        }
    }
}

/// LayerNorm of each `weight.len()`-value row of `x` in place, as ggml's `norm` then the weight
/// and bias: the mean and the variance summed in f64, `(x - mean) / sqrt(var + eps)` rounded to
/// f32, then `* weight + bias` (two roundings, as ggml's separate mul and add).
pub fn layer_norm_rows_in_place(x: &mut [f32], weight: &[f32], bias: &[f32], eps: f32) {
    let d = weight.len();
    assert!(
        d > 0 && bias.len() == d && x.len().is_multiple_of(d),
        "layer_norm_rows: shapes"
    );
    for row in x.chunks_exact_mut(d) {
        let mean = (row.iter().map(|&v| f64::from(v)).sum::<f64>() / d as f64) as f32;
        let mut var = 0.0f64;
        for v in row.iter_mut() {
            *v -= mean;
            var += f64::from(*v * *v);
        }
        let scale = 1.0 / ((var / d as f64) as f32 + eps).sqrt();
        for ((v, &w), &b) in row.iter_mut().zip(weight).zip(bias) {
            *v = (*v * scale) * w + b;
        }
    }
}

/// In-place softmax; an empty slice is left alone, `-inf` entries become 0.
pub fn softmax(x: &mut [f32]) {
    let max = x.iter().fold(f32::NEG_INFINITY, |m, &v| m.max(v));
    if max == f32::NEG_INFINITY {
        return;
    }
    let mut sum = 0.0f64;
    for v in x.iter_mut() {
        *v = (*v - max).exp();
        sum += f64::from(*v);
    }
    let inv = (1.0 / sum) as f32;
    for v in x.iter_mut() {
        *v *= inv;
    }
}

const SQRT_2_OVER_PI: f32 = 0.797_884_6;
const GELU_COEF_A: f32 = 0.044_715;

#[inline]
fn gelu_tanh_scalar(x: f32) -> f32 {
    0.5 * x * (1.0 + (SQRT_2_OVER_PI * x * (1.0 + GELU_COEF_A * x * x)).tanh())
}

/// In-place tanh-approximated GELU in full f32.
pub fn gelu_tanh_exact(x: &mut [f32]) {
    for v in x.iter_mut() {
        *v = gelu_tanh_scalar(*v);
    }
}

/// ggml's table: GELU of every f16 input, rounded to f16; one padding entry after it, so a
/// four-byte gather at the last index stays inside.
fn gelu_table() -> &'static [u16] {
    static TABLE: OnceLock<Vec<u16>> = OnceLock::new();
    TABLE.get_or_init(|| {
        (0..=u16::MAX)
            .map(|bits| {
                half::f16::from_f32(gelu_tanh_scalar(half::f16::from_bits(bits).to_f32())).to_bits()
            })
            .chain([0])
            .collect()
    })
}

/// In-place tanh-approximated GELU as llama.cpp computes it: inputs in (-10, 10) are rounded to
/// f16 and looked up in a table of f16 results; outside that range it is 0 or the identity.
pub fn gelu_tanh(x: &mut [f32]) {
    let table = gelu_table();
    #[cfg(target_arch = "x86_64")]
    if simd() {
        // SAFETY: AVX2/FMA/F16C detected.
        unsafe { crate::kernel::x86::ops::gelu_table(x, table) };
        return;
    }
    gelu_with_table(x, table);
}

/// [`gelu_tanh`]'s element by element form.
pub(crate) fn gelu_with_table(x: &mut [f32], table: &[u16]) {
    for v in x.iter_mut() {
        *v = if *v <= -10.0 {
            0.0
        } else if *v >= 10.0 {
            *v
        } else {
            half::f16::from_bits(table[usize::from(half::f16::from_f32(*v).to_bits())]).to_f32()
        };
    }
}

/// In-place SiLU: `x / (1 + e^-x)`, with `exp_poly`'s `e^-x` (the same bits on every path).
pub fn silu(x: &mut [f32]) {
    silu_mul_with(x, None);
}

/// `gate[i] = silu(gate[i]) * up[i]`: [`silu`] then [`mul`], in one sweep, the same bits.
pub fn silu_mul(gate: &mut [f32], up: &[f32]) {
    assert_eq!(gate.len(), up.len(), "silu_mul: length mismatch");
    silu_mul_with(gate, Some(up));
}

/// gpt-oss's gated activation, as ggml's `swiglu_oai`: with `g = min(gate[i], limit)` and
/// `u = clamp(up[i], -limit, limit)`, `gate[i] = g * sigmoid(alpha * g) * (u + 1)` (libm's
/// `exp`, as ggml's `expf`).
pub fn swiglu_oai(gate: &mut [f32], up: &[f32], alpha: f32, limit: f32) {
    assert_eq!(gate.len(), up.len(), "swiglu_oai: length mismatch");
    for (g, &u) in gate.iter_mut().zip(up) {
        let x = g.min(limit);
        let y = u.clamp(-limit, limit);
        *g = x / (1.0 + (alpha * -x).exp()) * (y + 1.0);
    }
}

fn silu_mul_with(x: &mut [f32], up: Option<&[f32]>) {
    let mut done = 0;
    #[cfg(target_arch = "x86_64")]
    if simd() {
        // SAFETY: AVX2/FMA detected; `up`, when given, is as long as `x` (checked by the callers).
        done = unsafe { crate::kernel::x86::ops::silu_mul(x, up) };
    }
    for (i, v) in x.iter_mut().enumerate().skip(done) {
        *v /= 1.0 + exp_poly(-*v);
        if let Some(up) = up {
            *v *= up[i];
        }
    }
}

/// `ln 2` split so that `n * LN2_HI` is exact for the `n` of [`exp_poly`].
pub(crate) const LN2_HI: f32 = 0.693_145_75;
pub(crate) const LN2_LO: f32 = 1.428_606_8e-6;
/// Where [`exp_poly`] clamps its argument: `2^n` stays a normal float down to `EXP_MIN`; from
/// about 88.4 up `n` is 128, whose exponent bits make `2^n` infinite (as `e^x` is, in f32, from
/// 88.73), so SiLU of a large negative input is `-0`.
pub(crate) const EXP_MIN: f32 = -87.0;
pub(crate) const EXP_MAX: f32 = 89.0;
/// Taylor coefficients `1/6!` .. `1/2!` of [`exp_poly`]'s polynomial (then `r + 1`).
pub(crate) const EXP_POLY: [f32; 5] = [1.0 / 720.0, 1.0 / 120.0, 1.0 / 24.0, 1.0 / 6.0, 0.5];

/// `e^x` within ~2 ulp for x in [-87, 88.4] (clamped to [-87, 89], infinite from ~88.4), as SIMD lanes compute it: `n` the
/// nearest integer to `x / ln 2`, `r = x - n ln 2` (|r| <= ln 2 / 2) by two fused steps, a
/// degree-6 Taylor polynomial of `e^r` by fused multiply-adds, times `2^n` built in the exponent
/// bits. Every operation is one the AVX2 lanes do alike (fma, round to nearest even), so the
/// scalar and SIMD forms give the same bits; llama.cpp also uses a polynomial `exp` for SiLU.
#[inline]
pub(crate) fn exp_poly(x: f32) -> f32 {
    let x = x.clamp(EXP_MIN, EXP_MAX);
    let n = (x * std::f32::consts::LOG2_E).round_ties_even();
    let r = n.mul_add(-LN2_LO, n.mul_add(-LN2_HI, x));
    let mut p = EXP_POLY[0];
    for c in &EXP_POLY[1..] {
        p = p.mul_add(r, *c);
    }
    let p = p.mul_add(r, 1.0).mul_add(r, 1.0);
    p * f32::from_bits(((n as i32 + 127) as u32) << 23)
}

/// `a[i] *= b[i]`.
pub fn mul(a: &mut [f32], b: &[f32]) {
    assert_eq!(a.len(), b.len(), "mul: length mismatch");
    for (x, &y) in a.iter_mut().zip(b) {
        *x *= y;
    }
}

/// `a[i] += b[i]`.
pub fn add(a: &mut [f32], b: &[f32]) {
    assert_eq!(a.len(), b.len(), "add: length mismatch");
    for (x, &y) in a.iter_mut().zip(b) {
        *x += y;
    }
}

/// `x[i] *= s`.
pub fn scale(x: &mut [f32], s: f32) {
    for v in x.iter_mut() {
        *v *= s;
    }
}

/// Rounds a row of f32 to f16 bits (nearest, ties to even), e.g. to store a K or V row.
pub fn f32_to_f16_row(src: &[f32], dst: &mut [u16]) {
    assert_eq!(src.len(), dst.len(), "f32_to_f16_row: length mismatch");
    #[cfg(target_arch = "x86_64")]
    if simd() {
        // SAFETY: AVX2/FMA/F16C detected; lengths checked above.
        unsafe { crate::kernel::x86::ops::f32_to_f16_row(src, dst) };
        return;
    }
    for (d, &s) in dst.iter_mut().zip(src) {
        *d = half::f16::from_f32(s).to_bits();
    }
}

/// Widens a row of f16 bits to f32.
pub fn f16_to_f32_row(src: &[u16], dst: &mut [f32]) {
    assert_eq!(src.len(), dst.len(), "f16_to_f32_row: length mismatch");
    #[cfg(target_arch = "x86_64")]
    if simd() {
        // SAFETY: AVX2/FMA/F16C detected; lengths checked above.
        unsafe { crate::kernel::x86::ops::f16_to_f32_row(src, dst) };
        return;
    }
    for (d, &s) in dst.iter_mut().zip(src) {
        *d = half::f16::from_bits(s).to_f32();
    }
}

/// Dot of an f16 row (bits) with an f32 row, e.g. a cached key with a query.
pub fn dot_f16_f32(a: &[u16], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len(), "dot_f16_f32: length mismatch");
    #[cfg(target_arch = "x86_64")]
    if simd() {
        // SAFETY: AVX2/FMA/F16C detected; lengths checked above.
        return unsafe { crate::kernel::x86::ops::dot_f16_f32(a, b) };
    }
    let mut lanes = [0.0f32; 8];
    for (i, (&h, &v)) in a.iter().zip(b).enumerate() {
        lanes[i % 8] += half::f16::from_bits(h).to_f32() * v;
    }
    lanes.iter().sum()
}

/// `y += a * x` with `x` an f16 row (bits), e.g. accumulating a cached value row.
pub fn axpy_f16(a: f32, x: &[u16], y: &mut [f32]) {
    assert_eq!(x.len(), y.len(), "axpy_f16: length mismatch");
    #[cfg(target_arch = "x86_64")]
    if simd() {
        // SAFETY: AVX2/FMA/F16C detected; lengths checked above.
        unsafe { crate::kernel::x86::ops::axpy_f16(a, x, y) };
        return;
    }
    for (o, &h) in y.iter_mut().zip(x) {
        *o += a * half::f16::from_bits(h).to_f32();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn side_by_side_square_sums_keep_each_rows_order() {
        // Each row starts with 1e8, whose square 1e16 leaves no room in f64 for the ones after
        // it one by one; summed the other way the ones add up first.
        let d = 40;
        let x: Vec<f32> = (0..8 * d)
            .map(|i| if i % d == 0 { 1e8 } else { 1.0 })
            .collect();
        let sums = square_sums::<8>(&x, d);
        assert_eq!(square_sums8(&x, d), sums, "SIMD lanes");
        // Row lengths with a tail past the eight-element steps, and none at all; values of many
        // magnitudes.
        for n in [43, 7, 16] {
            let y: Vec<f32> = (0..8 * n)
                .map(|i| ((i * 7919) % 1013) as f32 * 10f32.powi((i % 9) as i32 - 4))
                .collect();
            assert_eq!(square_sums8(&y, n), square_sums::<8>(&y, n), "rows of {n}");
        }
        for (j, &sum) in sums.iter().enumerate() {
            let row = &x[j * d..(j + 1) * d];
            let in_order = row.iter().fold(0.0f64, |a, &v| a + f64::from(v * v));
            let reversed = row.iter().rev().fold(0.0f64, |a, &v| a + f64::from(v * v));
            assert_eq!(sum.to_bits(), in_order.to_bits(), "row {j}");
            // The data can tell the orders apart, so the check above means something.
            assert_ne!(in_order.to_bits(), reversed.to_bits(), "row {j}");
        }
        assert_eq!(square_sums::<2>(&x, d), [sums[0], sums[1]]);
    }

    #[test]
    fn gelu_gives_the_element_by_element_bits_at_the_edges() {
        let mut x = vec![
            -10.0,
            10.0,
            f32::from_bits((-10.0f32).to_bits() - 1),
            f32::from_bits(10.0f32.to_bits() - 1),
            -0.0,
            0.0,
            1e-9,
            -1e-9,
            65504.0,
            -65504.0,
            70000.0,
            f32::INFINITY,
            f32::NEG_INFINITY,
            f32::NAN,
            3.25,
            -2.5,
            0.1,
        ];
        x.extend((0..4000).map(|i| (i as f32 - 2000.0) * 0.00613));
        let mut want = x.clone();
        gelu_with_table(&mut want, gelu_table());
        let mut got = x.clone();
        gelu_tanh(&mut got);
        for ((g, w), v) in got.iter().zip(&want).zip(&x) {
            assert!(
                g.to_bits() == w.to_bits() || (g.is_nan() && w.is_nan()),
                "gelu({v}) = {g} against {w}"
            );
        }
    }

    #[test]
    fn layer_norm_matches_a_float64_reference() {
        let d = 37;
        let x: Vec<f32> = (0..3 * d)
            .map(|i| ((i * 7919) % 101) as f32 / 13.0 - 3.0)
            .collect();
        let w: Vec<f32> = (0..d).map(|i| 0.5 + i as f32 / 40.0).collect();
        let b: Vec<f32> = (0..d).map(|i| i as f32 / 100.0 - 0.2).collect();
        let mut got = x.clone();
        layer_norm_rows_in_place(&mut got, &w, &b, 1e-5);
        for (row, out) in x.chunks(d).zip(got.chunks(d)) {
            let mean = row.iter().map(|&v| f64::from(v)).sum::<f64>() / d as f64;
            let var = row
                .iter()
                .map(|&v| (f64::from(v) - mean).powi(2))
                .sum::<f64>()
                / d as f64;
            for i in 0..d {
                let want = (f64::from(row[i]) - mean) / (var + 1e-5).sqrt() * f64::from(w[i])
                    + f64::from(b[i]);
                assert!(
                    (f64::from(out[i]) - want).abs() < 1e-5,
                    "{} vs {want}",
                    out[i]
                );
            }
        }
    }

    #[test]
    fn swiglu_oai_clamps_the_gate_above_and_up_both_ways() {
        let (alpha, limit) = (1.702f32, 7.0f32);
        let gate = [-9.0f32, -1.0, 0.0, 0.5, 3.0, 7.0, 20.0];
        let up = [12.0f32, -12.0, 1.0, -0.5, 2.0, 0.0, -3.0];
        let mut got = gate;
        swiglu_oai(&mut got, &up, alpha, limit);
        for ((g, u), out) in gate.iter().zip(&up).zip(&got) {
            let x = f64::from(g.min(limit));
            let y = f64::from(u.clamp(-limit, limit));
            let want = x / (1.0 + (-1.702 * x).exp()) * (y + 1.0);
            assert!(
                (f64::from(*out) - want).abs() < 1e-5 * want.abs().max(1.0),
                "{g}, {u}"
            );
        }
        // The gate is not clamped below: a very negative one still gives (almost) zero.
        assert!(got[0].abs() < 1e-4 && got[0] != 0.0);
    }
}
