//! The AMX-INT8 pass for x16-packed Q4_K weights: the sub-block scales are multiplied into the
//! weight tiles, so the tile unit sums a whole record (256 quants) at once and the vector units
//! scale one sum per record instead of eight.
//!
//! A Q4_K record's integer sum for one (activation row, weight row) pair is
//! `sum_j sc_j * dot(q_j, x_j)` over its eight sub-blocks `j` of 32 (`sc_j` a 6-bit scale,
//! `q_j` 4-bit quants). A tile product sums over its whole depth with one weight per element, so
//! the scale goes into the weights: `q * sc` reaches 945, over a byte, but with
//! `sc = 16 * hi + lo` (`hi < 4`, `lo < 16`) both `q * lo` (at most 225) and `q * hi` (at most 45)
//! are unsigned bytes, and the sum is `16 * dot(q * hi, x) + dot(q * lo, x)` over the whole
//! record: two sum tiles, each fed four 64-deep products (sub-block pairs), with no store between
//! sub-blocks. The integers are the VNNI pass's exactly (no sum comes near 2^31) and the float
//! steps are its own, so the outputs have the scalar reference's bits (`tests/packed.rs`).
//!
//! Per weight group (sixteen weight rows) the records are taken in order: each is prescaled
//! ([`prescale`]: one 16-bit multiply per 64 quants and part, the two quants of a 16-bit lane
//! never carry into each other) into a buffer that stays in L1, then multiplied with every
//! sixteen activation rows in turn; the rows past the last sixteen run the VNNI pass. The
//! activation quants are 64-byte aligned (`BlockQ8K`), so a tile row is one cache line.
//!
//! Tiles: 0-1 and 2-3 hold a (record, row tile)'s `hi` and `lo` sums, alternately, so one's
//! products are issued before the previous one's sums are stored and scaled; 4-5 the
//! activations of a sub-block pair (alternating), 6-7 the prescaled weights.
//!
//! Measured (Intel Xeon with AMX, one thread, weights in cache, 128 activation rows, minimums of
//! alternated runs of `kquant_speed -- 1 8 Q4_K:128`, a noisy shared host): Q4_K 8960x1536
//! 7.1 ms against 9.7-10.1 ms for the per-sub-block tile passes this replaces and 12.7-13.1 ms
//! for the VNNI passes (`TESSERA_ISA=avx512`); 1536x1536 1.13 against 1.51 and 2.07-2.15 ms.
//! Tile loads cost about as much as the products on that host (one 64-byte-row tile load per
//! product halves the product rate; a row straddling two lines adds ~40%), which bounds this
//! pass at three loads per two products.

use std::arch::asm;
use std::arch::x86_64::*;

use super::amx::{Prescaling, ROWS};
use super::packed512::{self, merge6, pick, unpack, widen_u8, Q4KPass};
use super::{prefetch_record, Q4};
use crate::dtype::Format;
use crate::packed::{record_bytes, PackedJob, Q4K_HIGH, Q4K_MINS, Q4K_QUANTS, Q4K_SCALES};
use crate::quant::BlockQ8K;

/// One Q4_K record of a weight group, ready for the tile unit and the float steps.
#[derive(Clone, Copy)]
#[repr(C, align(64))]
pub(super) struct Prescaled {
    /// Per sub-block pair `p`, the quants times `lo` of their row's scale: a weight tile of 16
    /// rows (row `k`: the sixteen weight rows' elements `4k..4k + 4` of the pair's 64).
    lo: [[u8; 1024]; 4],
    /// The same times `hi`.
    hi: [[u8; 1024]; 4],
    /// The record's min pairs (as `packed512::q4k_min_sum` takes them), `d` and `dmin`.
    mins: [__m512i; 4],
    d: __m512,
    dmin: __m512,
}

/// Two row tiles' sums, `hi` then `lo`, each sixteen activation rows of sixteen i32.
#[repr(C, align(64))]
pub(super) struct Sums([[[i32; 16]; 16]; 4]);

/// The Q4_K pass for `amx::prescaled_groups`.
pub(super) struct Q4K;

