//! Float weights multiplied in bfloat16: weights and activations rounded to BF16, products summed
//! in f32 — the numerics of AVX-512 BF16's `vdpbf16ps`, which does twice the multiply-adds of an
//! f32 FMA per instruction. An opt-in precision for float (F32 / F16 / BF16) weights, as vLLM's
//! `--dtype bfloat16`; the f32 path ([`crate::matmul()`]) stays the exact one.
//!
//! Numerics (every path but AMX gives these bits):
//! - A weight or activation is rounded to the nearest BF16 (ties to even); NaNs stay NaN, and a
//!   value under 2^-64 in magnitude becomes a signed zero. With no BF16 input that small, no
//!   partial sum can be a subnormal (a non-zero one is a multiple of at least 2^-102), so the
//!   instruction's flushing of subnormals never applies and a plain fused multiply-add is exact
//!   emulation.
//! - Each (weight row, activation row) output has sixteen f32 lanes; lane `j` takes, for every
//!   block of 32 columns in order, `fma(x[2j + 1], w[2j + 1], acc)` and then
//!   `fma(x[2j], w[2j], acc)` (what `vdpbf16ps` does per lane; checked against the instruction
//!   in the tests). The lanes are then summed: `t[j] = lane[j] + lane[j + 8]`, `u[i] = t[i] +
//!   t[i + 4]`, `(u[0] + u[2]) + (u[1] + u[3])`.
//! - Nothing depends on the batch, the tile or the thread, so the results are batch invariant.
//!
//! Paths: AVX-512 BF16 (`vdpbf16ps`, tiles of four weight rows by four activation rows), AVX2 /
//! FMA (each 16-column half split into odd and even BF16 lanes with a mask and a shift), and a
//! scalar reference. On CPUs with AMX-BF16, `tdpbf16ps` (`kernel::x86::amx_bf16`): sixteen weight
//! rows by sixteen activation rows per instruction, with the same rounded operands and exact
//! products; the tile unit adds them its own way (not specified bit for bit), so its sums agree
//! with the lanes' to f32 rounding, not in every bit. It keeps batch invariance: an output
//! depends only on its weight row and activation row.

use std::ops::Deref;

use crate::aligned::AlignedU16;
use crate::dtype::GgmlType;
use crate::quant::float::{dequantize_bf16, dequantize_f16, dequantize_f32};
use crate::threads::Threads;

/// Columns per block: one 512-bit vector of BF16 values.
pub const BLOCK: usize = 32;

/// Which code computes a BF16 matmul (all give the same bits).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Bf16Path {
    Scalar,
    /// AVX2 + FMA, emulating the BF16 products with f32 fused multiply-adds.
    Avx2,
    /// AVX-512 BF16 (`vdpbf16ps`).
    Avx512Bf16,
    /// AMX-BF16 (`tdpbf16ps`, `kernel::x86::amx_bf16`): the same rounded operands and exact
    /// products, but the tile unit's own sums, so not the bits of the paths above (see the
    /// module docs). Used for tiled weights ([`Bf16Rows`]); row-major ones take `Avx512Bf16`.
    Amx,
}

impl Bf16Path {
    /// The fastest path this CPU runs, within the `TESSERA_ISA` cap ([`crate::isa`]); detected
    /// once per process (each `cpuid` is a VM exit on a virtual machine, and every BF16 matmul
    /// asks).
    pub fn detect() -> Bf16Path {
        static PATH: std::sync::OnceLock<Bf16Path> = std::sync::OnceLock::new();
        *PATH.get_or_init(Bf16Path::probe)
    }

    /// [`Bf16Path::detect`], uncached.
    fn probe() -> Bf16Path {
        #[cfg(target_arch = "x86_64")]
        {
            use crate::Isa;
            let isa = crate::isa();
            if isa >= Isa::Amx && crate::kernel::x86::amx_bf16::available() {
                return Bf16Path::Amx;
            }
            if isa >= Isa::Avx512Vnni && crate::kernel::x86::bf16dot::avx512bf16_available() {
                return Bf16Path::Avx512Bf16;
            }
            if isa >= Isa::Avx2 {
                return Bf16Path::Avx2;
            }
        }
        Bf16Path::Scalar
    }
}

