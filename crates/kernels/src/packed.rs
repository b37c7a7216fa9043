//! Weights repacked at load for batched matmul: sixteen rows interleaved per block ("x16").
//!
//! The row-major kernels spend most of a batched step on per-lane float work: a 512-bit vector of
//! one row's block pair yields sixteen partial integer sums, each scaled and accumulated in float
//! for every activation row. Interleaving sixteen weight rows instead makes each i32 lane of a
//! VNNI `dpbusd` one *row's* running integer sum of a block, with the activation's four bytes
//! broadcast from memory: a block of 32 quants against one activation row is eight `dpbusd` for
//! sixteen rows, then one conversion, one multiply and one multiply-add for all sixteen — about a
//! third of the instructions per product of the row-major path.
//!
//! Q6_K and Q4_K (super-blocks of 256) are packed per sub-block (16 and 32 quants) the same
//! way, each record exactly as large as the sixteen blocks it replaces: single-sequence decode
//! streams every weight byte once per token, so it reads no more than the file's own format
//! would. Q6_K's quants are split into the low nibbles (a Q4_0 record's layout) and two high bits
//! per quant, merged in registers once per record; its kernel takes the `-32` offset off with
//! `vpdpwssd` of the scales against the activation's block sums. Q4_K keeps its 6-bit scales and
//! mins 6-bit (low nibbles and high bits apart, see `Q4K_*`), widened in registers once per
//! record; its kernel multiplies each sub-block's exact sum by the row's scale in integers and
//! takes the mins off with `vpdpwssd` against the activation's block sums. The scales are stored
//! in *pair order* (sub-blocks `2k`, `2k + 1` of a row side by side), so one widening load gives
//! the i16 pairs those instructions take.
//!
//! The AVX2 kernels (`kernel/x86/packed256.rs`) run the same layout eight row lanes at a time
//! with `maddubs` / `madd` in place of `dpbusd` / `dpwssd`: the same exact integer sums, so the
//! same bits.
//!
//! Layout (Q8_0, Q5_0, Q4_0 with `rows % 16 == 0`): records of sixteen rows by one 32-quant block,
//! group-major (`record(g, b)` at `(g * blocks + b) * record_bytes`); each record is exactly as
//! large as the sixteen blocks it replaces (for every packed format), so packing costs no memory
//! beyond the copy:
//! - 16 f16 scales (row order), 32 bytes;
//! - quants in eight chunks `k = 0..8` of 64 bytes, byte `4i + t` of chunk `k` holding row `i`'s
//!   element `4k + t`, stored *unsigned*: Q8_0 as `q + 128` (512 bytes); Q4_0 / Q5_0 as their raw
//!   4-bit values (offset 8 / 16), two chunks per 64 bytes (chunk `2v` in the low nibbles and
//!   `2v + 1` in the high nibbles of bytes `64v..64v + 64`, 256 bytes); Q5_0 then adds the fifth
//!   bits as 64 bytes laid out like a chunk, bit `k` of byte `4i + t` being chunk `k`'s (row `i`,
//!   element `4k + t`): one vector load holds every chunk's fifth bits, and a shift and a mask put
//!   chunk `k`'s at bit 4 of each byte (as Q6_K's high bits, below).
//!
//! BF16 (on CPUs that multiply on AMX-BF16 tiles, `crate::bf16dot`): records of sixteen rows by
//! 32 values, each the right-hand tile of `tdpbf16ps` (row `k` holding the sixteen rows' value
//! pairs `(2k, 2k + 1)`, `bf16dot::tile_index`), so the tile loads contiguous 1 KiB.
//!
//! Q4_1 / Q5_1 records are Q4_0 / Q5_0 records with the sixteen f16 minimums after the scales
//! (32 more bytes, the quants then start at 64): 320 and 384 bytes, again exactly the sixteen
//! blocks they replace. Their quants are unsigned already; the minimum's term is
//! `fma(sum(x), m * d_x, acc)` after the block's `fma(isum, d * d_x, acc)`, the float steps of
//! `quant::legacy_min`, so the packed kernels give the row-major ones' bits.
//!
//! MXFP4 and IQ4_NL records are Q4_0 records whose nibbles index the format's table
//! ([`KVALUES_MXFP4`], [`KVALUES_IQ4NL`]) instead of being the quants: IQ4_NL's 16 f16 scales
//! then the nibbles (288 bytes), MXFP4's 16 E8M0 exponent bytes then the nibbles (272 bytes),
//! again exactly the sixteen blocks they replace. The kernels map the nibbles through the table
//! with a byte shuffle; where they multiply unsigned weight bytes (`dpbusd`, `maddubs`) the
//! table is biased to unsigned, `u = table[nibble] + offset`, with MXFP4's ±12 taking Q5_0's
//! offset of 16 and IQ4_NL's -127..113 Q8_0's 128, so the activation block's stored
//! `-offset * sum(x)` serves them ([`ActQ8_0::neg_offset_sums`]). AVX2's `maddubs` sums pairs
//! of products in i16: MXFP4's biased values (4..28) allow four chunks per i16 sum, as Q5_0's;
//! IQ4_NL's (1..241) would saturate a single pair, so the AVX2 kernel multiplies the signed
//! table values as Q8_0's quants, `|w| . sign(x, w)`; the AMX passes multiply the signed table
//! values on the tile unit. MXFP4's exponent is decoded in vectors with the integer operations
//! of [`e8m0_to_f32_half`]. The block sums are exact, so every ISA
//! gives the scalar kernel's bits; the float steps are the legacy formats' (one
//! `fma(isum, d_w * d_x, acc)` per block), not those of the row-major MXFP4 / IQ4_NL kernels,
//! which fold eight partial sums per block lane by lane (`quant::nonlinear`): a packed matrix's
//! outputs differ from the row-major ones in the last bits (a tensor is either packed or not).
//!
//! With unsigned weights `u = q + offset`, `sum(q * x) = sum(u * x) - offset * sum(x)`; the
//! activation block's `sum` is precomputed ([`ActQ8_0`]), so each row's block sum is exact in
//! integers. Numerics per (weight row, activation row): `acc = fma(isum_b, d_w * d_x, acc)` over
//! blocks in order — the same operations whatever `m`, the grouping of activation rows or the
//! threads, so the packed matmul is batch-invariant, and the scalar kernel here
//! (`dot_packed_row`) gives the SIMD kernel's exact bits.

