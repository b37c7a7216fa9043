//! Threaded matrix multiplication of a quantized weight matrix with a batch of f32 activations.
//!
//! `out[i * rows + r] = dot(w.row(r), x[i * cols..(i + 1) * cols])` for `i in 0..m`.
//!
//! Design:
//! - Activations are quantized once per call (Q8_0 or Q8_K, as llama.cpp does; Q8_0 in block
//!   pairs for the 512-bit kernels) into a reusable [`MatmulScratch`], by the pool when the batch
//!   has four rows or more.
//! - Output rows are split into chunks that the pool's threads claim from a shared counter. Each
//!   weight row is read from memory once and multiplied with all `m` activation rows while it is
//!   hot in L1, in groups of up to four activation rows per pass so one unpacked weight block
//!   feeds four dot products.
//!   Float weights (F32/F16) run tiled kernels instead (`float_tiled` with AVX2, `float512`
//!   with AVX-512): several weight rows by several activation rows per tile, over blocks of
//!   activation rows that stay in L2, each output with the bits of the per-row kernel. BF16
//!   weights (whole 32-column blocks) multiply as llama.cpp does, with activations rounded to
//!   BF16 ([`crate::bf16dot`]: `vdpbf16ps`, or `tdpbf16ps` tiles on AMX); other BF16 shapes as
//!   F16.
//! - Weights repacked by [`crate::packed::pack`] ([`Layout::X16`]) take the packed path instead:
//!   Q8_0 (or Q8_K) activations, sixteen weight rows per pass, with the AVX-512 VNNI or the
//!   AVX2 kernel as the CPU allows and a scalar kernel of identical bits elsewhere.
//!
//! Invariant (batch invariance): every output element is produced by the same per-pair kernel
//! with the same accumulation order, whatever `m`, the other rows, the group an activation row
//! lands in, or the thread count; the kernels guarantee that `dot::<N>` gives each pair exactly the
//! bits `dot::<1>` would.

use crate::act::Activation;
use crate::bf16dot::{self, matmul_bf16_on, Bf16Path, Bf16Rows, Bf16Scratch};
use crate::dtype::{Format, GgmlType};
use crate::error::KernelError;
use crate::kernel::{self, detect_isa, isa, DotKernel, Isa, KernelVisitor, RowsJob};
use crate::packed::{self, Layout};
use crate::quant::{self, ActQ8_0, ActQ8_0x2, BlockQ8K};
use crate::threads::Threads;

/// A weight matrix of `rows` output features by `cols` inputs: row-major (ggml's layout, each row
/// a contiguous run of blocks) or repacked ([`Layout::X16`], see [`crate::packed`]).
#[derive(Debug, Clone, Copy)]
pub struct Weights<'a> {
    pub ty: GgmlType,
    pub data: &'a [u8],
    pub rows: usize,
    pub cols: usize,
    pub layout: Layout,
}

impl<'a> Weights<'a> {
    /// Checks that `ty` is supported, `cols` is a whole number of blocks and `data` holds exactly
    /// `rows` rows.
    pub fn new(
        ty: GgmlType,
        data: &'a [u8],
        rows: usize,
        cols: usize,
    ) -> Result<Self, KernelError> {
        let format = Format::from_ggml(ty)?;
        let expected = format.row_bytes(ty, cols)? * rows;
        if data.len() != expected {
            return Err(KernelError::SizeMismatch {
                what: "weights",
                ty,
                expected,
                actual: data.len(),
            });
        }
        Ok(Self {
            ty,
            data,
            rows,
            cols,
            layout: Layout::RowMajor,
        })
    }

    /// Weights in the x16 layout produced by [`crate::packed::pack`] for the same type and shape.
    pub fn packed(
        ty: GgmlType,
        data: &'a [u8],
        rows: usize,
        cols: usize,
    ) -> Result<Self, KernelError> {
        let expected = packed::packed_len(ty, rows, cols).unwrap_or(0);
        if expected == 0 || data.len() != expected {
            return Err(KernelError::SizeMismatch {
                what: "packed weights",
                ty,
                expected,
                actual: data.len(),
            });
        }
        Ok(Self {
            ty,
            data,
            rows,
            cols,
            layout: Layout::X16,
        })
    }

