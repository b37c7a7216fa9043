//! The BERT family (`bert`, `nomic-bert`): weights, the embedding stage, one layer, and the
//! classifier head of rerankers, under llama.cpp's tensor names.
//!
//! A layer is post-norm: `x = LN(x + Wo·attn(QKV(x)) + bo)`, then `x = LN(x + FFN(x))`.
//! BERT: Q/K/V separate or fused, with biases; learned positions; FFN `down(gelu(up x))`.
//! nomic-bert: fused QKV, RoPE (NeoX pairs over the whole head), FFN `down(silu(gate x) ·
//! up x)`. Token types: only type 0 is added, as llama.cpp does for every input.
//! Tensors of variants not implemented here (Q/K norms, mixtures of experts, ...) are refused
//! at load by name.

use gguf::GgufFile;
use kernels::bf16dot::{matmul_bf16, Bf16Rows, Bf16Scratch};
use kernels::{matmul, MatmulScratch, Threads};

use super::config::{EncoderArch, EncoderConfig};
use crate::weights::{Loader, Matrix};
use crate::ModelError;

/// A LayerNorm's weight and bias.
pub(crate) struct Norm {
    pub w: Vec<f32>,
    pub b: Vec<f32>,
}

impl Norm {
    fn load(l: &Loader, name: &str, d: usize) -> Result<Norm, ModelError> {
        Ok(Norm {
            w: l.vector(&format!("{name}.weight"), d)?,
            b: l.vector(&format!("{name}.bias"), d)?,
        })
    }

    pub fn apply(&self, x: &mut [f32], eps: f32) {
        kernels::layer_norm_rows_in_place(x, &self.w, &self.b, eps);
    }
}

/// A projection and its optional bias.
pub(crate) struct Linear {
    pub w: Matrix,
    pub b: Option<Vec<f32>>,
    /// The weights rounded to BF16 when the encoder multiplies in BF16 (`Dtype::Bfloat16`);
    /// then `w`'s file pages are released and only these are read.
    pub bf16: Option<Bf16Rows<'static>>,
}

/// Scratch of the two matmul paths.
#[derive(Default)]
pub(crate) struct LinScratch {
    pub mm: MatmulScratch,
    pub bf16: Bf16Scratch,
}

impl Linear {
    fn load(
        l: &Loader,
        name: &str,
        rows: usize,
        cols: usize,
        bf16: bool,
    ) -> Result<Linear, ModelError> {
        let bias = format!("{name}.bias");
        let w = l.matrix(&format!("{name}.weight"), rows, cols)?;
        let rounded = if bf16 {
            Bf16Rows::from_float(w.ty, w.data, rows, cols)
        } else {
            None
        };
        if rounded.is_some() {
            l.file.release_pages(w.data);
        }
        Ok(Linear {
            w: if rounded.is_some() { w } else { w.packed() },
            b: match l.file.tensor(&bias) {
                Some(_) => Some(l.vector(&bias, rows)?),
                None => None,
            },
            bf16: rounded,
        })
    }

    fn try_load(
        l: &Loader,
        name: &str,
        rows: usize,
        cols: usize,
        bf16: bool,
    ) -> Result<Option<Linear>, ModelError> {
        match l.file.tensor(&format!("{name}.weight")) {
            Some(_) => Linear::load(l, name, rows, cols, bf16).map(Some),
            None => Ok(None),
        }
    }

    /// `out = x · Wᵀ + b` over the `n` rows of `x`.
    pub fn apply(&self, th: &Threads, x: &[f32], n: usize, out: &mut [f32], s: &mut LinScratch) {
        match &self.bf16 {
            Some(w) => matmul_bf16(th, w, x, n, out, &mut s.bf16),
            None => matmul(th, &self.w.weights(), x, n, out, &mut s.mm),
        }
        if let Some(b) = &self.b {
            out.chunks_exact_mut(b.len())
                .for_each(|r| kernels::add(r, b));
        }
    }
}

/// Q, K and V: one fused `[3d][d]` projection or three.
pub(crate) enum Qkv {
    Fused(Linear),
    Split(Box<[Linear; 3]>),
}

pub(crate) struct Layer {
    pub qkv: Qkv,
    pub out: Linear,
    pub attn_norm: Norm,
    pub up: Linear,
    /// nomic-bert's gate (SwiGLU); BERT has none (GELU).
    pub gate: Option<Linear>,
    pub down: Linear,
    pub out_norm: Norm,
}

/// The classifier of a reranker: `cls` (dense + tanh) and/or `cls.output`.
pub(crate) struct Classifier {
    pub dense: Option<Linear>,
    pub out: Option<Linear>,
    /// Scores per input.
    pub n_out: usize,
}

pub(crate) struct BertWeights {
    pub tok_embd: Matrix,
    /// Row 0 of `token_types.weight`, added to every token.
    pub type0: Option<Vec<f32>>,
    /// BERT's learned positions `[context][d]`.
    pub pos_embd: Option<Matrix>,
    pub embd_norm: Norm,
    pub layers: Vec<Layer>,
    pub cls: Option<Classifier>,
}

/// Layer tensor suffixes this file understands.
const LAYER_TENSORS: &[&str] = &[
    "attn_qkv.weight",
    "attn_qkv.bias",
    "attn_q.weight",
    "attn_q.bias",
    "attn_k.weight",
    "attn_k.bias",
    "attn_v.weight",
    "attn_v.bias",
    "attn_output.weight",
    "attn_output.bias",
    "attn_output_norm.weight",
    "attn_output_norm.bias",
    "ffn_up.weight",
    "ffn_up.bias",
    "ffn_gate.weight",
    "ffn_gate.bias",
    "ffn_down.weight",
    "ffn_down.bias",
    "layer_output_norm.weight",
    "layer_output_norm.bias",
];

