//! The mixture-of-experts FFN (Qwen 3 MoE, Qwen 2 MoE, Granite MoE, OLMoE, gpt-oss), grouped
//! by expert.
//!
//! Per token, a router matrix gives one logit per expert; their softmax is taken over all
//! experts, the `n_used` largest probabilities pick the experts (ties to the lower index), and,
//! with `norm_topk`, the picked probabilities are rescaled to sum to one. Each picked expert is
//! a SwiGLU MLP; the token's output is the weighted sum of its experts' outputs, accumulated in
//! the order the experts were picked (largest probability first), as llama.cpp sums them.
//! Qwen 2 MoE then adds a shared SwiGLU expert, run by every token, scaled per token by
//! `sigmoid(gate_inp_shexp · h)`. gpt-oss adds a bias to the router's logits and to each
//! expert projection's output (`MoeBiases`), picks the `n_used` largest logits and weighs them
//! by their softmax (`route_picked`), and activates with SwiGLU-OAI.
//!
//! Design: the step's tokens are grouped by expert. For every expert with routed tokens, their
//! normed rows are gathered and run through the same batched kernels as a dense layer (gate and
//! up sharing their input's quantization, then down), so each expert's weights are read once
//! per step however many tokens chose it. The experts of a step go to the thread pool together
//! (`kernels::matmul_segments`, up to `ROWS_PER_HANDOFF` gathered rows at a time): one parallel
//! region for all their gate and up matrices and one for their down matrices, so a decoding
//! token's eight experts cost two hand-offs, not sixteen. Results land in one slot per (token,
//! pick) and are combined per token afterwards.
//!
//! Invariants:
//! - Expert weights are held once: `Experts` views the file's 3-D tensor (GGUF stores each
//!   expert's rows contiguously), or, where the CPU has the batched kernels, the same tensor
//!   repacked at load into x16 records expert after expert, its file pages then released. Expert
//!   `e` is the byte range `e * per_expert .. (e + 1) * per_expert` of either.
//! - A token's output depends only on its own row: the kernels are batch-invariant, routing is
//!   per row, and the combination order is fixed by the token's picks, so a sequence's logits
//!   are the same alone or batched with others.

use gguf::GgmlType;
use kernels::{
    matmul, matmul_segments, matmul_shared, HugeVec, Layout, MatmulScratch, Segment, Threads,
    Weights,
};

use crate::config::{Activation, MoeSpec};
use crate::weights::Matrix;

/// `n_expert` matrices of `[rows][cols]`, stacked in one tensor of the mapped file, or repacked
/// into the kernels' x16 layout (one buffer, expert after expert).
#[derive(Clone, Copy, Debug)]
pub struct Experts {
    pub ty: GgmlType,
    pub data: &'static [u8],
    pub n_expert: usize,
    pub rows: usize,
    pub cols: usize,
    pub layout: Layout,
}

impl Experts {
    /// Expert `e`'s matrix, a view of its bytes. `e < n_expert`.
    pub fn expert(&self, e: usize) -> Weights<'static> {
        let per = self.data.len() / self.n_expert;
        Weights {
            ty: self.ty,
            data: &self.data[e * per..(e + 1) * per],
            rows: self.rows,
            cols: self.cols,
            layout: self.layout,
        }
    }

    /// These experts repacked for the batched kernels (`kernels::pack_stacked`), each expert's
    /// rows in the x16 records of the dense matrices, or themselves if their type or shape is not
    /// packable. The buffer is leaked like the file it came from.
    pub(crate) fn packed(self) -> Experts {
        if self.layout != Layout::RowMajor {
            return self;
        }
        match kernels::pack_stacked(self.ty, self.data, self.n_expert, self.rows, self.cols) {
            Some(p) => Experts {
                data: p.leak(),
                layout: Layout::X16,
                ..self
            },
            None => self,
        }
    }
}

/// One layer's router and experts.
pub struct MoeWeights {
    pub spec: MoeSpec,
    /// `[n_expert][d_model]`: one logit per expert.
    pub router: Matrix,
    /// `[d_ff_exp][d_model]` per expert.
    pub gate: Experts,
    pub up: Experts,
    /// `[d_model][d_ff_exp]` per expert.
    pub down: Experts,
    pub shared: Option<SharedExpert>,
    /// gpt-oss's biases.
    pub biases: Option<MoeBiases>,
}