/// Whether this CPU multiplies BF16 natively (`vdpbf16ps` or `tdpbf16ps`), which is where BF16
/// pays: twice the multiply-adds per instruction of the f32 path, or a whole tile's. Elsewhere
/// the emulation is no faster than f32.
pub fn native_bf16() -> bool {
    Bf16Path::detect() >= Bf16Path::Avx512Bf16
}

/// A weight matrix in BF16: `rows` rows of `cols` values, `cols` a multiple of [`BLOCK`]; owned
/// (rounded at load) or borrowed (a BF16 tensor of the file, or its repacked copy).
///
/// Row-major, or (where the CPU multiplies on AMX tiles, for whole tiles of 16 rows) *tiled*:
/// the right-hand operand of `tdpbf16ps`, tile `t` of rows `16t..16t + 16` and block `b` of 32
/// columns 1 KiB at `(t * cols / 32 + b) * 512`, holding value `(16t + n, 32b + c)` at
/// `tile_index(n, c)`. [`Bf16Rows::from_float`] and `crate::packed::pack` tile where the CPU
/// wants it.
#[derive(Debug, Clone)]
pub struct Bf16Rows<'a> {
    pub(crate) data: Bf16Data<'a>,
    pub rows: usize,
    pub cols: usize,
    pub(crate) tiled: bool,
}

impl<'a> Bf16Rows<'a> {
    /// BF16 rows in ggml's layout (little-endian `u16`s) as they are: borrowed where the bytes
    /// are 2-aligned on a little-endian machine (a GGUF tensor always is), else copied. `None`
    /// for a column count that is not a multiple of [`BLOCK`] or data of another size.
    pub fn view(data: &'a [u8], rows: usize, cols: usize) -> Option<Bf16Rows<'a>> {
        if cols == 0 || !cols.is_multiple_of(BLOCK) || data.len() != rows * cols * 2 {
            return None;
        }
        // SAFETY: every bit pattern is a valid u16; `align_to` puts only whole, aligned u16s in
        // the middle part.
        let (head, mid, _) = unsafe { data.align_to::<u16>() };
        let data = if cfg!(target_endian = "little") && head.is_empty() && mid.len() == rows * cols
        {
            Bf16Data::Borrowed(mid)
        } else {
            let mut owned = AlignedU16::zeroed(rows * cols);
            for (v, b) in owned.iter_mut().zip(data.chunks_exact(2)) {
                *v = u16::from_le_bytes([b[0], b[1]]);
            }
            Bf16Data::Owned(owned)
        };
        Some(Bf16Rows {
            data,
            rows,
            cols,
            tiled: false,
        })
    }

    /// BF16 weights tiled by `crate::packed::pack` (see the type's docs), borrowed; `None` for a
    /// shape that is not whole tiles or data of another size.
    pub(crate) fn view_tiles(data: &'a [u8], rows: usize, cols: usize) -> Option<Bf16Rows<'a>> {
        if !rows.is_multiple_of(TILE_ROWS) {
            return None;
        }
        let mut w = Bf16Rows::view(data, rows, cols)?;
        w.tiled = true;
        Some(w)
    }

    /// Rounds a float matrix (F32, F16 or BF16 rows in ggml's layout) to BF16. `None` for any
    /// other type, a column count that is not a multiple of [`BLOCK`], or data of another size.
    pub fn from_float(
        ty: GgmlType,
        data: &[u8],
        rows: usize,
        cols: usize,
    ) -> Option<Bf16Rows<'static>> {
        let width = match ty {
            GgmlType::F32 => 4,
            GgmlType::F16 | GgmlType::BF16 => 2,
            _ => return None,
        };
        if cols == 0 || !cols.is_multiple_of(BLOCK) || data.len() != rows * cols * width {
            return None;
        }
        let mut out = AlignedU16::zeroed(rows * cols);
        let mut row = vec![0f32; cols];
        for (src, dst) in data
            .chunks_exact(cols * width)
            .zip(out.chunks_exact_mut(cols))
        {
            match ty {
                GgmlType::F32 => dequantize_f32(src, &mut row),
                GgmlType::F16 => dequantize_f16(src, &mut row),
                _ => dequantize_bf16(src, &mut row),
            }
            round_row(&row, dst);
        }
        let tiled = tiles_wanted(rows);
        if tiled {
            let mut tiles = AlignedU16::zeroed(rows * cols);
            for (r, row) in out.chunks_exact(cols).enumerate() {
                for (c, &v) in row.iter().enumerate() {
                    tiles[tiled_at(cols, r, c)] = v;
                }
            }
            out = tiles;
        }
        Some(Bf16Rows {
            data: Bf16Data::Owned(out),
            rows,
            cols,
            tiled,
        })
    }

    /// The BF16 values of row `r` (row-major weights only: tiled ones have no rows in place).
    pub fn row(&self, r: usize) -> &[u16] {
        assert!(!self.tiled, "Bf16Rows::row of tiled weights");
        &self.data[r * self.cols..(r + 1) * self.cols]
    }

    /// The BF16 value at (`r`, `c`), in either layout.
    pub fn value(&self, r: usize, c: usize) -> u16 {
        if self.tiled {
            self.data[tiled_at(self.cols, r, c)]
        } else {
            self.data[r * self.cols + c]
        }
    }

    /// Whether the values are tiled for AMX (see the type's docs).
    pub fn is_tiled(&self) -> bool {
        self.tiled
    }

    /// The tiles from weight tile `t` (rows `16t..16t + 16`) on: its `cols / 32` blocks, then the
    /// next tile's (tiled weights only).
    pub(crate) fn tiles(&self, t: usize) -> &[u16] {
        debug_assert!(self.tiled);
        &self.data[t * TILE_ROWS * self.cols..]
    }

    /// A row-major copy (of tiled weights, for the paths that read rows).
    fn untiled(&self) -> Bf16Rows<'static> {
        let mut out = AlignedU16::zeroed(self.rows * self.cols);
        for (r, row) in out.chunks_exact_mut(self.cols).enumerate() {
            for (c, v) in row.iter_mut().enumerate() {
                *v = self.value(r, c);
            }
        }
        Bf16Rows {
            data: Bf16Data::Owned(out),
            rows: self.rows,
            cols: self.cols,
            tiled: false,
        }
    }
}