    fn format(&self) -> Format {
        match Format::from_ggml(self.ty) {
            Ok(f) => f,
            Err(e) => panic!("matmul: {e}; build weights with Weights::new"),
        }
    }

    /// Bytes of one row of the row-major layout (packed layouts have no rows of their own, and
    /// Q4_K / Q6_K records are larger than the blocks they replace).
    pub fn row_bytes(&self) -> usize {
        self.data.len() / self.rows.max(1)
    }

    /// The bytes of row `r` (row-major layout only).
    pub fn row(&self, r: usize) -> &'a [u8] {
        assert_eq!(
            self.layout,
            Layout::RowMajor,
            "Weights::row of packed weights"
        );
        let n = self.row_bytes();
        &self.data[r * n..(r + 1) * n]
    }
}

/// Reusable buffers for quantized activations; grows to the largest call and then stops
/// allocating.
#[derive(Debug, Default)]
pub struct MatmulScratch {
    pub(crate) q8_0: Vec<ActQ8_0>,
    pub(crate) q8_0x2: Vec<ActQ8_0x2>,
    pub(crate) q8_k: Vec<BlockQ8K>,
    pub(crate) bf16: Bf16Scratch,
}

impl MatmulScratch {
    pub fn new() -> Self {
        Self::default()
    }
}

/// The output pointer of a call, shared by the workers; each (activation row, weight row)
/// element is written by exactly one thread.
struct OutPtr(*mut f32);

/// Multiplies `w` with `m` activation rows `x` (`m * w.cols` floats) into `out` (`m * w.rows`).
///
/// Panics if the slice lengths do not match the shapes (a caller bug).
pub fn matmul(
    threads: &Threads,
    w: &Weights,
    x: &[f32],
    m: usize,
    out: &mut [f32],
    scratch: &mut MatmulScratch,
) {
    matmul_with_isa(isa(), threads, w, x, m, out, scratch);
}

/// [`matmul`] restricted to instruction set `isa` (capped at what this CPU supports); for tests
/// and benchmarks that compare kernels.
pub fn matmul_with_isa(
    isa: Isa,
    threads: &Threads,
    w: &Weights,
    x: &[f32],
    m: usize,
    out: &mut [f32],
    scratch: &mut MatmulScratch,
) {
    let isa = isa.min(detect_isa());
    let format = check(w, x, m, out);
    if m == 0 || w.rows == 0 {
        return;
    }
    if w.layout == Layout::X16 && format == Format::BF16 {
        // BF16 weights tiled for AMX at load (`packed`), multiplied as below.
        let Some(tiles) = Bf16Rows::view_tiles(w.data, w.rows, w.cols) else {
            panic!("matmul: tiled BF16 weights of {} x {}", w.rows, w.cols);
        };
        matmul_bf16_on(
            bf16_path(isa),
            threads,
            &tiles,
            x,
            m,
            out,
            &mut scratch.bf16,
        );
        return;
    }
    if w.layout == Layout::X16 {
        let (acts, blocks) = packed_acts(threads, format, x, w.cols, scratch);
        packed::run(threads, &[packed_job(w, acts, blocks, m, out)], isa);
        return;
    }
    if format == Format::BF16 && w.cols.is_multiple_of(bf16dot::BLOCK) {
        // BF16 weights multiply as llama.cpp multiplies them: activations rounded to BF16,
        // products summed in f32 (`bf16dot`), the weights read in place (on CPUs with AMX-BF16
        // they are tiled at load, above).
        let Some(rows) = Bf16Rows::view(w.data, w.rows, w.cols) else {
            panic!(
                "matmul: BF16 weights of {} x {} in {} bytes",
                w.rows,
                w.cols,
                w.data.len()
            );
        };
        matmul_bf16_on(bf16_path(isa), threads, &rows, x, m, out, &mut scratch.bf16);
        return;
    }
    kernel::visit(
        isa,
        format,
        RunAll {
            threads,
            w,
            x,
            m,
            scratch,
            out: OutPtr(out.as_mut_ptr()),
        },
    );
}

/// The BF16 path of instruction set `isa`.
fn bf16_path(isa: Isa) -> Bf16Path {
    match isa {
        Isa::Scalar => Bf16Path::Scalar,
        Isa::Avx2 => Bf16Path::Avx2,
        Isa::Avx512Vnni => Bf16Path::Avx512Bf16,
        Isa::Amx => Bf16Path::Amx,
    }
}

