//! The AMX-BF16 path of [`crate::bf16dot`]: `tdpbf16ps` multiplies a 16 x 32 tile of BF16
//! weights by 32 x 16 BF16 activations, all 16 x 16 (weight row, activation row) sums of a
//! 32-column block in one instruction, where `vdpbf16ps` does one (weight row, activation row)
//! pair's 32 columns.
//!
//! Operands: the activations are the left tile, sixteen rows of one 32-column block straight
//! from their rows (rounded to BF16 by [`pack_group`]: group `g` of sixteen activation rows, block
//! `b`, is 1 KiB at `(g * blocks + b) * 512`, row `n` holding `x[16g + n][32b..32b + 32]`, rows
//! past `m` zero). The weights are the right tile, which wants each tile row to hold one BF16 pair
//! of sixteen weight rows: `crate::packed` rearranges them so at load ([`crate::bf16dot`]'s tiled
//! layout: weight tile `t` of sixteen rows, block `b`, is 1 KiB at `(t * blocks + b) * 512`, row
//! `k` holding the pairs `(w[16t + n][32b + 2k], w[16t + n][32b + 2k + 1])` for `n` in 0..16). A
//! sum tile is thus (activation row, weight row), the outputs' own layout, and is stored straight
//! to them: nothing is transposed on either side.
//!
//! Alignment: a tile row is 64 bytes, and one that straddles two cache lines loads several
//! times slower (six times for loads alone on the Xeon we measured); both operands are packed
//! into 64-byte aligned buffers.
//!
//! Blocking: two activation tiles by two weight tiles, four sum tiles (tiles 0-3 sums, 4-5
//! weights, 6-7 activations), four loads per four products; activation groups in chunks of about
//! 1 MiB, so they stay in L2 while every pair of weight tiles passes over them.
//!
//! Numerics: the products of the rounded operands are exact in f32; how the tile unit adds them
//! is its own (Intel does not specify it bit for bit, and on the Xeon we measured it matches no
//! order of f32 additions). So this path does not give the other paths' bits. It keeps what the
//! callers rely on: each output depends only on its weight row and activation row (never on the
//! batch, the tile or the thread), and its error is that of f32 sums.

// Index loops address parallel register arrays; iterator forms would hide the unrolled shape.
#![allow(clippy::needless_range_loop)]

use std::arch::asm;
use std::arch::x86_64::*;
use std::ops::Range;

use super::amx::TileConfig;
use crate::bf16dot::{Bf16Job, BLOCK};

/// Rows of a tile: sixteen weight rows, sixteen activation rows.
pub(crate) const ROWS: usize = 16;

/// BF16 values of one packed activation tile (sixteen rows by one 32-column block).
pub(crate) const TILE_VALUES: usize = ROWS * BLOCK;

/// Bytes of packed activation groups a call keeps in L2 while the weight tiles pass over them.
const ACT_BUDGET: usize = 1 << 20;

/// Whether the CPU has AMX-BF16 (CPUID 7.0 EDX bit 22) beside the AMX tiles the INT8 passes
/// use, with the OS's permission, and AVX-512 BF16 for the rest of the path.
pub(crate) fn available() -> bool {
    // `cpuid` exists on every x86-64 CPU; leaf 7 reads as zeros where unsupported.
    let leaf7 = __cpuid_count(7, 0);
    leaf7.edx & (1 << 22) != 0 && super::amx::available() && super::bf16dot::avx512bf16_available()
}

/// Sixteen f32 values rounded to BF16 as [`crate::bf16dot::to_bf16`] rounds them (nearest, ties
/// to even; NaNs kept quiet; magnitudes under 2^-64 to a signed zero), each in the low half of
/// its 32-bit lane.
///
/// # Safety
/// AVX-512 F enabled in the caller.
#[inline(always)]
unsafe fn round16(v: __m512) -> __m512i {
    // SAFETY: register operations only; AVX-512 F per the contract.
    unsafe {
        let b = _mm512_castps_si512(v);
        let high = _mm512_srli_epi32::<16>(b);
        let lsb = _mm512_and_si512(high, _mm512_set1_epi32(1));
        let bias = _mm512_add_epi32(_mm512_set1_epi32(0x7fff), lsb);
        let rounded = _mm512_srli_epi32::<16>(_mm512_add_epi32(b, bias));
        let abs = _mm512_and_si512(b, _mm512_set1_epi32(0x7fff_ffff));
        let nan = _mm512_cmpgt_epu32_mask(abs, _mm512_set1_epi32(0x7f80_0000));
        let quiet = _mm512_or_si512(high, _mm512_set1_epi32(0x40));
        let exp = _mm512_and_si512(_mm512_srli_epi32::<23>(b), _mm512_set1_epi32(0xff));
        let tiny = _mm512_cmplt_epu32_mask(exp, _mm512_set1_epi32(127 - 64));
        let sign = _mm512_and_si512(high, _mm512_set1_epi32(0x8000));
        let r = _mm512_mask_blend_epi32(nan, rounded, quiet);
        _mm512_mask_blend_epi32(tiny, r, sign)
    }
}