/// Weight rows of one AMX tile.
const TILE_ROWS: usize = 16;

/// Whether BF16 weights of `rows` rows are tiled on this CPU: where matmuls run on AMX tiles
/// (within the `TESSERA_ISA` cap), for whole tiles of rows.
pub(crate) fn tiles_wanted(rows: usize) -> bool {
    Bf16Path::detect() == Bf16Path::Amx && rows > 0 && rows.is_multiple_of(TILE_ROWS)
}

/// Where value `(n, c)` of a 16-row, 32-column block sits in its tile: row `c / 2` of the tile
/// holds the BF16 pairs `(c, c + 1)` of its sixteen weight rows in order.
pub(crate) fn tile_index(n: usize, c: usize) -> usize {
    (c / 2) * 2 * TILE_ROWS + 2 * n + c % 2
}

/// Where value `(r, c)` of tiled weights of `cols` columns sits.
fn tiled_at(cols: usize, r: usize, c: usize) -> usize {
    ((r / TILE_ROWS) * (cols / BLOCK) + c / BLOCK) * TILE_ROWS * BLOCK
        + tile_index(r % TILE_ROWS, c % BLOCK)
}

/// The values of a [`Bf16Rows`]: a file's tensor in place, or rounded at load into 64-byte aligned
/// storage (whole AMX tile rows per cache line).
#[derive(Debug, Clone)]
pub(crate) enum Bf16Data<'a> {
    Borrowed(&'a [u16]),
    Owned(AlignedU16),
}

impl Deref for Bf16Data<'_> {
    type Target = [u16];

    fn deref(&self) -> &[u16] {
        match self {
            Bf16Data::Borrowed(s) => s,
            Bf16Data::Owned(v) => v,
        }
    }
}

/// `v` rounded to BF16 as this module defines it (see the module docs).
#[inline(always)]
pub fn to_bf16(v: f32) -> u16 {
    let b = v.to_bits();
    let rounded = (b.wrapping_add(0x7fff + ((b >> 16) & 1)) >> 16) as u16;
    let nan = (b & 0x7fff_ffff) > 0x7f80_0000;
    let tiny = (b >> 23) & 0xff < 127 - 64;
    let sign = ((b >> 16) & 0x8000) as u16;
    if nan {
        ((b >> 16) as u16) | 0x40
    } else if tiny {
        sign
    } else {
        rounded
    }
}

/// A BF16 value as f32 (exact).
#[inline(always)]
pub fn from_bf16(v: u16) -> f32 {
    f32::from_bits(u32::from(v) << 16)
}

