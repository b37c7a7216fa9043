//! Weights: views of the GGUF mmap, checked once at load.
//!
//! Quantized matrices stay quantized (nothing is dequantized at load); only the small F32 vectors
//! (norm weights, biases) are copied out. On CPUs with AVX2 (and AVX-512 VNNI) the Q8_0 / Q5_0 /
//! Q4_0 / Q4_1 / Q5_1 / MXFP4 / IQ4_NL / Q4_K / Q6_K matrices (with rows a multiple of 16), dense
//! or experts, are repacked at load into the kernels' x16 layout (sixteen rows interleaved per
//! block, in exactly the bytes of the blocks they replace, so decode reads no more per token
//! than the file's format) and their file pages released; everything else is used in place. The
//! `GgufFile` is leaked on purpose: a model lives as long as the process that serves it, and
//! `&'static` views keep the forward pass free of lifetimes and reference counting.

use gguf::{GgmlType, GgufFile};
use kernels::{Layout, Weights};

use crate::config::{Arch, ModelConfig};
use crate::moe::{Experts, MoeBiases, MoeWeights, SharedExpert};
use crate::ModelError;

/// A matrix of `rows` output features by `cols` input features, in its GGUF block format.
#[derive(Clone, Copy, Debug)]
pub struct Matrix {
    pub ty: GgmlType,
    pub data: &'static [u8],
    pub rows: usize,
    pub cols: usize,
    pub layout: Layout,
}

impl Matrix {
    /// Rows `r` as a matrix of their own (a part of a fused projection).
    fn row_range(&self, r: std::ops::Range<usize>) -> Matrix {
        let rb = self.row_bytes();
        Matrix {
            data: &self.data[r.start * rb..r.end * rb],
            rows: r.len(),
            ..*self
        }
    }

    pub fn weights(&self) -> Weights<'static> {
        Weights {
            ty: self.ty,
            data: self.data,
            rows: self.rows,
            cols: self.cols,
            layout: self.layout,
        }
    }

    /// This matrix repacked for the batched kernels (see `kernels::packed`), or itself if its type
    /// or shape is not packable. The packed copy is leaked like the file it came from.
    pub(crate) fn packed(self) -> Matrix {
        match kernels::pack(self.ty, self.data, self.rows, self.cols) {
            Some(p) => Matrix {
                data: p.leak(),
                layout: Layout::X16,
                ..self
            },
            None => self,
        }
    }

    /// Bytes of one row (one output feature).
    pub fn row_bytes(&self) -> usize {
        self.data.len() / self.rows.max(1)
    }
}

/// The weights of one transformer block.
pub struct LayerWeights {
    /// `None` without pre-norms (OLMo 2): attention reads the residual itself.
    pub attn_norm: Option<Vec<f32>>,
    pub wq: Matrix,
    pub wk: Matrix,
    pub wv: Matrix,
    pub wo: Matrix,
    pub bq: Option<Vec<f32>>,
    pub bk: Option<Vec<f32>>,
    pub bv: Option<Vec<f32>>,
    /// gpt-oss: the output projection's bias.
    pub bo: Option<Vec<f32>>,
    /// gpt-oss: one sink logit per query head.
    pub sinks: Option<Vec<f32>>,
    pub q_norm: Option<Vec<f32>>,
    pub k_norm: Option<Vec<f32>>,
    pub post_attn_norm: Option<Vec<f32>>,
    /// `None` without pre-norms (OLMo 2).
    pub ffn_norm: Option<Vec<f32>>,
    pub ffn: Ffn,
    pub post_ffn_norm: Option<Vec<f32>>,
}

/// A layer's feed-forward network.
pub enum Ffn {
    /// One gated MLP: gate and up `[d_ff][d_model]`, down `[d_model][d_ff]`.
    Dense {
        gate: Matrix,
        up: Matrix,
        down: Matrix,
    },
    /// A router and its experts (boxed: far larger than a dense MLP's three views).
    Moe(Box<MoeWeights>),
}

/// Per-layer tensors a file may hold that its architecture's layout does not apply (biases of
/// the output projection and the MLP, which some Granite and OLMo variants carry; gpt-oss's
/// sinks and MoE biases elsewhere): loading refuses them unless `applies` says the layout
/// reads them.
const UNSUPPORTED_LAYER_TENSORS: [&str; 9] = [
    "attn_output.bias",
    "attn_sinks.weight",
    "ffn_gate.bias",
    "ffn_up.bias",
    "ffn_down.bias",
    "ffn_gate_inp.bias",
    "ffn_gate_exps.bias",
    "ffn_up_exps.bias",
    "ffn_down_exps.bias",
];