// SAFETY: `Prescaled` is integers and float vectors, valid as zeroed bytes.
unsafe impl Prescaling for Q4K {
    type Record = Prescaled;
    type Sums = Sums;
    type Rest = Q4KPass;
    #[inline(always)]
    unsafe fn prescale(job: &PackedJob, g: usize, b: usize, out: &mut Prescaled) {
        // SAFETY: forwarded.
        unsafe { prescale(job, g, b, out) }
    }
    /// The sum tiles alternate (0-1, 2-3): nothing waits to be stored first.
    #[inline(always)]
    unsafe fn issue(x: *const i8, stride: usize, w: &Prescaled, odd: bool, _: bool, _: &mut Sums) {
        // SAFETY: forwarded.
        unsafe {
            if odd {
                products::<2>(x, stride, w);
            } else {
                products::<0>(x, stride, w);
            }
        }
    }
    #[inline(always)]
    unsafe fn drain(
        odd: bool,
        _: bool,
        w: &Prescaled,
        x: *const BlockQ8K,
        blocks: usize,
        sums: &mut Sums,
        acc: &mut [__m512],
    ) {
        // SAFETY: forwarded.
        unsafe { drain(odd, w, x, blocks, &mut sums.0, acc) }
    }
}

/// Record `b` of group `g`, prescaled into `out`.
///
/// # Safety
/// The CPU must support AVX-512 F/BW/VNNI and F16C; `job` is a Q4_K job whose shapes agree,
/// `g < job.rows / 16`, `b < job.blocks`.
#[inline(always)]
unsafe fn prescale(job: &PackedJob, g: usize, b: usize, out: &mut Prescaled) {
    let rec = record_bytes(Format::Q4_K);
    // SAFETY: record b of group g lies in `data` (the job's shapes); the stores write the
    // 64-byte aligned rows of `out`'s tiles; the instruction sets per the contract.
    unsafe {
        let r = job.data.as_ptr().add((g * job.blocks + b) * rec);
        prefetch_record(r, rec, 1);
        let m4 = _mm512_set1_epi32(15);
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
        for sj in 0..8 {
            let sc = if sj % 2 == 0 {
                pick::<0>(sp[sj / 2])
            } else {
                pick::<1>(sp[sj / 2])
            };
            // A lane's part of its scale in both 16-bit halves: one 16-bit multiply scales the
            // two quants of each half (neither product reaches 256, so they do not carry).
            let lo = _mm512_and_si512(sc, m4);
            let lo = _mm512_or_si512(lo, _mm512_slli_epi32::<16>(lo));
            let hi = _mm512_srli_epi32::<4>(sc);
            let hi = _mm512_or_si512(hi, _mm512_slli_epi32::<16>(hi));
            let w = unpack::<Q4>(r.add(Q4K_QUANTS + 256 * sj));
            // Sub-block sj is tile rows 8 * (sj % 2).. of pair sj / 2.
            let at = 512 * (sj % 2);
            for (k, &chunk) in w.iter().enumerate() {
                let lo_row = out.lo[sj / 2].as_mut_ptr().add(at + 64 * k);
                let hi_row = out.hi[sj / 2].as_mut_ptr().add(at + 64 * k);
                _mm512_store_si512(lo_row.cast(), _mm512_mullo_epi16(chunk, lo));
                _mm512_store_si512(hi_row.cast(), _mm512_mullo_epi16(chunk, hi));
            }
        }
        out.mins = [
            widen_u8::<0>(m01),
            widen_u8::<1>(m01),
            widen_u8::<0>(m23),
            widen_u8::<1>(m23),
        ];
        out.d = _mm512_cvtph_ps(_mm256_loadu_si256(r.cast()));
        out.dmin = _mm512_cvtph_ps(_mm256_loadu_si256(r.add(32).cast()));
    }
}

/// One record's products for one row tile into sum tiles `H` (hi) and `H + 1` (lo): per
/// sub-block pair `p` the activations (`x`, sixteen rows `stride` bytes apart, at byte `64p`)
/// into tile 4 or 5 (alternating, so a load does not wait for the products of the pair before)
/// and the prescaled weights into tiles 6 and 7.
///
/// # Safety
/// AMX-INT8 with this thread's tiles configured by `TileConfig::for_subblock(64)`; `x` readable
/// for 16 rows of 256 bytes `stride` apart.
#[inline(always)]
unsafe fn products<const H: u8>(x: *const i8, stride: usize, w: &Prescaled) {
    // SAFETY: per the contract; the loads read the 16 x 64 activation bytes of each pair and
    // `w`'s 1 KiB tiles.
    unsafe {
        asm!("tilezero tmm{h}", "tilezero tmm{l}", h = const H, l = const H + 1,
            options(nostack, nomem));
        for p in 0..4 {
            let (x, hi, lo) = (x.add(64 * p), w.hi[p].as_ptr(), w.lo[p].as_ptr());
            if p % 2 == 0 {
                pair::<H, 4>(x, stride, hi, lo);
            } else {
                pair::<H, 5>(x, stride, hi, lo);
            }
        }
    }
}