use crate::dtype::{Format, GgmlType};
use crate::hugebuf::HugeBuf;
use crate::kernel::Isa;
use crate::quant::kquants::{k4_scales_mins, q4_k_quants, q6_k_quants};
use crate::quant::legacy_min::{fold_block, MinBlock};
use crate::quant::nonlinear::{e8m0_to_f32_half, KVALUES_IQ4NL, KVALUES_MXFP4};
use crate::quant::{
    self, f16_to_f32, legacy::q4_0_quants, legacy::q5_0_quants, legacy::PACKED_OFFSETS, ActQ8_0,
    BlockIq4Nl, BlockMxfp4, BlockQ4K, BlockQ4_0, BlockQ4_1, BlockQ5_0, BlockQ5_1, BlockQ6K,
    BlockQ8K, BlockQ8_0, QK8_0, QK_K,
};
use crate::threads::Threads;

/// Rows interleaved per record.
pub const PACK_ROWS: usize = 16;

/// How a weight matrix's bytes are arranged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layout {
    /// ggml's layout: each row a run of blocks.
    RowMajor,
    /// Sixteen rows interleaved per block (see the module docs); from [`pack`].
    X16,
}

/// Packed weight bytes, from [`pack`], in a [`HugeBuf`] (transparent huge pages where the OS
/// allows: the kernels stream these bytes once per step).
pub struct PackedBytes(HugeBuf<u8>);

impl PackedBytes {
    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }

    /// Leaks the buffer for weights that live as long as the process.
    pub fn leak(self) -> &'static [u8] {
        self.0.leak()
    }
}

/// Quant offset of a packable format (`q = u - offset`, `u` the unsigned value a kernel
/// multiplies: for MXFP4 / IQ4_NL the table value plus [`MXFP4_OFFSET`] / [`IQ4NL_OFFSET`]).
pub(crate) fn offset(format: Format) -> Option<i32> {
    match format {
        Format::Q8_0 => Some(PACKED_OFFSETS[0]),
        Format::Q5_0 => Some(PACKED_OFFSETS[1]),
        Format::Q4_0 => Some(PACKED_OFFSETS[2]),
        Format::MXFP4 => Some(MXFP4_OFFSET),
        Format::IQ4_NL => Some(IQ4NL_OFFSET),
        _ => None,
    }
}

/// Offset of MXFP4's biased table values (±12 to 4..28): Q5_0's, so the activation block's
/// `neg_offset_sums[1]` is its `-offset * sum(x)`.
pub(crate) const MXFP4_OFFSET: i32 = PACKED_OFFSETS[1];
/// Offset of IQ4_NL's biased table values (-127..113 to 1..241): Q8_0's, `neg_offset_sums[0]`.
pub(crate) const IQ4NL_OFFSET: i32 = PACKED_OFFSETS[0];

/// `table` plus `offset`, as the unsigned bytes a kernel's byte shuffle gives; fails to compile
/// (as a constant) if a value leaves `0..=255`.
const fn biased(table: [i8; 16], offset: i32) -> [u8; 16] {
    let mut out = [0u8; 16];
    let mut k = 0;
    while k < 16 {
        let v = table[k] as i32 + offset;
        assert!(v >= 0 && v <= 255, "a biased table value leaves u8");
        out[k] = v as u8;
        k += 1;
    }
    out
}

/// MXFP4's table plus [`MXFP4_OFFSET`].
pub(crate) const MXFP4_BIASED: [u8; 16] = biased(KVALUES_MXFP4, MXFP4_OFFSET);
/// IQ4_NL's table plus [`IQ4NL_OFFSET`].
pub(crate) const IQ4NL_BIASED: [u8; 16] = biased(KVALUES_IQ4NL, IQ4NL_OFFSET);