/// [`matmul`] of `K` matrices with the same input `x` (attention Q, K and V; the MLP's gate and
/// up): when all are packed, have the same columns and take the same activation blocks, `x` is
/// quantized once and the row groups of all of them are shared out in one parallel region (one
/// hand-off instead of `K`). Otherwise, one [`matmul`] each. Either way each output gets the bits
/// its own [`matmul`] call would give.
pub fn matmul_shared<const K: usize>(
    threads: &Threads,
    ws: [&Weights; K],
    x: &[f32],
    m: usize,
    mut outs: [&mut [f32]; K],
    scratch: &mut MatmulScratch,
) {
    let formats = std::array::from_fn::<_, K, _>(|k| check(ws[k], x, m, outs[k]));
    if K == 0 || !one_packed_region(ws.iter().copied()) {
        for (w, out) in ws.iter().zip(outs.iter_mut()) {
            matmul(threads, w, x, m, out, scratch);
        }
        return;
    }
    if m == 0 {
        return;
    }
    let (acts, blocks) = packed_acts(threads, formats[0], x, ws[0].cols, scratch);
    let jobs: [packed::PackedJob; K] =
        std::array::from_fn(|k| packed_job(ws[k], acts, blocks, m, &mut *outs[k]));
    packed::run(threads, &jobs, isa());
}

/// One segment of [`matmul_segments`]: `K` weight matrices applied to a run of input rows.
pub type Segment<'w, const K: usize> = ([Weights<'w>; K], std::ops::Range<usize>);

/// [`matmul_shared`] of many weight sets, each over its own run of rows of one input, in one
/// parallel region: segment `(ws, rows)` multiplies each `ws[k]` with rows `rows` of `x` into
/// the same rows of `outs[k]` (`m * ws[k].rows` floats; every segment's `ws[k]` has as many rows
/// and all weights as many columns). The segments' row runs are disjoint and in order; rows in
/// none of them are left untouched. This is a mixture of experts' step: each expert's weights
/// over the tokens routed to it, with one hand-off for all experts instead of one per expert.
/// When every matrix is packed and takes the same activation blocks, `x` is quantized once for
/// all segments; otherwise each segment is one [`matmul_shared`]. Either way every output gets
/// the bits its own [`matmul`] call would give.
///
/// Panics if the shapes disagree or the runs overlap, are out of order or leave `0..m` (a
/// caller bug).
pub fn matmul_segments<const K: usize>(
    threads: &Threads,
    segments: &[Segment<'_, K>],
    x: &[f32],
    m: usize,
    mut outs: [&mut [f32]; K],
    scratch: &mut MatmulScratch,
) {
    let Some((first, _)) = segments.first() else {
        return;
    };
    let cols = first.first().map_or(0, |w| w.cols);
    let n_out: [usize; K] = std::array::from_fn(|k| first[k].rows);
    assert_eq!(x.len(), m * cols, "matmul_segments: x is not m * cols");
    let mut end = 0;
    for (ws, rows) in segments {
        assert!(
            end <= rows.start && rows.start <= rows.end && rows.end <= m,
            "matmul_segments: row runs overlap, are out of order or leave 0..{m}"
        );
        end = rows.end;
        for w in ws {
            check(w, &[], 0, &[]);
        }
        for k in 0..K {
            assert!(
                ws[k].rows == n_out[k] && ws[k].cols == cols,
                "matmul_segments: segment weights of different shapes"
            );
        }
    }
    for k in 0..K {
        assert_eq!(outs[k].len(), m * n_out[k], "matmul_segments: out {k} size");
    }
    if m == 0 || !one_packed_region(segments.iter().flat_map(|(ws, _)| ws)) {
        for (ws, rows) in segments {
            let (a, b) = (rows.start, rows.end);
            let mut k = 0;
            let sub = outs.each_mut().map(|o| {
                let n = n_out[k];
                k += 1;
                &mut o[a * n..b * n]
            });
            let ws: [&Weights; K] = std::array::from_fn(|k| &ws[k]);
            matmul_shared(threads, ws, &x[a * cols..b * cols], b - a, sub, scratch);
        }
        return;
    }
    // One base pointer per output, taken once: each job writes its own rows through it.
    let bases = outs.each_mut().map(|o| o.as_mut_ptr());
    let (acts, blocks) = packed_acts(threads, first[0].format(), x, cols, scratch);
    let mut jobs = Vec::with_capacity(segments.len() * K);
    for (ws, rows) in segments.iter().filter(|(_, r)| !r.is_empty()) {
        for k in 0..K {
            jobs.push(packed::PackedJob {
                format: ws[k].format(),
                data: ws[k].data,
                blocks,
                rows: n_out[k],
                acts: acts.rows(rows.start * blocks..rows.end * blocks),
                m: rows.len(),
                // SAFETY: `rows.end <= m` (checked above), so the offset stays inside
                // `outs[k]` (`m * n_out[k]` floats), whose borrow outlives the jobs.
                out: unsafe { bases[k].add(rows.start * n_out[k]) },
            });
        }
    }
    packed::run(threads, &jobs, isa());
}

/// Whether matrices can share one quantization of their input and one packed parallel region:
/// all packed but none BF16 (its tiles take float activations), of as many columns, and all
/// taking the same activation blocks (Q8_K for Q4_K / Q6_K, Q8_0 for the other formats).
fn one_packed_region<'a, 'w: 'a>(ws: impl IntoIterator<Item = &'a Weights<'w>>) -> bool {
    let kquant = |f: Format| matches!(f, Format::Q4_K | Format::Q6_K);
    let mut first = None;
    ws.into_iter().all(|w| {
        let (f, this) = (w.format(), (w.cols, kquant(w.format())));
        w.layout == Layout::X16 && f != Format::BF16 && *first.get_or_insert(this) == this
    })
}