/// gpt-oss's MoE biases: one per router logit, and per expert one per output row of its
/// gate, up and down projections (`[n_expert][rows]`).
pub struct MoeBiases {
    pub router: Vec<f32>,
    pub gate: Vec<f32>,
    pub up: Vec<f32>,
    pub down: Vec<f32>,
}

/// A shared expert: a SwiGLU MLP every token runs, its output scaled by `sigmoid(gate_inp · h)`
/// (Qwen 2 MoE) or added as it is (Granite MoE Shared).
pub struct SharedExpert {
    /// `[d_model]`: the gate's logit is its dot with the token's row (GGUF stores it 1-D).
    pub gate_inp: Option<Vec<f32>>,
    pub gate: Matrix,
    pub up: Matrix,
    pub down: Matrix,
}

/// Buffers of the MoE FFN, reused across layers and steps; they only grow.
#[derive(Default)]
pub struct MoeScratch {
    router_logits: HugeVec<f32>,
    /// `(expert, weight)` per (token, pick), token-major.
    picks: Vec<(usize, f32)>,
    /// Per expert, the (token, pick) slots routed to it, in token order.
    slots: Vec<Vec<usize>>,
    xs: HugeVec<f32>,
    gate: HugeVec<f32>,
    up: HugeVec<f32>,
    ys: HugeVec<f32>,
    /// `[n * n_used][d_model]`: each pick's expert output.
    slot_out: HugeVec<f32>,
    /// A hand-off's experts with routed rows, and their gate and up matrices and their down
    /// matrices, each over the expert's run of the gathered rows.
    experts: Vec<usize>,
    gate_up: Vec<Segment<'static, 2>>,
    down: Vec<Segment<'static, 1>>,
}

/// The MoE FFN of the `n` rows of `h` (`[n][d]`, already normed) into `out` (`[n][d]`).
pub fn moe_ffn(
    th: &Threads,
    w: &MoeWeights,
    h: &[f32],
    n: usize,
    out: &mut [f32],
    s: &mut MoeScratch,
    mm: &mut MatmulScratch,
) {
    let spec = &w.spec;
    let (ne, k, d) = (spec.n_expert, spec.n_used, w.down.rows);
    let logits = s.router_logits.sized(n * ne);
    matmul(th, &w.router.weights(), &h[..n * d], n, logits, mm);
    s.picks.clear();
    for row in logits.chunks_exact_mut(ne) {
        if let Some(b) = &w.biases {
            kernels::add(row, &b.router);
        }
        match spec.softmax_after_topk {
            true => route_picked(row, k, &mut s.picks),
            false => route(row, k, spec.norm_topk, &mut s.picks),
        }
    }
    s.slots.resize_with(ne, Vec::new);
    s.slots.iter_mut().for_each(Vec::clear);
    for (slot, &(e, _)) in s.picks.iter().enumerate() {
        s.slots[e].push(slot);
    }
    s.slot_out.sized(n * k * d);
    // Experts in index order, as many per hand-off as `ROWS_PER_HANDOFF` rows allow (at least
    // one with rows).
    let mut e0 = 0;
    while e0 < ne {
        let (mut rows, mut e1) = (0, e0);
        while e1 < ne && (rows == 0 || rows + s.slots[e1].len() <= ROWS_PER_HANDOFF) {
            rows += s.slots[e1].len();
            e1 += 1;
        }
        if rows > 0 {
            run_experts(th, w, e0..e1, rows, h, s, mm);
        }
        e0 = e1;
    }
    let slot_out = &s.slot_out;
    for (t, o) in out[..n * d].chunks_exact_mut(d).enumerate() {
        for j in 0..k {
            let slot = t * k + j;
            let wt = s.picks[slot].1;
            let y = &slot_out[slot * d..(slot + 1) * d];
            if j == 0 {
                o.iter_mut().zip(y).for_each(|(o, y)| *o = wt * y);
            } else {
                o.iter_mut().zip(y).for_each(|(o, y)| *o += wt * y);
            }
        }
    }
    if let Some(sh) = &w.shared {
        shared_expert(th, sh, h, n, d, out, s, mm);
    }
}

/// Most routed rows one hand-off to the pool carries: a decoding step's experts all go at once
/// (one parallel region for all their gate and up matrices, one for their down matrices, instead
/// of two per expert), while a long prefill chunk's gathered rows stay a few MiB.
const ROWS_PER_HANDOFF: usize = 512;