/// One sub-block pair: activations into tile `A`, `hi` into 6 and `lo` into 7, their products
/// added to tiles `H` and `H + 1`.
///
/// # Safety
/// As [`products`]; `hi` and `lo` readable for 1 KiB each.
#[inline(always)]
unsafe fn pair<const H: u8, const A: u8>(
    x: *const i8,
    stride: usize,
    hi: *const u8,
    lo: *const u8,
) {
    // SAFETY: per the contract.
    unsafe {
        asm!(
            "tileloadd tmm{a}, [{x} + {s}*1]",
            "tileloadd tmm6, [{hi} + {s64}*1]",
            "tdpbsud tmm{h}, tmm{a}, tmm6",
            "tileloadd tmm7, [{lo} + {s64}*1]",
            "tdpbsud tmm{l}, tmm{a}, tmm7",
            a = const A,
            h = const H,
            l = const H + 1,
            x = in(reg) x,
            s = in(reg) stride,
            hi = in(reg) hi,
            lo = in(reg) lo,
            s64 = in(reg) 64usize,
            options(nostack, readonly),
        );
    }
}

/// Stores sum tiles `H` (hi) and `H + 1` (lo) to `out[0]` and `out[1]`.
///
/// # Safety
/// AMX-INT8 with this thread's tiles configured by `TileConfig::for_subblock(64)`.
#[inline(always)]
unsafe fn store<const H: u8>(out: &mut [[[i32; 16]; 16]]) {
    // SAFETY: each store writes 16 rows of 64 bytes into its 1 KiB of `out`.
    unsafe {
        asm!(
            "tilestored [{hi} + {s64}*1], tmm{h}",
            "tilestored [{lo} + {s64}*1], tmm{l}",
            h = const H,
            l = const H + 1,
            hi = in(reg) out[0].as_mut_ptr(),
            lo = in(reg) out[1].as_mut_ptr(),
            s64 = in(reg) 64usize,
            options(nostack),
        );
    }
}

/// The VNNI pass's float steps of one record for one row tile: `x` is the record's activation
/// block of the tile's first row (rows `blocks` blocks apart), `sums` its stored sums (hi, lo),
/// `acc` the tile's sixteen accumulators.
///
/// # Safety
/// AVX-512 F/VNNI; `x` readable for the sixteen rows' blocks.
#[inline(always)]
unsafe fn scale(
    w: &Prescaled,
    x: *const BlockQ8K,
    blocks: usize,
    sums: &[[[i32; 16]; 16]],
    acc: &mut [__m512],
) {
    // SAFETY: per the contract: the blocks read are the rows' own.
    unsafe {
        for (j, a) in acc.iter_mut().enumerate().take(ROWS) {
            let x = &*x.add(j * blocks);
            let hi = _mm512_load_si512(sums[0][j].as_ptr().cast());
            let lo = _mm512_load_si512(sums[1][j].as_ptr().cast());
            let isum = _mm512_add_epi32(_mm512_slli_epi32::<4>(hi), lo);
            let msum = packed512::q4k_min_sum(&w.mins, &x.sub_sums);
            let dx = _mm512_set1_ps(x.d);
            *a = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), _mm512_mul_ps(w.d, dx), *a);
            *a = _mm512_fnmadd_ps(_mm512_cvtepi32_ps(msum), _mm512_mul_ps(w.dmin, dx), *a);
        }
    }
}

/// Stores the sum tiles of one record and row tile (tiles 2-3 when `odd`, else 0-1) to their
/// half of `sums` and scales them into `acc` ([`scale`]).
///
/// # Safety
/// As [`scale`], with this thread's tiles configured by `TileConfig::for_subblock(64)` and the
/// tiles holding the products of `w` and the sixteen rows of `x`.
#[inline(always)]
unsafe fn drain(
    odd: bool,
    w: &Prescaled,
    x: *const BlockQ8K,
    blocks: usize,
    sums: &mut [[[i32; 16]; 16]; 4],
    acc: &mut [__m512],
) {
    let (even_half, odd_half) = sums.split_at_mut(2);
    // SAFETY: forwarded from this function's contract.
    unsafe {
        if odd {
            store::<2>(odd_half);
            scale(w, x, blocks, odd_half, acc);
        } else {
            store::<0>(even_half);
            scale(w, x, blocks, even_half, acc);
        }
    }
}
