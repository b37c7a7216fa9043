//! AMX-INT8 passes for x16-packed weights over sixteen activation rows (layout in
//! `crate::packed`), beside the AVX-512 VNNI passes of `packed512`, whose helpers they share:
//! the legacy formats (Q8_0, Q5_0, Q4_0, Q4_1, Q5_1) with the table formats packed like them
//! (MXFP4, IQ4_NL). The K-quants' passes, which fold their integer sub-block scales into the
//! weight tiles, are `amx_q4k` and `amx_q6k`; this file holds the tile configuration and the
//! OS permission they share.
//!
//! Why: over sixteen activation rows the VNNI passes are bound by port 0, which runs every
//! 512-bit integer multiply (`dpbusd`, the scales' `mullo`, `madd`). One `tdpbssd` multiplies a
//! 16 x K tile of activation bytes by a K x 16 tile of weight bytes on the tile unit: all
//! 16 x 16 (activation row, weight row) sums of a block in one instruction. The x16 chunks are
//! already the tile unit's "VNNI" layout of the weight operand (tile row `k` holds the sixteen
//! rows' elements `4k..4k + 4`), and the activation operand is loaded straight from the
//! activation blocks (one tile row per activation row, stride one activation row).
//!
//! Legacy formats: a weight group's records are unpacked once into tiles of *signed* quants (the
//! stored value less the format's offset, for MXFP4 / IQ4_NL the table values themselves; Q4_1
//! / Q5_1 stay unsigned, they have no offset), so one
//! `tdpbssd` per record and sixteen activation rows (`Q8_0` activation blocks, a tile row each)
//! gives each block's whole integer sum, the VNNI pass's `-offset * sum(x)` included; then the
//! VNNI pass's float steps per activation row, records in order. Products of four records are
//! issued before the previous four's sums are scaled. Measured (Q5_0 2048x640, one thread,
//! minimums of 50 runs, `kquant_speed -- 1 50 Q5_0:128` against `TESSERA_ISA=avx512`, a loaded
//! machine): 815-839 against 1172-1176 us at 128 rows, 110-112 against 133 us at 16. The tile
//! products alone take about two thirds of that time, the float steps alone half: tile loads and
//! stores of 32-quant blocks cost about as much as the multiplies they save.
//!
//! Tiles: 0-3 hold sums (record `s` of a batch uses `s % 4`), 4-5 activations and 6-7 weights
//! (alternating). The configuration is loaded at the start of each call into a thread's share of
//! row groups and the tiles released at its end (an idle thread then carries no tile state).
//!
//! The OS must grant the process the tile data state (`arch_prctl(ARCH_REQ_XCOMP_PERM)`, Linux
//! 5.16 and later; other systems are not asked, and do without AMX); [`available`] asks once and
//! says no when the CPU or the OS does not allow it.

// Index loops address parallel register arrays; iterator forms would hide the unrolled shape.
#![allow(clippy::needless_range_loop)]

use std::arch::asm;
use std::arch::x86_64::*;
use std::sync::OnceLock;

use super::packed512::{self, unpack};
use super::{legacy_format, Pass, MX, NL, Q4, Q41, Q5, Q51, Q8};

use crate::dtype::Format;
use crate::packed::{offset, quants_at, record_bytes, PackedActs, PackedJob, PACK_ROWS};
use crate::quant::{ActQ8_0, BlockQ8K};

/// Activation rows of an AMX pass (the tiles' 16 rows).
pub(super) const ROWS: usize = 16;

/// Whether this CPU has AMX-TILE and AMX-INT8 and the OS lets this process use the tile state.
/// Asks the OS once (the permission is the process's, for every thread).
pub(crate) fn available() -> bool {
    static OK: OnceLock<bool> = OnceLock::new();
    *OK.get_or_init(|| cpu_has_amx_int8() && os_grants_tiles())
}