/// Experts `experts` over the rows of `h` routed to them (`rows` in all), each output into its
/// slot of `s.slot_out`: the rows gathered expert after expert, gate and up sharing their
/// input's quantization for all the experts at once (`matmul_segments`), then per expert its
/// biases and the activation, then all down projections at once, (their biases).
fn run_experts(
    th: &Threads,
    w: &MoeWeights,
    experts: std::ops::Range<usize>,
    rows: usize,
    h: &[f32],
    s: &mut MoeScratch,
    mm: &mut MatmulScratch,
) {
    let (k, d, ff) = (w.spec.n_used, w.down.rows, w.spec.d_ff_exp);
    let xs = s.xs.sized(rows * d);
    s.experts.clear();
    s.gate_up.clear();
    s.down.clear();
    let mut at = 0;
    for e in experts {
        let slots = &s.slots[e];
        if slots.is_empty() {
            continue;
        }
        let run = at..at + slots.len();
        for (dst, &slot) in xs[run.start * d..run.end * d]
            .chunks_exact_mut(d)
            .zip(slots)
        {
            let t = slot / k;
            dst.copy_from_slice(&h[t * d..(t + 1) * d]);
        }
        at = run.end;
        s.experts.push(e);
        s.gate_up
            .push(([w.gate.expert(e), w.up.expert(e)], run.clone()));
        s.down.push(([w.down.expert(e)], run));
    }
    let gate = s.gate.sized(rows * ff);
    let up = s.up.sized(rows * ff);
    matmul_segments(th, &s.gate_up, xs, rows, [&mut *gate, &mut *up], mm);
    for (&e, (_, run)) in s.experts.iter().zip(&s.gate_up) {
        let (g, u) = (
            &mut gate[run.start * ff..run.end * ff],
            &mut up[run.start * ff..run.end * ff],
        );
        if let Some(b) = &w.biases {
            add_rows(g, &b.gate[e * ff..(e + 1) * ff]);
            add_rows(u, &b.up[e * ff..(e + 1) * ff]);
        }
        match w.spec.activation {
            Activation::Silu => kernels::silu_mul(g, u),
            Activation::SwigluOai => {
                kernels::swiglu_oai(g, u, Activation::OAI_ALPHA, Activation::OAI_LIMIT)
            }
            Activation::GeluTanh => {
                kernels::gelu_tanh(g);
                kernels::mul(g, u);
            }
        }
    }
    let ys = s.ys.sized(rows * d);
    matmul_segments(th, &s.down, gate, rows, [&mut *ys], mm);
    for (&e, (_, run)) in s.experts.iter().zip(&s.down) {
        let ys = &mut ys[run.start * d..run.end * d];
        if let Some(b) = &w.biases {
            add_rows(ys, &b.down[e * d..(e + 1) * d]);
        }
        for (src, &slot) in ys.chunks_exact(d).zip(&s.slots[e]) {
            s.slot_out[slot * d..(slot + 1) * d].copy_from_slice(src);
        }
    }
}

/// Adds `bias` to every row of `rows` (rows as long as `bias`).
fn add_rows(rows: &mut [f32], bias: &[f32]) {
    rows.chunks_exact_mut(bias.len())
        .for_each(|r| kernels::add(r, bias));
}

/// Adds the shared expert of the `n` rows of `h`, each scaled by its sigmoid gate if it has one,
/// to `out`.
#[allow(clippy::too_many_arguments)]
fn shared_expert(
    th: &Threads,
    sh: &SharedExpert,
    h: &[f32],
    n: usize,
    d: usize,
    out: &mut [f32],
    s: &mut MoeScratch,
    mm: &mut MatmulScratch,
) {
    let ff = sh.gate.rows;
    let gate = s.gate.sized(n * ff);
    let up = s.up.sized(n * ff);
    let (wg, wu) = (sh.gate.weights(), sh.up.weights());
    matmul_shared(th, [&wg, &wu], &h[..n * d], n, [&mut *gate, &mut *up], mm);
    kernels::silu_mul(gate, up);
    let ys = s.ys.sized(n * d);
    matmul(th, &sh.down.weights(), gate, n, ys, mm);
    for ((o, y), x) in out[..n * d]
        .chunks_exact_mut(d)
        .zip(ys.chunks_exact(d))
        .zip(h.chunks_exact(d))
    {
        match &sh.gate_inp {
            Some(gate_inp) => {
                let g: f32 = x.iter().zip(gate_inp).map(|(a, b)| a * b).sum();
                let scale = 1.0 / (1.0 + (-g).exp());
                o.iter_mut().zip(y).for_each(|(o, y)| *o += scale * y);
            }
            None => kernels::add(o, y),
        }
    }
}

