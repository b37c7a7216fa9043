//! Routers: uniform (random rows, nothing favoured) or Zipf-like (expert popularity roughly
//! 1/rank over random tokens), and the measured expert-usage histogram that checks the claim.
//!
//! Mechanism: every token's embedding has a large positive element 0 (`blocks::First::Massive`)
//! that every other matrix ignores (`First::Quiet`), so after the FFN norm each hidden state
//! carries an about constant `c` in dimension 0. The router's column 0 then acts as a per-expert
//! bias: `logit_e = r_e . h + w_e * c`. The uniform router has `w_e = 0`; the Zipf router's
//! `w_e = beta_e / c` with `beta` fitted (by simulation on model hidden states, see
//! `HiddenModel`) so that the share of tokens routing to the expert of rank `r` is
//! `min(1, a / r)`, `a` such that the shares sum to the `k` experts each token uses. Which expert
//! has which rank is a random permutation per layer.
//!
//! The hidden states are modelled, not run: a fresh embedding row plus Gaussian noise of variance
//! `layer * RESIDUAL_GROWTH` per dimension (what the layers before have added), RMS-normalised.

use super::super::SplitMix64;
use super::blocks::{push_row, First};
use gguf::GgmlType;

/// Variance each layer adds to a residual dimension, relative to an embedding element's: the
/// attention and expert outputs are scaled (`OUTPUT_GAIN` in the generator) so that it stays
/// small and dimension 0 keeps its weight through every layer.
pub const RESIDUAL_GROWTH: f32 = 0.2;
/// Hidden states drawn to fit a Zipf router, and to measure a router's histogram.
const N_FIT: usize = 384;
pub const N_MEASURE: usize = 512;
const FIT_ROUNDS: usize = 150;

/// Model hidden states for one embedding format and width.
pub(super) struct HiddenModel {
    rows: Vec<Vec<f32>>,
    noise: Vec<Vec<f32>>,
}

impl HiddenModel {
    /// `n` embedding rows of `embed_ty` (standard deviation 1, massive element 0) and as many
    /// unit Gaussian-like noise vectors, from `seed`.
    pub(super) fn new(embed_ty: GgmlType, d: usize, n: usize, seed: u64) -> HiddenModel {
        let mut rng = SplitMix64(seed);
        let rows = (0..n)
            .map(|_| {
                let mut bytes = Vec::new();
                push_row(embed_ty, d, 1.0, First::Massive, &mut rng, &mut bytes);
                let mut row = vec![0.0; d];
                kernels::dequantize_row(embed_ty, &bytes, &mut row)
                    .unwrap_or_else(|e| panic!("{embed_ty} row: {e}"));
                row
            })
            .collect();
        // Sum of three uniforms: close enough to Gaussian here, unit variance.
        let noise = (0..n)
            .map(|_| {
                (0..d)
                    .map(|_| rng.next_signed() + rng.next_signed() + rng.next_signed())
                    .collect()
            })
            .collect();
        HiddenModel { rows, noise }
    }

    /// The RMS-normalised hidden states before layer `layer`.
    pub(super) fn states(&self, layer: usize) -> Vec<Vec<f32>> {
        let s = (layer as f32 * RESIDUAL_GROWTH).sqrt();
        self.rows
            .iter()
            .zip(&self.noise)
            .map(|(e, n)| {
                let h: Vec<f32> = e.iter().zip(n).map(|(e, n)| e + s * n).collect();
                let rms = (h.iter().map(|x| x * x).sum::<f32>() / h.len() as f32).sqrt();
                h.iter().map(|x| x / rms).collect()
            })
            .collect()
    }
}

/// Random router rows (`n_expert` rows of `d`, standard deviation 1/sqrt(d)) with column 0 zero.
pub(super) fn random_rows(n_expert: usize, d: usize, rng: &mut SplitMix64) -> Vec<f32> {
    let sd = 1.0 / (d as f32).sqrt();
    let mut w = rng.fill(n_expert * d, 0.0, sd * 3f32.sqrt());
    w.iter_mut().step_by(d).for_each(|x| *x = 0.0);
    w
}