/// Rounds activation rows `x` (`rows <= 16` rows of `cols` values, `cols` a multiple of 32) into
/// one group's packed tiles `group` (`cols / 32` tiles of [`TILE_VALUES`], row `n` of tile `b`
/// holding row `n`'s columns `32b..32b + 32`); rows past `rows` are zero.
///
/// # Safety
/// The CPU has AVX-512 F and BW.
#[target_feature(enable = "avx2,avx512f,avx512bw")]
pub(crate) unsafe fn pack_group(x: &[f32], rows: usize, cols: usize, group: &mut [u16]) {
    let blocks = cols / BLOCK;
    assert!(rows <= ROWS && x.len() >= rows * cols && group.len() >= blocks * TILE_VALUES);
    // SAFETY: loads read 32 floats at n * cols + 32 b <= rows * cols - 32; stores write 64 bytes
    // at row n of tile b < cols / 32 of `group` (both checked above); features per the contract.
    unsafe {
        for b in 0..blocks {
            let tile = group.as_mut_ptr().add(b * TILE_VALUES);
            for n in 0..ROWS {
                let v = if n < rows {
                    let at = x.as_ptr().add(n * cols + b * BLOCK);
                    let lo = _mm512_cvtepi32_epi16(round16(_mm512_loadu_ps(at)));
                    let hi = _mm512_cvtepi32_epi16(round16(_mm512_loadu_ps(at.add(16))));
                    _mm512_inserti64x4::<1>(_mm512_castsi256_si512(lo), hi)
                } else {
                    _mm512_setzero_si512()
                };
                _mm512_storeu_si512(tile.add(n * BLOCK).cast(), v);
            }
        }
    }
}

/// Tile configuration: every tile sixteen rows of 64 bytes, which is the INT8 passes'
/// configuration for 64-quant sub-blocks (a 64-byte row holds 32 BF16 values or 16 pairs).
const CONFIG: TileConfig = TileConfig::for_subblock(64);

/// A 16 x 16 f32 tile in memory, 64-byte aligned.
#[repr(C, align(64))]
struct SumTile([f32; ROWS * ROWS]);

/// `tileloadd tmm{T}` from `ptr`, rows `stride` bytes apart.
///
/// # Safety
/// Tiles configured ([`CONFIG`]); sixteen rows of 64 bytes readable at `ptr + i * stride`.
#[inline(always)]
unsafe fn load<const T: usize>(ptr: *const u16, stride: usize) {
    // SAFETY: the caller's contract.
    unsafe {
        asm!("tileloadd tmm{t}, [{p} + {s}*1]", t = const T, p = in(reg) ptr, s = in(reg) stride,
            options(nostack, readonly));
    }
}

/// `tdpbf16ps tmm{C}, tmm{A}, tmm{B}`.
///
/// # Safety
/// Tiles configured and loaded.
#[inline(always)]
unsafe fn product<const C: usize, const A: usize, const B: usize>() {
    // SAFETY: register-only tile operation; the caller's contract.
    unsafe {
        asm!("tdpbf16ps tmm{c}, tmm{a}, tmm{b}", c = const C, a = const A, b = const B,
            options(nostack, nomem));
    }
}

/// `tilezero tmm{T}`.
///
/// # Safety
/// Tiles configured.
#[inline(always)]
unsafe fn zero<const T: usize>() {
    // SAFETY: register-only tile operation; the caller's contract.
    unsafe { asm!("tilezero tmm{t}", t = const T, options(nostack, nomem)) };
}

/// `tilestored` tile `T` to `out`, rows `stride` bytes apart.
///
/// # Safety
/// Tiles configured; sixteen rows of 64 bytes writable at `out + i * stride`.
#[inline(always)]
unsafe fn store<const T: usize>(out: *mut f32, stride: usize) {
    // SAFETY: the caller's contract.
    unsafe {
        asm!("tilestored [{p} + {s}*1], tmm{t}", t = const T, p = in(reg) out, s = in(reg) stride,
            options(nostack));
    }
}

