//! AVX2 kernels for x16-packed Q8_0 / Q5_0 / Q4_0 / Q4_1 / Q5_1 / MXFP4 / IQ4_NL / Q4_K / Q6_K
//! weights (layout in `crate::packed`): the same exact per-block integer sums and the same float
//! operations per (weight row, activation row) pair as the AVX-512 VNNI kernels and the scalar
//! reference, so all three give the same bits.
//!
//! A 256-bit vector holds eight of a record's sixteen row lanes, so a pass runs each record's two
//! halves back to back (rows `0..8`, then `8..16`, from L1) and keeps both halves' float sums.
//! While a record is computed, the record [`PREFETCH_BYTES`] on is asked for into L2 a slice at
//! a time (one slice per sub-block or chunk pair): a core on its own keeps too few misses in
//! flight to stream weights at the memory's rate, and with the requests spread over the compute
//! the memory works while the core multiplies. On an AVX2-only AMD EPYC (Zen 3) this took one
//! decode step's matmuls of Qwen2.5-Coder-1.5B from 1.6x a plain read of the same bytes to 1.1x
//! (`examples/kquant_speed`, docs/BENCHMARKS.md); a burst of a whole record's prefetches at its
//! start, or the second half run from cache after the whole group's first, left the memory idle
//! for half the compute. Without VNNI, the products go through `maddubs` (unsigned weight bytes
//! times signed activation bytes, adjacent pairs summed to i16) and `madd` (i16 pairs to i32):
//! - Q4_0 / Q5_0 / Q4_K quants are small enough that the i16 pair sums of all eight chunks of a
//!   block (Q4: 8 x 2 x 15 x 127) or of four (Q5: 4 x 2 x 31 x 127) add up without saturating
//!   before one `madd` widens them; Q4_K's `madd` multiplies by the sub-block scale on the way.
//! - Q6_K quants (0..63) allow two chunks per i16 sum, widened by a `madd` with the scale.
//! - Q8_0's stored `q + 128` would saturate `maddubs`, so its quants are made signed again
//!   (`xor 0x80`) and multiplied as `|q| . sign(x, q)` (at most 2 x 128 x 127 per pair).
//! - MXFP4's nibbles are looked up (`vpshufb`) in its table biased by 16 (4..28) and summed as
//!   Q5_0's quants (four chunks: 4 x 2 x 28 x 127); IQ4_NL's in its signed table (-127..113:
//!   biased they would reach 241, and one pair of products could saturate) and multiplied as
//!   Q8_0's.
//!
//! The offset terms (`-offset * sum(x)`, Q4_1 / Q5_1's minimums, Q4_K's mins, Q6_K's `-32`) are
//! the VNNI kernels'; Q4_1 / Q5_1 quants are Q4_0 / Q5_0's in size, so they sum the same way.

// Index loops address parallel register arrays; iterator forms would hide the unrolled shape.
#![allow(clippy::needless_range_loop)]

use std::arch::x86_64::*;

use super::{
    biased_table, drive_passes, legacy_format, offset_slot, Ahead, Pass, MX, NL, PREFETCH_BYTES,
    Q4, Q41, Q5, Q51, Q8,
};
use crate::dtype::Format;
use crate::packed::{
    quants_at, record_bytes, PackedActs, PackedJob, PACK_ROWS, Q4K_HIGH, Q4K_MINS, Q4K_QUANTS,
    Q4K_SCALES, Q6K_HIGH, Q6K_LOW, Q6K_SCALES,
};
use crate::quant::nonlinear::KVALUES_IQ4NL;
use crate::quant::{ActQ8_0, BlockQ8K};

/// Row lanes per vector.
const HALF: usize = PACK_ROWS / 2;