/// The table a packable format's nibbles index (MXFP4, IQ4_NL), if any.
pub(crate) fn table(format: Format) -> Option<&'static [i8; 16]> {
    match format {
        Format::MXFP4 => Some(&KVALUES_MXFP4),
        Format::IQ4_NL => Some(&KVALUES_IQ4NL),
        _ => None,
    }
}

/// Whether a packable legacy format carries a minimum per block (Q4_1, Q5_1).
pub(crate) fn has_min(format: Format) -> bool {
    matches!(format, Format::Q4_1 | Format::Q5_1)
}

/// Bytes before a legacy record's quants: the scales (one byte each for MXFP4, else f16), and
/// the minimums where the format has them.
pub(crate) fn quants_at(format: Format) -> usize {
    if has_min(format) {
        64
    } else if format == Format::MXFP4 {
        16
    } else {
        32
    }
}

/// Elements per block of a packable format.
fn block_elems(format: Format) -> Option<usize> {
    match format {
        Format::Q8_0
        | Format::Q5_0
        | Format::Q4_0
        | Format::Q4_1
        | Format::Q5_1
        | Format::MXFP4
        | Format::IQ4_NL => Some(QK8_0),
        Format::Q4_K | Format::Q6_K => Some(QK_K),
        Format::BF16 => Some(crate::bf16dot::BLOCK),
        _ => None,
    }
}

/// Whether [`pack`] accepts a matrix of this type and shape.
pub fn packable(ty: GgmlType, rows: usize, cols: usize) -> bool {
    if ty == GgmlType::BF16 && !crate::bf16dot::tiles_wanted(rows) {
        return false;
    }
    Format::from_ggml(ty)
        .ok()
        .and_then(block_elems)
        .is_some_and(|unit| {
            rows > 0 && rows.is_multiple_of(PACK_ROWS) && cols > 0 && cols.is_multiple_of(unit)
        })
}

/// Bytes of a packed matrix of this type and shape (`None` if not packable).
pub fn packed_len(ty: GgmlType, rows: usize, cols: usize) -> Option<usize> {
    if !packable(ty, rows, cols) {
        return None;
    }
    let format = Format::from_ggml(ty).ok()?;
    Some(rows / PACK_ROWS * (cols / block_elems(format)?) * record_bytes(format))
}

/// Q4_K record (exactly the 16 x 144 bytes of the blocks it replaces): d and dmin (16 f16 each),
/// the 6-bit scales and mins in 192 bytes, then eight sub-blocks of quants laid out like a Q4_0
/// record's (256 bytes each).
///
/// Scales and mins are indexed in *pair order*: position `p = 32k + 2i + t` holds row `i`'s value
/// of sub-block `2k + t` (`k = 0..4`), so 32 bytes at `32k` widen (u8 -> i16) into sixteen row
/// lanes of the pair `(v[2k], v[2k + 1])`, the shape `vpdpwssd` / `madd` want. Stored as
/// - the scales' low nibbles at `Q4K_SCALES` (64 bytes): byte `p` holds position `p` in its low
///   nibble and position `p + 64` in its high nibble;
/// - the mins' low nibbles at `Q4K_MINS`, likewise;
/// - their high two bits at `Q4K_HIGH`: byte `p` holds, from bit 0 up, those of scale `p`,
///   scale `p + 64`, min `p` and min `p + 64`.
pub(crate) const Q4K_SCALES: usize = 64;
pub(crate) const Q4K_MINS: usize = Q4K_SCALES + 64;
pub(crate) const Q4K_HIGH: usize = Q4K_MINS + 64;
pub(crate) const Q4K_QUANTS: usize = Q4K_HIGH + 64;

/// Q6_K record (exactly the 16 x 210 bytes of the blocks it replaces): d (16 f16), the i8
/// scales in pair order (byte `32k + 2i + t`: row `i`'s scale of sub-block `2k + t`, so 32 bytes
/// at `32k` widen into the lanes' pairs `(s[2k], s[2k + 1])`), then the 6-bit quants split:
/// - their low four bits at `Q6K_LOW`, as a Q4_0 record's nibbles with chunk `4g + c` holding
///   elements `16g + 4c..+4` of sub-block `g` (so sub-block `g` is the 128 bytes at `128g`);
/// - their high two bits at `Q6K_HIGH`, 64 bytes per sub-block `g`: byte `4i + t` holds chunk
///   `c`'s bits at bits `2c..2c + 2`.
pub(crate) const Q6K_SCALES: usize = 32;
pub(crate) const Q6K_LOW: usize = Q6K_SCALES + 256;
pub(crate) const Q6K_HIGH: usize = Q6K_LOW + 2048;