fn cpu_has_amx_int8() -> bool {
    // `cpuid` exists on every x86-64 CPU; leaf 7 reads as zeros where unsupported.
    let leaf7 = __cpuid_count(7, 0);
    let (tile, int8) = (leaf7.edx & (1 << 24) != 0, leaf7.edx & (1 << 25) != 0);
    tile && int8 && super::avx512vnni_available()
}

/// Elsewhere than Linux the tile state is not requested, and AMX not used.
#[cfg(not(target_os = "linux"))]
fn os_grants_tiles() -> bool {
    false
}

/// Requests the tile data state for this process (`ARCH_REQ_XCOMP_PERM`, `XFEATURE_XTILEDATA`).
#[cfg(target_os = "linux")]
fn os_grants_tiles() -> bool {
    const SYS_ARCH_PRCTL: usize = 158;
    const ARCH_REQ_XCOMP_PERM: usize = 0x1023;
    const XFEATURE_XTILEDATA: usize = 18;
    let ret: isize;
    // SAFETY: the arch_prctl system call with this request only changes the process's
    // permitted extended state; it reads and writes no user memory. `syscall` clobbers rcx and
    // r11, declared here.
    unsafe {
        asm!(
            "syscall",
            inlateout("rax") SYS_ARCH_PRCTL as isize => ret,
            in("rdi") ARCH_REQ_XCOMP_PERM,
            in("rsi") XFEATURE_XTILEDATA,
            lateout("rcx") _,
            lateout("r11") _,
            options(nostack),
        );
    }
    ret == 0
}

/// A tile configuration (palette 1): tiles 0-3 hold sums (16 x 64 bytes), 4-5 activations
/// (16 x `k` bytes), 6-7 weights (`k / 4` x 64 bytes), for sub-blocks of `k` quants.
#[repr(C, align(64))]
pub(super) struct TileConfig(pub(super) [u8; 64]);

impl TileConfig {
    pub(super) const fn for_subblock(k: usize) -> Self {
        let mut c = [0u8; 64];
        c[0] = 1;
        let mut t = 0;
        while t < 8 {
            let (rows, bytes) = match t {
                0..4 => (16, 64),
                4 | 5 => (16, k),
                _ => (k / 4, 64),
            };
            c[16 + 2 * t] = bytes as u8;
            c[48 + t] = rows as u8;
            t += 1;
        }
        Self(c)
    }
}

/// Bytes of activation blocks a K-quant pass keeps in L2 while a record, prescaled once, meets
/// its row tiles in turn.
const ACT_BUDGET: usize = 1 << 20;

/// Row tiles the K-quant passes take together (at least two): as many as have their activation
/// blocks (`blocks` per row) within [`ACT_BUDGET`]. With all of a 512-row prefill's tiles
/// together, the activations of Qwen2.5-Coder-1.5B's `ffn_down` (5.7 MB) fell out of L2 and its
/// prefill ran 12% slower than with the per-sub-block tile passes.
fn tiles_per_chunk(blocks: usize) -> usize {
    let tile = ROWS * blocks * std::mem::size_of::<crate::quant::BlockQ8K>();
    (ACT_BUDGET / tile.max(1)).max(2)
}

