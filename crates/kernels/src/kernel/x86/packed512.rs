//! AVX-512 VNNI kernels for x16-packed Q8_0 / Q5_0 / Q4_0 / Q4_1 / Q5_1 / MXFP4 / IQ4_NL / Q4_K /
//! Q6_K weights (layout in `crate::packed`), one pass function per format behind one driver
//! (`Pass`, `groups_of`).
//!
//! Q4_K / Q6_K: per record the 6-bit values (Q4_K's scales and mins, Q6_K's quants sub-block by
//! sub-block) are merged from their nibbles and high bits in registers (`merge6`) and the
//! pair-order scales widened to i16 pairs once, then reused for every activation row of the pass.
//!
//! While a record is computed, the record [`PREFETCH_BYTES`] on is asked for into L2 a slice at
//! a time ([`Ahead`]): one slice per sub-block (Q4_K, Q6_K) or per activation row (legacy).
//!
//! Legacy formats: per record (sixteen rows by one block) the eight chunks of unsigned quants are
//! loaded (and, for 4/5-bit formats, unpacked) into registers once and reused for up to
//! `Pass::GROUP` activation rows.
//! Per activation row: the integer sum starts at `-offset * sum(x)` in every lane, eight `dpbusd`
//! add the chunks times the row's quants broadcast four bytes at a time (two chains of four), and
//! one conversion, one multiply and one multiply-add fold the block into sixteen row accumulators
//! — the same `fma(isum, d_w * d_x, acc)` per pair as the scalar `dot_packed_row`. Q4_1 / Q5_1
//! start the sum at zero and add their minimum's `fma(sum(x), m_w * d_x, acc)` after it.
//! MXFP4 / IQ4_NL unpack as Q4_0 and then map each nibble through the biased table with one
//! `vpshufb` (`u = table[q] + offset`, `offset` 16 or 128), so their passes are Q4_0's; MXFP4's
//! scales are E8M0 bytes, decoded in integers ([`e8m0_half`]).

// Index loops address parallel register arrays; iterator forms would hide the unrolled shape.
#![allow(clippy::needless_range_loop)]

use std::arch::x86_64::*;

use super::{
    biased_table, drive_passes, legacy_format, offset_slot, Ahead, Pass, MX, NL, PREFETCH_BYTES,
    Q4, Q41, Q5, Q51, Q8,
};
use crate::dtype::Format;
use crate::packed::{
    offset, quants_at, record_bytes, PackedActs, PackedJob, PACK_ROWS, Q4K_HIGH, Q4K_MINS,
    Q4K_QUANTS, Q4K_SCALES, Q6K_HIGH, Q6K_LOW, Q6K_SCALES,
};
use crate::quant::{ActQ8_0, BlockQ8K};