/// Panics unless `x`, `out` and `w` agree with each other (a caller bug); returns `w`'s format.
fn check(w: &Weights, x: &[f32], m: usize, out: &[f32]) -> Format {
    assert_eq!(
        x.len(),
        m * w.cols,
        "matmul: x has {} floats, expected m * cols = {m} * {}",
        x.len(),
        w.cols
    );
    assert_eq!(
        out.len(),
        m * w.rows,
        "matmul: out has {} floats, expected m * rows = {m} * {}",
        out.len(),
        w.rows
    );
    let format = w.format();
    let valid = match w.layout {
        Layout::RowMajor => format
            .row_bytes(w.ty, w.cols)
            .is_ok_and(|b| b * w.rows == w.data.len()),
        Layout::X16 => packed::packed_len(w.ty, w.rows, w.cols) == Some(w.data.len()),
    };
    assert!(valid, "matmul: inconsistent Weights {{ ty: {:?}, rows: {}, cols: {}, {} bytes }}; build them with Weights::new", w.ty, w.rows, w.cols, w.data.len());
    if w.layout == Layout::X16 {
        assert!(
            packed::packable(w.ty, w.rows, w.cols),
            "matmul: packed weights of an unpackable type or shape; build them with Weights::packed"
        );
    }
    format
}

/// The activation blocks packed weights of `format` take (Q8_K for Q4_K / Q6_K, else Q8_0).
fn packed_acts<'a>(
    threads: &Threads,
    format: Format,
    x: &'a [f32],
    cols: usize,
    scratch: &'a mut MatmulScratch,
) -> (packed::PackedActs<'a>, usize) {
    if matches!(format, Format::Q4_K | Format::Q6_K) {
        let (a, n) = BlockQ8K::prepare(threads, x, cols, scratch);
        (packed::PackedActs::Q8K(a), n)
    } else {
        let (a, n) = ActQ8_0::prepare(threads, x, cols, scratch);
        (packed::PackedActs::Q8_0(a), n)
    }
}

fn packed_job<'a>(
    w: &Weights<'a>,
    acts: packed::PackedActs<'a>,
    blocks: usize,
    m: usize,
    out: &mut [f32],
) -> packed::PackedJob<'a> {
    packed::PackedJob {
        format: w.format(),
        data: w.data,
        blocks,
        rows: w.rows,
        acts,
        m,
        out: out.as_mut_ptr(),
    }
}

/// Prepares the activations the selected kernel wants and runs it over all rows (the kernel
/// module picks the kernel for the format and this CPU).
struct RunAll<'a, 'w> {
    threads: &'a Threads,
    w: &'a Weights<'w>,
    x: &'a [f32],
    m: usize,
    scratch: &'a mut MatmulScratch,
    out: OutPtr,
}