/// Whether `cfg`'s layout reads the layer tensor `name` (one of `UNSUPPORTED_LAYER_TENSORS`).
fn applies(cfg: &ModelConfig, name: &str) -> bool {
    match name {
        "attn_output.bias" => cfg.attn_out_bias,
        "attn_sinks.weight" => cfg.attn_sinks,
        "ffn_gate_inp.bias" | "ffn_gate_exps.bias" | "ffn_up_exps.bias" | "ffn_down_exps.bias" => {
            cfg.moe.is_some_and(|m| m.biases)
        }
        _ => false,
    }
}

/// All weights of a model.
pub struct ModelWeights {
    pub file: &'static GgufFile,
    /// `[vocab][d_model]`: token embeddings, one row per token.
    pub embed: Matrix,
    pub output_norm: Vec<f32>,
    /// The output projection; the embeddings when tied.
    pub output: Matrix,
    pub layers: Vec<LayerWeights>,
}

impl ModelWeights {
    pub fn load(file: GgufFile, cfg: &ModelConfig) -> Result<ModelWeights, ModelError> {
        let mut w = Self::load_unpacked(file, cfg)?;
        w.pack_for_cpu();
        Ok(w)
    }

    /// The weights as the file holds them, nothing repacked (LoRA merges come first, then
    /// `pack_for_cpu`).
    pub fn load_unpacked(file: GgufFile, cfg: &ModelConfig) -> Result<ModelWeights, ModelError> {
        let file: &'static GgufFile = Box::leak(Box::new(file));
        let l = Loader { file };
        let embed = l.matrix("token_embd.weight", cfg.vocab_size, cfg.d_model)?;
        let output = match file.tensor("output.weight") {
            Some(_) => l.matrix("output.weight", cfg.vocab_size, cfg.d_model)?,
            // llama.cpp ties no gpt-oss or OLMoE output to the embeddings.
            None if matches!(cfg.arch, Arch::GptOss | Arch::Olmoe) => {
                return Err(ModelError::MissingTensor {
                    path: l.path(),
                    name: "output.weight".into(),
                })
            }
            None => embed,
        };
        let d = cfg.d_model;
        let layers = (0..cfg.n_layers)
            .map(|i| l.layer(cfg, i))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(ModelWeights {
            file,
            embed,
            output_norm: l.vector("output_norm.weight", d)?,
            output,
            layers,
        })
    }

    /// Repacks the matrices for the x16 kernels where the CPU has them (AVX2 or better).
    pub fn pack_for_cpu(&mut self) {
        if kernels::isa() >= kernels::Isa::Avx2 {
            self.pack();
        }
    }

    /// Repacks every packable matrix for the x16 kernels (AVX2 and AVX-512 VNNI) and drops the file
    /// pages they came from out of resident memory, so the model's footprint stays about its
    /// file size. The embeddings keep their row-major bytes for row lookups (pages fault back in
    /// per looked-up token when the output projection is tied to them).
    fn pack(&mut self) {
        let file = self.file;
        repack(file, &mut self.output);
        for l in &mut self.layers {
            for m in [&mut l.wq, &mut l.wk, &mut l.wv, &mut l.wo] {
                repack(file, m);
            }
            match &mut l.ffn {
                Ffn::Dense { gate, up, down } => {
                    for m in [gate, up, down] {
                        repack(file, m);
                    }
                }
                Ffn::Moe(m) => {
                    repack(file, &mut m.router);
                    for e in [&mut m.gate, &mut m.up, &mut m.down] {
                        repack(file, e);
                    }
                    if let Some(sh) = &mut m.shared {
                        for m in [&mut sh.gate, &mut sh.up, &mut sh.down] {
                            repack(file, m);
                        }
                    }
                }
            }
        }
    }
}

