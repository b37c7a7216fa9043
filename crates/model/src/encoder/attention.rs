//! Bidirectional (non-causal) attention of an encoder, each input attending to itself alone.
//!
//! One task per (input, head), handed out by the pool: scores of four queries at a time against
//! blocks of four keys where AVX-512VL gives the registers (`kernels::attn::dots4`), else two
//! against three (`dots`), each pair's dot as a lone dot would be; scaled,
//! a softmax in f32 (sum in f64), then the weighted sum of V (`axpy_block`). A query's result
//! depends only on its own input, and every task runs the same operations whatever else is in
//! the batch, so results are batch invariant. Outputs are written head-major (each task one
//! contiguous run) and then put back in token-major order.

use std::ops::Range;
use std::sync::Mutex;

use kernels::attn::{
    axpy_block, dots, dots4, exp_neg, Avx2, Block, Lanes, Portable, Wide, KEYS4, KEYS_PER_BLOCK,
};
use kernels::{Shares, Threads};

/// The shapes of one attention call; Q, K and V rows are `d = n_heads * head_dim` wide.
#[derive(Clone, Copy)]
pub(crate) struct Shape {
    pub n_heads: usize,
    pub head_dim: usize,
    pub scale: f32,
}

/// Per-thread score rows (two queries' scores over all keys of an input).
#[derive(Default)]
pub(crate) struct AttnScratch {
    per_thread: Vec<Mutex<Vec<f32>>>,
    head_major: Vec<f32>,
}

/// Attention of every input (`spans`: its rows of `q`, `k`, `v`) into `out` (`[n][d]`).
pub(crate) fn attend(
    th: &Threads,
    spans: &[Range<usize>],
    s: Shape,
    qkv: [&[f32]; 3],
    out: &mut [f32],
    scratch: &mut AttnScratch,
) {
    let (nh, hd) = (s.n_heads, s.head_dim);
    let d = nh * hd;
    let n = out.len() / d;
    scratch
        .per_thread
        .resize_with(th.n(), || Mutex::new(Vec::new()));
    if scratch.head_major.len() < n * d {
        scratch.head_major.resize(n * d, 0.0);
    }
    let hm = &mut scratch.head_major[..n * d];
    // Task t = (input t / nh, head t % nh) writes rows of its input in head (t % nh)'s block.
    let ranges: Vec<Range<usize>> = (0..spans.len() * nh)
        .map(|t| {
            let (sp, h) = (&spans[t / nh], t % nh);
            h * n * hd + sp.start * hd..h * n * hd + sp.end * hd
        })
        .collect();
    {
        let shares = Shares::new(hm, &ranges);
        let per_thread = &scratch.per_thread;
        th.for_each_range(ranges.len(), 1, &|thread, r| {
            let mut sc = per_thread[thread].lock().unwrap_or_else(|e| e.into_inner());
            for t in r {
                let task = Task {
                    span: spans[t / nh].clone(),
                    head: t % nh,
                    d,
                    s,
                };
                task.run(qkv, shares.take(t), &mut sc);
            }
        });
    }
    for (h, block) in scratch.head_major[..n * d].chunks_exact(n * hd).enumerate() {
        for (row, src) in block.chunks_exact(hd).enumerate() {
            out[row * d + h * hd..row * d + (h + 1) * hd].copy_from_slice(src);
        }
    }
}

/// One input's one head.
struct Task {
    span: Range<usize>,
    head: usize,
    d: usize,
    s: Shape,
}

impl Task {
    /// Runs with AVX2/FMA code where the CPU has it; both paths give the same bits.
    fn run(&self, qkv: [&[f32]; 3], out: &mut [f32], sc: &mut Vec<f32>) {
        if let Some(simd) = Avx2::detect() {
            #[cfg(target_arch = "x86_64")]
            // SAFETY: an `Avx2` value means AVX2, FMA and F16C were detected.
            unsafe {
                self.run_avx2(simd, qkv, out, sc)
            };
            #[cfg(not(target_arch = "x86_64"))]
            self.body(simd, qkv, out, sc);
            return;
        }
        self.body(Portable, qkv, out, sc);
    }