/// Unsigned quants of a record as eight vectors (chunk `k`: lane `i` = row `i`'s elements
/// `4k..4k + 4`).
///
/// # Safety
/// The CPU must support AVX-512 F/BW (the passes inline this only into the `groups_of` entries here
/// and in `amx`, which enable AVX2, FMA, F16C and AVX-512 F/BW/VL/VNNI; `packed::PackedJob::groups`
/// calls it after detection); `q` points to a record's readable quant bytes of format `F`: 512
/// bytes for Q8_0, 256 for Q4_0 / Q4_1 / MXFP4 / IQ4_NL (and a Q4_K sub-block), 320 for Q5_0 /
/// Q5_1. MXFP4 / IQ4_NL come out as their biased table values (`crate::packed::MXFP4_BIASED`).
#[inline(always)]
pub(super) unsafe fn unpack<const F: u8>(q: *const u8) -> [__m512i; 8] {
    // SAFETY: the loads read 64 bytes at 64k (k < 8) for Q8_0, at 64v (v < 4) and, for Q5_0 /
    // Q5_1, at 256: inside the quant bytes `q` points to (this function's contract), and for
    // MXFP4 / IQ4_NL the 16 bytes of their table; AVX-512 F/BW per the contract.
    unsafe {
        let mut w = [_mm512_setzero_si512(); 8];
        if F == Q8 {
            for k in 0..8 {
                w[k] = _mm512_loadu_si512(q.add(64 * k).cast());
            }
        } else {
            let m4 = _mm512_set1_epi8(0x0F);
            for v in 0..4 {
                let raw = _mm512_loadu_si512(q.add(64 * v).cast());
                w[2 * v] = _mm512_and_si512(raw, m4);
                w[2 * v + 1] = _mm512_and_si512(_mm512_srli_epi16::<4>(raw), m4);
            }
            if F == MX || F == NL {
                // Each byte a nibble (0..16): one shuffle per chunk looks its value up.
                let table = biased_table(F).as_ptr();
                let table = _mm512_broadcast_i32x4(_mm_loadu_si128(table.cast()));
                for k in 0..8 {
                    w[k] = _mm512_shuffle_epi8(table, w[k]);
                }
            }
            if F == Q5 || F == Q51 {
                // Bit k of each byte is chunk k's fifth bit: moved to bit 4 and merged,
                // `w | (bits & 0x10)` in one ternary-logic operation.
                let bits = _mm512_loadu_si512(q.add(256).cast());
                let five = _mm512_set1_epi8(0x10);
                for k in 0..8 {
                    let at4 = match k {
                        0 => _mm512_slli_epi16::<4>(bits),
                        1 => _mm512_slli_epi16::<3>(bits),
                        2 => _mm512_slli_epi16::<2>(bits),
                        3 => _mm512_slli_epi16::<1>(bits),
                        4 => bits,
                        5 => _mm512_srli_epi16::<1>(bits),
                        6 => _mm512_srli_epi16::<2>(bits),
                        _ => _mm512_srli_epi16::<3>(bits),
                    };
                    w[k] = _mm512_ternarylogic_epi32::<0xF8>(w[k], at4, five);
                }
            }
        }
        w
    }
}

/// `e8m0_to_f32_half` of each of sixteen exponent bytes: `(e - 1) << 23` as f32 bits, or for
/// `e < 2` the subnormal `0x0020_0000 << e` (exact for every byte, 0 and 255 included).
///
/// # Safety
/// The CPU must support AVX-512 F (the passes inline this only into the `groups_of` entries here
/// and in `amx`, which enable it).
#[inline(always)]
pub(super) unsafe fn e8m0_half(e: __m128i) -> __m512 {
    // SAFETY: register operations only; AVX-512 F per this function's contract.
    unsafe {
        let e = _mm512_cvtepu8_epi32(e);
        let normal = _mm512_slli_epi32::<23>(_mm512_sub_epi32(e, _mm512_set1_epi32(1)));
        let subnormal = _mm512_sllv_epi32(_mm512_set1_epi32(0x0020_0000), e);
        let small = _mm512_cmplt_epu32_mask(e, _mm512_set1_epi32(2));
        _mm512_castsi512_ps(_mm512_mask_blend_epi32(small, normal, subnormal))
    }
}

/// The sixteen row scales at the start of a legacy record of format `F`, as f32: E8M0 bytes
/// for MXFP4 ([`e8m0_half`]), f16 for the others.
///
/// # Safety
/// The CPU must support AVX-512 F and F16C (the passes inline this only into the `groups_of`
/// entries here and in `amx`, which enable them); `r` points to a readable record of format
/// `legacy_format(F)` (16 bytes of scales for MXFP4, 32 for the others).
#[inline(always)]
pub(super) unsafe fn scales<const F: u8>(r: *const u8) -> __m512 {
    // SAFETY: reads the record's scale bytes (this function's contract); the instruction sets
    // per the contract.
    unsafe {
        if F == MX {
            e8m0_half(_mm_loadu_si128(r.cast()))
        } else {
            _mm512_cvtph_ps(_mm256_loadu_si256(r.cast()))
        }
    }
}