/// Bytes of one record (sixteen rows by one block).
pub(crate) fn record_bytes(format: Format) -> usize {
    match format {
        Format::Q8_0 => 32 + 512,
        Format::Q5_0 => 32 + 256 + 64,
        Format::Q4_0 => 32 + 256,
        Format::Q4_1 => 64 + 256,
        Format::Q5_1 => 64 + 256 + 64,
        Format::MXFP4 => 16 + 256,
        Format::IQ4_NL => 32 + 256,
        Format::Q4_K => Q4K_QUANTS + 8 * 256,
        Format::Q6_K => Q6K_HIGH + 16 * 64,
        Format::BF16 => PACK_ROWS * crate::bf16dot::BLOCK * 2,
        _ => unreachable!("record_bytes of an unpackable format"),
    }
}

/// Unsigned quants (`q + offset`) of one block, in element order, with its scale (and minimum,
/// zero bytes for formats without one).
fn unsigned_quants(format: Format, block: &[u8]) -> ([u8; 2], [u8; 2], [u8; QK8_0]) {
    let with_min = |(d, q)| (d, [0; 2], q);
    match format {
        Format::Q4_1 => {
            let b: &BlockQ4_1 = &quant::cast_blocks(block)[0];
            (b.d, b.m, b.quants())
        }
        Format::Q5_1 => {
            let b: &BlockQ5_1 = &quant::cast_blocks(block)[0];
            (b.d, b.m, b.quants())
        }
        _ => with_min(unsigned_quants_0(format, block)),
    }
}

/// [`unsigned_quants`] of the formats without a minimum (for MXFP4 / IQ4_NL the table
/// indices, MXFP4's exponent byte first in the scale's bytes).
fn unsigned_quants_0(format: Format, block: &[u8]) -> ([u8; 2], [u8; QK8_0]) {
    match format {
        Format::MXFP4 => {
            let b: &BlockMxfp4 = &quant::cast_blocks(block)[0];
            ([b.e, 0], nibble_indices(&b.qs))
        }
        Format::IQ4_NL => {
            let b: &BlockIq4Nl = &quant::cast_blocks(block)[0];
            (b.d, nibble_indices(&b.qs))
        }
        Format::Q8_0 => {
            let b: &BlockQ8_0 = &quant::cast_blocks(block)[0];
            (b.d, b.qs.map(|q| (q as u8) ^ 0x80))
        }
        Format::Q5_0 => {
            let b: &BlockQ5_0 = &quant::cast_blocks(block)[0];
            (b.d, q5_0_quants(b))
        }
        Format::Q4_0 => {
            let b: &BlockQ4_0 = &quant::cast_blocks(block)[0];
            (b.d, q4_0_quants(b))
        }
        _ => unreachable!("unsigned_quants of an unpackable format"),
    }
}

/// The 32 nibbles of a table block in element order (byte `j`: element `j` low, `j + 16` high).
fn nibble_indices(qs: &[u8; QK8_0 / 2]) -> [u8; QK8_0] {
    std::array::from_fn(|e| {
        if e < 16 {
            qs[e] & 0x0F
        } else {
            qs[e - 16] >> 4
        }
    })
}

/// Repacks a row-major matrix into the x16 layout, or `None` if the type or shape is not
/// packable (see [`packable`]). `data` must hold exactly `rows` rows of `cols` elements.
pub fn pack(ty: GgmlType, data: &[u8], rows: usize, cols: usize) -> Option<PackedBytes> {
    pack_stacked(ty, data, 1, rows, cols)
}

/// Repacks `n` row-major matrices stacked in `data` (a mixture of experts' 3-D tensor) into one
/// buffer of `n` x16 matrices, matrix `e` at `e * packed_len(ty, rows, cols)`; `None` as for
/// [`pack`], or if `data` does not hold exactly `n` matrices.
pub fn pack_stacked(
    ty: GgmlType,
    data: &[u8],
    n: usize,
    rows: usize,
    cols: usize,
) -> Option<PackedBytes> {
    if !packable(ty, rows, cols) || n == 0 {
        return None;
    }
    let format = Format::from_ggml(ty).ok()?;
    let unit = block_elems(format)?;
    let bb = format.row_bytes(ty, unit).ok()?;
    let blocks = cols / unit;
    let per = rows * blocks * bb;
    if data.len() != n * per {
        return None;
    }
    let rec = record_bytes(format);
    let len = packed_len(ty, rows, cols)?;
    let mut buf = HugeBuf::<u8>::zeroed(n * len);
    let out: &mut [u8] = &mut buf;
    let group_bytes = blocks * rec;
    let per_matrix = rows / PACK_ROWS;
    let groups = n * per_matrix;
    // Groups are independent: split them over the cores (packing runs once, at load).
    let n_threads = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(groups);
    let per_thread = groups.div_ceil(n_threads.max(1));
    std::thread::scope(|scope| {
        for (t, part) in out.chunks_mut(per_thread * group_bytes).enumerate() {
            scope.spawn(move || {
                for (k, dst) in part.chunks_exact_mut(group_bytes).enumerate() {
                    let g = t * per_thread + k;
                    let (e, local) = (g / per_matrix, g % per_matrix);
                    let matrix = &data[e * per..(e + 1) * per];
                    pack_group(format, matrix, bb, blocks, local, dst);
                }
            });
        }
    });
    Some(PackedBytes(buf))
}