/// Runs `half` over both halves of each of group `g`'s records in turn, for activation rows
/// `i..i + N` (activation blocks `all`, `blocks` per row), and stores the sixteen rows' sums.
///
/// # Safety
/// `half` computes one half of a record of `rec` bytes; records of group `g` lie in
/// `job.data` and `all` holds rows `i..i + N` (checked by the matmul); `job.out` is valid for
/// `m * rows` writes and no other thread writes group `g`'s outputs; the CPU supports AVX2
/// (enabled by the entry point, `groups_of`).
#[inline(always)]
unsafe fn records<A, const N: usize>(
    job: &PackedJob,
    g: usize,
    i: usize,
    all: &[A],
    rec: usize,
    per_half: usize,
    half: impl Fn(*const u8, &[&A; N], usize, &mut [__m256; N], Ahead),
) {
    let blocks = job.blocks;
    // SAFETY: the caller's contract.
    unsafe {
        let base = job.data.as_ptr().add(g * blocks * rec);
        let acts: [*const A; N] = std::array::from_fn(|j| all.as_ptr().add((i + j) * blocks));
        let mut acc = [[_mm256_setzero_ps(); N]; 2];
        for b in 0..blocks {
            let r = base.add(b * rec);
            let xs: [&A; N] = std::array::from_fn(|j| &*acts[j].add(b));
            for (h, acc) in acc.iter_mut().enumerate() {
                half(
                    r,
                    &xs,
                    h,
                    acc,
                    Ahead::new(r, rec, PREFETCH_BYTES, 2 * per_half, h * per_half),
                );
            }
        }
        for (h, acc) in acc.iter().enumerate() {
            for j in 0..N {
                _mm256_storeu_ps(
                    job.out.add((i + j) * job.rows + g * PACK_ROWS + HALF * h),
                    acc[j],
                );
            }
        }
    }
}

/// `e8m0_to_f32_half` of each of the low eight exponent bytes of `e`, as `packed512::e8m0_half`.
///
/// # Safety
/// The CPU must support AVX2 (the passes inline this only into `groups_of`, which enables AVX2, FMA
/// and F16C; `packed::PackedJob::groups` calls it after detection).
#[inline(always)]
unsafe fn e8m0_half(e: __m128i) -> __m256 {
    // SAFETY: register operations only; AVX2 per this function's contract.
    unsafe {
        let e = _mm256_cvtepu8_epi32(e);
        let normal = _mm256_slli_epi32::<23>(_mm256_sub_epi32(e, _mm256_set1_epi32(1)));
        let subnormal = _mm256_sllv_epi32(_mm256_set1_epi32(0x0020_0000), e);
        let small = _mm256_cmpgt_epi32(_mm256_set1_epi32(2), e);
        _mm256_castsi256_ps(_mm256_blendv_epi8(normal, subnormal, small))
    }
}

/// Four activation bytes broadcast to every i32 lane.
///
/// # Safety
/// The CPU must support AVX (the passes inline this only into `groups_of`, which enables AVX2, FMA
/// and F16C; `packed::PackedJob::groups` calls it after detection); `4k + 4` bytes are readable at
/// `qs`.
#[inline(always)]
unsafe fn bcast(qs: *const i8, k: usize) -> __m256i {
    // SAFETY: bytes `4k..4k + 4` of `qs` are readable (this function's contract), read
    // unaligned; AVX per the contract.
    unsafe { _mm256_set1_epi32(std::ptr::read_unaligned(qs.add(4 * k).cast::<i32>())) }
}

/// Eight f16 scales (row lanes `8h..8h + 8`) of a record's scale area, as f32.
///
/// # Safety
/// The CPU must support AVX and F16C (the passes inline this only into `groups_of`, which enables
/// AVX2, FMA and F16C; `packed::PackedJob::groups` calls it after detection); bytes `16h..16h + 16`
/// at `p` are readable (a record's 32-byte scale area, `h < 2`).
#[inline(always)]
unsafe fn half_scales(p: *const u8, h: usize) -> __m256 {
    // SAFETY: reads bytes 16h..16h + 16 at `p`, readable per this function's contract; F16C per
    // the contract.
    unsafe { _mm256_cvtph_ps(_mm_loadu_si128(p.add(16 * h).cast())) }
}