/// `init` plus the `K` chunk products of one record's unsigned quants `w` with the activation's
/// quants at `qs` (four bytes broadcast per chunk), in two chains of `dpbusd`.
///
/// # Safety
/// `4 * K` bytes readable at `qs`; the CPU must support AVX-512 F/VNNI (enabled by the entry
/// point, `groups_of`).
#[inline(always)]
unsafe fn dot_chunks<const K: usize>(init: __m512i, w: &[__m512i; K], qs: *const i32) -> __m512i {
    // SAFETY: per the contract.
    unsafe {
        let mut s0 = init;
        let mut s1 = _mm512_setzero_si512();
        for k in (0..K).step_by(2) {
            let x0 = _mm512_set1_epi32(std::ptr::read_unaligned(qs.add(k)));
            s0 = _mm512_dpbusd_epi32(s0, w[k], x0);
            if k + 1 < K {
                let x1 = _mm512_set1_epi32(std::ptr::read_unaligned(qs.add(k + 1)));
                s1 = _mm512_dpbusd_epi32(s1, w[k + 1], x1);
            }
        }
        _mm512_add_epi32(s0, s1)
    }
}

/// Four vectors of 6-bit values from two nibble vectors and one of high bit pairs: value `c`
/// takes its low four bits from nibble `c % 2` of `lo[c / 2]` and its top two from bits
/// `2c..2c + 2` of `hi` (Q6_K's quants; Q4_K's scales and mins).
///
/// # Safety
/// The CPU must support AVX-512 F/BW (the passes inline this only into the `groups_of` entries here
/// and in `amx`, which enable AVX2, FMA, F16C and AVX-512 F/BW/VL/VNNI; `packed::PackedJob::groups`
/// calls it after detection).
#[inline(always)]
pub(super) unsafe fn merge6(lo0: __m512i, lo1: __m512i, hi: __m512i) -> [__m512i; 4] {
    // SAFETY: register operations only; AVX-512 F/BW per this function's contract.
    unsafe {
        let m4 = _mm512_set1_epi8(0x0F);
        let m30 = _mm512_set1_epi8(0x30);
        // Bits that 16-bit shifts move across a byte boundary are masked off.
        let low = |v: __m512i| _mm512_and_si512(v, m4);
        let high = |v: __m512i| _mm512_and_si512(_mm512_srli_epi16::<4>(v), m4);
        [
            _mm512_or_si512(low(lo0), _mm512_and_si512(_mm512_slli_epi16::<4>(hi), m30)),
            _mm512_or_si512(high(lo0), _mm512_and_si512(_mm512_slli_epi16::<2>(hi), m30)),
            _mm512_or_si512(low(lo1), _mm512_and_si512(hi, m30)),
            _mm512_or_si512(high(lo1), _mm512_and_si512(_mm512_srli_epi16::<2>(hi), m30)),
        ]
    }
}

/// Each lane's first (`T == 0`) or second i16 of its pair, as i32.
///
/// # Safety
/// The CPU must support AVX-512 F/BW (the passes inline this only into the `groups_of` entries here
/// and in `amx`, which enable AVX2, FMA, F16C and AVX-512 F/BW/VL/VNNI; `packed::PackedJob::groups`
/// calls it after detection).
#[inline(always)]
pub(super) unsafe fn pick<const T: usize>(pairs: __m512i) -> __m512i {
    // SAFETY: register operations only; AVX-512 F/BW per this function's contract.
    unsafe { _mm512_madd_epi16(pairs, _mm512_set1_epi32(if T == 0 { 1 } else { 1 << 16 })) }
}

/// The 32 pair-order bytes of `v` at `half`, widened unsigned to sixteen lanes of i16 pairs.
///
/// # Safety
/// The CPU must support AVX-512 F/BW (the passes inline this only into the `groups_of` entries here
/// and in `amx`, which enable AVX2, FMA, F16C and AVX-512 F/BW/VL/VNNI; `packed::PackedJob::groups`
/// calls it after detection).
#[inline(always)]
pub(super) unsafe fn widen_u8<const HALF: i32>(v: __m512i) -> __m512i {
    // SAFETY: register operations only; AVX-512 F/BW per this function's contract.
    unsafe { _mm512_cvtepu8_epi16(_mm512_extracti64x4_epi64::<HALF>(v)) }
}