/// A K-quant pass whose weight records are prescaled once and then met by several row tiles
/// (`amx_q4k`, `amx_q6k`), driven by [`prescaled_groups`].
///
/// # Safety
/// `Record` must be valid as zeroed bytes.
pub(super) unsafe trait Prescaling {
    /// One record, prescaled.
    type Record: Copy;
    /// Where a row tile's sums are stored to be scaled.
    type Sums;
    /// The VNNI pass for the rows past the last sixteen.
    type Rest: Pass;
    /// Record `b` of group `g`, prescaled into `out`.
    ///
    /// # Safety
    /// AVX-512 F/BW/VNNI and F16C; `job` is a job of the pass's format whose shapes agree,
    /// `g < job.rows / 16`, `b < job.blocks`.
    unsafe fn prescale(job: &PackedJob, g: usize, b: usize, out: &mut Self::Record);
    /// Issues the products of record `w` for one row tile (`x`: the record's quants of its first
    /// activation row, rows `stride` bytes apart) into the sum tiles of parity `odd`; `pending`
    /// says the previous row tile's sums are still in the tiles, not yet drained.
    ///
    /// # Safety
    /// AMX-INT8 with this thread's tiles configured for 64-deep products; `x` readable for 16
    /// rows of 256 bytes `stride` apart.
    unsafe fn issue(
        x: *const i8,
        stride: usize,
        w: &Self::Record,
        odd: bool,
        pending: bool,
        sums: &mut Self::Sums,
    );
    /// The float steps of the row tile whose products went into the tiles of parity `odd`
    /// (stored first where `issue` has not stored them, and always when `last`): `w` its record,
    /// `x` the record's activation block of the tile's first row (rows `blocks` blocks apart),
    /// `acc` the tile's sixteen accumulators.
    ///
    /// # Safety
    /// As `issue`, and AVX-512 F/VNNI; `x` readable for the sixteen rows' blocks.
    unsafe fn drain(
        odd: bool,
        last: bool,
        w: &Self::Record,
        x: *const BlockQ8K,
        blocks: usize,
        sums: &mut Self::Sums,
        acc: &mut [__m512],
    );
}

/// Group `g`'s outputs for `acc.len() / 16` row tiles from tile `t0`, record by record: each
/// record prescaled once (into `wq`, alternately) and multiplied with every row tile in turn, so
/// its tiles stay in L1. A row tile's products are issued before the previous one's sums are
/// drained, so the tile unit works while they are scaled. Each row's accumulator takes the
/// records in order: the VNNI pass's float steps.
///
/// # Safety
/// As [`prescaled_groups`], with this thread's tiles configured for 64-deep products;
/// `g < job.rows / 16`, and `acc.len()` a multiple of 16 with `16 t0 + acc.len() <= job.m`.
#[inline(always)]
unsafe fn prescaled_group<P: Prescaling>(
    job: &PackedJob,
    g: usize,
    t0: usize,
    wq: &mut [P::Record; 2],
    acc: &mut [__m512],
) {
    let blocks = job.blocks;
    let tiles = acc.len() / ROWS;
    if tiles == 0 {
        return;
    }
    let PackedActs::Q8K(all) = job.acts else {
        unreachable!("K-quant packed kernel with Q8_0 activations")
    };
    let stride = blocks * std::mem::size_of::<BlockQ8K>();
    let mut sums = std::mem::MaybeUninit::<P::Sums>::uninit();
    // SAFETY: the `acc.len()` activation rows from `16 t0` hold `blocks` blocks each (so a row
    // tile's quants `stride` apart are readable); the output stores hit group g's outputs of
    // those rows (this function's contract); every sum read was stored first, for the same
    // record and row tile; the instruction sets and tiles per the contract.
    unsafe {
        let sums = &mut *sums.as_mut_ptr();
        acc.fill(_mm512_setzero_ps());
        // The (record, row tile) whose products were issued last and whose sums wait.
        let mut pending: Option<(usize, usize)> = None;
        let mut odd = false;
        for b in 0..blocks {
            P::prescale(job, g, b, &mut wq[b % 2]);
            for t in 0..tiles {
                let x = (*all.as_ptr().add(ROWS * (t0 + t) * blocks + b))
                    .qs
                    .as_ptr();
                P::issue(x, stride, &wq[b % 2], odd, pending.is_some(), sums);
                if let Some((pb, pt)) = pending {
                    let x = all.as_ptr().add(ROWS * (t0 + pt) * blocks + pb);
                    let acc = &mut acc[ROWS * pt..];
                    P::drain(!odd, false, &wq[pb % 2], x, blocks, sums, acc);
                }
                pending = Some((b, t));
                odd = !odd;
            }
        }
        if let Some((pb, pt)) = pending {
            let x = all.as_ptr().add(ROWS * (t0 + pt) * blocks + pb);
            P::drain(
                !odd,
                true,
                &wq[pb % 2],
                x,
                blocks,
                sums,
                &mut acc[ROWS * pt..],
            );
        }
        for (row, a) in acc.iter().enumerate() {
            let row = ROWS * t0 + row;
            _mm512_storeu_ps(job.out.add(row * job.rows + g * PACK_ROWS), *a);
        }
    }
}

