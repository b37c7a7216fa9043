//! F16C/FMA versions of the f16 helpers in `crate::ops` (KV-cache rows and the GELU table).
//!
//! Callers must have detected AVX2 + FMA + F16C (see `crate::ops`). Conversions round to nearest
//! even, like the scalar path, so stored f16 bits are identical on every path.

use std::arch::x86_64::*;

use super::hsum_ps;

/// # Safety
/// AVX2, FMA and F16C must be available; `src.len() == dst.len()`.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn f32_to_f16_row(src: &[f32], dst: &mut [u16]) {
    let n = src.len().min(dst.len());
    let mut k = 0;
    while k + 8 <= n {
        // SAFETY: k + 8 <= n keeps both accesses in bounds; unaligned load/store.
        unsafe {
            let h =
                _mm256_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(_mm256_loadu_ps(src.as_ptr().add(k)));
            _mm_storeu_si128(dst.as_mut_ptr().add(k).cast(), h);
        }
        k += 8;
    }
    for i in k..n {
        dst[i] = half::f16::from_f32(src[i]).to_bits();
    }
}

/// # Safety
/// AVX2 and F16C must be available; `src.len() == dst.len()`.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn f16_to_f32_row(src: &[u16], dst: &mut [f32]) {
    let n = src.len().min(dst.len());
    let mut k = 0;
    while k + 8 <= n {
        // SAFETY: k + 8 <= n keeps both accesses in bounds; unaligned load/store.
        unsafe {
            let v = _mm256_cvtph_ps(_mm_loadu_si128(src.as_ptr().add(k).cast()));
            _mm256_storeu_ps(dst.as_mut_ptr().add(k), v);
        }
        k += 8;
    }
    for i in k..n {
        dst[i] = half::f16::from_bits(src[i]).to_f32();
    }
}

/// # Safety
/// AVX2, FMA and F16C must be available; `a.len() == b.len()`.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn dot_f16_f32(a: &[u16], b: &[f32]) -> f32 {
    let n = a.len().min(b.len());
    let mut acc = [_mm256_setzero_ps(); 2];
    let mut k = 0;
    while k + 8 <= n {
        // SAFETY: k + 8 <= n keeps both loads in bounds.
        unsafe {
            let x = _mm256_cvtph_ps(_mm_loadu_si128(a.as_ptr().add(k).cast()));
            let t = (k / 8) & 1;
            acc[t] = _mm256_fmadd_ps(x, _mm256_loadu_ps(b.as_ptr().add(k)), acc[t]);
        }
        k += 8;
    }
    // SAFETY: AVX is enabled here.
    let mut s = unsafe { hsum_ps(_mm256_add_ps(acc[0], acc[1])) };
    for i in k..n {
        s += half::f16::from_bits(a[i]).to_f32() * b[i];
    }
    s
}

/// # Safety
/// AVX2, FMA and F16C must be available; `x.len() == y.len()`.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn axpy_f16(alpha: f32, x: &[u16], y: &mut [f32]) {
    let n = x.len().min(y.len());
    let av = _mm256_set1_ps(alpha);
    let mut k = 0;
    while k + 8 <= n {
        // SAFETY: k + 8 <= n keeps all accesses in bounds.
        unsafe {
            let xv = _mm256_cvtph_ps(_mm_loadu_si128(x.as_ptr().add(k).cast()));
            let yp = y.as_mut_ptr().add(k);
            _mm256_storeu_ps(yp, _mm256_fmadd_ps(av, xv, _mm256_loadu_ps(yp)));
        }
        k += 8;
    }
    for i in k..n {
        y[i] += alpha * half::f16::from_bits(x[i]).to_f32();
    }
}