/// A Q4_K record's `sum_j m_j * sum(x_j)` per row lane: `mp[k]` holds the lanes' min pairs of
/// sub-blocks `2k`, `2k + 1`, `sub_sums` the activation block's sums of 32.
///
/// # Safety
/// The CPU must support AVX-512 F/VNNI (the passes inline this only into the `groups_of` entries
/// here and in `amx`, which enable AVX2, FMA, F16C and AVX-512 F/BW/VL/VNNI;
/// `packed::PackedJob::groups` calls it after detection).
#[inline(always)]
pub(super) unsafe fn q4k_min_sum(mp: &[__m512i; 4], sub_sums: &[i16; 8]) -> __m512i {
    // SAFETY: the reads stay in the 16 bytes of `sub_sums` (four unaligned i32); AVX-512 F/VNNI
    // per this function's contract.
    unsafe {
        // Sums 2k and 2k + 1 as one i32 (little-endian i16 pair), broadcast from memory.
        let pairs = sub_sums.as_ptr().cast::<i32>();
        let mut msum = _mm512_setzero_si512();
        for k in 0..4 {
            let pair = _mm512_set1_epi32(std::ptr::read_unaligned(pairs.add(k)));
            msum = _mm512_dpwssd_epi32(msum, mp[k], pair);
        }
        msum
    }
}

/// A Q6_K record's `sum_g s_g * sum(x_g)` per row lane (the `-32` offset's term before the
/// factor): `sp[k]` holds the lanes' scale pairs of sub-blocks `2k`, `2k + 1`.
///
/// # Safety
/// The CPU must support AVX-512 F/VNNI (the passes inline this only into the `groups_of` entries
/// here and in `amx`, which enable AVX2, FMA, F16C and AVX-512 F/BW/VL/VNNI;
/// `packed::PackedJob::groups` calls it after detection).
#[inline(always)]
pub(super) unsafe fn q6k_offset_sum(sp: &[__m512i; 8], bsums: &[i16; 16]) -> __m512i {
    // SAFETY: the reads stay in the 32 bytes of `bsums` (eight unaligned i32); AVX-512 F/VNNI
    // per this function's contract.
    unsafe {
        // bsums 2k and 2k + 1 as one i32 (little-endian i16 pair), broadcast from memory.
        let pairs = bsums.as_ptr().cast::<i32>();
        let mut corr = _mm512_setzero_si512();
        for k in 0..8 {
            let pair = _mm512_set1_epi32(std::ptr::read_unaligned(pairs.add(k)));
            corr = _mm512_dpwssd_epi32(corr, sp[k], pair);
        }
        corr
    }
}

