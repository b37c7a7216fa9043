//! Activation formats as the kernels consume them, and their preparation from f32 rows.
//!
//! Each kernel names its activation type; the matmul prepares that type once per call into the
//! caller's [`MatmulScratch`](crate::MatmulScratch). Quantized rows are produced by one
//! per-row function whichever thread runs it, so the result never depends on the batch or pool.

use crate::matmul::MatmulScratch;
use crate::quant::{self, ActQ8_0, ActQ8_0x2, BlockQ8K, QK8_0, QK_K};
use crate::threads::Threads;

/// An activation element/block type a kernel multiplies weight rows with.
pub(crate) trait Activation: Sized + Send + Sync + 'static {
    /// Turns `x` (rows of `cols` floats) into this format; returns the rows and the number of
    /// elements of `Self` per row.
    fn prepare<'a>(
        threads: &Threads,
        x: &'a [f32],
        cols: usize,
        scratch: &'a mut MatmulScratch,
    ) -> (&'a [Self], usize);
}

impl Activation for f32 {
    fn prepare<'a>(
        _: &Threads,
        x: &'a [f32],
        cols: usize,
        _: &'a mut MatmulScratch,
    ) -> (&'a [f32], usize) {
        (x, cols)
    }
}

impl Activation for ActQ8_0 {
    fn prepare<'a>(
        threads: &Threads,
        x: &'a [f32],
        cols: usize,
        s: &'a mut MatmulScratch,
    ) -> (&'a [Self], usize) {
        let per_row = cols / QK8_0;
        quantize_into(
            threads,
            x,
            cols,
            &mut s.q8_0,
            per_row,
            quant::legacy::quantize_act_q8_0,
        )
    }
}

impl Activation for ActQ8_0x2 {
    fn prepare<'a>(
        threads: &Threads,
        x: &'a [f32],
        cols: usize,
        s: &'a mut MatmulScratch,
    ) -> (&'a [Self], usize) {
        let per_row = cols.div_ceil(2 * QK8_0);
        quantize_into(
            threads,
            x,
            cols,
            &mut s.q8_0x2,
            per_row,
            quant::legacy::quantize_act_q8_0x2,
        )
    }
}

impl Activation for BlockQ8K {
    fn prepare<'a>(
        threads: &Threads,
        x: &'a [f32],
        cols: usize,
        s: &'a mut MatmulScratch,
    ) -> (&'a [Self], usize) {
        let per_row = cols / QK_K;
        quantize_into(
            threads,
            x,
            cols,
            &mut s.q8_k,
            per_row,
            quant::kquants::quantize_row_q8_k,
        )
    }
}

fn quantize_into<'a, A: Send + Default + Clone>(
    threads: &Threads,
    x: &[f32],
    cols: usize,
    buf: &'a mut Vec<A>,
    per_row: usize,
    quantize: fn(&[f32], &mut [A]),
) -> (&'a [A], usize) {
    let m = x.len() / cols;
    // Grows to the largest call, then stays: no allocation in steady state.
    buf.resize(m * per_row, A::default());
    quantize_rows(threads, x, cols, buf, per_row, quantize);
    (&buf[..], per_row)
}

/// A raw pointer to the activation scratch, written by several threads on disjoint rows.
struct RowsPtr<A>(*mut A);
// SAFETY: each thread writes a disjoint range of rows and `Threads::run` joins them before the
// exclusive borrow the pointer came from ends.
unsafe impl<A: Send> Sync for RowsPtr<A> {}

impl<A> RowsPtr<A> {
    /// Accessor so closures capture the wrapper (which is `Sync`), not the bare pointer field.
    fn get(&self) -> *mut A {
        self.0
    }
}

/// Quantizes the `x.len() / cols` rows into `acts` (`per_row` blocks each), spreading the rows
/// over the pool when the batch is large enough to pay for a dispatch.
fn quantize_rows<A: Send>(
    threads: &Threads,
    x: &[f32],
    cols: usize,
    acts: &mut [A],
    per_row: usize,
    quantize: fn(&[f32], &mut [A]),
) {
    let m = x.len() / cols;
    assert_eq!(
        acts.len(),
        m * per_row,
        "activation scratch size; this is a bug"
    );
    let n = threads.n();
    if m < 4 || n == 1 {
        for (xr, ar) in x.chunks_exact(cols).zip(acts.chunks_exact_mut(per_row)) {
            quantize(xr, ar);
        }
        return;
    }
    let ptr = RowsPtr(acts.as_mut_ptr());
    threads.run(&|t| {
        for r in m * t / n..m * (t + 1) / n {
            // SAFETY: r < m, so the row lies inside `acts`; threads own disjoint row ranges.
            let dst =
                unsafe { std::slice::from_raw_parts_mut(ptr.get().add(r * per_row), per_row) };
            quantize(&x[r * cols..(r + 1) * cols], dst);
        }
    });
}