/// Writes all outputs of row groups `groups` of a K-quant job with pass `P`: its row tiles in
/// chunks of [`tiles_per_chunk`], the rows past the last sixteen in `P::Rest`.
///
/// # Safety
/// The CPU must support AVX2, FMA, F16C, AVX-512 F/BW/VL/VNNI and AMX-INT8 with the OS's
/// permission ([`available`]); `job` is a job of `P`'s format whose shapes agree (as
/// `packed512::groups` states) and no other thread writes these groups.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn prescaled_groups<P: Prescaling>(job: &PackedJob, groups: std::ops::Range<usize>) {
    let config = TileConfig::for_subblock(64);
    // SAFETY: zeroed bytes are a valid record (the trait's contract).
    let blank: P::Record = unsafe { std::mem::zeroed() };
    let mut wq = Box::new([blank; 2]);
    let tiles = job.m / ROWS;
    let mut acc = vec![_mm512_setzero_ps(); tiles * ROWS];
    let chunk = tiles_per_chunk(job.blocks);
    // SAFETY: AMX is available and permitted (this function's contract) and the configuration
    // is valid for palette 1; `prescaled_group` gets the features enabled here, the tiles
    // configured for 64-deep products and whole row tiles within `job.m`; the rest of its
    // contract is this function's.
    unsafe {
        asm!("ldtilecfg [{}]", in(reg) config.0.as_ptr(), options(nostack, readonly));
        for g in groups {
            let mut t0 = 0;
            while t0 < tiles {
                let n = chunk.min(tiles - t0);
                prescaled_group::<P>(job, g, t0, &mut wq, &mut acc[..n * ROWS]);
                t0 += n;
            }
            super::drive_rest::<P::Rest>(job, g, tiles * ROWS);
        }
        asm!("tilerelease", options(nostack, nomem));
    }
}

/// A 64-byte aligned scratch buffer.
#[repr(C, align(64))]
struct Aligned<const B: usize>([u8; B]);

/// `tilezero tmm{C}`; `tileloadd` activations into `tmm{A}` (rows `stride` apart) and weights
/// into `tmm{A + 2}` (64-byte rows); `tdpbssd` when `SIGNED` (both operands signed), else
/// `tdpbsud` (unsigned weights); `tilestored` the sums to `out` (64-byte rows). The tiles are
/// architectural state no compiled code touches, so they carry across the three `asm!` blocks.
///
/// # Safety
/// Tiles configured by [`TileConfig::for_subblock`]; `x` readable for 16 rows of the activation
/// tile's width `stride` apart, `w` for the weight tile, `out` writable for 1024 bytes.
#[inline(always)]
unsafe fn tile_product<const C: u8, const A: u8, const SIGNED: bool>(
    x: *const i8,
    stride: usize,
    w: *const u8,
    out: *mut i32,
) {
    // SAFETY: per the contract; the instructions touch only the memory named.
    unsafe {
        asm!(
            "tilezero tmm{c}",
            "tileloadd tmm{a}, [{x} + {s}*1]",
            "tileloadd tmm{b}, [{w} + {s64}*1]",
            c = const C,
            a = const A,
            b = const A + 2,
            x = in(reg) x,
            s = in(reg) stride,
            w = in(reg) w,
            s64 = in(reg) 64usize,
            options(nostack, readonly),
        );
        if SIGNED {
            asm!("tdpbssd tmm{c}, tmm{a}, tmm{b}", c = const C, a = const A, b = const A + 2,
                options(nostack, nomem));
        } else {
            asm!("tdpbsud tmm{c}, tmm{a}, tmm{b}", c = const C, a = const A, b = const A + 2,
                options(nostack, nomem));
        }
        asm!(
            "tilestored [{out} + {s64}*1], tmm{c}",
            c = const C,
            out = in(reg) out,
            s64 = in(reg) 64usize,
            options(nostack),
        );
    }
}

