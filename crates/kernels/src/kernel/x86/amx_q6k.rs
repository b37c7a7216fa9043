//! The AMX-INT8 pass for x16-packed Q6_K weights: the sub-block scales are multiplied into the
//! weight tiles in four pieces, so the tile unit sums a whole record (256 quants) at once and the
//! vector units scale four sums per record instead of sixteen.
//!
//! A Q6_K record's integer sum for one (activation row, weight row) pair is
//! `sum_j s_j * dot(q_j, x_j) - 32 * sum_j s_j * bsum_j` over its sixteen sub-blocks `j` of 16
//! (`s_j` a signed 8-bit scale, `q_j` the 6-bit quants 0..63). The second term is the VNNI
//! pass's (from the activations' sums of 16). For the first, `s = 64 a + 16 b + 4 c + e` with
//! `b, c, e` in 0..4 (the low six bits of `s + 128`) and `a` in -2..2: `q * b`, `q * c` and
//! `q * e` are unsigned bytes (at most 189) and `q * a` a signed one (-126..63), so four sum
//! tiles, each fed four 64-deep products (four sub-blocks each), give
//! `64 A + 16 B + 4 C + E` with no store between sub-blocks. The integers are the VNNI pass's
//! exactly (none comes near 2^31) and the float steps are its own, so the outputs have the
//! scalar reference's bits (`tests/packed.rs`).
//!
//! As `amx_q4k`: per weight group the records are taken in order, each prescaled into a
//! buffer that stays in L1 ([`prescale`]; the three unsigned pieces one 16-bit multiply per 64
//! quants, the signed one as its magnitude with the sign put back) and multiplied with every
//! sixteen activation rows in turn; the rows past the last sixteen run the VNNI pass.
//!
//! Tiles: 0-3 hold the sums of the pieces `a`, `b`, `c`, `e` of one (record, row tile); they
//! are stored before the next one's products are issued, whose work on the tile unit then
//! overlaps the stored sums' float steps; 4-5 the activations of a 64-quant chunk (alternating),
//! 6-7 the prescaled weights (alternating).

/// Activation rows from which this pass is taken (below, the VNNI passes): a record's
/// prescaling costs about as much as three row tiles' products, so over one row tile the pass
/// was slower than VNNI (1536x8960 at 16 rows 3.4 against 1.8-1.9 ms, one thread, a noisy
/// Intel Xeon host), and at 32 rows faster (4.8 against 6.6 ms).
pub(super) const MIN_ROWS: usize = 32;

use std::arch::asm;
use std::arch::x86_64::*;

use super::amx::{Prescaling, ROWS};
use super::packed512::{self, merge6, pick, Q6KPass};
use super::prefetch_record;
use crate::dtype::Format;
use crate::packed::{record_bytes, PackedJob, Q6K_HIGH, Q6K_LOW, Q6K_SCALES};
use crate::quant::BlockQ8K;

/// One Q6_K record of a weight group, ready for the tile unit and the float steps.
#[derive(Clone, Copy)]
#[repr(C, align(64))]
pub(super) struct Prescaled {
    /// Per piece (`a`, `b`, `c`, `e`) and 64-quant chunk, a weight tile of 16 rows (row `k`:
    /// the sixteen weight rows' elements `4k..4k + 4` of the chunk) of the quants times that
    /// piece of their row's sub-block scale.
    pieces: [[[u8; 1024]; 4]; 4],
    /// The record's scales in pair order, sign-extended (as `packed512::q6k_offset_sum` takes
    /// them), and `d`.
    sp: [__m512i; 8],
    d: __m512,
}

/// One row tile's four piece sums, each sixteen activation rows of sixteen i32.
#[repr(C, align(64))]
pub(super) struct Sums([[[i32; 16]; 16]; 4]);

/// The Q6_K pass for `amx::prescaled_groups`.
pub(super) struct Q6K;

// SAFETY: `Prescaled` is integers and float vectors, valid as zeroed bytes.
unsafe impl Prescaling for Q6K {
    type Record = Prescaled;
    type Sums = Sums;
    type Rest = Q6KPass;
    #[inline(always)]
    unsafe fn prescale(job: &PackedJob, g: usize, b: usize, out: &mut Prescaled) {
        // SAFETY: forwarded.
        unsafe { prescale(job, g, b, out) }
    }
    /// One set of sum tiles: the previous row tile's sums are stored before they are zeroed.
    #[inline(always)]
    unsafe fn issue(
        x: *const i8,
        stride: usize,
        w: &Prescaled,
        _: bool,
        pending: bool,
        sums: &mut Sums,
    ) {
        // SAFETY: forwarded.
        unsafe {
            if pending {
                store(sums);
            }
            products(x, stride, w);
        }
    }
    #[inline(always)]
    unsafe fn drain(
        _: bool,
        last: bool,
        w: &Prescaled,
        x: *const BlockQ8K,
        blocks: usize,
        sums: &mut Sums,
        acc: &mut [__m512],
    ) {
        // SAFETY: forwarded; the last row tile's sums are still in the tiles.
        unsafe {
            if last {
                store(sums);
            }
            scale(w, x, blocks, sums, acc);
        }
    }
}