/// ggml-style GELU through an f16 table; see `crate::ops::gelu_tanh`. Eight values at a time:
/// F16C rounds them to f16 (the table indices), one gather reads the eight entries (four bytes at
/// each index, the entry in the low half), and two compares pick 0 or the input outside
/// (-10, 10) as the scalar code's branches do.
///
/// # Safety
/// AVX2 and F16C must be available.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn gelu_table(x: &mut [f32], table: &[u16]) {
    // A four-byte read at the last index must stay inside the table.
    assert!(
        table.len() > 1 << 16,
        "gelu_table: the table needs a padding entry"
    );
    let (chunks, tail) = x.as_chunks_mut::<8>();
    // SAFETY: each load and store covers one 8-float chunk; gather indices are f16 bits (below
    // 2^16), so each 4-byte read lies inside the padded table (asserted); AVX2/F16C per the
    // contract.
    unsafe {
        let (lo, hi) = (_mm256_set1_ps(-10.0), _mm256_set1_ps(10.0));
        let low_half = _mm256_set1_epi32(0xFFFF);
        for c in chunks {
            let v = _mm256_loadu_ps(c.as_ptr());
            let idx = _mm256_cvtepu16_epi32(_mm256_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(v));
            let g = _mm256_i32gather_epi32::<2>(table.as_ptr().cast(), idx);
            let g = _mm256_and_si256(g, low_half);
            let h = _mm_packus_epi32(_mm256_castsi256_si128(g), _mm256_extracti128_si256::<1>(g));
            let looked_up = _mm256_cvtph_ps(h);
            let above = _mm256_cmp_ps::<_CMP_GE_OQ>(v, hi);
            let below = _mm256_cmp_ps::<_CMP_LE_OQ>(v, lo);
            let r = _mm256_andnot_ps(below, _mm256_blendv_ps(looked_up, v, above));
            _mm256_storeu_ps(c.as_mut_ptr(), r);
        }
    }
    crate::ops::gelu_with_table(tail, table);
}

/// `round_half_even(v * s)` of eight values as i32, by the same float operations as the scalar
/// `quant::round_half_even` (add 1.5 * 2^23, take the bits), so the same results.
///
/// # Safety
/// The CPU must support AVX2 (the activation quantizers inline this only into their entry points,
/// which enable it; `crate::ops` calls those after detection).
#[inline(always)]
unsafe fn round_scaled(v: __m256, s: __m256) -> __m256i {
    // SAFETY: register operations only; AVX2 per this function's contract.
    unsafe {
        const MAGIC: f32 = 12_582_912.0;
        let m = _mm256_set1_ps(MAGIC);
        _mm256_sub_epi32(
            _mm256_castps_si256(_mm256_add_ps(_mm256_mul_ps(v, s), m)),
            _mm256_castps_si256(m),
        )
    }
}

/// 32 i32 values in `-128..=127` (four vectors, element order) as bytes.
///
/// # Safety
/// The CPU must support AVX2 (the activation quantizers inline this only into their entry points,
/// which enable it; `crate::ops` calls those after detection).
#[inline(always)]
unsafe fn pack_i8(q: [__m256i; 4]) -> [i8; 32] {
    // SAFETY: register operations and one 32-byte store into a local; AVX2 per this function's
    // contract.
    unsafe {
        let ab = _mm256_packs_epi32(q[0], q[1]);
        let cd = _mm256_packs_epi32(q[2], q[3]);
        // Lanes now hold [a0-3 b0-3 c0-3 d0-3 | a4-7 b4-7 c4-7 d4-7] by dwords of four bytes.
        let abcd = _mm256_packs_epi16(ab, cd);
        let ordered = _mm256_permutevar8x32_epi32(abcd, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
        let mut out = [0i8; 32];
        _mm256_storeu_si256(out.as_mut_ptr().cast(), ordered);
        out
    }
}

/// The sum of the eight i32 lanes.
///
/// # Safety
/// The CPU must support AVX2 (the activation quantizers inline this only into their entry points,
/// which enable it; `crate::ops` calls those after detection).
#[inline(always)]
unsafe fn hsum_epi32(v: __m256i) -> i32 {
    // SAFETY: register operations only; AVX2 per this function's contract.
    unsafe {
        let s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256::<1>(v));
        let s = _mm_add_epi32(s, _mm_shuffle_epi32::<0b01_00_11_10>(s));
        let s = _mm_add_epi32(s, _mm_shuffle_epi32::<0b10_11_00_01>(s));
        _mm_cvtsi128_si32(s)
    }
}