    /// # Safety
    /// AVX2, FMA and F16C must be available (an `Avx2` value proves it).
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn run_avx2(&self, simd: Avx2, qkv: [&[f32]; 3], out: &mut [f32], sc: &mut Vec<f32>) {
        self.body(simd, qkv, out, sc);
    }

    #[inline(always)]
    fn body<L: Lanes>(&self, lanes: L, qkv: [&[f32]; 3], out: &mut [f32], sc: &mut Vec<f32>) {
        let (hd, d, len) = (self.s.head_dim, self.d, self.span.len());
        let col = self.head * hd;
        let start = self.span.start;
        fn row(m: &[f32], at: usize, hd: usize) -> &[f32] {
            &m[at..at + hd]
        }
        let at = |i: usize| (start + i) * d + col;
        let [q, k, v] = qkv;
        // Four queries by four keys where AVX-512VL gives the registers (`dots4`), else two by
        // three (`dots`): the same bits per (query, key) either way.
        let wide = if L::SIMD { Wide::detect() } else { None };
        let nq = if wide.is_some() { 4 } else { 2 };
        if sc.len() < nq * len {
            sc.resize(nq * len, 0.0);
        }
        let last = len - 1;
        let qrow = |i: usize| row(q, at(i.min(last)), hd);
        for i in (0..len).step_by(nq) {
            let scores = &mut sc[..nq * len];
            match wide {
                Some(wide) => {
                    let qs: [&[f32]; 4] = std::array::from_fn(|a| qrow(i + a));
                    for j in (0..len).step_by(KEYS4) {
                        let keys = std::array::from_fn(|b| row(k, at((j + b).min(last)), hd));
                        put(scores, len, j, &dots4(wide, qs, keys), self.s.scale);
                    }
                }
                None => {
                    let pair = [qrow(i), qrow(i + 1)];
                    for j in (0..len).step_by(KEYS_PER_BLOCK) {
                        let keys = std::array::from_fn(|b| row(k, at((j + b).min(last)), hd));
                        put(scores, len, j, &dots(lanes, pair, keys), self.s.scale);
                    }
                }
            }
            for (a, scores) in scores.chunks_exact_mut(len).enumerate() {
                let qi = i + a;
                if qi >= len {
                    break;
                }
                softmax(scores);
                let acc = &mut out[qi * hd..(qi + 1) * hd];
                acc.fill(0.0);
                let block = Block {
                    span: len,
                    hd,
                    base: 0,
                    positions: 0..len,
                    next: &(),
                };
                axpy_block::<1, L, f32, ()>(lanes, acc, scores, &block, |p| row(v, at(p), hd));
            }
        }
    }
}

/// Scaled dots of a block of queries (rows of `scores`, each `len` long) with keys `j..j + K`
/// (those before `len`).
#[inline(always)]
fn put<const K: usize>(scores: &mut [f32], len: usize, j: usize, got: &[[f32; K]], scale: f32) {
    for (a, g) in got.iter().enumerate() {
        for b in 0..K.min(len - j) {
            scores[a * len + j + b] = g[b] * scale;
        }
    }
}

/// Softmax in place: `e^(x - max)` (`exp_neg`), summed in f64 in order, times the sum's f32
/// inverse. The exponentials are a loop of their own (the compiler vectorises it; the values
/// are those of `exp_neg` one at a time) before the ordered sum.
#[inline(always)]
fn softmax(x: &mut [f32]) {
    let max = x.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    x.iter_mut().for_each(|v| *v = exp_neg(*v - max));
    let mut sum = 0.0f64;
    for v in x.iter() {
        sum += f64::from(*v);
    }
    let inv = (1.0 / sum) as f32;
    x.iter_mut().for_each(|v| *v *= inv);
}