/// A weight the x16 kernels can take as a repacked copy: a matrix, or a mixture's experts.
trait Repack: Copy {
    /// The repacked copy, or the weight itself where its type or shape is not packable.
    fn repacked(self) -> Self;
    /// The weight's bytes and their layout.
    fn bytes(&self) -> (&'static [u8], Layout);
}

impl Repack for Matrix {
    fn repacked(self) -> Self {
        self.packed()
    }
    fn bytes(&self) -> (&'static [u8], Layout) {
        (self.data, self.layout)
    }
}

impl Repack for Experts {
    fn repacked(self) -> Self {
        self.packed()
    }
    fn bytes(&self) -> (&'static [u8], Layout) {
        (self.data, self.layout)
    }
}

/// Replaces `w` by its repacked copy and, when it was repacked, drops the file pages it came
/// from out of resident memory.
fn repack<T: Repack>(file: &GgufFile, w: &mut T) {
    let packed = w.repacked();
    if packed.bytes().1 == Layout::X16 {
        file.release_pages(w.bytes().0);
    }
    *w = packed;
}

pub(crate) struct Loader {
    pub(crate) file: &'static GgufFile,
}

impl Loader {
    /// Layer `i`'s weights, as `cfg` says the file holds them; refuses tensors this forward pass
    /// would not apply.
    fn layer(&self, cfg: &ModelConfig, i: usize) -> Result<LayerWeights, ModelError> {
        let (l, file) = (self, self.file);
        let (d, q, kv, hd) = (cfg.d_model, cfg.q_dim(), cfg.kv_dim(), cfg.head_dim);
        let n = |s: &str| format!("blk.{i}.{s}");
        let opt_vec = |s: &str, len: usize| -> Result<Option<Vec<f32>>, ModelError> {
            if file.tensor(&n(s)).is_some() {
                l.vector(&n(s), len).map(Some)
            } else {
                Ok(None)
            }
        };
        let need_vec = |s: &str, len: usize| l.vector(&n(s), len);
        let when = |on: bool, s: &str, len: usize| match on {
            true => need_vec(s, len).map(Some),
            false => Ok(None),
        };
        // Per head, or (OLMo 2) over the whole projection.
        let (qn, kn) = match cfg.qk_norm_whole {
            true => (q, kv),
            false => (hd, hd),
        };
        // Q, K and V apart, or fused in one projection (Phi 3) whose rows are them in turn.
        let [wq, wk, wv] = match file.tensor(&n("attn_qkv.weight")) {
            Some(_) => {
                let f = l.matrix(&n("attn_qkv.weight"), q + 2 * kv, d)?;
                [0..q, q..q + kv, q + kv..q + 2 * kv].map(|r| f.row_range(r))
            }
            None => [
                l.matrix(&n("attn_q.weight"), q, d)?,
                l.matrix(&n("attn_k.weight"), kv, d)?,
                l.matrix(&n("attn_v.weight"), kv, d)?,
            ],
        };
        let layer = LayerWeights {
            attn_norm: when(cfg.pre_norms, "attn_norm.weight", d)?,
            wq,
            wk,
            wv,
            wo: l.matrix(&n("attn_output.weight"), d, q)?,
            bq: opt_vec("attn_q.bias", q)?,
            bk: opt_vec("attn_k.bias", kv)?,
            bv: opt_vec("attn_v.bias", kv)?,
            bo: when(cfg.attn_out_bias, "attn_output.bias", d)?,
            sinks: when(cfg.attn_sinks, "attn_sinks.weight", cfg.n_heads)?,
            q_norm: when(cfg.qk_norm, "attn_q_norm.weight", qn)?,
            k_norm: when(cfg.qk_norm, "attn_k_norm.weight", kn)?,
            post_attn_norm: when(cfg.post_norms, "post_attention_norm.weight", d)?,
            ffn_norm: when(cfg.pre_norms, cfg.ffn_norm_tensor, d)?,
            ffn: self.ffn(cfg, &n)?,
            post_ffn_norm: when(cfg.post_norms, "post_ffw_norm.weight", d)?,
        };
        // Tensors some architectures may carry that this forward pass would not apply.
        for extra in UNSUPPORTED_LAYER_TENSORS {
            if !applies(cfg, extra) && file.tensor(&n(extra)).is_some() {
                return Err(ModelError::BadTensor {
                    path: file.path().display().to_string(),
                    name: n(extra),
                    problem: "not supported (the model would run without it)".into(),
                });
            }
        }
        if cfg.qkv_bias && (layer.bq.is_none() || layer.bk.is_none() || layer.bv.is_none()) {
            return Err(ModelError::MissingTensor {
                path: file.path().display().to_string(),
                name: n("attn_{q,k,v}.bias"),
            });
        }
        Ok(layer)
    }