fn round_row(src: &[f32], dst: &mut [u16]) {
    for (d, &s) in dst.iter_mut().zip(src) {
        *d = to_bf16(s);
    }
}

/// The sixteen lanes of one output summed in the module's order.
#[inline(always)]
pub(crate) fn sum_lanes(l: &[f32; 16]) -> f32 {
    let t: [f32; 8] = std::array::from_fn(|j| l[j] + l[j + 8]);
    let u: [f32; 4] = std::array::from_fn(|i| t[i] + t[i + 4]);
    (u[0] + u[2]) + (u[1] + u[3])
}

/// The scalar reference: one output.
pub fn dot_scalar(w: &[u16], x: &[u16]) -> f32 {
    let mut lanes = [0f32; 16];
    for (wb, xb) in w.chunks_exact(BLOCK).zip(x.chunks_exact(BLOCK)) {
        for (j, lane) in lanes.iter_mut().enumerate() {
            let odd = from_bf16(xb[2 * j + 1]).mul_add(from_bf16(wb[2 * j + 1]), *lane);
            *lane = from_bf16(xb[2 * j]).mul_add(from_bf16(wb[2 * j]), odd);
        }
    }
    sum_lanes(&lanes)
}

/// Reusable buffer of BF16 activations (row-major, or in the AMX path's tiles).
#[derive(Debug, Default)]
pub struct Bf16Scratch {
    acts: AlignedU16,
}

/// One call's operands, shared with the pool's threads.
pub(crate) struct Bf16Job<'a> {
    pub w: &'a Bf16Rows<'a>,
    /// `m` rows of `w.cols` BF16 activations; for [`Bf16Path::Amx`], packed in its tiles.
    pub x: &'a [u16],
    pub m: usize,
    /// `m * w.rows` outputs; each thread writes the columns of its own weight rows.
    pub out: *mut f32,
}

// SAFETY: the job holds shared slices of plain data and an output pointer whose weight rows are
// split between threads (each row range is claimed by exactly one thread), and `Threads` joins
// every thread before the `&mut` output it came from is used again.
unsafe impl Sync for Bf16Job<'_> {}

impl Bf16Job<'_> {
    /// Writes output (activation row `i`, weight row `r`).
    ///
    /// # Safety
    /// `i < m`, `r < w.rows`, and no other thread writes weight row `r`'s outputs.
    #[inline(always)]
    pub(crate) unsafe fn store(&self, i: usize, r: usize, v: f32) {
        // SAFETY: in bounds of the `m * rows` output by the contract; exclusive per row.
        unsafe { *self.out.add(i * self.w.rows + r) = v };
    }

    /// Activation row `i`.
    pub(crate) fn act(&self, i: usize) -> &[u16] {
        &self.x[i * self.w.cols..(i + 1) * self.w.cols]
    }
}

/// `out[i * rows + r] = Σ x[i]·w[r]` in BF16 numerics, on the fastest path of this CPU.
///
/// Panics if `x` or `out` do not match the shapes (a caller bug).
pub fn matmul_bf16(
    th: &Threads,
    w: &Bf16Rows,
    x: &[f32],
    m: usize,
    out: &mut [f32],
    scratch: &mut Bf16Scratch,
) {
    matmul_bf16_on(Bf16Path::detect(), th, w, x, m, out, scratch);
}