/// Four vectors of 6-bit values from two nibble vectors and one of high bit pairs: value `c`
/// takes its low four bits from nibble `c % 2` of `lo[c / 2]` and its top two from bits
/// `2c..2c + 2` of `hi` (Q6_K's quants; Q4_K's scales and mins), as `packed512::merge6`.
///
/// # Safety
/// The CPU must support AVX2 (the passes inline this only into `groups_of`, which enables AVX2, FMA
/// and F16C; `packed::PackedJob::groups` calls it after detection).
#[inline(always)]
unsafe fn merge6(lo0: __m256i, lo1: __m256i, hi: __m256i) -> [__m256i; 4] {
    // SAFETY: register operations only; AVX2 per this function's contract.
    unsafe {
        let m4 = _mm256_set1_epi8(0x0F);
        let m30 = _mm256_set1_epi8(0x30);
        // Bits that 16-bit shifts move across a byte boundary are masked off.
        let low = |v: __m256i| _mm256_and_si256(v, m4);
        let high = |v: __m256i| _mm256_and_si256(_mm256_srli_epi16::<4>(v), m4);
        [
            _mm256_or_si256(low(lo0), _mm256_and_si256(_mm256_slli_epi16::<4>(hi), m30)),
            _mm256_or_si256(high(lo0), _mm256_and_si256(_mm256_slli_epi16::<2>(hi), m30)),
            _mm256_or_si256(low(lo1), _mm256_and_si256(hi, m30)),
            _mm256_or_si256(high(lo1), _mm256_and_si256(_mm256_srli_epi16::<2>(hi), m30)),
        ]
    }
}

/// Each lane's i16 pair `(a, b)` made `(a, a)` (`T == 0`) or `(b, b)`: a per-row scale for
/// `madd` against pair sums.
///
/// # Safety
/// The CPU must support AVX2 (the passes inline this only into `groups_of`, which enables AVX2, FMA
/// and F16C; `packed::PackedJob::groups` calls it after detection).
#[inline(always)]
unsafe fn splat_pair<const T: usize>(pairs: __m256i) -> __m256i {
    // SAFETY: register operations only; AVX2 per this function's contract.
    unsafe {
        if T == 0 {
            _mm256_shufflehi_epi16::<0xA0>(_mm256_shufflelo_epi16::<0xA0>(pairs))
        } else {
            _mm256_shufflehi_epi16::<0xF5>(_mm256_shufflelo_epi16::<0xF5>(pairs))
        }
    }
}

/// The scale pairs (`T == 0`) or min pairs of a Q4_K record's half `h`: lane `i` of element `k`
/// is row `8h + i`'s `(v[2k], v[2k + 1])`, widened from the pair-order 6-bit values.
///
/// # Safety
/// The CPU must support AVX2 (the passes inline this only into `groups_of`, which enables AVX2, FMA
/// and F16C; `packed::PackedJob::groups` calls it after detection); `r` points to a whole readable
/// Q4_K record (`record_bytes(Format::Q4_K)` bytes) and `h < 2`.
#[inline(always)]
unsafe fn q4k_pairs<const T: usize>(r: *const u8, h: usize) -> [__m256i; 4] {
    // SAFETY: the loads read 16 bytes at 32k + 16h (k, h < 2) of the record's scale, min and
    // high-bit areas, inside the record `r` points to (this function's contract); AVX2 per the
    // contract.
    unsafe {
        // Bytes 32k' + 16h..+16 of the three 64-byte areas hold positions 32k' + 16h (low
        // nibbles and bits 0-1, 4-5) and 64 + 32k' + 16h (high nibbles and bits 2-3, 6-7).
        let part = |area: usize, k: usize| {
            _mm256_castsi128_si256(_mm_loadu_si128(r.add(area + 32 * k + 16 * h).cast()))
        };
        // `merge6` gives the scales as its values 0 and 1, the mins as 2 and 3; the other two
        // are left unused (and not computed once inlined).
        let mut pairs = [_mm256_setzero_si256(); 4];
        for k in 0..2 {
            let v = merge6(part(Q4K_SCALES, k), part(Q4K_MINS, k), part(Q4K_HIGH, k));
            let widen = |x: __m256i| _mm256_cvtepu8_epi16(_mm256_castsi256_si128(x));
            pairs[k] = widen(v[2 * T]);
            pairs[k + 2] = widen(v[2 * T + 1]);
        }
        pairs
    }
}