/// The largest `|x|` of `x` (a multiple of 8 long); maxima are exact in any order.
///
/// # Safety
/// The CPU must support AVX (the activation quantizers inline this only into their entry points,
/// which enable AVX2), and `x.len()` is a multiple of 8: the loads are unchecked.
#[inline(always)]
unsafe fn abs_max(x: &[f32]) -> f32 {
    // SAFETY: the loads read x[i..i + 8] with i + 8 <= len, as `len` is a multiple of 8 (this
    // function's contract), and a 32-byte store into a local; AVX per the contract.
    unsafe {
        let sign = _mm256_set1_ps(-0.0);
        let mut m = _mm256_setzero_ps();
        for i in (0..x.len()).step_by(8) {
            // max(|v|, m) returns m when v is NaN, as `f32::max` skips NaN.
            m = _mm256_max_ps(
                _mm256_andnot_ps(sign, _mm256_loadu_ps(x.as_ptr().add(i))),
                m,
            );
        }
        let mut lanes = [0f32; 8];
        _mm256_storeu_ps(lanes.as_mut_ptr(), m);
        lanes.iter().fold(0.0f32, |a, &b| a.max(b))
    }
}

/// AVX2 form of `quant::legacy::quantize_act_q8_0` (the same bits for finite inputs).
///
/// # Safety
/// AVX2, FMA and F16C must be available; `x.len() == 32 * out.len()`.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn quantize_act_q8_0(x: &[f32], out: &mut [crate::quant::ActQ8_0]) {
    use crate::quant::{f16_to_f32, f32_to_f16, ActQ8_0};
    for (chunk, block) in x.chunks_exact(32).zip(out.iter_mut()) {
        // SAFETY: AVX2 (and so AVX) is enabled here; `chunk` holds 32 floats, a multiple of 8
        // for `abs_max`, and the loads read chunk[8k..8k + 8] for k < 4.
        unsafe {
            let amax = abs_max(chunk);
            let d = amax / 127.0;
            let id = _mm256_set1_ps(if amax != 0.0 { 127.0 / amax } else { 0.0 });
            let q: [__m256i; 4] = std::array::from_fn(|k| {
                round_scaled(_mm256_loadu_ps(chunk.as_ptr().add(8 * k)), id)
            });
            let sum = hsum_epi32(_mm256_add_epi32(
                _mm256_add_epi32(q[0], q[1]),
                _mm256_add_epi32(q[2], q[3]),
            ));
            *block = ActQ8_0::new(f16_to_f32(f32_to_f16(d)), pack_i8(q), sum);
        }
    }
}

/// `crate::ops::square_sums::<8>` eight lanes wide: lane `j` of the f64 sums is row `j`'s. Eight
/// elements of each row are loaded and transposed, so that each add takes element `i` of all
/// eight rows. Per row the same squares (in f32) added in the same order from the same zero:
/// the same bits, without eight scalar chains.
///
/// # Safety
/// AVX2 must be available; `x` holds eight rows of `d` values.
#[target_feature(enable = "avx2,fma")]
pub(crate) unsafe fn square_sums8(x: &[f32], d: usize) -> [f64; 8] {
    assert!(x.len() >= 8 * d, "square_sums8: shapes");
    let body = d - d % 8;
    let mut out = [0.0f64; 8];
    // SAFETY: loads read x[j * d + i..+8] for j < 8, i + 8 <= body <= d, inside `x` (asserted);
    // AVX2 per the contract.
    unsafe {
        let (mut lo, mut hi) = (_mm256_setzero_pd(), _mm256_setzero_pd());
        let mut i = 0;
        while i < body {
            let r: [__m256; 8] = std::array::from_fn(|j| {
                let v = _mm256_loadu_ps(x.as_ptr().add(j * d + i));
                _mm256_mul_ps(v, v)
            });
            for col in transpose8(r) {
                lo = _mm256_add_pd(lo, _mm256_cvtps_pd(_mm256_castps256_ps128(col)));
                hi = _mm256_add_pd(hi, _mm256_cvtps_pd(_mm256_extractf128_ps::<1>(col)));
            }
            i += 8;
        }
        _mm256_storeu_pd(out.as_mut_ptr(), lo);
        _mm256_storeu_pd(out.as_mut_ptr().add(4), hi);
    }
    for (j, o) in out.iter_mut().enumerate() {
        for &v in &x[j * d + body..(j + 1) * d] {
            *o += f64::from(v * v);
        }
    }
    out
}

