//! The SIMD paths of [`crate::bf16dot`]: AVX-512 BF16 and AVX2 / FMA, with the numerics the
//! parent module defines (and the bits of its scalar reference).
//!
//! AVX-512 BF16: tiles of four weight rows by four activation rows, sixteen `__m512`
//! accumulators (lane `j` of a pair's accumulator is lane `j` of the definition), one
//! `vdpbf16ps` per pair per 32 columns.
//!
//! AVX2: a 32-column block is two 16-column halves; half `h` holds lanes `8h..8h + 8`. Eight
//! 32-bit words of BF16 pairs give the odd values (`& 0xffff0000`) and the even ones (`<< 16`)
//! as f32, then two FMAs per pair, odd first. The halves run one after the other over all blocks
//! (every lane is its own chain, so the order of lanes does not matter), which keeps eight
//! accumulators live for tiles of four weight rows by two activation rows.

// Index loops address several parallel arrays (registers per row); the iterator forms would
// hide the unrolled structure the compiler needs to see.
#![allow(clippy::needless_range_loop)]

use std::arch::x86_64::*;
use std::ops::Range;

use super::hsum_ps;
use crate::bf16dot::{act_block_rows, Bf16Job, BLOCK};

/// Whether the CPU has AVX-512 F and BF16 (and AVX2 / FMA for the epilogue).
pub(crate) fn avx512bf16_available() -> bool {
    is_x86_feature_detected!("avx512f")
        && is_x86_feature_detected!("avx512bf16")
        && is_x86_feature_detected!("avx2")
        && is_x86_feature_detected!("fma")
}

/// `R` weight rows by `N` activation rows with `vdpbf16ps`.
///
/// # Safety
/// AVX-512 F / BF16 and AVX2 enabled in the caller; every row holds `n` values, `n % 32 == 0`.
#[inline(always)]
unsafe fn tile512<const R: usize, const N: usize>(
    n: usize,
    w: [&[u16]; R],
    a: [&[u16]; N],
) -> [[f32; N]; R] {
    // SAFETY: features per the contract; each load reads 32 values at k with k + 32 <= n.
    unsafe {
        let mut acc = [[_mm512_setzero_ps(); N]; R];
        let mut k = 0;
        while k < n {
            let mut xv = [_mm512_setzero_si512(); N];
            for j in 0..N {
                xv[j] = _mm512_loadu_si512(a[j].as_ptr().add(k).cast());
            }
            for r in 0..R {
                let wv = _mm512_loadu_si512(w[r].as_ptr().add(k).cast());
                for j in 0..N {
                    // SAFETY: __m512i and __m512bh are both 64 bytes of plain lanes.
                    let (wb, xb) = (
                        std::mem::transmute::<__m512i, __m512bh>(wv),
                        std::mem::transmute::<__m512i, __m512bh>(xv[j]),
                    );
                    acc[r][j] = _mm512_dpbf16_ps(acc[r][j], xb, wb);
                }
            }
            k += BLOCK;
        }
        let mut out = [[0f32; N]; R];
        for r in 0..R {
            for j in 0..N {
                let v = acc[r][j];
                let lo = _mm512_castps512_ps256(v);
                let hi = _mm256_castpd_ps(_mm512_extractf64x4_pd::<1>(_mm512_castps_pd(v)));
                out[r][j] = hsum_ps(_mm256_add_ps(lo, hi));
            }
        }
        out
    }
}

/// Eight BF16 pairs as their odd and their even values in f32 (a function, not a closure, so
/// that it inlines with the caller's target features).
///
/// # Safety
/// AVX2 enabled in the caller.
#[inline(always)]
unsafe fn split(mask: __m256i, v: __m256i) -> (__m256, __m256) {
    // SAFETY: register operations only; AVX2 per the contract.
    unsafe {
        (
            _mm256_castsi256_ps(_mm256_and_si256(v, mask)),
            _mm256_castsi256_ps(_mm256_slli_epi32::<16>(v)),
        )
    }
}