/// Activation row `j`'s sums of sub-block `sb` (sixteen weight-row lanes).
///
/// # Safety
/// The CPU must support AVX-512F; `sums` is 64-byte aligned and holds the 1024-byte sums of
/// block `sb` of a batch, written by [`tile_product`]; `j < 16`.
#[inline(always)]
unsafe fn sums_of(sums: *const u8, sb: usize, j: usize) -> __m512i {
    // SAFETY: per the contract.
    unsafe { _mm512_load_si512(sums.add(1024 * sb + 64 * j).cast()) }
}

/// Scratch for one pass: the sums of two batches of records. Left uninitialized: every byte
/// read was written first in the same batch.
struct Scratch {
    sums: std::mem::MaybeUninit<Aligned<{ 2 * LEGACY_BATCH * 1024 }>>,
}

impl Scratch {
    fn new() -> Self {
        Self {
            sums: std::mem::MaybeUninit::uninit(),
        }
    }
    fn sums(&mut self) -> *mut u8 {
        self.sums.as_mut_ptr().cast()
    }
}

/// Records a legacy pass multiplies on the tile unit before it scales their sums: one sum tile
/// each, so their products overlap and the sums are read back well after their stores.
const LEGACY_BATCH: usize = 4;

/// One record's quants as a weight tile (eight 64-byte rows).
#[derive(Clone, Copy)]
#[repr(C, align(64))]
struct TileQuants([u8; 512]);

/// Group `g`'s quants of a legacy format `F`, record by record, as weight tiles: signed (`q`,
/// the unpacked value less the format's offset: for MXFP4 / IQ4_NL the table value) where the
/// format has an offset, so the tile product is the block's whole integer sum; unsigned where
/// it has a minimum (Q4_1, Q5_1).
///
/// # Safety
/// The CPU must support AVX-512 F/BW; `job` is a job of format `legacy_format(F)` whose shapes
/// agree, `g < job.rows / 16`, and `out` holds `job.blocks` tiles.
#[inline(always)]
unsafe fn unpack_group<const F: u8>(job: &PackedJob, g: usize, out: &mut [TileQuants]) {
    let format = legacy_format(F);
    let rec = record_bytes(format);
    let with_min = F == Q41 || F == Q51;
    // SAFETY: the records of group g lie in `data` (the job's shapes); each store writes one
    // 64-byte row of a 64-byte aligned tile of `out`, which holds `blocks` of them; AVX-512 F/BW
    // per the contract.
    unsafe {
        // The offset as a byte: Q8_0's and IQ4_NL's 128 wraps to -128, and `u - 128` wraps
        // alike.
        let off = _mm512_set1_epi8(offset(format).unwrap_or(0) as i8);
        let base = job.data.as_ptr().add(g * job.blocks * rec);
        for (b, t) in out.iter_mut().enumerate().take(job.blocks) {
            let w = unpack::<F>(base.add(b * rec + quants_at(format)));
            for k in 0..8 {
                let v = if with_min {
                    w[k]
                } else {
                    _mm512_sub_epi8(w[k], off)
                };
                _mm512_store_si512(t.0.as_mut_ptr().add(64 * k).cast(), v);
            }
        }
    }
}