/// A lane's 32-bit value in both of its 16-bit halves.
///
/// # Safety
/// AVX-512 F.
#[inline(always)]
unsafe fn both_halves(v: __m512i) -> __m512i {
    // SAFETY: register operations only.
    unsafe { _mm512_or_si512(v, _mm512_slli_epi32::<16>(v)) }
}

/// Record `b` of group `g`, prescaled into `out`.
///
/// # Safety
/// The CPU must support AVX-512 F/BW/VNNI and F16C; `job` is a Q6_K job whose shapes agree,
/// `g < job.rows / 16`, `b < job.blocks`.
#[inline(always)]
unsafe fn prescale(job: &PackedJob, g: usize, b: usize, out: &mut Prescaled) {
    let rec = record_bytes(Format::Q6_K);
    // SAFETY: record b of group g lies in `data` (the job's shapes); the stores write the
    // 64-byte aligned rows of `out`'s tiles; the instruction sets per the contract.
    unsafe {
        let r = job.data.as_ptr().add((g * job.blocks + b) * rec);
        prefetch_record(r, rec, 1);
        out.sp = std::array::from_fn(|k| {
            _mm512_cvtepi8_epi16(_mm256_loadu_si256(r.add(Q6K_SCALES + 32 * k).cast()))
        });
        out.d = _mm512_cvtph_ps(_mm256_loadu_si256(r.cast()));
        let (three, bias) = (_mm512_set1_epi32(3), _mm512_set1_epi32(128));
        for sb in 0..16 {
            let s = if sb % 2 == 0 {
                pick::<0>(out.sp[sb / 2])
            } else {
                pick::<1>(out.sp[sb / 2])
            };
            // s + 128 = 64 (a + 2) + 16 b + 4 c + e.
            let u = _mm512_add_epi32(s, bias);
            let e = both_halves(_mm512_and_si512(u, three));
            let c = both_halves(_mm512_and_si512(_mm512_srli_epi32::<2>(u), three));
            let bp = both_halves(_mm512_and_si512(_mm512_srli_epi32::<4>(u), three));
            // a in -2..2: its magnitude (at most 2), and the rows where it is negative.
            let a = _mm512_sub_epi32(_mm512_srli_epi32::<6>(u), _mm512_set1_epi32(2));
            let a_abs = both_halves(_mm512_abs_epi32(a));
            let a_neg = _mm512_movepi8_mask(_mm512_srai_epi32::<31>(a));
            let low = r.add(Q6K_LOW + 128 * sb);
            let w = merge6(
                _mm512_loadu_si512(low.cast()),
                _mm512_loadu_si512(low.add(64).cast()),
                _mm512_loadu_si512(r.add(Q6K_HIGH + 64 * sb).cast()),
            );
            // Sub-block sb is tile rows 4 * (sb % 4).. of chunk sb / 4.
            let (chunk, at) = (sb / 4, 256 * (sb % 4));
            for (k, &q) in w.iter().enumerate() {
                let row = at + 64 * k;
                let mag = _mm512_mullo_epi16(q, a_abs);
                let signed = _mm512_mask_sub_epi8(mag, a_neg, _mm512_setzero_si512(), mag);
                let products = [signed, _mm512_mullo_epi16(q, bp), _mm512_mullo_epi16(q, c)];
                for (piece, v) in products.into_iter().enumerate() {
                    _mm512_store_si512(out.pieces[piece][chunk].as_mut_ptr().add(row).cast(), v);
                }
                let v = _mm512_mullo_epi16(q, e);
                _mm512_store_si512(out.pieces[3][chunk].as_mut_ptr().add(row).cast(), v);
            }
        }
    }
}

/// One 64-quant chunk's product for one piece: the prescaled weights into tile `B`, times the
/// activations in tile `A`, added to tile `P` (signed weights when `SIGNED`).
///
/// # Safety
/// AMX-INT8 with this thread's tiles configured by `TileConfig::for_subblock(64)` and tile `A`
/// loaded; `w` readable for 1 KiB.
#[inline(always)]
unsafe fn piece<const P: u8, const A: u8, const B: u8, const SIGNED: bool>(w: *const u8) {
    // SAFETY: per the contract.
    unsafe {
        asm!("tileloadd tmm{b}, [{w} + {s64}*1]", b = const B, w = in(reg) w,
            s64 = in(reg) 64usize, options(nostack, readonly));
        if SIGNED {
            asm!("tdpbssd tmm{p}, tmm{a}, tmm{b}", p = const P, a = const A, b = const B,
                options(nostack, nomem));
        } else {
            asm!("tdpbsud tmm{p}, tmm{a}, tmm{b}", p = const P, a = const A, b = const B,
                options(nostack, nomem));
        }
    }
}