/// Rows `16g..16g + 16` for activation rows `i..i + N`.
///
/// # Safety
/// The CPU must support AVX2, FMA, F16C and AVX-512 F/BW/VNNI (the passes inline this only into
/// `groups_of`, which enables them); `job` is a job of format `legacy_format(F)` whose shapes agree
/// (as [`groups`] states); `g < job.rows / 16`, `i + N <= job.m`, and no other thread writes group
/// `g`'s outputs.
#[inline(always)]
pub(super) unsafe fn pass<const F: u8, const N: usize>(job: &PackedJob, g: usize, i: usize) {
    let format = legacy_format(F);
    let rec = record_bytes(format);
    let off = offset(format).unwrap_or(0);
    let with_min = F == Q41 || F == Q51;
    let blocks = job.blocks;
    // SAFETY: records of group g lie in `data`, activation rows i..i + N hold `blocks` blocks
    // each and the stores hit group g's outputs of rows i..i + N (all this function's
    // contract); the instruction sets per the contract.
    unsafe {
        let base = job.data.as_ptr().add(g * blocks * rec);
        let PackedActs::Q8_0(all) = job.acts else {
            unreachable!("legacy packed kernel with Q8_K activations")
        };
        let acts: [*const ActQ8_0; N] = std::array::from_fn(|j| all.as_ptr().add((i + j) * blocks));
        let mut acc = [_mm512_setzero_ps(); N];
        for b in 0..blocks {
            let r = base.add(b * rec);
            // The record's unpacked quants serve every row: slot `j` comes with row `j`.
            let pf = Ahead::new(r, rec, PREFETCH_BYTES, N, 0);
            let dw = scales::<F>(r);
            let mw = if with_min {
                _mm512_cvtph_ps(_mm256_loadu_si256(r.add(32).cast()))
            } else {
                _mm512_setzero_ps()
            };
            let w = unpack::<F>(r.add(quants_at(format)));
            for j in 0..N {
                let x = &*acts[j].add(b);
                let corr = if with_min {
                    _mm512_setzero_si512()
                } else {
                    // `-off * x.sum`, stored with the block.
                    let k = offset_slot(F);
                    debug_assert_eq!(x.neg_offset_sums[k], -off * x.sum);
                    _mm512_set1_epi32(x.neg_offset_sums[k])
                };
                pf.slot(j);
                let isum = dot_chunks(corr, &w, x.qs.as_ptr().cast::<i32>());
                let dx = _mm512_set1_ps(x.d);
                let scale = _mm512_mul_ps(dw, dx);
                acc[j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), scale, acc[j]);
                if with_min {
                    let xsum = _mm512_set1_ps(x.sum as f32);
                    acc[j] = _mm512_fmadd_ps(xsum, _mm512_mul_ps(mw, dx), acc[j]);
                }
            }
        }
        for j in 0..N {
            _mm512_storeu_ps(job.out.add((i + j) * job.rows + g * PACK_ROWS), acc[j]);
        }
    }
}