/// Legacy rows `16g..16g + 16` (format `F`: Q8_0, Q5_0, Q4_0, Q4_1, Q5_1, MXFP4, IQ4_NL) for
/// activation rows `i..i + 16`, the group's quants unpacked in `wq` ([`unpack_group`]): per
/// record one tile product of the sixteen activation rows' quants by the record's, then the
/// VNNI pass's float steps per activation row, records in order. The integer sums are the VNNI
/// pass's (there the offset's term `-offset * sum(x)` is added to the unsigned quants' sum), so
/// are the outputs.
///
/// # Safety
/// The CPU must support AVX2, FMA, F16C, AVX-512 F/BW/VNNI and AMX-INT8 with the OS's permission
/// ([`available`]), and this thread's tiles must be configured by `TileConfig::for_subblock(32)`
/// ([`legacy_groups`] does both). `job` is a job of format `legacy_format(F)` whose shapes agree
/// (as `packed512::groups` states); `g < job.rows / 16`, `i + 16 <= job.m`, `wq` holds group
/// `g`'s tiles, and no other thread writes group `g`'s outputs.
#[inline(always)]
unsafe fn pass_legacy<const F: u8>(job: &PackedJob, g: usize, i: usize, wq: &[TileQuants]) {
    let format = legacy_format(F);
    let rec = record_bytes(format);
    let with_min = F == Q41 || F == Q51;
    let blocks = job.blocks;
    let PackedActs::Q8_0(all) = job.acts else {
        unreachable!("legacy packed kernel with Q8_K activations")
    };
    let stride = blocks * std::mem::size_of::<ActQ8_0>();
    let mut scratch = Scratch::new();
    let sums = scratch.sums();
    // SAFETY: records of group g lie in `data` and activation rows i..i + 16 hold `blocks`
    // blocks each, so the 16 tile rows of 32 quants `stride` apart from a block of row i are
    // readable; `wq` holds `blocks` tiles; the stores hit group g's outputs of rows i..i + 16
    // (this function's contract); `scratch` holds the LEGACY_BATCH sum tiles written here; the
    // instruction sets and the tile configuration per the contract.
    unsafe {
        let base = job.data.as_ptr().add(g * blocks * rec);
        let acts = all.as_ptr().add(i * blocks);
        let mut acc = [_mm512_setzero_ps(); ROWS];
        // Batch k's sums go to half k % 2 of the scratch: the next batch's products are issued
        // before this batch's sums are read, so the tile unit works while they are scaled.
        let products = |b: usize, half: usize| {
            for s in 0..LEGACY_BATCH.min(blocks - b) {
                let w = wq[b + s].0.as_ptr();
                let x = (*acts.add(b + s)).qs.as_ptr();
                let out = sums.add(1024 * (LEGACY_BATCH * half + s)).cast::<i32>();
                match (s, with_min) {
                    (0, false) => tile_product::<0, 4, true>(x, stride, w, out),
                    (1, false) => tile_product::<1, 5, true>(x, stride, w, out),
                    (2, false) => tile_product::<2, 4, true>(x, stride, w, out),
                    (_, false) => tile_product::<3, 5, true>(x, stride, w, out),
                    (0, true) => tile_product::<0, 4, false>(x, stride, w, out),
                    (1, true) => tile_product::<1, 5, false>(x, stride, w, out),
                    (2, true) => tile_product::<2, 4, false>(x, stride, w, out),
                    (_, true) => tile_product::<3, 5, false>(x, stride, w, out),
                }
            }
        };
        products(0, 0);
        let mut b = 0;
        while b < blocks {
            let nb = LEGACY_BATCH.min(blocks - b);
            let half = (b / LEGACY_BATCH) % 2;
            if b + nb < blocks {
                products(b + nb, 1 - half);
            }
            let mut dw = [_mm512_setzero_ps(); LEGACY_BATCH];
            let mut mw = [_mm512_setzero_ps(); LEGACY_BATCH];
            for s in 0..nb {
                let r = base.add((b + s) * rec);
                dw[s] = packed512::scales::<F>(r);
                if with_min {
                    mw[s] = _mm512_cvtph_ps(_mm256_loadu_si256(r.add(32).cast()));
                }
            }
            for j in 0..ROWS {
                for s in 0..nb {
                    let x = &*acts.add(j * blocks + b + s);
                    let dx = _mm512_set1_ps(x.d);
                    let scale = _mm512_mul_ps(dw[s], dx);
                    let isum = sums_of(sums, LEGACY_BATCH * half + s, j);
                    acc[j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), scale, acc[j]);
                    if with_min {
                        let xsum = _mm512_set1_ps(x.sum as f32);
                        acc[j] = _mm512_fmadd_ps(xsum, _mm512_mul_ps(mw[s], dx), acc[j]);
                    }
                }
            }
            b += nb;
        }
        for j in 0..ROWS {
            _mm512_storeu_ps(job.out.add((i + j) * job.rows + g * PACK_ROWS), acc[j]);
        }
    }
}