/// The 8x8 transpose: vector `k` of the result holds element `k` of each input, in input order.
///
/// # Safety
/// The CPU must support AVX (`square_sums8` inlines this into its entry point, which enables AVX2).
#[inline(always)]
unsafe fn transpose8(r: [__m256; 8]) -> [__m256; 8] {
    // SAFETY: register operations only; AVX per this function's contract.
    unsafe {
        let t0 = _mm256_unpacklo_ps(r[0], r[1]);
        let t1 = _mm256_unpackhi_ps(r[0], r[1]);
        let t2 = _mm256_unpacklo_ps(r[2], r[3]);
        let t3 = _mm256_unpackhi_ps(r[2], r[3]);
        let t4 = _mm256_unpacklo_ps(r[4], r[5]);
        let t5 = _mm256_unpackhi_ps(r[4], r[5]);
        let t6 = _mm256_unpacklo_ps(r[6], r[7]);
        let t7 = _mm256_unpackhi_ps(r[6], r[7]);
        let s0 = _mm256_shuffle_ps::<0x44>(t0, t2);
        let s1 = _mm256_shuffle_ps::<0xEE>(t0, t2);
        let s2 = _mm256_shuffle_ps::<0x44>(t1, t3);
        let s3 = _mm256_shuffle_ps::<0xEE>(t1, t3);
        let s4 = _mm256_shuffle_ps::<0x44>(t4, t6);
        let s5 = _mm256_shuffle_ps::<0xEE>(t4, t6);
        let s6 = _mm256_shuffle_ps::<0x44>(t5, t7);
        let s7 = _mm256_shuffle_ps::<0xEE>(t5, t7);
        [
            _mm256_permute2f128_ps::<0x20>(s0, s4),
            _mm256_permute2f128_ps::<0x20>(s1, s5),
            _mm256_permute2f128_ps::<0x20>(s2, s6),
            _mm256_permute2f128_ps::<0x20>(s3, s7),
            _mm256_permute2f128_ps::<0x31>(s0, s4),
            _mm256_permute2f128_ps::<0x31>(s1, s5),
            _mm256_permute2f128_ps::<0x31>(s2, s6),
            _mm256_permute2f128_ps::<0x31>(s3, s7),
        ]
    }
}

/// AVX2 form of `quant::kquants::quantize_row_q8_k` (the same bits for finite inputs).
///
/// # Safety
/// AVX2, FMA and F16C must be available; `x.len() == 256 * out.len()`.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn quantize_row_q8_k(x: &[f32], out: &mut [crate::quant::BlockQ8K]) {
    use crate::quant::BlockQ8K;
    for (chunk, block) in x.chunks_exact(256).zip(out.iter_mut()) {
        // SAFETY: AVX2 (and so AVX) is enabled here; `chunk` holds 256 floats, a multiple of 8
        // for `abs_max`, and the loads read chunk[32g + 8k..+8] for g < 8, k < 4.
        unsafe {
            let amax = abs_max(chunk);
            if amax == 0.0 {
                *block = BlockQ8K::default();
                continue;
            }
            // The scalar path takes the sign of the first value of largest magnitude.
            let max = chunk
                .iter()
                .copied()
                .find(|v| v.abs() == amax)
                .unwrap_or(amax);
            let iscale = -127.0 / max;
            let s = _mm256_set1_ps(iscale);
            let top = _mm256_set1_epi32(127);
            for g in 0..8 {
                let q: [__m256i; 4] = std::array::from_fn(|k| {
                    let v = _mm256_loadu_ps(chunk.as_ptr().add(32 * g + 8 * k));
                    _mm256_min_epi32(round_scaled(v, s), top)
                });
                block.qs[32 * g..32 * g + 32].copy_from_slice(&pack_i8(q));
                block.bsums[2 * g] = hsum_epi32(_mm256_add_epi32(q[0], q[1])) as i16;
                block.bsums[2 * g + 1] = hsum_epi32(_mm256_add_epi32(q[2], q[3])) as i16;
                block.sub_sums[g] = block.bsums[2 * g] + block.bsums[2 * g + 1];
            }
            block.d = 1.0 / iscale;
        }
    }
}