/// One chunk's four products: the activations (`x`, sixteen rows `stride` bytes apart) into tile
/// `A`, then the four pieces.
///
/// # Safety
/// AMX-INT8 with this thread's tiles configured by `TileConfig::for_subblock(64)`; `x` readable
/// for 16 rows of 64 bytes `stride` apart.
#[inline(always)]
unsafe fn chunk<const A: u8>(x: *const i8, stride: usize, w: &Prescaled, c: usize) {
    // SAFETY: per the contract; the weights are `w`'s 1 KiB tiles.
    unsafe {
        asm!("tileloadd tmm{a}, [{x} + {s}*1]", a = const A, x = in(reg) x, s = in(reg) stride,
            options(nostack, readonly));
        piece::<0, A, 6, true>(w.pieces[0][c].as_ptr());
        piece::<1, A, 7, false>(w.pieces[1][c].as_ptr());
        piece::<2, A, 6, false>(w.pieces[2][c].as_ptr());
        piece::<3, A, 7, false>(w.pieces[3][c].as_ptr());
    }
}

/// One record's products for one row tile (`x`: the record's quants of its first activation
/// row, rows `stride` bytes apart) into sum tiles 0-3.
///
/// # Safety
/// AMX-INT8 with this thread's tiles configured by `TileConfig::for_subblock(64)`; `x` readable
/// for 16 rows of 256 bytes `stride` apart.
#[inline(always)]
unsafe fn products(x: *const i8, stride: usize, w: &Prescaled) {
    // SAFETY: per the contract.
    unsafe {
        asm!(
            "tilezero tmm0",
            "tilezero tmm1",
            "tilezero tmm2",
            "tilezero tmm3",
            options(nostack, nomem)
        );
        for c in 0..4 {
            if c % 2 == 0 {
                chunk::<4>(x.add(64 * c), stride, w, c);
            } else {
                chunk::<5>(x.add(64 * c), stride, w, c);
            }
        }
    }
}

/// Stores sum tiles 0-3 to `out`.
///
/// # Safety
/// AMX-INT8 with this thread's tiles configured by `TileConfig::for_subblock(64)`.
#[inline(always)]
unsafe fn store(out: &mut Sums) {
    // SAFETY: each store writes 16 rows of 64 bytes into its 1 KiB of `out`.
    unsafe {
        asm!(
            "tilestored [{p0} + {s64}*1], tmm0",
            "tilestored [{p1} + {s64}*1], tmm1",
            "tilestored [{p2} + {s64}*1], tmm2",
            "tilestored [{p3} + {s64}*1], tmm3",
            p0 = in(reg) out.0[0].as_mut_ptr(),
            p1 = in(reg) out.0[1].as_mut_ptr(),
            p2 = in(reg) out.0[2].as_mut_ptr(),
            p3 = in(reg) out.0[3].as_mut_ptr(),
            s64 = in(reg) 64usize,
            options(nostack),
        );
    }
}

/// The VNNI pass's float steps of one record for one row tile: `x` is the record's activation
/// block of the tile's first row (rows `blocks` blocks apart), `sums` its stored piece sums,
/// `acc` the tile's sixteen accumulators.
///
/// # Safety
/// AVX-512 F/VNNI; `x` readable for the sixteen rows' blocks.
#[inline(always)]
unsafe fn scale(w: &Prescaled, x: *const BlockQ8K, blocks: usize, sums: &Sums, acc: &mut [__m512]) {
    // SAFETY: per the contract: the blocks read are the rows' own.
    unsafe {
        for (j, a) in acc.iter_mut().enumerate().take(ROWS) {
            let x = &*x.add(j * blocks);
            let [pa, pb, pc, pe] = [0, 1, 2, 3].map(|p| sums.0[p][j].as_ptr());
            let (pa, pb) = (_mm512_load_si512(pa.cast()), _mm512_load_si512(pb.cast()));
            let (pc, pe) = (_mm512_load_si512(pc.cast()), _mm512_load_si512(pe.cast()));
            // 64 a + 16 b + 4 c + e, as ((4 a + b) * 4 + c) * 4 + e.
            let ab = _mm512_add_epi32(_mm512_slli_epi32::<2>(pa), pb);
            let abc = _mm512_add_epi32(_mm512_slli_epi32::<2>(ab), pc);
            let isum = _mm512_add_epi32(_mm512_slli_epi32::<2>(abc), pe);
            let corr = packed512::q6k_offset_sum(&w.sp, &x.bsums);
            let total = _mm512_sub_epi32(isum, _mm512_slli_epi32::<5>(corr));
            let dx = _mm512_set1_ps(x.d);
            *a = _mm512_fmadd_ps(_mm512_cvtepi32_ps(total), _mm512_mul_ps(w.d, dx), *a);
        }
    }
}