/// Writes 32 unsigned 4-bit quants of row `i` (elements `4k + t`) into a Q4_0-style quant area.
fn put_nibbles(quants: &mut [u8], i: usize, u: &[u8]) {
    for (e, &q) in u.iter().enumerate() {
        let (k, t) = (e / 4, e % 4);
        let shift = if k % 2 == 0 { 0 } else { 4 };
        quants[64 * (k / 2) + 4 * i + t] |= (q & 0x0F) << shift;
    }
}

/// Packs row group `g` (rows `16g..16g + 16`) into `dst` (`blocks` records, zeroed): row `i`'s
/// block `b` goes to lane `i` of record `b`.
fn pack_group(format: Format, data: &[u8], bb: usize, blocks: usize, g: usize, dst: &mut [u8]) {
    let rec = record_bytes(format);
    for b in 0..blocks {
        let r = &mut dst[b * rec..(b + 1) * rec];
        for i in 0..PACK_ROWS {
            let off = ((g * PACK_ROWS + i) * blocks + b) * bb;
            let src = &data[off..off + bb];
            match format {
                Format::Q4_K => put_q4k(r, i, &quant::cast_blocks(src)[0]),
                Format::Q6_K => put_q6k(r, i, &quant::cast_blocks(src)[0]),
                Format::BF16 => put_bf16(r, i, src),
                _ => put_legacy(format, r, i, src),
            }
        }
    }
}

/// Writes row `i`'s 32 BF16 values (`src`, little-endian) into their places in tile `r`.
fn put_bf16(r: &mut [u8], i: usize, src: &[u8]) {
    for (c, v) in src.chunks_exact(2).enumerate() {
        let at = 2 * crate::bf16dot::tile_index(i, c);
        r[at..at + 2].copy_from_slice(v);
    }
}

/// Writes a Q8_0 / Q5_0 / Q4_0 / Q4_1 / Q5_1 / MXFP4 / IQ4_NL block (`src`) into lane `i` of
/// record `r`.
fn put_legacy(format: Format, r: &mut [u8], i: usize, src: &[u8]) {
    let (head, quants) = r.split_at_mut(quants_at(format));
    let (d, m, u) = unsigned_quants(format, src);
    if format == Format::MXFP4 {
        head[i] = d[0];
    } else {
        head[2 * i..2 * i + 2].copy_from_slice(&d);
    }
    if has_min(format) {
        head[32 + 2 * i..32 + 2 * i + 2].copy_from_slice(&m);
    }
    if format == Format::Q8_0 {
        for (e, &q) in u.iter().enumerate() {
            quants[64 * (e / 4) + 4 * i + e % 4] = q;
        }
        return;
    }
    put_nibbles(quants, i, &u);
    if five_bits(format) {
        for (e, &q) in u.iter().enumerate() {
            quants[256 + 4 * i + e % 4] |= ((q >> 4) & 1) << (e / 4);
        }
    }
}

/// Where the value of row `i`, sub-block `j` sits in pair order: (byte, which half) of the
/// 64-byte nibble and high-bit areas (see [`Q4K_SCALES`]).
fn pair_slot(i: usize, j: usize) -> (usize, usize) {
    let p = 32 * (j / 2) + 2 * i + j % 2;
    (p % 64, p / 64)
}

/// Writes a Q4_K block into lane `i` of record `r`.
fn put_q4k(r: &mut [u8], i: usize, blk: &BlockQ4K) {
    r[2 * i..2 * i + 2].copy_from_slice(&blk.d);
    r[32 + 2 * i..32 + 2 * i + 2].copy_from_slice(&blk.dmin);
    let (sc, mn) = k4_scales_mins(&blk.scales);
    for j in 0..8 {
        let (byte, half) = pair_slot(i, j);
        r[Q4K_SCALES + byte] |= (sc[j] & 0x0F) << (4 * half);
        r[Q4K_MINS + byte] |= (mn[j] & 0x0F) << (4 * half);
        r[Q4K_HIGH + byte] |= ((sc[j] >> 4) << (2 * half)) | ((mn[j] >> 4) << (4 + 2 * half));
    }
    let q = q4_k_quants(blk);
    for j in 0..8 {
        let area = Q4K_QUANTS + 256 * j;
        put_nibbles(&mut r[area..area + 256], i, &q[32 * j..32 * j + 32]);
    }
}

/// Row `i`'s 6-bit scale and min of sub-block `j` in a packed Q4_K record.
pub(crate) fn q4k_scale_min(record: &[u8], i: usize, j: usize) -> (i32, i32) {
    let (byte, half) = pair_slot(i, j);
    let high = record[Q4K_HIGH + byte];
    let low = |area: usize| (record[area + byte] >> (4 * half)) & 0x0F;
    let sc = low(Q4K_SCALES) | (((high >> (2 * half)) & 3) << 4);
    let mn = low(Q4K_MINS) | (((high >> (4 + 2 * half)) & 3) << 4);
    (i32::from(sc), i32::from(mn))
}