/// [`crate::ops::silu_mul`]'s lanes: eight at a time, the scalar `exp_poly` operation by
/// operation (same bits); returns how many leading elements it wrote (the rest are the caller's).
///
/// # Safety
/// AVX2 and FMA must be available; `up`, when given, at least as long as `x`.
#[target_feature(enable = "avx2,fma")]
pub(crate) unsafe fn silu_mul(x: &mut [f32], up: Option<&[f32]>) -> usize {
    use crate::ops::{EXP_MAX, EXP_MIN, EXP_POLY, LN2_HI, LN2_LO};
    let n = x.len() / 8 * 8;
    let one = _mm256_set1_ps(1.0);
    for i in (0..n).step_by(8) {
        // SAFETY: i + 8 <= n <= x.len() (and <= up.len()); AVX2/FMA enabled.
        unsafe {
            let v = _mm256_loadu_ps(x.as_ptr().add(i));
            let t = _mm256_sub_ps(_mm256_setzero_ps(), v);
            let t = _mm256_min_ps(
                _mm256_max_ps(t, _mm256_set1_ps(EXP_MIN)),
                _mm256_set1_ps(EXP_MAX),
            );
            let k = _mm256_round_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(
                _mm256_mul_ps(t, _mm256_set1_ps(std::f32::consts::LOG2_E)),
            );
            let r = _mm256_fmadd_ps(k, _mm256_set1_ps(-LN2_HI), t);
            let r = _mm256_fmadd_ps(k, _mm256_set1_ps(-LN2_LO), r);
            let mut p = _mm256_set1_ps(EXP_POLY[0]);
            for c in &EXP_POLY[1..] {
                p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(*c));
            }
            let p = _mm256_fmadd_ps(_mm256_fmadd_ps(p, r, one), r, one);
            let pow2 = _mm256_castsi256_ps(_mm256_slli_epi32::<23>(_mm256_add_epi32(
                _mm256_cvtps_epi32(k),
                _mm256_set1_epi32(127),
            )));
            let mut y = _mm256_div_ps(v, _mm256_add_ps(one, _mm256_mul_ps(p, pow2)));
            if let Some(up) = up {
                y = _mm256_mul_ps(y, _mm256_loadu_ps(up.as_ptr().add(i)));
            }
            _mm256_storeu_ps(x.as_mut_ptr().add(i), y);
        }
    }
    n
}

#[cfg(test)]
mod tests {
    use crate::quant::{
        kquants::quantize_row_q8_k_scalar, legacy::quantize_act_q8_0_scalar, ActQ8_0, BlockQ8K,
    };

    /// Rows with ties (halves after scaling), zeros, a negative extreme, repeated extremes of
    /// both signs, NaN-free random values of many magnitudes.
    fn rows() -> Vec<Vec<f32>> {
        let mut s = 0x9E37_79B9_7F4A_7C15u64;
        let mut unit = || {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            (s >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0
        };
        let mut out = vec![vec![0.0; 512]];
        for scale in [1e-3f32, 1.0, 37.0, 3e4] {
            out.push((0..512).map(|_| unit() * scale).collect());
        }
        // Multiples of 127 / 2 / 127 land on .5 after scaling: ties to even.
        out.push((0..512).map(|i| (i % 255) as f32 * 0.5 - 63.5).collect());
        let mut both = vec![0.25f32; 512];
        both[3] = -2.0;
        both[9] = 2.0;
        both[300] = 2.0;
        both[301] = -2.0;
        out.push(both);
        out
    }

    #[test]
    fn simd_activation_quantizers_give_the_scalar_bits() {
        if !super::super::avx2_available() {
            return;
        }
        for x in rows() {
            let (mut a, mut b) = (vec![ActQ8_0::default(); 16], vec![ActQ8_0::default(); 16]);
            quantize_act_q8_0_scalar(&x, &mut a);
            // SAFETY: AVX2 detected above; 512 = 32 x 16.
            unsafe { super::quantize_act_q8_0(&x, &mut b) };
            for (p, q) in a.iter().zip(&b) {
                assert_eq!((p.d.to_bits(), p.sum, p.qs), (q.d.to_bits(), q.sum, q.qs));
            }
            let (mut a, mut b) = (vec![BlockQ8K::default(); 2], vec![BlockQ8K::default(); 2]);
            quantize_row_q8_k_scalar(&x, &mut a);
            // SAFETY: as above; 512 = 256 x 2.
            unsafe { super::quantize_row_q8_k(&x, &mut b) };
            for (p, q) in a.iter().zip(&b) {
                assert_eq!(
                    (p.d.to_bits(), p.qs, p.bsums, p.sub_sums),
                    (q.d.to_bits(), q.qs, q.bsums, q.sub_sums)
                );
            }
        }
    }
}