/// Appends one token's `k` picks `(expert, weight)` to `picks`, largest probability first:
/// softmax over all of `logits`, the top `k` (ties to the lower index), renormalised to sum to
/// one when `norm`.
pub fn route(logits: &[f32], k: usize, norm: bool, picks: &mut Vec<(usize, f32)>) {
    let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let exps = logits.iter().map(|&l| (l - max).exp());
    let sum: f32 = exps.clone().sum();
    let first = picks.len();
    for _ in 0..k {
        let mut best: Option<(usize, f32)> = None;
        for (e, p) in exps.clone().enumerate() {
            let taken = picks[first..].iter().any(|&(pe, _)| pe == e);
            if !taken && best.is_none_or(|(_, bp)| p > bp) {
                best = Some((e, p));
            }
        }
        if let Some((e, p)) = best {
            picks.push((e, p / sum));
        }
    }
    if norm {
        let total: f32 = picks[first..].iter().map(|&(_, p)| p).sum();
        if total > 0.0 {
            picks[first..].iter_mut().for_each(|(_, p)| *p /= total);
        }
    }
}

/// Appends one token's `k` picks `(expert, weight)` to `picks` as llama.cpp's `SOFTMAX_WEIGHT`
/// gating does (gpt-oss): the `k` largest logits, largest first (ties to the lower index),
/// weighted by the softmax of those `k` logits alone.
pub fn route_picked(logits: &[f32], k: usize, picks: &mut Vec<(usize, f32)>) {
    let first = picks.len();
    for _ in 0..k {
        let mut best: Option<(usize, f32)> = None;
        for (e, &l) in logits.iter().enumerate() {
            let taken = picks[first..].iter().any(|&(pe, _)| pe == e);
            if !taken && best.is_none_or(|(_, bl)| l > bl) {
                best = Some((e, l));
            }
        }
        if let Some(b) = best {
            picks.push(b);
        }
    }
    let picked = &mut picks[first..];
    let max = picked.iter().fold(f32::NEG_INFINITY, |m, &(_, l)| m.max(l));
    let mut sum = 0.0f64;
    for (_, l) in picked.iter_mut() {
        *l = (*l - max).exp();
        sum += f64::from(*l);
    }
    let inv = (1.0 / sum) as f32;
    picked.iter_mut().for_each(|(_, p)| *p *= inv);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn route_picks_the_largest_probabilities_first_and_renormalises() {
        let mut picks = Vec::new();
        route(&[0.0, 2.0, -1.0, 1.0], 2, true, &mut picks);
        assert_eq!(picks.iter().map(|p| p.0).collect::<Vec<_>>(), [1, 3]);
        let (a, b) = (2.0f64.exp(), 1.0f64.exp());
        assert!((picks[0].1 as f64 - a / (a + b)).abs() < 1e-6);
        assert!((picks[1].1 as f64 - b / (a + b)).abs() < 1e-6);
    }

    #[test]
    fn route_picked_weighs_the_top_logits_by_their_own_softmax() {
        let mut picks = Vec::new();
        route_picked(&[0.0, 2.0, -1.0, 1.0, 1.5], 3, &mut picks);
        assert_eq!(picks.iter().map(|p| p.0).collect::<Vec<_>>(), [1, 4, 3]);
        let e = [2.0f64.exp(), 1.5f64.exp(), 1.0f64.exp()];
        let total: f64 = e.iter().sum();
        for (p, e) in picks.iter().zip(e) {
            assert!((p.1 as f64 - e / total).abs() < 1e-6, "{picks:?}");
        }
        // The same weights as renormalised top-k probabilities, in exact arithmetic.
        let mut renorm = Vec::new();
        route(&[0.0, 2.0, -1.0, 1.0, 1.5], 3, true, &mut renorm);
        for (a, b) in picks.iter().zip(&renorm) {
            assert_eq!(a.0, b.0);
            assert!((a.1 - b.1).abs() < 1e-6);
        }
    }

    #[test]
    fn route_without_norm_keeps_the_softmax_over_all_experts() {
        let mut picks = Vec::new();
        route(&[0.0, 0.0, 0.0, 0.0], 1, false, &mut picks);
        assert_eq!(picks, [(0, 0.25)]);
    }
}