/// Writes a Q6_K block into lane `i` of record `r`.
fn put_q6k(r: &mut [u8], i: usize, blk: &BlockQ6K) {
    r[2 * i..2 * i + 2].copy_from_slice(&blk.d);
    for (g, &sc) in blk.scales.iter().enumerate() {
        r[Q6K_SCALES + 32 * (g / 2) + 2 * i + g % 2] = sc as u8;
    }
    let q = q6_k_quants(blk);
    for g in 0..16 {
        let low = Q6K_LOW + 128 * g;
        let sub = &q[16 * g..16 * g + 16];
        put_nibbles(&mut r[low..low + 128], i, sub);
        for (e, &v) in sub.iter().enumerate() {
            r[Q6K_HIGH + 64 * g + 4 * i + e % 4] |= (v >> 4) << (2 * (e / 4));
        }
    }
}

/// Whether a legacy record holds the quants' fifth bits (Q5_0, Q5_1).
fn five_bits(format: Format) -> bool {
    matches!(format, Format::Q5_0 | Format::Q5_1)
}

/// Row `i`'s unsigned 6-bit quant of element `e` (0..16) of sub-block `g` in a packed Q6_K
/// record.
fn q6k_quant(record: &[u8], i: usize, g: usize, e: usize) -> i32 {
    let low = record_quant(Format::Q4_0, &record[Q6K_LOW + 128 * g..], i, e);
    let high = (record[Q6K_HIGH + 64 * g + 4 * i + e % 4] >> (2 * (e / 4))) & 3;
    low | (i32::from(high) << 4)
}

/// The unsigned quant of row `i`, element `e` of a record's quant bytes.
fn record_quant(format: Format, q: &[u8], i: usize, e: usize) -> i32 {
    let (k, t) = (e / 4, e % 4);
    let byte = 4 * i + t;
    match format {
        Format::Q8_0 => i32::from(q[64 * k + byte]),
        _ => {
            let packed = q[64 * (k / 2) + byte];
            let mut v = if k % 2 == 0 {
                packed & 0x0F
            } else {
                packed >> 4
            };
            if five_bits(format) && (q[256 + byte] >> k) & 1 == 1 {
                v |= 0x10;
            }
            i32::from(v)
        }
    }
}

/// Scalar kernel (and reference) for row `r` of packed Q4_K weights against one activation row:
/// per block, `acc = fma(isum, d * d_x, acc)` then `acc = fma(-msum, dmin * d_x, acc)`, with
/// `isum = sum_j sc_j * (q_j . x_j)` and `msum = sum_j m_j * sum(x_j)` exact in integers.
pub(crate) fn dot_packed_row_q4k(data: &[u8], blocks: usize, r: usize, x: &[BlockQ8K]) -> f32 {
    let rec = record_bytes(Format::Q4_K);
    let (g, i) = (r / PACK_ROWS, r % PACK_ROWS);
    let mut acc = 0.0f32;
    for (b, xa) in x.iter().enumerate().take(blocks) {
        let record = &data[(g * blocks + b) * rec..(g * blocks + b + 1) * rec];
        let d = f16_to_f32([record[2 * i], record[2 * i + 1]]);
        let dmin = f16_to_f32([record[32 + 2 * i], record[33 + 2 * i]]);
        let (mut isum, mut msum) = (0i32, 0i32);
        for j in 0..8 {
            let q = &record[Q4K_QUANTS + 256 * j..Q4K_QUANTS + 256 * (j + 1)];
            let dot: i32 = (0..32)
                .map(|e| record_quant(Format::Q4_0, q, i, e) * i32::from(xa.qs[32 * j + e]))
                .sum();
            let (sc, m) = q4k_scale_min(record, i, j);
            isum += sc * dot;
            msum += m * (i32::from(xa.bsums[2 * j]) + i32::from(xa.bsums[2 * j + 1]));
        }
        acc = (isum as f32).mul_add(d * xa.d, acc);
        acc = (-(msum as f32)).mul_add(dmin * xa.d, acc);
    }
    acc
}