    /// A layer's feed-forward weights (`n` names its tensors): dense with gate and up apart or
    /// fused (Phi 3), or a mixture of experts with its router and shared expert, if any.
    fn ffn(&self, cfg: &ModelConfig, n: &dyn Fn(&str) -> String) -> Result<Ffn, ModelError> {
        let (l, d, ff) = (self, cfg.d_model, cfg.d_ff);
        Ok(match cfg.moe {
            None if cfg.fused_gate_up => {
                let f = l.matrix(&n("ffn_up.weight"), 2 * ff, d)?;
                Ffn::Dense {
                    gate: f.row_range(0..ff),
                    up: f.row_range(ff..2 * ff),
                    down: l.matrix(&n("ffn_down.weight"), d, ff)?,
                }
            }
            None => Ffn::Dense {
                gate: l.matrix(&n("ffn_gate.weight"), ff, d)?,
                up: l.matrix(&n("ffn_up.weight"), ff, d)?,
                down: l.matrix(&n("ffn_down.weight"), d, ff)?,
            },
            Some(spec) => {
                let (e, eff) = (spec.n_expert, spec.d_ff_exp);
                Ffn::Moe(Box::new(MoeWeights {
                    spec,
                    router: l.matrix(&n("ffn_gate_inp.weight"), e, d)?,
                    biases: match spec.biases {
                        false => None,
                        true => Some(MoeBiases {
                            router: l.vector(&n("ffn_gate_inp.bias"), e)?,
                            gate: l.vector(&n("ffn_gate_exps.bias"), e * eff)?,
                            up: l.vector(&n("ffn_up_exps.bias"), e * eff)?,
                            down: l.vector(&n("ffn_down_exps.bias"), e * d)?,
                        }),
                    },
                    gate: l.experts(&n("ffn_gate_exps.weight"), e, eff, d)?,
                    up: l.experts(&n("ffn_up_exps.weight"), e, eff, d)?,
                    down: l.experts(&n("ffn_down_exps.weight"), e, d, eff)?,
                    shared: match spec.shared_ff {
                        None => None,
                        Some(sff) => Some(SharedExpert {
                            gate_inp: match spec.shared_gate {
                                true => Some(l.vector(&n("ffn_gate_inp_shexp.weight"), d)?),
                                false => None,
                            },
                            gate: l.matrix(&n("ffn_gate_shexp.weight"), sff, d)?,
                            up: l.matrix(&n("ffn_up_shexp.weight"), sff, d)?,
                            down: l.matrix(&n("ffn_down_shexp.weight"), d, sff)?,
                        }),
                    },
                }))
            }
        })
    }

    pub(crate) fn path(&self) -> String {
        self.file.path().display().to_string()
    }

    /// A `[rows][cols]` matrix; GGUF stores it as dims `[cols, rows]`.
    pub(crate) fn matrix(
        &self,
        name: &str,
        rows: usize,
        cols: usize,
    ) -> Result<Matrix, ModelError> {
        let t = self.file.require_tensor(name)?;
        let dims = &t.info.dims;
        let want = [cols as u64, rows as u64];
        let shape_ok = dims.len() >= 2 && dims[..2] == want && dims[2..].iter().all(|&x| x == 1);
        if !shape_ok {
            return Err(ModelError::BadTensor {
                path: self.path(),
                name: name.to_string(),
                problem: format!("shape {dims:?}, expected {want:?}"),
            });
        }
        let m = Matrix {
            ty: t.info.ggml_type,
            data: t.data,
            rows,
            cols,
            layout: Layout::RowMajor,
        };
        Weights::new(m.ty, m.data, rows, cols).map_err(|e| ModelError::BadTensor {
            path: self.path(),
            name: name.to_string(),
            problem: e.to_string(),
        })?;
        Ok(m)
    }

    /// `n_expert` matrices of `[rows][cols]` stacked in one tensor (GGUF dims
    /// `[cols, rows, n_expert]`), each expert's rows contiguous; viewed in place.
    fn experts(
        &self,
        name: &str,
        n_expert: usize,
        rows: usize,
        cols: usize,
    ) -> Result<Experts, ModelError> {
        let t = self.file.require_tensor(name)?;
        let dims = &t.info.dims;
        let want = [cols as u64, rows as u64, n_expert as u64];
        let bad = |problem: String| ModelError::BadTensor {
            path: self.path(),
            name: name.to_string(),
            problem,
        };
        if dims.len() < 3 || dims[..3] != want || dims[3..].iter().any(|&x| x != 1) {
            return Err(bad(format!(
                "shape {dims:?}, expected {want:?} ([input, output, experts])"
            )));
        }
        if !t.data.len().is_multiple_of(n_expert) {
            return Err(bad(format!(
                "{} bytes do not split into {n_expert} experts",
                t.data.len()
            )));
        }
        let per = t.data.len() / n_expert;
        Weights::new(t.info.ggml_type, &t.data[..per], rows, cols)
            .map_err(|e| bad(e.to_string()))?;
        Ok(Experts {
            ty: t.info.ggml_type,
            data: t.data,
            n_expert,
            rows,
            cols,
            layout: Layout::RowMajor,
        })
    }

    /// An F32 (or other format, dequantized) vector of `len` values.
    pub(crate) fn vector(&self, name: &str, len: usize) -> Result<Vec<f32>, ModelError> {
        let t = self.file.require_tensor(name)?;
        let n: u64 = t.info.dims.iter().product();
        if n != len as u64 {
            return Err(ModelError::BadTensor {
                path: self.path(),
                name: name.to_string(),
                problem: format!("{n} values, expected {len}"),
            });
        }
        let mut out = vec![0.0; len];
        kernels::dequantize_row(t.info.ggml_type, t.data, &mut out).map_err(|e| {
            ModelError::BadTensor {
                path: self.path(),
                name: name.to_string(),
                problem: e.to_string(),
            }
        })?;
        Ok(out)
    }
}