/// Writes all outputs of row groups `groups` of a legacy job (format `F`): per group its quants
/// unpacked once ([`unpack_group`]), then sixteen activation rows at a time on the tile unit and
/// the rest in the VNNI passes.
///
/// # Safety
/// As [`groups_of`] for a legacy format `F` (the tiles are configured here, for 32-quant blocks).
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn legacy_groups<const F: u8>(job: &PackedJob, groups: std::ops::Range<usize>) {
    let config = TileConfig::for_subblock(32);
    let mut wq = vec![TileQuants([0; 512]); job.blocks];
    // SAFETY: AMX is available and permitted (this function's contract) and the configuration
    // is valid for palette 1; the passes get the features enabled here, the tiles configured
    // for 32-quant blocks and group g's quants in `wq`, and the rest of their contract is this
    // function's.
    unsafe {
        asm!("ldtilecfg [{}]", in(reg) config.0.as_ptr(), options(nostack, readonly));
        for g in groups {
            unpack_group::<F>(job, g, &mut wq);
            let mut i = 0;
            while i + ROWS <= job.m {
                pass_legacy::<F>(job, g, i, &wq);
                i += ROWS;
            }
            super::drive_rest::<packed512::LegacyPass<F>>(job, g, i);
        }
        asm!("tilerelease", options(nostack, nomem));
    }
}

/// Writes all outputs of row groups `groups` of a packed job: Q4_K, Q6_K and the legacy and
/// table formats on the tile unit from sixteen activation rows, the rest in the VNNI passes.
///
/// # Safety
/// As `packed512::groups`, and [`available`] must have returned true.
pub(crate) unsafe fn groups(job: &PackedJob, groups: std::ops::Range<usize>) {
    // SAFETY: forwarded from this function's contract.
    unsafe {
        match job.format {
            // Fewer activation rows than a tile: VNNI passes only, no tile state.
            _ if job.m < ROWS => packed512::groups(job, groups),
            Format::Q4_K => prescaled_groups::<super::amx_q4k::Q4K>(job, groups),
            // Q6_K's prescaling pays from two row tiles on (see `amx_q6k`); below, VNNI (the
            // same bits).
            Format::Q6_K if job.m < super::amx_q6k::MIN_ROWS => packed512::groups(job, groups),
            Format::Q6_K => prescaled_groups::<super::amx_q6k::Q6K>(job, groups),
            Format::Q8_0 => legacy_groups::<Q8>(job, groups),
            Format::Q5_0 => legacy_groups::<Q5>(job, groups),
            Format::Q4_0 => legacy_groups::<Q4>(job, groups),
            Format::Q4_1 => legacy_groups::<Q41>(job, groups),
            Format::Q5_1 => legacy_groups::<Q51>(job, groups),
            Format::MXFP4 => legacy_groups::<MX>(job, groups),
            Format::IQ4_NL => legacy_groups::<NL>(job, groups),
            _ => packed512::groups(job, groups),
        }
    }
}