/// Scalar kernel (and reference) for row `r` of packed Q6_K weights against one activation row:
/// per block `acc = fma(isum, d * d_x, acc)` with the exact
/// `isum = sum_g s_g * (q_g . x_g) - 32 * sum_g s_g * sum(x_g)`.
pub(crate) fn dot_packed_row_q6k(data: &[u8], blocks: usize, r: usize, x: &[BlockQ8K]) -> f32 {
    let rec = record_bytes(Format::Q6_K);
    let (g, i) = (r / PACK_ROWS, r % PACK_ROWS);
    let mut acc = 0.0f32;
    for (b, xa) in x.iter().enumerate().take(blocks) {
        let record = &data[(g * blocks + b) * rec..(g * blocks + b + 1) * rec];
        let d = f16_to_f32([record[2 * i], record[2 * i + 1]]);
        let (mut dots, mut corr) = (0i32, 0i32);
        for sb in 0..16 {
            let sc = i32::from(record[Q6K_SCALES + 32 * (sb / 2) + 2 * i + sb % 2] as i8);
            let dot: i32 = (0..16)
                .map(|e| q6k_quant(record, i, sb, e) * i32::from(xa.qs[16 * sb + e]))
                .sum();
            dots += sc * dot;
            corr += sc * i32::from(xa.bsums[sb]);
        }
        let isum = dots - 32 * corr;
        acc = (isum as f32).mul_add(d * xa.d, acc);
    }
    acc
}

/// Row `i`'s scale in a legacy record: MXFP4's exponent byte as [`e8m0_to_f32_half`] decodes
/// it, else an f16.
fn record_scale(format: Format, record: &[u8], i: usize) -> f32 {
    if format == Format::MXFP4 {
        e8m0_to_f32_half(record[i])
    } else {
        f16_to_f32([record[2 * i], record[2 * i + 1]])
    }
}

/// Row `i`'s quant of element `e` in a legacy record's quant bytes `q`, as the block's integer
/// sum weighs it: signed (the table value for MXFP4 / IQ4_NL, the stored value less the offset
/// for Q8_0 / Q5_0 / Q4_0), unsigned for Q4_1 / Q5_1 (their minimum is a separate term).
fn record_value(format: Format, q: &[u8], i: usize, e: usize) -> i32 {
    let u = record_quant(format, q, i, e);
    match table(format) {
        Some(t) => i32::from(t[u as usize]),
        None => u - offset(format).unwrap_or(0),
    }
}

/// Scalar kernel (and reference) for row `r` of packed weights against one activation row:
/// `fma(isum_b, d_w * d_x, acc)` over the blocks in order, `isum_b` the block's exact integer
/// sum (then, for Q4_1 / Q5_1, `fma(sum(x), m_w * d_x, acc)`: `quant::legacy_min`'s steps).
pub(crate) fn dot_packed_row(
    format: Format,
    data: &[u8],
    blocks: usize,
    r: usize,
    x: &[ActQ8_0],
) -> f32 {
    let rec = record_bytes(format);
    let (g, i) = (r / PACK_ROWS, r % PACK_ROWS);
    let mut acc = 0.0f32;
    for (b, xa) in x.iter().enumerate().take(blocks) {
        let record = &data[(g * blocks + b) * rec..(g * blocks + b + 1) * rec];
        let dw = record_scale(format, record, i);
        let q = &record[quants_at(format)..];
        let isum: i32 = (xa.qs.iter().enumerate())
            .map(|(e, &xq)| record_value(format, q, i, e) * i32::from(xq))
            .sum();
        if has_min(format) {
            let mw = f16_to_f32([record[32 + 2 * i], record[33 + 2 * i]]);
            acc = fold_block(acc, isum, dw, mw, xa);
        } else {
            acc = (isum as f32).mul_add(dw * xa.d, acc);
        }
    }
    acc
}

/// The activations of a packed matmul: Q8_0 blocks for the legacy formats, Q8_K for Q4_K.
#[derive(Clone, Copy)]
pub(crate) enum PackedActs<'a> {
    Q8_0(&'a [ActQ8_0]),
    Q8K(&'a [BlockQ8K]),
}

impl<'a> PackedActs<'a> {
    /// The blocks `range` of these activations (whole rows: `range` in multiples of a row's
    /// blocks).
    pub(crate) fn rows(self, range: std::ops::Range<usize>) -> PackedActs<'a> {
        match self {
            PackedActs::Q8_0(a) => PackedActs::Q8_0(&a[range]),
            PackedActs::Q8K(a) => PackedActs::Q8K(&a[range]),
        }
    }
}

/// One packed matmul call, shared by the pool's threads.
pub(crate) struct PackedJob<'a> {
    pub format: Format,
    pub data: &'a [u8],
    pub blocks: usize,
    pub rows: usize,
    pub acts: PackedActs<'a>,
    pub m: usize,
    pub out: *mut f32,
}

// SAFETY: shared slices of `Sync` data plus an output pointer whose row groups are claimed by
// exactly one thread each; `Threads::run` joins before the `&mut` it came from is released.
unsafe impl Sync for PackedJob<'_> {}

