//! The AMX-BF16 path of [`crate::bf16dot`]: `tdpbf16ps` multiplies a 16 x 32 tile of BF16
//! weights by 32 x 16 BF16 activations, all 16 x 16 (weight row, activation row) sums of a
//! 32-column block in one instruction, where `vdpbf16ps` does one (weight row, activation row)
//! pair's 32 columns.
//!
//! Operands: the weights are the left tile, loaded straight from their rows (one tile row per
//! weight row, stride one weight row); the activations are the right tile, which wants each tile
//! row to hold one BF16 pair of sixteen activation rows, so [`crate::bf16dot`] rounds them into
//! that layout ([`pack_group`]): group `g` of sixteen activation rows, block `b` of 32 columns, is
//! 1 KiB at `(g * blocks + b) * 512` values, row `k` holding the pairs `(x[16g + n][32b + 2k],
//! x[16g + n][32b + 2k + 1])` for `n` in 0..16, rows past `m` zero. A sum tile is thus (weight row,
//! activation row); it is transposed on the vector units on its way out.
//!
//! Alignment: a tile row is 64 bytes, and one that straddles two cache lines loads several
//! times slower (six times for loads alone on the Xeon we measured). The packed activations
//! and the weights rounded at load live in [`crate::aligned::AlignedU16`]; weights read in place
//! from a file start on a cache line when the file's tensors do (`general.alignment` 64, as the
//! `to_bf16` example writes; llama.cpp's default of 32 leaves that to chance).
//!
//! Blocking: two weight tiles by two activation tiles, four sum tiles (tiles 0-3 sums, 4-5
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
/// one group's packed tiles `group` (`cols / 32` tiles of [`TILE_VALUES`]); rows past `rows` are
/// zero. Per block, the sixteen rows' BF16 pairs are a 16 x 16 matrix of 32-bit words, which the
/// tile wants transposed (row `k` holding pair `k` of every row).
///
/// # Safety
/// The CPU has AVX-512 F and BW.
#[target_feature(enable = "avx2,avx512f,avx512bw")]
pub(crate) unsafe fn pack_group(x: &[f32], rows: usize, cols: usize, group: &mut [u16]) {
    assert!(rows <= ROWS && x.len() >= rows * cols && group.len() >= cols / BLOCK * TILE_VALUES);
    // SAFETY: loads read 32 floats at n * cols + 32 b <= rows * cols - 32; stores write 1 KiB at
    // tile b < cols / 32 of `group` (both checked above); features per the contract.
    unsafe {
        for b in 0..cols / BLOCK {
            let pairs: [__m512; ROWS] = std::array::from_fn(|n| {
                if n >= rows {
                    return _mm512_setzero_ps();
                }
                let at = x.as_ptr().add(n * cols + b * BLOCK);
                let lo = _mm512_cvtepi32_epi16(round16(_mm512_loadu_ps(at)));
                let hi = _mm512_cvtepi32_epi16(round16(_mm512_loadu_ps(at.add(16))));
                _mm512_castsi512_ps(_mm512_inserti64x4::<1>(_mm512_castsi256_si512(lo), hi))
            });
            let tile = group.as_mut_ptr().add(b * TILE_VALUES);
            for (k, v) in transpose(pairs).iter().enumerate() {
                _mm512_storeu_ps(tile.add(k * 2 * ROWS).cast(), *v);
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

/// `tilestored` tile `T` to `out` (64-byte rows).
///
/// # Safety
/// Tiles configured.
#[inline(always)]
unsafe fn store<const T: usize>(out: &mut SumTile) {
    // SAFETY: `out` holds sixteen 64-byte rows; the caller's contract.
    unsafe {
        asm!("tilestored [{p} + {s}*1], tmm{t}", t = const T, p = in(reg) out.0.as_mut_ptr(),
            s = in(reg) 64usize, options(nostack));
    }
}

/// The transpose of a 16 x 16 tile, in four stages: stage `b` (1, 2, 4, 8) swaps the
/// off-diagonal `b x b` blocks of every `2b x 2b` block, whose own blocks the earlier stages
/// transposed.
///
/// # Safety
/// AVX-512 F enabled in the caller.
#[inline(always)]
unsafe fn transpose(mut r: [__m512; ROWS]) -> [__m512; ROWS] {
    // SAFETY: register operations only; AVX-512 F per the contract.
    unsafe {
        let mut b = 1;
        while b < ROWS {
            // Row p (bit b clear) keeps its own lanes with bit b clear and takes row q's lanes
            // j - b where bit b is set; row q the converse.
            let ip: [i32; 16] = std::array::from_fn(|j| {
                if j & b == 0 {
                    j as i32
                } else {
                    (16 + j - b) as i32
                }
            });
            let iq: [i32; 16] = std::array::from_fn(|j| {
                if j & b == 0 {
                    (j + b) as i32
                } else {
                    (16 + j) as i32
                }
            });
            let (ip, iq) = (
                _mm512_loadu_si512(ip.as_ptr().cast()),
                _mm512_loadu_si512(iq.as_ptr().cast()),
            );
            for p in 0..ROWS {
                if p & b == 0 {
                    let q = p | b;
                    let (rp, rq) = (r[p], r[q]);
                    r[p] = _mm512_permutex2var_ps(rp, ip, rq);
                    r[q] = _mm512_permutex2var_ps(rp, iq, rq);
                }
            }
            b *= 2;
        }
        r
    }
}

/// Writes sum tile `t` (weight rows `r..r + 16` by the activation rows of group `g`) to the
/// outputs, skipping activation rows at or past `m`.
///
/// # Safety
/// AVX-512 F enabled; `r + 16 <= job.w.rows`; no other thread writes these weight rows.
#[inline(always)]
unsafe fn write(job: &Bf16Job, t: &SumTile, r: usize, g: usize) {
    // SAFETY: the caller's contract; each store writes sixteen outputs of activation row
    // `i < m` at weight rows r..r + 16, inside the `m * rows` output.
    unsafe {
        let rows: [__m512; ROWS] =
            std::array::from_fn(|i| _mm512_load_ps(t.0.as_ptr().add(ROWS * i)));
        let cols = transpose(rows);
        for (n, v) in cols.iter().enumerate() {
            let i = g * ROWS + n;
            if i < job.m {
                _mm512_storeu_ps(job.out.add(i * job.w.rows + r), *v);
            }
        }
    }
}

/// `W` weight tiles (rows `r..r + 16 W`) by `A` activation groups (`g..g + A`) over all blocks:
/// sum tile `2w + a` holds weight tile `w` by group `a`.
///
/// # Safety
/// Tiles configured; AVX-512 F enabled; the weight rows and groups exist (`acts` holds the
/// packed groups); no other thread writes these weight rows.
#[inline(always)]
unsafe fn block<const W: usize, const A: usize>(
    job: &Bf16Job,
    r: usize,
    g: usize,
    sums: &mut SumTile,
) {
    let cols = job.w.cols;
    let blocks = cols / BLOCK;
    let stride = cols * 2;
    let w0 = job.w.row(r).as_ptr();
    // SAFETY: the caller's contract; loads read weight rows r..r + 16 W at 64-byte column
    // offsets below the row's end, and whole 1 KiB packed tiles of groups g..g + A.
    unsafe {
        zero::<0>();
        if A == 2 {
            zero::<1>();
        }
        if W == 2 {
            zero::<2>();
            if A == 2 {
                zero::<3>();
            }
        }
        let acts = job.x.as_ptr().add(g * blocks * TILE_VALUES);
        for b in 0..blocks {
            load::<4>(w0.add(b * BLOCK), stride);
            load::<6>(acts.add(b * TILE_VALUES), 64);
            if A == 2 {
                load::<7>(acts.add((blocks + b) * TILE_VALUES), 64);
            }
            product::<0, 4, 6>();
            if A == 2 {
                product::<1, 4, 7>();
            }
            if W == 2 {
                load::<5>(w0.add(ROWS * cols + b * BLOCK), stride);
                product::<2, 5, 6>();
                if A == 2 {
                    product::<3, 5, 7>();
                }
            }
        }
        store::<0>(sums);
        write(job, sums, r, g);
        if A == 2 {
            store::<1>(sums);
            write(job, sums, r, g + 1);
        }
        if W == 2 {
            store::<2>(sums);
            write(job, sums, r + ROWS, g);
            if A == 2 {
                store::<3>(sums);
                write(job, sums, r + ROWS, g + 1);
            }
        }
    }
}

/// Weight rows `range` of `job` (whose `x` is packed by [`pack_group`]) with AMX-BF16.
///
/// # Safety
/// [`available`] holds; `range` lies in `0..job.w.rows` with `range.start` and `range.end`
/// multiples of 16 (or `range.end == job.w.rows`, itself a multiple of 16); `job.x` holds
/// `job.m.div_ceil(16)` packed groups; no other thread writes these rows.
#[target_feature(enable = "avx2,fma,avx512f,avx512bf16")]
pub(crate) unsafe fn rows_amx(job: &Bf16Job, range: Range<usize>) {
    let blocks = job.w.cols / BLOCK;
    let groups = job.m.div_ceil(ROWS);
    let chunk = (ACT_BUDGET / (blocks * TILE_VALUES * 2)).max(2);
    let mut sums = SumTile([0.0; ROWS * ROWS]);
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
                    match (two, g + 2 <= g1) {
                        (true, true) => block::<2, 2>(job, r, g, &mut sums),
                        (true, false) => block::<2, 1>(job, r, g, &mut sums),
                        (false, true) => block::<1, 2>(job, r, g, &mut sums),
                        (false, false) => block::<1, 1>(job, r, g, &mut sums),
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