/// Unsigned quants of half `h` of a Q5_0 / Q4_0 / Q4_1 / Q5_1 / MXFP4 record's chunk pair `v`
/// (chunks `2v`, `2v + 1`): MXFP4's nibbles looked up in its biased table
/// (`crate::packed::MXFP4_BIASED`), the others' values as stored.
///
/// # Safety
/// The CPU must support AVX2 (the passes inline this only into `groups_of`, which enables AVX2, FMA
/// and F16C; `packed::PackedJob::groups` calls it after detection); `q` points to a record's
/// readable quant area of format `F` (256 bytes, then 64 bytes of fifth bits for Q5_0 / Q5_1); `v <
/// 4` and `h < 2`.
#[inline(always)]
unsafe fn nibble_pair<const F: u8>(q: *const u8, v: usize, h: usize) -> [__m256i; 2] {
    // SAFETY: the loads read 32 bytes at 64v + 32h < 256 and, for Q5_0 / Q5_1, at 256 + 32h,
    // inside the quant area `q` points to (this function's contract), and for MXFP4 the 16
    // bytes of its table; AVX2 per the contract.
    unsafe {
        let m4 = _mm256_set1_epi8(0x0F);
        let raw = _mm256_loadu_si256(q.add(64 * v + 32 * h).cast());
        let mut w = [
            _mm256_and_si256(raw, m4),
            _mm256_and_si256(_mm256_srli_epi16::<4>(raw), m4),
        ];
        if F == Q5 || F == Q51 {
            // Bit k of each byte is chunk k's fifth bit: a shift moves it to bit 4 (what a
            // 16-bit shift carries over from the next byte lands elsewhere and is masked off).
            let bits = _mm256_loadu_si256(q.add(256 + 32 * h).cast());
            let five = _mm256_set1_epi8(0x10);
            for (t, wt) in w.iter_mut().enumerate() {
                let at4 = match 2 * v + t {
                    0 => _mm256_slli_epi16::<4>(bits),
                    1 => _mm256_slli_epi16::<3>(bits),
                    2 => _mm256_slli_epi16::<2>(bits),
                    3 => _mm256_slli_epi16::<1>(bits),
                    4 => bits,
                    5 => _mm256_srli_epi16::<1>(bits),
                    6 => _mm256_srli_epi16::<2>(bits),
                    _ => _mm256_srli_epi16::<3>(bits),
                };
                *wt = _mm256_or_si256(*wt, _mm256_and_si256(at4, five));
            }
        }
        if F == MX {
            let table = _mm_loadu_si128(biased_table(F).as_ptr().cast());
            let table = _mm256_broadcastsi128_si256(table);
            w = w.map(|n| _mm256_shuffle_epi8(table, n));
        }
        w
    }
}

/// Half `h` (rows `8h..8h + 8`) of one legacy record `r` against activation blocks `xs`,
/// accumulated into `acc`; prefetch slot `k` comes with chunk pair `k`.
///
/// # Safety
/// The CPU must support AVX2, FMA and F16C (the passes inline this only into `groups_of`, which
/// enables AVX2, FMA and F16C; `packed::PackedJob::groups` calls it after detection); `r` points to
/// a whole readable record of format `F` (`record_bytes(legacy_format(F))` bytes) and `h < 2`.
#[inline(always)]
unsafe fn legacy_half<const F: u8, const N: usize>(
    r: *const u8,
    xs: &[&ActQ8_0; N],
    h: usize,
    acc: &mut [__m256; N],
    pf: Ahead,
) {
    let format = legacy_format(F);
    let with_min = F == Q41 || F == Q51;
    // SAFETY: every read lies in the record of format `F` that `r` points to (scales at 0 and,
    // with a minimum, 32; quants at `quants_at`, as the sums need) or in the activation blocks'
    // arrays; the instruction sets per this function's contract.
    unsafe {
        let q = r.add(quants_at(format));
        let isum = if F == Q8 || F == NL {
            signed_sums::<F, N>(q, xs, h, pf)
        } else {
            unsigned_sums::<F, N>(q, xs, h, pf)
        };
        let dw = if F == MX {
            e8m0_half(_mm_loadl_epi64(r.add(8 * h).cast()))
        } else {
            half_scales(r, h)
        };
        let mw = if with_min {
            Some(half_scales(r.add(32), h))
        } else {
            None
        };
        for j in 0..N {
            let dx = _mm256_set1_ps(xs[j].d);
            let scale = _mm256_mul_ps(dw, dx);
            acc[j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[j]), scale, acc[j]);
            if let Some(mw) = mw {
                let xsum = _mm256_set1_ps(xs[j].sum as f32);
                acc[j] = _mm256_fmadd_ps(xsum, _mm256_mul_ps(mw, dx), acc[j]);
            }
        }
    }
}