/// [`matmul_bf16`] on `path` (capped at what this CPU runs); for tests and benchmarks.
pub fn matmul_bf16_on(
    path: Bf16Path,
    th: &Threads,
    w: &Bf16Rows,
    x: &[f32],
    m: usize,
    out: &mut [f32],
    scratch: &mut Bf16Scratch,
) {
    let cols = w.cols;
    assert_eq!(x.len(), m * cols, "matmul_bf16: x is not m * cols");
    assert_eq!(out.len(), m * w.rows, "matmul_bf16: out is not m * rows");
    if m == 0 || w.rows == 0 {
        return;
    }
    let mut path = path.min(Bf16Path::detect());
    if w.tiled && path != Bf16Path::Amx {
        return matmul_bf16_on(path, th, &w.untiled(), x, m, out, scratch);
    }
    if !w.tiled && path == Bf16Path::Amx {
        path = Bf16Path::Avx512Bf16;
    }
    let len = if path == Bf16Path::Amx {
        pack_amx(th, x, m, cols, &mut scratch.acts)
    } else {
        round_rows(th, x, m, cols, &mut scratch.acts)
    };
    let job = Bf16Job {
        w,
        x: &scratch.acts[..len],
        m,
        out: out.as_mut_ptr(),
    };
    let tile = if path == Bf16Path::Amx {
        2 * AMX_ROWS
    } else {
        4
    };
    let chunk = if th.n() == 1 {
        w.rows
    } else {
        w.rows.div_ceil(th.n() * 8).max(16).next_multiple_of(tile)
    };
    th.for_each_range(w.rows, chunk, &|_, range| match path {
        #[cfg(target_arch = "x86_64")]
        Bf16Path::Amx => {
            // SAFETY: `path` is capped by detection, so AMX-BF16 is present and permitted;
            // `w.rows` and every chunk are multiples of 16; `x` holds the packed groups; the
            // range is this call's alone.
            unsafe { crate::kernel::x86::amx_bf16::rows_amx(&job, range) }
        }
        #[cfg(target_arch = "x86_64")]
        Bf16Path::Avx512Bf16 => {
            // SAFETY: `path` is capped by detection, so AVX-512 BF16 is present; the range is
            // this call's alone.
            unsafe { crate::kernel::x86::bf16dot::rows_avx512(&job, range) }
        }
        #[cfg(target_arch = "x86_64")]
        Bf16Path::Avx2 => {
            // SAFETY: as above, AVX2 and FMA are present.
            unsafe { crate::kernel::x86::bf16dot::rows_avx2(&job, range) }
        }
        _ => {
            for r in range {
                for i in 0..m {
                    let v = dot_scalar(w.row(r), job.act(i));
                    // SAFETY: i < m, r in this call's range of rows.
                    unsafe { job.store(i, r, v) };
                }
            }
        }
    });
}

/// Activation rows of an AMX tile.
const AMX_ROWS: usize = 16;

/// Rounds `m` rows of `x` into `acts`, row-major; returns the values written.
fn round_rows(th: &Threads, x: &[f32], m: usize, cols: usize, acts: &mut AlignedU16) -> usize {
    acts.resize(m * cols);
    let parts: Vec<std::ops::Range<usize>> = (0..m).map(|i| i * cols..(i + 1) * cols).collect();
    let shares = crate::Shares::new(&mut acts[..m * cols], &parts);
    th.for_each_range(m, 16, &|_, rows| {
        for i in rows {
            round_row(&x[i * cols..(i + 1) * cols], shares.take(i));
        }
    });
    m * cols
}

/// Rounds `m` rows of `x` into `acts` in the AMX path's tiles (groups of sixteen rows, the last
/// padded with zero rows); returns the values written.
#[cfg(target_arch = "x86_64")]
fn pack_amx(th: &Threads, x: &[f32], m: usize, cols: usize, acts: &mut AlignedU16) -> usize {
    use crate::kernel::x86::amx_bf16::{pack_group, TILE_VALUES};
    let group = cols / BLOCK * TILE_VALUES;
    let groups = m.div_ceil(AMX_ROWS);
    acts.resize(groups * group);
    let parts: Vec<std::ops::Range<usize>> =
        (0..groups).map(|g| g * group..(g + 1) * group).collect();
    let shares = crate::Shares::new(&mut acts[..groups * group], &parts);
    th.for_each_range(groups, 1, &|_, gs| {
        for g in gs {
            let rows = AMX_ROWS.min(m - g * AMX_ROWS);
            let x = &x[g * AMX_ROWS * cols..(g * AMX_ROWS + rows) * cols];
            // SAFETY: only the AMX path packs, and it runs where AMX-BF16 (with AVX-512 F and
            // BW) was detected; the slices hold `rows` rows and one group's tiles.
            unsafe { pack_group(x, rows, cols, shares.take(g)) };
        }
    });
    groups * group
}

#[cfg(not(target_arch = "x86_64"))]
fn pack_amx(th: &Threads, x: &[f32], m: usize, cols: usize, acts: &mut AlignedU16) -> usize {
    round_rows(th, x, m, cols, acts)
}

/// Activation rows per block of the SIMD paths: about 128 KiB of BF16 rows, a multiple of four.
pub(crate) fn act_block_rows(cols: usize) -> usize {
    crate::kernel::act_block_rows(128 * 1024, 2 * cols, 4)
}