impl KernelVisitor for RunAll<'_, '_> {
    fn visit<K: DotKernel>(self, k: &K) {
        let (acts, act_stride) = K::A::prepare(self.threads, self.x, self.w.cols, self.scratch);
        let blocks: &[K::W] = quant::cast_blocks(self.w.data);
        let job = RowsJob {
            w: blocks,
            per_row: blocks.len() / self.w.rows,
            acts,
            act_stride,
            m: self.m,
            rows: self.w.rows,
            out: self.out.0,
        };
        job.validate(k.act_len(job.per_row));
        run_parallel(self.threads, k, &SharedJob(job));
    }
}

/// A validated job shared with the pool's threads.
struct SharedJob<'a, W, A>(RowsJob<'a, W, A>);
// SAFETY: the job holds shared slices of `Sync` data and an output pointer whose rows are split
// between threads (each row range is claimed by exactly one thread through the chunk counter),
// and `Threads::run` joins all threads before the `&mut` output the pointer came from is released.
unsafe impl<W: Sync, A: Sync> Sync for SharedJob<'_, W, A> {}

/// Rows per work chunk: enough chunks for load balance, a multiple of 4, and not tiny.
fn chunk_rows(rows: usize, threads: usize) -> usize {
    if threads == 1 {
        return rows;
    }
    let target = rows.div_ceil(threads * 8);
    target.max(16).next_multiple_of(4)
}

fn run_parallel<K: DotKernel>(threads: &Threads, k: &K, job: &SharedJob<K::W, K::A>) {
    let rows = job.0.rows;
    threads.for_each_range(rows, chunk_rows(rows, threads.n()), &|_, range| {
        // SAFETY: validated job; each row range goes to exactly one call, so its rows are
        // written by one thread only.
        unsafe { k.rows(&job.0, range) }
    });
}

/// Decodes one row of `ty` (e.g. an embedding row) into `dst` (`dst.len()` elements).
pub fn dequantize_row(ty: GgmlType, src: &[u8], dst: &mut [f32]) -> Result<(), KernelError> {
    let format = Format::from_ggml(ty)?;
    let expected = format.row_bytes(ty, dst.len())?;
    if src.len() != expected {
        return Err(KernelError::SizeMismatch {
            what: "dequantize_row",
            ty,
            expected,
            actual: src.len(),
        });
    }
    use quant::{float, kquants, kquants_low, legacy, legacy_min, nonlinear};
    match format {
        Format::F32 => float::dequantize_f32(src, dst),
        Format::F16 => float::dequantize_f16(src, dst),
        Format::BF16 => float::dequantize_bf16(src, dst),
        Format::Q4_0 => legacy::dequantize_q4_0(quant::cast_blocks(src), dst),
        Format::Q5_0 => legacy::dequantize_q5_0(quant::cast_blocks(src), dst),
        Format::Q4_1 => legacy_min::dequantize::<quant::BlockQ4_1>(quant::cast_blocks(src), dst),
        Format::Q5_1 => legacy_min::dequantize::<quant::BlockQ5_1>(quant::cast_blocks(src), dst),
        Format::Q8_0 => legacy::dequantize_q8_0(quant::cast_blocks(src), dst),
        Format::Q4_K => kquants::dequantize_q4_k(quant::cast_blocks(src), dst),
        Format::Q5_K => kquants::dequantize_q5_k(quant::cast_blocks(src), dst),
        Format::Q6_K => kquants::dequantize_q6_k(quant::cast_blocks(src), dst),
        Format::Q2_K => kquants_low::dequantize_q2_k(quant::cast_blocks(src), dst),
        Format::Q3_K => kquants_low::dequantize_q3_k(quant::cast_blocks(src), dst),
        Format::MXFP4 => {
            nonlinear::dequantize_table::<quant::BlockMxfp4>(quant::cast_blocks(src), dst)
        }
        Format::IQ4_NL => {
            nonlinear::dequantize_table::<quant::BlockIq4Nl>(quant::cast_blocks(src), dst)
        }
        Format::IQ4_XS => nonlinear::dequantize_iq4_xs(quant::cast_blocks(src), dst),
    }
    Ok(())
}