/// Half `h`'s exact block sums of a Q8_0 or IQ4_NL record's quants `q` (`F`) against `xs`, from
/// its signed quants (Q8_0's stored bytes made signed again, IQ4_NL's table values): unsigned
/// they would saturate `maddubs`, so they are multiplied as `|w| . sign(x, w)` (at most
/// 2 x 128 x 127 per pair), one `madd` per chunk. Prefetch slot `v` comes with chunk pair `v`.
///
/// # Safety
/// As [`legacy_half`], `q` pointing to the record's quants.
#[inline(always)]
unsafe fn signed_sums<const F: u8, const N: usize>(
    q: *const u8,
    xs: &[&ActQ8_0; N],
    h: usize,
    pf: Ahead,
) -> [__m256i; N] {
    // SAFETY: the loads read 32 bytes at 64k + 32h (k < 8) of Q8_0's 512 bytes of quants, or
    // what `nibble_pair` reads of IQ4_NL's 256, and the 16 bytes of IQ4_NL's table; the
    // activation reads stay in `qs`; AVX2 per the contract.
    unsafe {
        let ones = _mm256_set1_epi16(1);
        let flip = _mm256_set1_epi8(-128);
        let table = _mm256_broadcastsi128_si256(_mm_loadu_si128(KVALUES_IQ4NL.as_ptr().cast()));
        let mut isum = [_mm256_setzero_si256(); N];
        for v in 0..4 {
            pf.slot(v);
            let w = if F == Q8 {
                let chunk = |k: usize| _mm256_loadu_si256(q.add(64 * k + 32 * h).cast());
                [
                    _mm256_xor_si256(chunk(2 * v), flip),
                    _mm256_xor_si256(chunk(2 * v + 1), flip),
                ]
            } else {
                nibble_pair::<Q4>(q, v, h).map(|n| _mm256_shuffle_epi8(table, n))
            };
            for t in 0..2 {
                let aw = _mm256_abs_epi8(w[t]);
                for j in 0..N {
                    let sx = _mm256_sign_epi8(bcast(xs[j].qs.as_ptr(), 2 * v + t), w[t]);
                    let p = _mm256_maddubs_epi16(aw, sx);
                    isum[j] = _mm256_add_epi32(isum[j], _mm256_madd_epi16(p, ones));
                }
            }
        }
        isum
    }
}

