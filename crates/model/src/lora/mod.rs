//! LoRA adapters: low-rank updates of a model's weights, chosen per sequence.
//!
//! An adapter is a GGUF file in llama.cpp's format (`general.type = adapter`,
//! `adapter.type = lora`, `adapter.lora.alpha`) holding, for each weight `W` (`[d_out][d_in]`)
//! it changes, a pair `W.lora_a` (`[rank][d_in]`, GGUF dims `[d_in, rank]`) and `W.lora_b`
//! (`[d_out][rank]`, GGUF dims `[rank, d_out]`). With the adapter at user scale `s`, the weight
//! computes `W·x + s·(alpha/rank)·B·(A·x)` (llama.cpp's scale: `s` alone when alpha is 0).
//!
//! - `load`: reads and checks an adapter against the base model (architecture, each weight
//!   exists and is one this forward pass can adapt, shapes, rank), A and B dequantized to f32.
//! - `apply`: the forward pass's side. The base matmul runs once over every row of the batch;
//!   then for each adapter the batch names (in ascending id order, so a row's result does not
//!   depend on the others'), its rows are gathered and `(x·Aᵀ)·Bᵀ` computed with the kernels'
//!   float matmul, one parallel region per stage for all adapters and weights sharing an input,
//!   and added, times each row's scale, to those rows alone.
//! - `merge`: an adapter added into the weights at load (`--lora-merge`).
//!
//! Which weights: a layer's Q, K, V (apart or fused as `attn_qkv`), attention output, gate, up
//! (apart or fused into `ffn_up`), down, and the untied output head. Mixture-of-experts weights,
//! the token embeddings and the router are refused by name; `*_norm.weight` tensors in the file
//! are ignored, as llama.cpp does.

mod apply;
mod load;
mod merge;

use std::collections::BTreeMap;
use std::ops::Range;
use std::path::Path;

use kernels::{plain_bytes, Layout, Weights};
pub use runner::{LoraId, LoraUse};

use crate::config::ModelConfig;
use crate::weights::ModelWeights;
use crate::ModelError;

pub(crate) use apply::{add_deltas, LoraScratch, Site};
pub use load::load_adapter;
pub use merge::merge_adapter;

/// The weights of a layer an adapter may change, in the order of `LayerLora::pairs`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Target {
    Q = 0,
    K = 1,
    V = 2,
    O = 3,
    Gate = 4,
    Up = 5,
    Down = 6,
}

/// How many `Target`s a layer has.
pub const N_TARGETS: usize = 7;

impl Target {
    pub const ALL: [Target; N_TARGETS] = [
        Target::Q,
        Target::K,
        Target::V,
        Target::O,
        Target::Gate,
        Target::Up,
        Target::Down,
    ];

    /// The name of the weight in a GGUF file (`blk.N.` before it), apart from fused ones.
    pub fn gguf_name(self) -> &'static str {
        match self {
            Target::Q => "attn_q.weight",
            Target::K => "attn_k.weight",
            Target::V => "attn_v.weight",
            Target::O => "attn_output.weight",
            Target::Gate => "ffn_gate.weight",
            Target::Up => "ffn_up.weight",
            Target::Down => "ffn_down.weight",
        }
    }
}

/// One weight's low-rank update: `A` (`[rank][d_in]`) and `B` (`[d_out][rank]`), f32, and `B`
/// transposed (`[rank][d_out]`), which `t·Bᵀ` reads: a rank of 8 to 64 is too short a dot
/// product to pay for a horizontal sum per output, so that stage adds `rank` scaled rows of `Bᵀ`
/// instead.
#[derive(Clone, Debug)]
pub struct LoraPair {
    pub rank: usize,
    pub d_in: usize,
    pub d_out: usize,
    pub a: Vec<f32>,
    pub b: Vec<f32>,
    bt: Vec<f32>,
}

impl LoraPair {
    /// The pair of `a` (`[rank][d_in]`) and `b` (`[d_out][rank]`).
    pub fn new(rank: usize, d_in: usize, d_out: usize, a: Vec<f32>, b: Vec<f32>) -> LoraPair {
        debug_assert_eq!((a.len(), b.len()), (rank * d_in, d_out * rank));
        let mut bt = vec![0.0; rank * d_out];
        for (o, row) in b.chunks_exact(rank.max(1)).enumerate() {
            for (k, &v) in row.iter().enumerate() {
                bt[k * d_out + o] = v;
            }
        }
        LoraPair {
            rank,
            d_in,
            d_out,
            a,
            b,
            bt,
        }
    }

    /// `out[i][c] = Σ_k t[i][k] · Bᵀ[k][cols.start + c]` for the `m` rows of `t` (`[m][rank]`),
    /// `out` being `[m][cols.len()]`: per output, the products added in order of `k`, whatever
    /// the rows beside it.
    pub(crate) fn t_times_bt(&self, t: &[f32], m: usize, cols: Range<usize>, out: &mut [f32]) {
        let w = cols.len();
        for (i, dst) in out.chunks_exact_mut(w).take(m).enumerate() {
            let ti = &t[i * self.rank..(i + 1) * self.rank];
            for (k, &tk) in ti.iter().enumerate() {
                let src = &self.bt[k * self.d_out + cols.start..k * self.d_out + cols.end];
                if k == 0 {
                    dst.iter_mut().zip(src).for_each(|(d, &b)| *d = tk * b);
                } else {
                    dst.iter_mut().zip(src).for_each(|(d, &b)| *d += tk * b);
                }
            }
        }
    }