const GLOBAL_TENSORS: &[&str] = &[
    "token_embd.weight",
    "token_types.weight",
    "position_embd.weight",
    "token_embd_norm.weight",
    "token_embd_norm.bias",
    "cls.weight",
    "cls.bias",
    "cls.output.weight",
    "cls.output.bias",
];

impl BertWeights {
    pub fn load(
        file: GgufFile,
        cfg: &EncoderConfig,
        bf16: bool,
    ) -> Result<BertWeights, ModelError> {
        let file: &'static GgufFile = Box::leak(Box::new(file));
        let l = Loader { file };
        refuse_unknown_tensors(&l, cfg.n_layers)?;
        let (d, ff) = (cfg.d_model, cfg.d_ff);
        let type0 = match file.tensor("token_types.weight") {
            None => None,
            Some(t) => {
                let n_types = t.info.n_elements() as usize / d.max(1);
                let m = l.matrix("token_types.weight", n_types.max(1), d)?;
                let mut row = vec![0.0; d];
                kernels::dequantize_row(m.ty, &m.data[..m.row_bytes()], &mut row)
                    .map_err(ModelError::kernel)?;
                Some(row)
            }
        };
        let pos_embd = match cfg.arch {
            EncoderArch::Bert => Some(l.matrix("position_embd.weight", cfg.context_length, d)?),
            EncoderArch::NomicBert => None,
        };
        let mut layers = Vec::with_capacity(cfg.n_layers);
        for i in 0..cfg.n_layers {
            let n = |s: &str| format!("blk.{i}.{s}");
            let qkv = match Linear::try_load(&l, &n("attn_qkv"), 3 * d, d, bf16)? {
                Some(fused) => Qkv::Fused(fused),
                None => Qkv::Split(Box::new([
                    Linear::load(&l, &n("attn_q"), d, d, bf16)?,
                    Linear::load(&l, &n("attn_k"), d, d, bf16)?,
                    Linear::load(&l, &n("attn_v"), d, d, bf16)?,
                ])),
            };
            let gate = Linear::try_load(&l, &n("ffn_gate"), ff, d, bf16)?;
            match (cfg.arch, &gate) {
                (EncoderArch::Bert, Some(_)) => {
                    return Err(bad(
                        &l,
                        &n("ffn_gate.weight"),
                        "a gated FFN in a bert file (GEGLU variants) is not supported",
                    ))
                }
                (EncoderArch::NomicBert, None) => {
                    return Err(ModelError::MissingTensor {
                        path: l.path(),
                        name: n("ffn_gate.weight"),
                    })
                }
                _ => {}
            }
            layers.push(Layer {
                qkv,
                out: Linear::load(&l, &n("attn_output"), d, d, bf16)?,
                attn_norm: Norm::load(&l, &n("attn_output_norm"), d)?,
                up: Linear::load(&l, &n("ffn_up"), ff, d, bf16)?,
                gate,
                down: Linear::load(&l, &n("ffn_down"), d, ff, bf16)?,
                out_norm: Norm::load(&l, &n("layer_output_norm"), d)?,
            });
        }
        Ok(BertWeights {
            tok_embd: l.matrix("token_embd.weight", cfg.vocab_size, d)?,
            type0,
            pos_embd,
            embd_norm: Norm::load(&l, "token_embd_norm", d)?,
            layers,
            cls: load_classifier(&l, d)?,
        })
    }
}

fn bad(l: &Loader, name: &str, problem: &str) -> ModelError {
    ModelError::BadTensor {
        path: l.path(),
        name: name.to_string(),
        problem: problem.to_string(),
    }
}

/// Any tensor outside the names above is a variant this code would silently ignore: refused.
fn refuse_unknown_tensors(l: &Loader, n_layers: usize) -> Result<(), ModelError> {
    for t in l.file.tensors() {
        let name = t.name.as_str();
        let known = GLOBAL_TENSORS.contains(&name)
            || name
                .strip_prefix("blk.")
                .and_then(|r| r.split_once('.'))
                .is_some_and(|(i, rest)| {
                    i.parse::<usize>().is_ok_and(|i| i < n_layers) && LAYER_TENSORS.contains(&rest)
                });
        if !known {
            return Err(bad(
                l,
                name,
                "not a tensor of the supported bert / nomic-bert layouts",
            ));
        }
    }
    Ok(())
}

/// `cls` is `[d][d]` (then tanh); `cls.output` is `[n_out][d]` (or `[n_out][d]` straight on
/// the pooled state when `cls` is absent).
fn load_classifier(l: &Loader, d: usize) -> Result<Option<Classifier>, ModelError> {
    let dense = Linear::try_load(l, "cls", d, d, false)?;
    let out = match l.file.tensor("cls.output.weight") {
        None => None,
        Some(t) => {
            let n_out = t.info.n_elements() as usize / d.max(1);
            Some(Linear::load(l, "cls.output", n_out.max(1), d, false)?)
        }
    };
    let n_out = match (&dense, &out) {
        (_, Some(o)) => o.w.rows,
        (Some(_), None) => d,
        (None, None) => return Ok(None),
    };
    Ok(Some(Classifier { dense, out, n_out }))
}