/// Half `h`'s exact block sums of a Q5_0 / Q4_0 / Q4_1 / Q5_1 / MXFP4 record's quants `q` (`F`)
/// against `xs`, from its unsigned quants (MXFP4's biased table values, 4..28): i16 pair sums of
/// all eight chunks (4-bit quants: 8 x 2 x 15 x 127) or of four (the others: at most
/// 4 x 2 x 31 x 127)
/// added before one `madd` widens them, from `-offset * sum(x)` (zero for Q4_1 / Q5_1). Prefetch
/// slot `v` comes with chunk pair `v`.
///
/// # Safety
/// As [`legacy_half`], `q` pointing to the record's quants.
#[inline(always)]
unsafe fn unsigned_sums<const F: u8, const N: usize>(
    q: *const u8,
    xs: &[&ActQ8_0; N],
    h: usize,
    pf: Ahead,
) -> [__m256i; N] {
    let with_min = F == Q41 || F == Q51;
    // SAFETY: `nibble_pair`'s reads per this function's contract; the activation reads stay in
    // `qs`; AVX2 per the contract.
    unsafe {
        let ones = _mm256_set1_epi16(1);
        let mut isum: [__m256i; N] = std::array::from_fn(|j| {
            _mm256_set1_epi32(if with_min {
                0
            } else {
                xs[j].neg_offset_sums[offset_slot(F)]
            })
        });
        // Chunks per i16 sum: all eight for 4-bit quants, four for 5-bit and MXFP4's.
        let per = if F == Q4 || F == Q41 { 4 } else { 2 };
        for v0 in (0..4).step_by(per) {
            let mut p = [_mm256_setzero_si256(); N];
            for v in v0..v0 + per {
                pf.slot(v);
                let w = nibble_pair::<F>(q, v, h);
                for t in 0..2 {
                    for j in 0..N {
                        let x = bcast(xs[j].qs.as_ptr(), 2 * v + t);
                        p[j] = _mm256_add_epi16(p[j], _mm256_maddubs_epi16(w[t], x));
                    }
                }
            }
            for j in 0..N {
                isum[j] = _mm256_add_epi32(isum[j], _mm256_madd_epi16(p[j], ones));
            }
        }
        isum
    }
}

/// Half `h` (rows `8h..8h + 8`) of one Q4_K record `r` against activation blocks `xs`,
/// accumulated into `acc`; prefetch slot `sj` comes with sub-block `sj`.
///
/// # Safety
/// The CPU must support AVX2, FMA and F16C (the passes inline this only into `groups_of`, which
/// enables AVX2, FMA and F16C; `packed::PackedJob::groups` calls it after detection); `r` points to
/// a whole readable Q4_K record (`record_bytes(Format::Q4_K)` bytes) and `h < 2`.
#[inline(always)]
unsafe fn q4k_half<const N: usize>(
    r: *const u8,
    xs: &[&BlockQ8K; N],
    h: usize,
    acc: &mut [__m256; N],
    pf: Ahead,
) {
    // SAFETY: every read lies in the Q4_K record `r` points to (this function's contract) or in
    // the activation blocks' arrays (`qs` bytes 32sj + 4(2v + t)..+4 < 256, the 16 bytes of
    // `sub_sums`); the instruction sets per the contract.
    unsafe {
        // The mins are widened after the sub-block loop, which keeps their registers free.
        let sp = q4k_pairs::<0>(r, h);
        let mut isum = [_mm256_setzero_si256(); N];
        for sj in 0..8 {
            pf.slot(sj);
            let sc = if sj % 2 == 0 {
                splat_pair::<0>(sp[sj / 2])
            } else {
                splat_pair::<1>(sp[sj / 2])
            };
            let q = r.add(Q4K_QUANTS + 256 * sj);
            let mut p = [_mm256_setzero_si256(); N];
            for v in 0..4 {
                let w = nibble_pair::<Q4>(q, v, h);
                for t in 0..2 {
                    for j in 0..N {
                        let x = bcast(xs[j].qs.as_ptr().add(32 * sj), 2 * v + t);
                        p[j] = _mm256_add_epi16(p[j], _mm256_maddubs_epi16(w[t], x));
                    }
                }
            }
            for j in 0..N {
                isum[j] = _mm256_add_epi32(isum[j], _mm256_madd_epi16(p[j], sc));
            }
        }
        let mp = q4k_pairs::<1>(r, h);
        let d = half_scales(r, h);
        let dmin = half_scales(r.add(32), h);
        for j in 0..N {
            // The activation's sums of 32 (sub-blocks 2k, 2k + 1 as one little-endian i32).
            let pairs = xs[j].sub_sums.as_ptr().cast::<i32>();
            let mut msum = _mm256_setzero_si256();
            for k in 0..4 {
                let pair = _mm256_set1_epi32(std::ptr::read_unaligned(pairs.add(k)));
                msum = _mm256_add_epi32(msum, _mm256_madd_epi16(mp[k], pair));
            }
            let dx = _mm256_set1_ps(xs[j].d);
            acc[j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[j]), _mm256_mul_ps(d, dx), acc[j]);
            acc[j] = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(msum), _mm256_mul_ps(dmin, dx), acc[j]);
        }
    }
}