    /// `A` as a matrix for the kernels' matmul (`x·Aᵀ`: `[m][rank]` from `[m][d_in]`).
    pub(crate) fn a_weights(&self) -> Weights<'_> {
        float_weights(&self.a, self.rank, self.d_in)
    }

    /// The factor of `B·A·x` at user scale `user`: llama.cpp's `user * alpha / rank`, or `user`
    /// when alpha is 0.
    pub fn scale(&self, alpha: f32, user: f32) -> f32 {
        if alpha == 0.0 {
            user
        } else {
            user * alpha / self.rank as f32
        }
    }
}

fn float_weights(v: &[f32], rows: usize, cols: usize) -> Weights<'_> {
    Weights {
        ty: gguf::GgmlType::F32,
        data: plain_bytes(v),
        rows,
        cols,
        layout: Layout::RowMajor,
    }
}

/// One layer's updates, by `Target`.
#[derive(Clone, Debug, Default)]
pub struct LayerLora {
    pub pairs: [Option<LoraPair>; N_TARGETS],
}

/// A loaded adapter, checked against the model it was loaded for.
#[derive(Clone, Debug)]
pub struct LoraAdapter {
    /// The file it came from, for messages.
    pub path: String,
    pub alpha: f32,
    pub layers: Vec<LayerLora>,
    /// The output head's update (only on a model with an untied output).
    pub output: Option<LoraPair>,
}

impl LoraAdapter {
    /// Every pair with where it applies: `(Some(layer), target)`, or `(None, _)` for the head.
    pub fn pairs(&self) -> impl Iterator<Item = (Option<usize>, Target, &LoraPair)> {
        let layers = self.layers.iter().enumerate().flat_map(|(li, l)| {
            Target::ALL
                .iter()
                .filter_map(move |&t| l.pairs[t as usize].as_ref().map(|p| (Some(li), t, p)))
        });
        layers.chain(self.output.iter().map(|p| (None, Target::O, p)))
    }

    /// The largest rank of its pairs.
    pub fn max_rank(&self) -> usize {
        self.pairs().map(|(_, _, p)| p.rank).max().unwrap_or(0)
    }
}

/// The adapters a transformer has loaded, by id (ids are never reused).
#[derive(Default)]
pub struct Loras {
    by_id: BTreeMap<LoraId, LoraAdapter>,
    next: u32,
}

impl Loras {
    /// Loads and checks the adapter at `path` for this model; returns its new id.
    pub fn load(
        &mut self,
        path: &Path,
        cfg: &ModelConfig,
        w: &ModelWeights,
    ) -> Result<LoraId, ModelError> {
        let adapter = load_adapter(path, cfg, w)?;
        Ok(self.insert(adapter))
    }

    /// Adds an adapter already loaded for this model; returns its new id.
    pub fn insert(&mut self, adapter: LoraAdapter) -> LoraId {
        let id = LoraId(self.next);
        self.next += 1;
        self.by_id.insert(id, adapter);
        id
    }

    /// Drops adapter `id`.
    pub fn unload(&mut self, id: LoraId) -> Result<(), ModelError> {
        match self.by_id.remove(&id) {
            Some(_) => Ok(()),
            None => Err(ModelError::invalid(format!(
                "no LoRA adapter with id {} is loaded",
                id.0
            ))),
        }
    }

    pub fn get(&self, id: LoraId) -> Option<&LoraAdapter> {
        self.by_id.get(&id)
    }

    /// Ids of the loaded adapters, ascending.
    pub fn ids(&self) -> impl Iterator<Item = LoraId> + '_ {
        self.by_id.keys().copied()
    }

    pub fn len(&self) -> usize {
        self.by_id.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_id.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn t_times_bt_is_t_times_b_transposed_on_any_columns() {
        let (rank, d_out, m) = (3, 7, 2);
        let b: Vec<f32> = (0..d_out * rank).map(|i| i as f32 * 0.25 - 2.0).collect();
        let p = LoraPair::new(rank, 1, d_out, vec![1.0; rank], b.clone());
        let t = [1.0, -2.0, 0.5, 3.0, 0.0, -1.0];
        let cols = 2..6;
        let mut out = vec![f32::NAN; m * cols.len()];
        p.t_times_bt(&t, m, cols.clone(), &mut out);
        for i in 0..m {
            for (c, o) in cols.clone().enumerate() {
                let want: f32 = (0..rank).map(|k| t[i * rank + k] * b[o * rank + k]).sum();
                assert_eq!(out[i * cols.len() + c], want, "row {i} output {o}");
            }
        }
    }
}