/// Q4_K rows `16g..16g + 16` for activation rows `i..i + N`.
///
/// # Safety
/// The CPU must support AVX2, FMA, F16C and AVX-512 F/BW/VNNI (the passes inline this only into
/// `groups_of`, which enables them); `job` is a job of format Q4_K whose shapes agree (as
/// [`groups`] states); `g < job.rows / 16`, `i + N <= job.m`, and no other thread writes group
/// `g`'s outputs.
#[inline(always)]
pub(super) unsafe fn pass_q4k<const N: usize>(job: &PackedJob, g: usize, i: usize) {
    let rec = record_bytes(Format::Q4_K);
    let blocks = job.blocks;
    let PackedActs::Q8K(all) = job.acts else {
        unreachable!("Q4_K packed kernel with Q8_0 activations")
    };
    // SAFETY: records of group g lie in `data`, activation rows i..i + N hold `blocks` blocks
    // each and the stores hit group g's outputs of rows i..i + N (all this function's
    // contract); the instruction sets per the contract.
    unsafe {
        let base = job.data.as_ptr().add(g * blocks * rec);
        let acts: [*const BlockQ8K; N] =
            std::array::from_fn(|j| all.as_ptr().add((i + j) * blocks));
        let mut acc = [_mm512_setzero_ps(); N];
        for b in 0..blocks {
            let r = base.add(b * rec);
            // Slot `sj` comes with sub-block `sj`.
            let pf = Ahead::new(r, rec, PREFETCH_BYTES, 8, 0);
            let xs: [&BlockQ8K; N] = std::array::from_fn(|j| &*acts[j].add(b));
            // Scales and mins in pair order: positions 0..64 and 64..128 of each.
            let [s01, s23, m01, m23] = merge6(
                _mm512_loadu_si512(r.add(Q4K_SCALES).cast()),
                _mm512_loadu_si512(r.add(Q4K_MINS).cast()),
                _mm512_loadu_si512(r.add(Q4K_HIGH).cast()),
            );
            let sp = [
                widen_u8::<0>(s01),
                widen_u8::<1>(s01),
                widen_u8::<0>(s23),
                widen_u8::<1>(s23),
            ];
            let mut isum = [_mm512_setzero_si512(); N];
            // Sub-blocks in pairs (`2k`, `2k + 1`): both scales come from one widened vector.
            for k in 0..4 {
                let scs = [pick::<0>(sp[k]), pick::<1>(sp[k])];
                for t in 0..2 {
                    let sj = 2 * k + t;
                    pf.slot(sj);
                    let w = unpack::<Q4>(r.add(Q4K_QUANTS + 256 * sj));
                    for j in 0..N {
                        let qs = xs[j].qs.as_ptr().add(32 * sj).cast::<i32>();
                        let dot = dot_chunks(_mm512_setzero_si512(), &w, qs);
                        isum[j] = _mm512_add_epi32(isum[j], _mm512_mullo_epi32(dot, scs[t]));
                    }
                }
            }
            let mp = [
                widen_u8::<0>(m01),
                widen_u8::<1>(m01),
                widen_u8::<0>(m23),
                widen_u8::<1>(m23),
            ];
            let d = _mm512_cvtph_ps(_mm256_loadu_si256(r.cast()));
            let dmin = _mm512_cvtph_ps(_mm256_loadu_si256(r.add(32).cast()));
            for j in 0..N {
                let msum = q4k_min_sum(&mp, &xs[j].sub_sums);
                let dx = _mm512_set1_ps(xs[j].d);
                acc[j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[j]), _mm512_mul_ps(d, dx), acc[j]);
                acc[j] =
                    _mm512_fnmadd_ps(_mm512_cvtepi32_ps(msum), _mm512_mul_ps(dmin, dx), acc[j]);
            }
        }
        for j in 0..N {
            _mm512_storeu_ps(job.out.add((i + j) * job.rows + g * PACK_ROWS), acc[j]);
        }
    }
}

/// Q6_K rows `16g..16g + 16` for activation rows `i..i + N`.
///
/// # Safety
/// The CPU must support AVX2, FMA, F16C and AVX-512 F/BW/VNNI (the passes inline this only into
/// `groups_of`, which enables them); `job` is a job of format Q6_K whose shapes agree (as
/// [`groups`] states); `g < job.rows / 16`, `i + N <= job.m`, and no other thread writes group
/// `g`'s outputs.
#[inline(always)]
pub(super) unsafe fn pass_q6k<const N: usize>(job: &PackedJob, g: usize, i: usize) {
    let rec = record_bytes(Format::Q6_K);
    let blocks = job.blocks;
    let PackedActs::Q8K(all) = job.acts else {
        unreachable!("Q6_K packed kernel with Q8_0 activations")
    };
    // SAFETY: records of group g lie in `data`, activation rows i..i + N hold `blocks` blocks
    // each and the stores hit group g's outputs of rows i..i + N (all this function's
    // contract); the instruction sets per the contract.
    unsafe {
        let base = job.data.as_ptr().add(g * blocks * rec);
        let acts: [*const BlockQ8K; N] =
            std::array::from_fn(|j| all.as_ptr().add((i + j) * blocks));
        let mut acc = [_mm512_setzero_ps(); N];
        for b in 0..blocks {
            let r = base.add(b * rec);
            // Slot `sb` comes with sub-block `sb`.
            let pf = Ahead::new(r, rec, PREFETCH_BYTES, 16, 0);
            let xs: [&BlockQ8K; N] = std::array::from_fn(|j| &*acts[j].add(b));
            // Scales in pair order, sign-extended: lane i of `sp[k]` is (s[2k], s[2k + 1]).
            let sp: [__m512i; 8] = std::array::from_fn(|k| {
                _mm512_cvtepi8_epi16(_mm256_loadu_si256(r.add(Q6K_SCALES + 32 * k).cast()))
            });
            let mut isum = [_mm512_setzero_si512(); N];
            // Sub-blocks in pairs (`2k`, `2k + 1`): both scales come from one widened vector.
            for k in 0..8 {
                let scs = [pick::<0>(sp[k]), pick::<1>(sp[k])];
                for t in 0..2 {
                    let sb = 2 * k + t;
                    pf.slot(sb);
                    let low = r.add(Q6K_LOW + 128 * sb);
                    let w = merge6(
                        _mm512_loadu_si512(low.cast()),
                        _mm512_loadu_si512(low.add(64).cast()),
                        _mm512_loadu_si512(r.add(Q6K_HIGH + 64 * sb).cast()),
                    );
                    for j in 0..N {
                        let qs = xs[j].qs.as_ptr().add(16 * sb).cast::<i32>();
                        let dot = dot_chunks(_mm512_setzero_si512(), &w, qs);
                        isum[j] = _mm512_add_epi32(isum[j], _mm512_mullo_epi32(dot, scs[t]));
                    }
                }
            }
            let d = _mm512_cvtph_ps(_mm256_loadu_si256(r.cast()));
            for j in 0..N {
                let corr = q6k_offset_sum(&sp, &xs[j].bsums);
                let total = _mm512_sub_epi32(isum[j], _mm512_slli_epi32::<5>(corr));
                let dx = _mm512_set1_ps(xs[j].d);
                acc[j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(total), _mm512_mul_ps(d, dx), acc[j]);
            }
        }
        for j in 0..N {
            _mm512_storeu_ps(job.out.add((i + j) * job.rows + g * PACK_ROWS), acc[j]);
        }
    }
}