/// Half `h` (rows `8h..8h + 8`) of one Q6_K record `r` against activation blocks `xs`,
/// accumulated into `acc`; prefetch slot `sb` comes with sub-block `sb`.
///
/// # Safety
/// The CPU must support AVX2, FMA and F16C (the passes inline this only into `groups_of`, which
/// enables AVX2, FMA and F16C; `packed::PackedJob::groups` calls it after detection); `r` points to
/// a whole readable Q6_K record (`record_bytes(Format::Q6_K)` bytes) and `h < 2`.
#[inline(always)]
unsafe fn q6k_half<const N: usize>(
    r: *const u8,
    xs: &[&BlockQ8K; N],
    h: usize,
    acc: &mut [__m256; N],
    pf: Ahead,
) {
    // SAFETY: every read lies in the Q6_K record `r` points to (this function's contract) or in
    // the activation blocks' arrays (`qs` bytes 16sb + 4c..+4 < 256, the 32 bytes of `bsums`);
    // the instruction sets per the contract.
    unsafe {
        // Scales in pair order, sign-extended: lane i of `sp(k)` is (s[2k], s[2k + 1]). Widened
        // where they are used rather than held in eight registers through the loop.
        let sp = |k: usize| {
            _mm256_cvtepi8_epi16(_mm_loadu_si128(r.add(Q6K_SCALES + 32 * k + 16 * h).cast()))
        };
        let mut isum = [_mm256_setzero_si256(); N];
        for sb in 0..16 {
            pf.slot(sb);
            let sc = if sb % 2 == 0 {
                splat_pair::<0>(sp(sb / 2))
            } else {
                splat_pair::<1>(sp(sb / 2))
            };
            let low = r.add(Q6K_LOW + 128 * sb + 32 * h);
            let w = merge6(
                _mm256_loadu_si256(low.cast()),
                _mm256_loadu_si256(low.add(64).cast()),
                _mm256_loadu_si256(r.add(Q6K_HIGH + 64 * sb + 32 * h).cast()),
            );
            // Two chunks per i16 sum (2 x 2 x 63 x 127 fits).
            for c0 in [0, 2] {
                for j in 0..N {
                    let x = xs[j].qs.as_ptr().add(16 * sb);
                    let p = _mm256_add_epi16(
                        _mm256_maddubs_epi16(w[c0], bcast(x, c0)),
                        _mm256_maddubs_epi16(w[c0 + 1], bcast(x, c0 + 1)),
                    );
                    isum[j] = _mm256_add_epi32(isum[j], _mm256_madd_epi16(p, sc));
                }
            }
        }
        let d = half_scales(r, h);
        for j in 0..N {
            // bsums 2k and 2k + 1 as one i32 (little-endian i16 pair).
            let pairs = xs[j].bsums.as_ptr().cast::<i32>();
            let mut corr = _mm256_setzero_si256();
            for k in 0..8 {
                let pair = std::ptr::read_unaligned(pairs.add(k));
                corr = _mm256_add_epi32(corr, _mm256_madd_epi16(sp(k), _mm256_set1_epi32(pair)));
            }
            let total = _mm256_sub_epi32(isum[j], _mm256_slli_epi32::<5>(corr));
            let dx = _mm256_set1_ps(xs[j].d);
            acc[j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(total), _mm256_mul_ps(d, dx), acc[j]);
        }
    }
}

/// Activation rows per pass (`Pass::GROUP`), measured: 8 for Q8_0 and IQ4_NL, whose chunk loop
/// keeps only the integer sums in registers (IQ4_NL 2880x2880 at 16 rows, one thread, AVX2
/// passes on a loaded Xeon: 2.8-4.3 ms against 4.2-4.7 ms with 4); 4 for the formats that keep
/// i16 partial sums per row.
struct LegacyPass<const F: u8>;
struct Q4KPass;
struct Q6KPass;