/// Accumulators of half `h` of every pair of an `R` by `N` tile.
///
/// # Safety
/// AVX2 / FMA enabled in the caller; every row holds `n` values, `n % 32 == 0`, `h < 2`.
#[inline(always)]
unsafe fn half256<const R: usize, const N: usize>(
    n: usize,
    h: usize,
    w: &[&[u16]; R],
    a: &[&[u16]; N],
) -> [[__m256; N]; R] {
    // SAFETY: features per the contract; each load reads 16 values at k + 16h <= n - 16.
    unsafe {
        let mask = _mm256_set1_epi32(0xffff_0000_u32 as i32);
        let mut acc = [[_mm256_setzero_ps(); N]; R];
        let mut k = 16 * h;
        while k < n {
            let mut xo = [_mm256_setzero_ps(); N];
            let mut xe = [_mm256_setzero_ps(); N];
            for j in 0..N {
                let (o, e) = split(mask, _mm256_loadu_si256(a[j].as_ptr().add(k).cast()));
                xo[j] = o;
                xe[j] = e;
            }
            for r in 0..R {
                let (wo, we) = split(mask, _mm256_loadu_si256(w[r].as_ptr().add(k).cast()));
                for j in 0..N {
                    let odd = _mm256_fmadd_ps(xo[j], wo, acc[r][j]);
                    acc[r][j] = _mm256_fmadd_ps(xe[j], we, odd);
                }
            }
            k += BLOCK;
        }
        acc
    }
}

/// `R` weight rows by `N` activation rows with AVX2 / FMA.
///
/// # Safety
/// As [`half256`].
#[inline(always)]
unsafe fn tile256<const R: usize, const N: usize>(
    n: usize,
    w: [&[u16]; R],
    a: [&[u16]; N],
) -> [[f32; N]; R] {
    // SAFETY: the contract is the caller's.
    unsafe {
        let lo = half256::<R, N>(n, 0, &w, &a);
        let hi = half256::<R, N>(n, 1, &w, &a);
        let mut out = [[0f32; N]; R];
        for r in 0..R {
            for j in 0..N {
                out[r][j] = hsum_ps(_mm256_add_ps(lo[r][j], hi[r][j]));
            }
        }
        out
    }
}

/// Runs `tile` over weight rows `range` by all activation rows, in L2-sized blocks of
/// activation rows, `R` weight rows by `N` activation rows at a time (then single rows).
macro_rules! rows_body {
    ($job:expr, $range:expr, $tile:ident, $R:literal, $N:literal) => {{
        let job: &Bf16Job = $job;
        let n = job.w.cols;
        let block = act_block_rows(n);
        let mut i0 = 0;
        while i0 < job.m {
            let acts = i0..(i0 + block).min(job.m);
            let mut r = $range.start;
            while r < $range.end {
                let rr = if r + $R <= $range.end { $R } else { 1 };
                let mut i = acts.start;
                while i < acts.end {
                    let nn = if i + $N <= acts.end { $N } else { 1 };
                    // SAFETY: rows r..r + rr lie in this call's range and activation rows
                    // i..i + nn in 0..m; the features are the caller's.
                    unsafe {
                        match (rr, nn) {
                            ($R, $N) => {
                                let t = $tile::<$R, $N>(
                                    n,
                                    std::array::from_fn(|q| job.w.row(r + q)),
                                    std::array::from_fn(|j| job.act(i + j)),
                                );
                                for q in 0..$R {
                                    for j in 0..$N {
                                        job.store(i + j, r + q, t[q][j]);
                                    }
                                }
                            }
                            ($R, _) => {
                                let t = $tile::<$R, 1>(
                                    n,
                                    std::array::from_fn(|q| job.w.row(r + q)),
                                    [job.act(i)],
                                );
                                for q in 0..$R {
                                    job.store(i, r + q, t[q][0]);
                                }
                            }
                            (_, $N) => {
                                let t = $tile::<1, $N>(
                                    n,
                                    [job.w.row(r)],
                                    std::array::from_fn(|j| job.act(i + j)),
                                );
                                for j in 0..$N {
                                    job.store(i + j, r, t[0][j]);
                                }
                            }
                            _ => {
                                let t = $tile::<1, 1>(n, [job.w.row(r)], [job.act(i)]);
                                job.store(i, r, t[0][0]);
                            }
                        }
                    }
                    i += nn;
                }
                r += rr;
            }
            i0 = acts.end;
        }
    }};
}

/// Weight rows `range` of `job` with AVX-512 BF16.
///
/// # Safety
/// The CPU has AVX-512 F / BF16, AVX2 and FMA ([`avx512bf16_available`]); `range` lies in
/// `0..job.w.rows` and no other thread writes its rows.
#[target_feature(enable = "avx2,fma,avx512f,avx512bf16")]
pub(crate) unsafe fn rows_avx512(job: &Bf16Job, range: Range<usize>) {
    rows_body!(job, range, tile512, 4, 4)
}

/// Weight rows `range` of `job` with AVX2 / FMA.
///
/// # Safety
/// The CPU has AVX2 and FMA; `range` lies in `0..job.w.rows` and no other thread writes its rows.
#[target_feature(enable = "avx2,fma")]
pub(crate) unsafe fn rows_avx2(job: &Bf16Job, range: Range<usize>) {
    rows_body!(job, range, tile256, 4, 2)
}
