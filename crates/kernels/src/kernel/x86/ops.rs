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

/// ggml-style GELU through an f16 table; see `crate::ops::gelu_tanh`.
///
/// # Safety
/// AVX2 and F16C must be available; `table.len() == 65536`.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn gelu_table(x: &mut [f32], table: &[u16]) {
    let mut idx = [0u16; 8];
    let mut res = [0u16; 8];
    for chunk in x.chunks_mut(8) {
        let n = chunk.len();
        let mut vals = [0f32; 8];
        vals[..n].copy_from_slice(chunk);
        // SAFETY: 8-element local arrays; unaligned load/store.
        unsafe {
            let h = _mm256_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(_mm256_loadu_ps(vals.as_ptr()));
            _mm_storeu_si128(idx.as_mut_ptr().cast(), h);
        }
        for i in 0..8 {
            res[i] = table[usize::from(idx[i])];
        }
        let mut out = [0f32; 8];
        // SAFETY: as above.
        unsafe {
            _mm256_storeu_ps(
                out.as_mut_ptr(),
                _mm256_cvtph_ps(_mm_loadu_si128(res.as_ptr().cast())),
            )
        };
        for i in 0..n {
            let v = vals[i];
            chunk[i] = if v <= -10.0 {
                0.0
            } else if v >= 10.0 {
                v
            } else {
                out[i]
            };
        }
    }
}