/// Target shares of the experts by rank: `min(1, a / r)` summing to `k`.
pub fn zipf_targets(n_expert: usize, k: usize) -> Vec<f32> {
    let sum = |a: f64| (1..=n_expert).map(|r| (a / r as f64).min(1.0)).sum::<f64>();
    let (mut lo, mut hi) = (0.0f64, k as f64 * 2.0);
    for _ in 0..60 {
        let mid = 0.5 * (lo + hi);
        if sum(mid) < k as f64 {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    (1..=n_expert)
        .map(|r| (lo / r as f64).min(1.0) as f32)
        .collect()
}

/// For each state, the logits of `w` (rows of `d`) without column 0, and the state's column 0.
fn split_logits(w: &[f32], d: usize, states: &[Vec<f32>]) -> (Vec<Vec<f32>>, Vec<f32>) {
    let logits = states
        .iter()
        .map(|h| {
            w.chunks_exact(d)
                .map(|r| r[1..].iter().zip(&h[1..]).map(|(a, b)| a * b).sum())
                .collect()
        })
        .collect();
    (logits, states.iter().map(|h| h[0]).collect())
}

/// Share of the states that route to each expert (top `k` logits) with column-0 weights `col0`.
fn shares(logits: &[Vec<f32>], c: &[f32], col0: &[f32], k: usize) -> Vec<f32> {
    let mut count = vec![0usize; col0.len()];
    let mut order: Vec<usize> = (0..col0.len()).collect();
    for (l, &c) in logits.iter().zip(c) {
        let full = |e: usize| l[e] + col0[e] * c;
        order.sort_unstable_by(|&a, &b| full(b).total_cmp(&full(a)));
        order[..k].iter().for_each(|&e| count[e] += 1);
    }
    count
        .iter()
        .map(|&n| n as f32 / logits.len() as f32)
        .collect()
}

/// Sets column 0 of the router `w` (`n_expert` rows of `d`) so that, on the modelled hidden
/// states of `layer`, expert `rank_of[e]`-th most popular gets about its Zipf share.
pub(super) fn fit_zipf(w: &mut [f32], d: usize, k: usize, rank_of: &[usize], states: &[Vec<f32>]) {
    let n_expert = rank_of.len();
    let targets = zipf_targets(n_expert, k);
    let (logits, c) = split_logits(w, d, &states[..N_FIT.min(states.len())]);
    let c_mean = c.iter().sum::<f32>() / c.len() as f32;
    let floor = 0.5 / logits.len() as f32;
    // Steps in units of the logits' spread, shrinking so that the discrete shares settle.
    let all = logits.iter().flatten();
    let n_all = (logits.len() * n_expert) as f32;
    let mean = all.clone().sum::<f32>() / n_all;
    let spread = (all.map(|x| (x - mean).powi(2)).sum::<f32>() / n_all).sqrt();
    let mut beta = vec![0.0f32; n_expert];
    for round in 0..FIT_ROUNDS {
        let col0: Vec<f32> = beta.iter().map(|b| b / c_mean).collect();
        let got = shares(&logits, &c, &col0, k);
        let rate = spread * 0.5 * (1.0 - round as f32 / FIT_ROUNDS as f32).max(0.1);
        for e in 0..n_expert {
            let t = targets[rank_of[e]];
            let step = t.max(floor).ln() - got[e].max(floor).ln();
            beta[e] += rate * step.clamp(-2.0, 2.0);
        }
    }
    for (row, b) in w.chunks_exact_mut(d).zip(&beta) {
        row[0] = b / c_mean;
    }
}

/// Share of `states` routed to each expert by the router `w`, sorted from most to least used.
pub(super) fn usage_by_rank(w: &[f32], d: usize, k: usize, states: &[Vec<f32>]) -> Vec<f32> {
    let n_expert = w.len() / d;
    let (logits, c) = split_logits(w, d, states);
    let col0: Vec<f32> = w.chunks_exact(d).map(|r| r[0]).collect();
    let mut s = shares(&logits, &c, &col0, k);
    debug_assert_eq!(s.len(), n_expert);
    s.sort_by(|a, b| b.total_cmp(a));
    s
}

/// One line of a histogram: shares at ranks 1, 2, 4, ... and the last, with the Zipf targets.
pub fn describe(usage: &[f32], k: usize) -> String {
    let targets = zipf_targets(usage.len(), k);
    let mut ranks: Vec<usize> = (0..)
        .map(|i| 1usize << i)
        .take_while(|&r| r < usage.len())
        .collect();
    ranks.push(usage.len());
    ranks
        .iter()
        .map(|&r| format!("#{r} {:.3} (1/r: {:.3})", usage[r - 1], targets[r - 1]))
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zipf_targets_sum_to_k_and_fall_as_one_over_rank() {
        for (n, k) in [(128, 8), (32, 4), (64, 8), (16, 4)] {
            let t = zipf_targets(n, k);
            let sum: f32 = t.iter().sum();
            assert!((sum - k as f32).abs() < 1e-3, "{n}/{k}: {sum}");
            assert!(t.iter().all(|&x| x <= 1.0));
            assert!((t[n - 1] * n as f32 - t[n / 2 - 1] * (n / 2) as f32).abs() < 1e-4);
        }
    }

    /// The fitted router reaches its targets on fresh states (not those it was fitted on), at
    /// the layer it was fitted for; the uniform one favours no expert much.
    #[test]
    fn fitted_router_follows_zipf_on_fresh_states() {
        let (d, ne, k) = (256, 16, 4);
        let fit = HiddenModel::new(GgmlType::Q4_K, d, N_FIT, 1).states(3);
        let fresh = HiddenModel::new(GgmlType::Q4_K, d, N_MEASURE, 2).states(3);
        let mut rng = SplitMix64(4);
        let uniform = random_rows(ne, d, &mut rng);
        let u = usage_by_rank(&uniform, d, k, &fresh);
        assert!(u[0] < 3.0 * k as f32 / ne as f32, "uniform: {u:?}");
        let mut zipf = uniform.clone();
        let rank_of: Vec<usize> = (0..ne).rev().collect();
        fit_zipf(&mut zipf, d, k, &rank_of, &fit);
        let z = usage_by_rank(&zipf, d, k, &fresh);
        let t = zipf_targets(ne, k);
        eprintln!("fresh {z:?}\ntarget {t:?}");
        for r in 0..ne {
            assert!((z[r] - t[r]).abs() < 0.08, "rank {r}: {} vs {}", z[r], t[r]);
        }
    }
}