/// Q8_0 / Q5_0 / Q4_0 / Q4_1 / Q5_1 / MXFP4 / IQ4_NL (`F`): 16 accumulators + 8 weight chunks
/// fit in 32 zmm.
pub(super) struct LegacyPass<const F: u8>;
pub(super) struct Q4KPass;
pub(super) struct Q6KPass;

impl<const F: u8> Pass for LegacyPass<F> {
    const GROUP: usize = 16;
    #[inline(always)]
    unsafe fn pass<const N: usize>(job: &PackedJob, g: usize, i: usize) {
        // SAFETY: forwarded.
        unsafe { pass::<F, N>(job, g, i) }
    }
}

impl Pass for Q4KPass {
    const GROUP: usize = 8;
    #[inline(always)]
    unsafe fn pass<const N: usize>(job: &PackedJob, g: usize, i: usize) {
        // SAFETY: forwarded.
        unsafe { pass_q4k::<N>(job, g, i) }
    }
}

impl Pass for Q6KPass {
    const GROUP: usize = 8;
    #[inline(always)]
    unsafe fn pass<const N: usize>(job: &PackedJob, g: usize, i: usize) {
        // SAFETY: forwarded.
        unsafe { pass_q6k::<N>(job, g, i) }
    }
}

/// [`drive_passes`] inside this file's `target_feature` entry, so the passes inline into it.
///
/// # Safety
/// The CPU must support AVX2, FMA, F16C and AVX-512 F/BW/VL/VNNI, and `P` is the pass of
/// `job.format`; the rest as [`groups`] (which this serves).
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn groups_of<P: Pass>(job: &PackedJob, groups: std::ops::Range<usize>) {
    // SAFETY: `P`'s instruction set is enabled here (AVX2, FMA, F16C, AVX-512 F/BW/VL/VNNI);
    // its format, the job's shapes and the groups' ownership are this function's contract.
    unsafe { drive_passes::<P>(job, groups) }
}

/// Writes all outputs of row groups `groups`.
///
/// # Safety
/// AVX-512 F/BW/VL/VNNI, AVX2, FMA and F16C must be available; `job` validated by the matmul
/// (data holds `rows / 16 * blocks` records, acts `m * blocks` blocks, out `m * rows` floats);
/// no other thread writes these groups.
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