/// Legacy formats: rows `16g..16g + 16` for activation rows `i..i + N`.
impl<const F: u8> Pass for LegacyPass<F> {
    const GROUP: usize = if F == Q8 || F == NL { 8 } else { 4 };
    #[inline(always)]
    unsafe fn pass<const N: usize>(job: &PackedJob, g: usize, i: usize) {
        let PackedActs::Q8_0(all) = job.acts else {
            unreachable!("legacy packed kernel with Q8_K activations")
        };
        let rec = record_bytes(legacy_format(F));
        // SAFETY: as `records`: `legacy_half` computes half a record of format `F`.
        unsafe {
            records::<_, N>(job, g, i, all, rec, 4, |r, xs, h, acc, pf| {
                legacy_half::<F, N>(r, xs, h, acc, pf)
            })
        }
    }
}

/// Q4_K rows `16g..16g + 16` for activation rows `i..i + N`.
impl Pass for Q4KPass {
    const GROUP: usize = 4;
    #[inline(always)]
    unsafe fn pass<const N: usize>(job: &PackedJob, g: usize, i: usize) {
        let PackedActs::Q8K(all) = job.acts else {
            unreachable!("Q4_K packed kernel with Q8_0 activations")
        };
        let rec = record_bytes(Format::Q4_K);
        // SAFETY: as `records`: `q4k_half` computes half a Q4_K record.
        unsafe {
            records::<_, N>(job, g, i, all, rec, 8, |r, xs, h, acc, pf| {
                q4k_half::<N>(r, xs, h, acc, pf)
            })
        }
    }
}

/// Q6_K rows `16g..16g + 16` for activation rows `i..i + N`.
impl Pass for Q6KPass {
    const GROUP: usize = 4;
    #[inline(always)]
    unsafe fn pass<const N: usize>(job: &PackedJob, g: usize, i: usize) {
        let PackedActs::Q8K(all) = job.acts else {
            unreachable!("Q6_K packed kernel with Q8_0 activations")
        };
        let rec = record_bytes(Format::Q6_K);
        // SAFETY: as `records`: `q6k_half` computes half a Q6_K record.
        unsafe {
            records::<_, N>(job, g, i, all, rec, 16, |r, xs, h, acc, pf| {
                q6k_half::<N>(r, xs, h, acc, pf)
            })
        }
    }
}

/// [`drive_passes`] inside this file's `target_feature` entry, so the passes inline into it.
///
/// # Safety
/// The CPU must support AVX2, FMA and F16C, and `P` is the pass of `job.format`; the rest as
/// [`groups`] (which this serves).
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn groups_of<P: Pass>(job: &PackedJob, groups: std::ops::Range<usize>) {
    // SAFETY: `P`'s instruction set is enabled here (AVX2, FMA, F16C); its format, the job's
    // shapes and the groups' ownership are this function's contract.
    unsafe { drive_passes::<P>(job, groups) }
}

/// Writes all outputs of row groups `groups`.
///
/// # Safety
/// AVX2, FMA and F16C must be available; `job` validated by the matmul (data holds
/// `rows / 16 * blocks` records, acts `m * blocks` blocks, out `m * rows` floats); no other
/// thread writes these groups.
pub(crate) unsafe fn groups(job: &PackedJob, groups: std::ops::Range<usize>) {
    // SAFETY: forwarded from this function's contract.
    unsafe {
        match job.format {
            Format::Q8_0 => groups_of::<LegacyPass<Q8>>(job, groups),
            Format::Q5_0 => groups_of::<LegacyPass<Q5>>(job, groups),
            Format::Q4_0 => groups_of::<LegacyPass<Q4>>(job, groups),
            Format::Q4_1 => groups_of::<LegacyPass<Q41>>(job, groups),
            Format::Q5_1 => groups_of::<LegacyPass<Q51>>(job, groups),
            Format::MXFP4 => groups_of::<LegacyPass<MX>>(job, groups),
            Format::IQ4_NL => groups_of::<LegacyPass<NL>>(job, groups),
            Format::Q4_K => groups_of::<Q4KPass>(job, groups),
            Format::Q6_K => groups_of::<Q6KPass>(job, groups),
            _ => unreachable!("packed kernel for an unpackable format"),
        }
    }
}