/// Writes sum tile `T` (the activation rows of group `g` by weight rows `r..r + 16`) to the
/// outputs: straight from the tile when the group's sixteen rows all exist, else through
/// `spare`, copying the rows below `m`.
///
/// # Safety
/// Tiles configured; `r + 16 <= job.w.rows`; no other thread writes these weight rows.
#[inline(always)]
unsafe fn write<const T: usize>(job: &Bf16Job, r: usize, g: usize, spare: &mut SumTile) {
    let stride = job.w.rows * 4;
    let first = g * ROWS;
    // SAFETY: the caller's contract; every row written is an activation row below `m`, columns
    // r..r + 16 of its `w.rows` outputs.
    unsafe {
        if first + ROWS <= job.m {
            store::<T>(job.out.add(first * job.w.rows + r), stride);
        } else {
            store::<T>(spare.0.as_mut_ptr(), ROWS * 4);
            for n in 0..job.m - first {
                let src = spare.0.as_ptr().add(n * ROWS);
                std::ptr::copy_nonoverlapping(src, job.out.add((first + n) * job.w.rows + r), ROWS);
            }
        }
    }
}

/// `A` activation groups (`g..g + A`) by `W` weight tiles (rows `r..r + 16 W`) over all blocks:
/// sum tile `2a + w` holds group `a` by weight tile `w`.
///
/// # Safety
/// Tiles configured; the weight tiles and groups exist (`job.w` tiled, `job.x` holding the packed
/// groups); no other thread writes these weight rows.
#[inline(always)]
unsafe fn block<const A: usize, const W: usize>(
    job: &Bf16Job,
    r: usize,
    g: usize,
    spare: &mut SumTile,
) {
    let blocks = job.w.cols / BLOCK;
    let w0 = job.w.tiles(r / ROWS).as_ptr();
    // SAFETY: the caller's contract; loads read whole 1 KiB tiles: weight tiles r / 16 and the
    // next (when W == 2), groups g and the next (when A == 2), at blocks below `blocks`.
    unsafe {
        let acts = job.x.as_ptr().add(g * blocks * TILE_VALUES);
        zero::<0>();
        if W == 2 {
            zero::<1>();
        }
        if A == 2 {
            zero::<2>();
            if W == 2 {
                zero::<3>();
            }
        }
        for b in 0..blocks {
            load::<6>(acts.add(b * TILE_VALUES), 64);
            load::<4>(w0.add(b * TILE_VALUES), 64);
            product::<0, 6, 4>();
            if W == 2 {
                load::<5>(w0.add((blocks + b) * TILE_VALUES), 64);
                product::<1, 6, 5>();
            }
            if A == 2 {
                load::<7>(acts.add((blocks + b) * TILE_VALUES), 64);
                product::<2, 7, 4>();
                if W == 2 {
                    product::<3, 7, 5>();
                }
            }
        }
        write::<0>(job, r, g, spare);
        if W == 2 {
            write::<1>(job, r + ROWS, g, spare);
        }
        if A == 2 {
            write::<2>(job, r, g + 1, spare);
            if W == 2 {
                write::<3>(job, r + ROWS, g + 1, spare);
            }
        }
    }
}

/// Weight rows `range` of `job` (`job.w` tiled, `job.x` packed by [`pack_group`]) with AMX-BF16.
///
/// # Safety
/// [`available`] holds; `job.w` is tiled; `range` lies in `0..job.w.rows` with `range.start` and
/// `range.end` multiples of 16; `job.x` holds `job.m.div_ceil(16)` packed groups; no other thread
/// writes these rows.
#[target_feature(enable = "avx2,fma,avx512f,avx512bf16")]
pub(crate) unsafe fn rows_amx(job: &Bf16Job, range: Range<usize>) {
    let blocks = job.w.cols / BLOCK;
    let groups = job.m.div_ceil(ROWS);
    let chunk = (ACT_BUDGET / (blocks * TILE_VALUES * 2)).max(2);
    let mut spare = SumTile([0.0; ROWS * ROWS]);
    // SAFETY: AMX-BF16 is available and permitted (the contract) and the configuration is valid
    // for palette 1; `block` gets whole weight tiles within `range` and groups within
    // `0..groups`; the tiles are released before returning.
    unsafe {
        asm!("ldtilecfg [{}]", in(reg) CONFIG.0.as_ptr(), options(nostack, readonly));
        let mut g0 = 0;
        while g0 < groups {
            let g1 = (g0 + chunk).min(groups);
            let mut r = range.start;
            while r < range.end {
                let two = r + 2 * ROWS <= range.end;
                let mut g = g0;
                while g < g1 {
                    match (g + 2 <= g1, two) {
                        (true, true) => block::<2, 2>(job, r, g, &mut spare),
                        (true, false) => block::<2, 1>(job, r, g, &mut spare),
                        (false, true) => block::<1, 2>(job, r, g, &mut spare),
                        (false, false) => block::<1, 1>(job, r, g, &mut spare),
                    }
                    g += if g + 2 <= g1 { 2 } else { 1 };
                }
                r += if two { 2 * ROWS } else { ROWS };
            }
            g0 = g1;
        }
        asm!("tilerelease", options(nostack, nomem));
    }
}