impl PackedJob<'_> {
    /// Writes every activation row's outputs for row groups `groups`.
    ///
    /// # Safety
    /// The job's shapes agree (`data` holds `rows / 16 * blocks` records of `format`, `acts`
    /// holds `m * blocks` blocks of the kind `format` takes: `matmul::check` and `packed_acts`
    /// make them so); `out` is valid for `m * rows` writes; `groups` lies in `0..rows / 16` and
    /// no other thread writes these groups' outputs; `isa` is at most what this CPU (and, for
    /// AMX, the OS) allows (`matmul` caps it with [`crate::detect_isa`]).
    unsafe fn groups(&self, groups: std::ops::Range<usize>, isa: Isa) {
        #[cfg(target_arch = "x86_64")]
        {
            use crate::kernel::x86::{amx, packed256, packed512};
            match isa {
                // SAFETY: `Isa::Amx` means `amx::available()` held (this function's contract);
                // the job's contract is forwarded.
                Isa::Amx => return unsafe { amx::groups(self, groups) },
                // SAFETY: AVX-512 F/BW/VL/VNNI, AVX2, FMA and F16C were detected (this
                // function's contract); the job's contract is forwarded.
                Isa::Avx512Vnni => return unsafe { packed512::groups(self, groups) },
                // SAFETY: AVX2, FMA and F16C were detected (this function's contract); the
                // job's contract is forwarded.
                Isa::Avx2 => return unsafe { packed256::groups(self, groups) },
                Isa::Scalar => {}
            }
        }
        let _ = isa;
        let bl = self.blocks;
        for g in groups {
            for i in 0..self.m {
                for r in g * PACK_ROWS..(g + 1) * PACK_ROWS {
                    let v = match self.acts {
                        PackedActs::Q8_0(a) => {
                            dot_packed_row(self.format, self.data, bl, r, &a[i * bl..(i + 1) * bl])
                        }
                        PackedActs::Q8K(a) if self.format == Format::Q6_K => {
                            dot_packed_row_q6k(self.data, bl, r, &a[i * bl..(i + 1) * bl])
                        }
                        PackedActs::Q8K(a) => {
                            dot_packed_row_q4k(self.data, bl, r, &a[i * bl..(i + 1) * bl])
                        }
                    };
                    // SAFETY: i < m, r < rows: in bounds; this thread owns group g.
                    unsafe { *self.out.add(i * self.rows + r) = v };
                }
            }
        }
    }
}

/// Weight bytes a chunk of [`run`] holds at least: smaller chunks cost more in claiming and
/// in restarting the prefetch stream than they save in balance.
const MIN_CHUNK_BYTES: usize = 32 << 10;

/// Runs packed matmuls over the pool in one parallel region: the row groups of all jobs, in
/// order, are cut into chunks, each thread working through a home share of them first
/// (`Threads::for_each_range`: a thread writes the same outputs step after step).
///
/// Each thread's share is cut into 32 chunks, of at least `MIN_CHUNK_BYTES` of weights: the
/// threads finish within about a chunk of each other, so a decoding step, which streams its
/// weights at the memory's pace, leaves a thread idle for about 1/64 of each region (with 8
/// chunks a share, the waits were 6.4-6.6% of an OLMoE decode's samples, with 32 4.2-4.8%).
pub(crate) fn run(threads: &Threads, jobs: &[PackedJob], isa: Isa) {
    let n_groups: usize = jobs.iter().map(|j| j.rows / PACK_ROWS).sum();
    let bytes: usize = jobs.iter().map(|j| j.data.len()).sum();
    let min_groups = MIN_CHUNK_BYTES.div_ceil((bytes / n_groups.max(1)).max(1));
    let per_chunk = if threads.n() == 1 {
        n_groups
    } else {
        n_groups.div_ceil(threads.n() * 32).max(min_groups)
    };
    threads.for_each_range(n_groups, per_chunk, &|_, range| {
        let mut start = 0;
        for job in jobs {
            let end = start + job.rows / PACK_ROWS;
            let (lo, hi) = (range.start.max(start), range.end.min(end));
            if lo < hi {
                // SAFETY: each global group goes to exactly one call, so each job's groups do;
                // `isa` as checked by the caller.
                unsafe { job.groups(lo - start..hi - start, isa) }
            }
            start = end;
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stored_offset_sums_follow_each_formats_offset() {
        // `ActQ8_0::neg_offset_sums` is indexed 0, 1, 2 for Q8_0, Q5_0, Q4_0 by the kernels, 1
        // for MXFP4 and 0 for IQ4_NL.
        let a = ActQ8_0::new(0.5, [3; QK8_0], -77);
        for (i, f) in [
            (0, Format::Q8_0),
            (1, Format::Q5_0),
            (2, Format::Q4_0),
            (1, Format::MXFP4),
            (0, Format::IQ4_NL),
        ] {
            let off = offset(f).expect("a legacy format has an offset");
            assert_eq!(a.neg_offset_sums[i], -off * a.sum, "{f:?}");
        }
    }

    #[test]
    fn biased_tables_are_the_tables_plus_their_offsets() {
        for (f, biased) in [
            (Format::MXFP4, MXFP4_BIASED),
            (Format::IQ4_NL, IQ4NL_BIASED),
        ] {
            let (t, off) = (table(f).expect("a table format"), offset(f).unwrap_or(0));
            for k in 0..16 {
                assert_eq!(i32::from(biased[k]), i32::from(t[k]) + off, "{f:?} {k}");
            }
        }
    }
}
