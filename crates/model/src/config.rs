//! Model hyper-parameters read from GGUF metadata.
//!
//! One `ModelConfig` describes every supported architecture: the differences between Gemma 3,
//! Llama, Qwen 2 and Qwen 3 are a handful of switches (norm placement, QK-norm, QKV bias, the
//! activation, the RoPE layout, per-layer sliding windows) rather than separate code paths.
//! Everything the forward pass needs to know per layer is resolved here once, at load, into
//! `LayerSpec`s, so the hot loop never looks at metadata.

use gguf::Metadata;

use crate::ModelError;

/// The architectures Tessera can run, chosen by `general.architecture`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Arch {
    /// Gemma 2: Gemma's norms and GeGLU, every other layer a sliding window, attention and
    /// final logits soft-capped.
    Gemma2,
    Gemma3,
    Llama,
    Qwen2,
    Qwen3,
    /// Qwen 2 attention with a mixture-of-experts FFN plus a gated shared expert in every layer.
    Qwen2Moe,
    /// Qwen 3 attention with a mixture-of-experts FFN in every layer.
    Qwen3Moe,
    /// OLMo 2: norms after attention and the MLP only (none before), and QK-norm over the
    /// whole of Q and of K rather than per head.
    Olmo2,
    /// Granite (3.x): Llama with four multipliers (embeddings, attention, residual, logits).
    Granite,
    /// Granite MoE: Granite's multipliers over a mixture-of-experts FFN (top-k renormalised).
    GraniteMoe,
    /// Phi 3 / 3.5: fused QKV and gate-up projections, LongRoPE frequency factors.
    Phi3,
}

impl Arch {
    /// The `general.architecture` strings we accept, for error messages.
    pub const SUPPORTED: &'static [&'static str] = &[
        "gemma2",
        "gemma3",
        "granite",
        "granitemoe",
        "llama",
        "olmo2",
        "phi3",
        "qwen2",
        "qwen2moe",
        "qwen3",
        "qwen3moe",
    ];

    pub fn from_name(name: &str) -> Option<Arch> {
        match name {
            "gemma2" => Some(Arch::Gemma2),
            "gemma3" => Some(Arch::Gemma3),
            "llama" => Some(Arch::Llama),
            "olmo2" => Some(Arch::Olmo2),
            "granite" => Some(Arch::Granite),
            "granitemoe" => Some(Arch::GraniteMoe),
            "phi3" => Some(Arch::Phi3),
            "qwen2" => Some(Arch::Qwen2),
            "qwen3" => Some(Arch::Qwen3),
            "qwen2moe" => Some(Arch::Qwen2Moe),
            "qwen3moe" => Some(Arch::Qwen3Moe),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Arch::Gemma2 => "gemma2",
            Arch::Gemma3 => "gemma3",
            Arch::Llama => "llama",
            Arch::Olmo2 => "olmo2",
            Arch::Granite => "granite",
            Arch::GraniteMoe => "granitemoe",
            Arch::Phi3 => "phi3",
            Arch::Qwen2 => "qwen2",
            Arch::Qwen3 => "qwen3",
            Arch::Qwen2Moe => "qwen2moe",
            Arch::Qwen3Moe => "qwen3moe",
        }
    }
}

/// The gated MLP's activation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Activation {
    /// SiLU (SwiGLU): Llama, Qwen.
    Silu,
    /// GELU, tanh approximation (GeGLU): Gemma.
    GeluTanh,
}

/// How RoPE pairs up the dimensions of a head.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RopeStyle {
    /// Adjacent pairs (x[2i], x[2i+1]): GGUF Llama (its Q/K weights are permuted for this).
    Interleaved,
    /// Halves (x[i], x[i + d/2]): "NeoX" style, used by Gemma and Qwen.
    Neox,
}

/// Per-layer attention settings, resolved at load.
#[derive(Clone, Debug, PartialEq)]
pub struct LayerSpec {
    /// `Some(w)`: a query at position p sees keys at positions p-w+1 ..= p only.
    pub window: Option<usize>,
    /// Inverse frequencies of RoPE for this layer, one per rotated pair.
    pub rope_inv_freq: Vec<f32>,
}

/// The mixture-of-experts FFN of every layer: a router picks `n_used` of `n_expert` SwiGLU
/// experts per token (softmax over all experts' logits, then the top `n_used`), whose outputs
/// are summed with the picked probabilities as weights. Qwen 2 MoE adds a shared SwiGLU expert
/// that every token runs, scaled by a sigmoid gate of its own.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MoeSpec {
    pub n_expert: usize,
    pub n_used: usize,
    /// Hidden width of one expert.
    pub d_ff_exp: usize,
    /// Rescale the picked probabilities to sum to one (Qwen 3 MoE's `norm_topk_prob`).
    pub norm_topk: bool,
    /// Hidden width of the shared expert, if the layers have one.
    pub shared_ff: Option<usize>,
}

impl MoeSpec {
    fn from_metadata(
        md: &Metadata,
        key: &dyn Fn(&str) -> String,
        norm_topk: bool,
        shared: bool,
        width: Option<usize>,
    ) -> Result<MoeSpec, ModelError> {
        let n_expert = md.require_u32(&key("expert_count"))? as usize;
        let n_used = md.require_u32(&key("expert_used_count"))? as usize;
        let d_ff_exp = match width {
            Some(w) => w,
            None => md.require_u32(&key("expert_feed_forward_length"))? as usize,
        };
        if n_expert == 0 || n_used == 0 || d_ff_exp == 0 {
            return Err(ModelError::invalid(format!(
                "{}, {} and {} must be positive",
                key("expert_count"),
                key("expert_used_count"),
                key("expert_feed_forward_length")
            )));
        }
        if n_used > n_expert {
            return Err(ModelError::invalid(format!(
                "{} = {n_used} exceeds {} = {n_expert}",
                key("expert_used_count"),
                key("expert_count")
            )));
        }
        let shared_ff = if shared {
            let k = key("expert_shared_feed_forward_length");
            match md.require_u32(&k)? {
                0 => return Err(ModelError::invalid(format!("{k} must be positive"))),
                v => Some(v as usize),
            }
        } else {
            None
        };
        Ok(MoeSpec {
            n_expert,
            n_used,
            d_ff_exp,
            norm_topk,
            shared_ff,
        })
    }
}

/// Everything the forward pass needs to know about a model.
#[derive(Clone, Debug)]
pub struct ModelConfig {
    pub arch: Arch,
    pub n_layers: usize,
    /// Width of the residual stream.
    pub d_model: usize,
    pub n_heads: usize,
    pub n_kv_heads: usize,
    pub head_dim: usize,
    /// Hidden width of the dense MLP (0 when every layer is a mixture of experts).
    pub d_ff: usize,
    /// `Some` when every layer's FFN is a mixture of experts.
    pub moe: Option<MoeSpec>,
    pub vocab_size: usize,
    /// The context length the model was trained for.
    pub context_length: usize,
    pub rms_eps: f32,
    pub activation: Activation,
    pub rope_style: RopeStyle,
    /// Gemma: norms after attention and after the MLP as well as before them.
    pub post_norms: bool,
    /// Gemma, Qwen 3: RMS-norm over each head of Q and K before RoPE.
    pub qk_norm: bool,
    /// OLMo 2: the QK-norm spans all of Q and all of K (its weights are that wide).
    pub qk_norm_whole: bool,
    /// RMS-norms before attention and before the MLP (all but OLMo 2).
    pub pre_norms: bool,
    /// Phi 3: one `ffn_up` of twice the width, the gate's rows then the up's.
    pub fused_gate_up: bool,
    /// Phi 3 LongRoPE: the context the short frequency factors are for.
    pub rope_original_context: Option<usize>,
    /// Qwen 2: biases on the Q, K and V projections.
    pub qkv_bias: bool,
    /// Gemma: embeddings are multiplied by sqrt(d_model).
    pub embed_scale: f32,
    /// Scale applied to Q before the dot with K.
    pub attn_scale: f32,
    /// Gemma 2 style tanh soft-capping of the final logits (0 = off).
    pub final_logit_softcap: f32,
    /// Gemma 2's tanh soft-capping of the scaled attention scores, `c * tanh(s / c)` (0 = off).
    pub attn_softcap: f32,
    /// Granite: what attention and the MLP add to the residual is multiplied by this first.
    pub residual_scale: f32,
    /// Granite: logits are divided by this.
    pub logit_scale: f32,
    /// RoPE base of the global layers, and the number of rotated dimensions per head.
    pub rope_base: f32,
    pub rope_dims: usize,
    pub layers: Vec<LayerSpec>,
}

/// Heads, KV heads and the head width from a file's attention keys, checked: no dimension is
/// zero, query heads are whole groups of KV heads, and the head width is even (for RoPE).
fn read_heads(
    md: &Metadata,
    key: &dyn Fn(&str) -> String,
    n_layers: usize,
    d_model: usize,
) -> Result<(usize, usize, usize), ModelError> {
    let n_heads = md.require_u32(&key("attention.head_count"))? as usize;
    let n_kv_heads = md
        .get_u32(&key("attention.head_count_kv"))?
        .map(|v| v as usize)
        .unwrap_or(n_heads);
    let head_dim = match md.get_u32(&key("attention.key_length"))? {
        Some(v) => v as usize,
        None if n_heads > 0 => d_model / n_heads,
        None => 0,
    };
    if let Some(v) = md.get_u32(&key("attention.value_length"))? {
        if v as usize != head_dim {
            return Err(ModelError::invalid(
                "attention.value_length differs from key_length",
            ));
        }
    }
    if n_layers == 0 || d_model == 0 || n_heads == 0 || n_kv_heads == 0 || head_dim == 0 {
        return Err(ModelError::invalid("a model dimension is zero"));
    }
    if !n_heads.is_multiple_of(n_kv_heads) {
        return Err(ModelError::invalid(
            "head_count is not a multiple of head_count_kv",
        ));
    }
    if !head_dim.is_multiple_of(2) {
        return Err(ModelError::invalid("head dimension must be even for RoPE"));
    }
    Ok((n_heads, n_kv_heads, head_dim))
}

impl ModelConfig {
    /// Reads the configuration of a supported architecture from GGUF metadata.
    pub fn from_metadata(md: &Metadata) -> Result<ModelConfig, ModelError> {
        let arch_name = md.require_str("general.architecture")?;
        let arch = Arch::from_name(arch_name).ok_or_else(|| ModelError::UnsupportedArch {
            name: arch_name.to_string(),
        })?;
        let key = |k: &str| format!("{arch_name}.{k}");
        let n_layers = md.require_u32(&key("block_count"))? as usize;
        let d_model = md.require_u32(&key("embedding_length"))? as usize;
        let d_ff = match arch {
            // MoE files may carry the dense width of their source model; no layer uses it.
            Arch::Qwen2Moe | Arch::Qwen3Moe => md
                .get_u32(&key("feed_forward_length"))?
                .map_or(0, |v| v as usize),
            _ => md.require_u32(&key("feed_forward_length"))? as usize,
        };
        let (n_heads, n_kv_heads, head_dim) = read_heads(md, &key, n_layers, d_model)?;
        let context_length = md
            .get_u32(&key("context_length"))?
            .map(|v| v as usize)
            .unwrap_or(4096);
        let rms_eps = md
            .get_f32(&key("attention.layer_norm_rms_epsilon"))?
            .unwrap_or(1e-6);
        let vocab_size = match md.get_array("tokenizer.ggml.tokens")? {
            Some(a) => a.len(),
            None => md.require_u32(&key("vocab_size"))? as usize,
        };
        let rope_base = md.get_f32(&key("rope.freq_base"))?.unwrap_or(10_000.0);
        let rope_dims = md
            .get_u32(&key("rope.dimension_count"))?
            .map(|v| v as usize)
            .unwrap_or(head_dim);
        if rope_dims > head_dim || !rope_dims.is_multiple_of(2) {
            return Err(ModelError::invalid(
                "rope.dimension_count must be even and <= head dim",
            ));
        }
        let scaling = RopeScaling::from_metadata(md, arch_name)?;

        let global_freqs = scaling.apply(&inv_freqs(rope_dims, rope_base));
        let mut cfg = ModelConfig {
            arch,
            n_layers,
            d_model,
            n_heads,
            n_kv_heads,
            head_dim,
            d_ff,
            moe: None,
            vocab_size,
            context_length,
            rms_eps,
            activation: Activation::Silu,
            rope_style: RopeStyle::Neox,
            post_norms: false,
            qk_norm: false,
            qk_norm_whole: false,
            pre_norms: true,
            fused_gate_up: false,
            rope_original_context: None,
            qkv_bias: false,
            embed_scale: 1.0,
            attn_scale: 1.0 / (head_dim as f32).sqrt(),
            final_logit_softcap: md.get_f32(&key("final_logit_softcapping"))?.unwrap_or(0.0),
            attn_softcap: 0.0,
            residual_scale: 1.0,
            logit_scale: 1.0,
            rope_base,
            rope_dims,
            layers: vec![
                LayerSpec {
                    window: None,
                    rope_inv_freq: global_freqs.clone(),
                };
                n_layers
            ],
        };
        cfg.apply_arch(md, &key)?;
        Ok(cfg)
    }

    /// What each architecture sets beyond the common fields (Gemma 3: GELU, post-norms, QK
    /// norm, scaled embeddings and its pattern of sliding-window layers).
    fn apply_arch(
        &mut self,
        md: &Metadata,
        key: &dyn Fn(&str) -> String,
    ) -> Result<(), ModelError> {
        let (d_model, rope_dims) = (self.d_model, self.rope_dims);
        match self.arch {
            Arch::Gemma2 => self.apply_gemma2(md, key)?,
            Arch::Gemma3 => {
                self.activation = Activation::GeluTanh;
                self.post_norms = true;
                self.qk_norm = true;
                self.embed_scale = (d_model as f32).sqrt();
                let window = md.require_u32(&key("attention.sliding_window"))? as usize;
                if window == 0 {
                    return Err(ModelError::invalid("attention.sliding_window is zero"));
                }
                // Gemma 3: five local (sliding-window, RoPE base 10k, unscaled) layers to each
                // global one; llama.cpp hard-codes the same pattern of 6.
                let local_freqs = inv_freqs(rope_dims, 10_000.0);
                for (i, layer) in self.layers.iter_mut().enumerate() {
                    if (i + 1) % 6 != 0 {
                        layer.window = Some(window);
                        layer.rope_inv_freq = local_freqs.clone();
                    }
                }
            }
            Arch::Llama => self.rope_style = RopeStyle::Interleaved,
            Arch::Granite => self.apply_granite(md, key)?,
            Arch::Phi3 => {
                self.fused_gate_up = true;
                // LongRoPE's attention factor scales RoPE's cos and sin, so Q and K each.
                let f = positive_f32(md, &key("rope.scaling.attn_factor"))?.unwrap_or(1.0);
                self.attn_scale *= f * f;
                self.rope_original_context = md
                    .get_u32(&key("rope.scaling.original_context_length"))?
                    .map(|v| v as usize);
            }
            Arch::GraniteMoe => {
                self.apply_granite(md, key)?;
                let shared = key("expert_shared_feed_forward_length");
                if md.get_u32(&shared)?.is_some_and(|v| v > 0) {
                    return Err(ModelError::invalid(format!(
                        "{shared} is set: Granite MoE with a shared expert is not supported"
                    )));
                }
                // llama.cpp sizes Granite MoE's experts by `feed_forward_length`.
                let width = std::mem::take(&mut self.d_ff);
                self.moe = Some(MoeSpec::from_metadata(md, key, true, false, Some(width))?);
            }
            Arch::Olmo2 => {
                self.post_norms = true;
                self.pre_norms = false;
                self.qk_norm = true;
                self.qk_norm_whole = true;
                self.apply_swa_pattern(md, key, None, 4)?;
            }
            Arch::Qwen2 => self.qkv_bias = true,
            Arch::Qwen3 => self.qk_norm = true,
            Arch::Qwen3Moe => {
                self.qk_norm = true;
                self.moe = Some(MoeSpec::from_metadata(md, key, true, false, None)?);
            }
            Arch::Qwen2Moe => {
                self.qkv_bias = true;
                self.moe = Some(MoeSpec::from_metadata(md, key, false, true, None)?);
            }
        }
        Ok(())
    }

    /// Gemma 2, as llama.cpp reads it: GeGLU, post-norms, scaled embeddings; sliding-window
    /// layers by `attention.sliding_window_pattern` (default 2: every even layer), with the
    /// window `attention.sliding_window` (default 4096) and RoPE base `rope.freq_base_swa`
    /// (default: the global one); attention scores soft-capped by `attn_logit_softcapping`
    /// (default 50) and logits by `final_logit_softcapping` (default 30); queries scaled by
    /// 1/sqrt(head_dim), but by 1/sqrt(d_model / n_heads) in the 46-layer 27B.
    fn apply_gemma2(
        &mut self,
        md: &Metadata,
        key: &dyn Fn(&str) -> String,
    ) -> Result<(), ModelError> {
        self.activation = Activation::GeluTanh;
        self.post_norms = true;
        self.embed_scale = (self.d_model as f32).sqrt();
        self.apply_swa_pattern(md, key, Some(4096), 2)?;
        let cap = |k: &str| positive_f32(md, &key(k));
        self.attn_softcap = cap("attn_logit_softcapping")?.unwrap_or(50.0);
        self.final_logit_softcap = cap("final_logit_softcapping")?.unwrap_or(30.0);
        if self.n_layers == 46 {
            self.attn_scale = 1.0 / ((self.d_model / self.n_heads) as f32).sqrt();
        }
        Ok(())
    }

    /// Granite, as llama.cpp reads it: Llama's layout (interleaved RoPE) with embeddings times
    /// `embedding_scale`, attention scores times `attention.scale` (instead of
    /// 1/sqrt(head_dim)), attention and MLP outputs times `residual_scale` before they join
    /// the residual, and logits divided by `logit_scale` (required); an absent or zero
    /// multiplier is none.
    fn apply_granite(
        &mut self,
        md: &Metadata,
        key: &dyn Fn(&str) -> String,
    ) -> Result<(), ModelError> {
        self.rope_style = RopeStyle::Interleaved;
        // llama.cpp reads a zero multiplier as none.
        let scale = |k: &str| match md.get_f32(&key(k))? {
            Some(0.0) => Ok(None),
            _ => positive_f32(md, &key(k)),
        };
        if let Some(s) = scale("embedding_scale")? {
            self.embed_scale = s;
        }
        if let Some(s) = scale("attention.scale")? {
            self.attn_scale = s;
        }
        if let Some(s) = scale("residual_scale")? {
            self.residual_scale = s;
        }
        self.logit_scale = scale("logit_scale")?.ok_or_else(|| {
            ModelError::invalid(format!("{} is missing or zero", key("logit_scale")))
        })?;
        Ok(())
    }

    /// Sliding-window layers as llama.cpp sets them from a pattern: with a window
    /// (`attention.sliding_window`, else `default_window`; none or zero: no layer slides),
    /// layers `i % pattern < pattern - 1` slide (every layer when the pattern is 0), `pattern`
    /// from `attention.sliding_window_pattern` (default `default_pattern`), with RoPE base
    /// `rope.freq_base_swa` (default the global one) and no RoPE scaling.
    fn apply_swa_pattern(
        &mut self,
        md: &Metadata,
        key: &dyn Fn(&str) -> String,
        default_window: Option<u32>,
        default_pattern: u32,
    ) -> Result<(), ModelError> {
        let window = md
            .get_u32(&key("attention.sliding_window"))?
            .or(default_window);
        let Some(window) = window.filter(|&w| w > 0) else {
            return Ok(());
        };
        let pattern = md
            .get_u32(&key("attention.sliding_window_pattern"))?
            .unwrap_or(default_pattern) as usize;
        let swa_base = md
            .get_f32(&key("rope.freq_base_swa"))?
            .unwrap_or(self.rope_base);
        let local_freqs = inv_freqs(self.rope_dims, swa_base);
        for (i, layer) in self.layers.iter_mut().enumerate() {
            if pattern == 0 || i % pattern < pattern - 1 {
                layer.window = Some(window as usize);
                layer.rope_inv_freq = local_freqs.clone();
            }
        }
        Ok(())
    }

    /// The tensor of RoPE frequency factors to apply, if the file has one: `rope_freqs.weight`
    /// (Llama 3.1+), or Phi 3's LongRoPE pair, the long factors when the model is served past
    /// the context its short ones are for (Tessera serves the whole `context_length`, so
    /// whenever the file's is longer; llama.cpp compares its context per sequence).
    pub fn rope_factors_tensor(&self, has: impl Fn(&str) -> bool) -> Option<&'static str> {
        if has("rope_freqs.weight") {
            return Some("rope_freqs.weight");
        }
        let original = self.rope_original_context?;
        let name = match self.context_length > original {
            true => "rope_factors_long.weight",
            false => "rope_factors_short.weight",
        };
        has(name).then_some(name)
    }

    /// Applies per-frequency factors (GGUF's `rope_freqs.weight`, how Llama 3.1+ files carry
    /// their RoPE scaling): every global layer's frequency i becomes base^(-2i/d) / factor[i],
    /// as llama.cpp's `ggml_rope_ext` does with freq_factors. Replaces any metadata scaling.
    pub fn apply_rope_freq_factors(&mut self, factors: &[f32]) -> Result<(), ModelError> {
        let plain = inv_freqs(self.rope_dims, self.rope_base);
        if factors.len() != plain.len() || factors.iter().any(|f| !f.is_finite() || *f <= 0.0) {
            return Err(ModelError::invalid(format!(
                "rope_freqs.weight needs {} positive factors",
                plain.len()
            )));
        }
        let scaled: Vec<f32> = plain.iter().zip(factors).map(|(f, d)| f / d).collect();
        for layer in self.layers.iter_mut().filter(|l| l.window.is_none()) {
            layer.rope_inv_freq = scaled.clone();
        }
        Ok(())
    }

    /// K (or V) floats per token per layer.
    pub fn kv_dim(&self) -> usize {
        self.n_kv_heads * self.head_dim
    }

    /// Q floats per token per layer.
    pub fn q_dim(&self) -> usize {
        self.n_heads * self.head_dim
    }
}

/// RoPE frequency scaling from `{arch}.rope.scaling.*`.
enum RopeScaling {
    None,
    /// Positions divided by `factor` (frequencies multiplied by 1/factor).
    Linear(f32),
    /// Llama 3's frequency-dependent scaling.
    Llama3 {
        factor: f32,
        low_freq_factor: f32,
        high_freq_factor: f32,
        original_context: f32,
    },
}

impl RopeScaling {
    fn from_metadata(md: &Metadata, arch: &str) -> Result<RopeScaling, ModelError> {
        let key = |k: &str| format!("{arch}.rope.scaling.{k}");
        let factor = md.get_f32(&key("factor"))?.unwrap_or(1.0);
        let kind = md.get_str(&key("type"))?.unwrap_or("none");
        match kind {
            "none" => {}
            "linear" if factor > 0.0 && factor != 1.0 => return Ok(RopeScaling::Linear(factor)),
            "linear" => {}
            "llama3" => {
                return Ok(RopeScaling::Llama3 {
                    factor,
                    low_freq_factor: md.get_f32(&key("low_freq_factor"))?.unwrap_or(1.0),
                    high_freq_factor: md.get_f32(&key("high_freq_factor"))?.unwrap_or(4.0),
                    original_context: md.get_u32(&key("original_context_length"))?.unwrap_or(8192)
                        as f32,
                })
            }
            other => {
                return Err(ModelError::invalid(format!(
                    "unsupported RoPE scaling type {other:?}"
                )))
            }
        }
        Ok(RopeScaling::None)
    }

    fn apply(&self, freqs: &[f32]) -> Vec<f32> {
        match *self {
            RopeScaling::None => freqs.to_vec(),
            RopeScaling::Linear(f) => freqs.iter().map(|x| x / f).collect(),
            RopeScaling::Llama3 {
                factor,
                low_freq_factor,
                high_freq_factor,
                original_context,
            } => {
                let low_wavelen = original_context / low_freq_factor;
                let high_wavelen = original_context / high_freq_factor;
                freqs
                    .iter()
                    .map(|&f| {
                        let wavelen = 2.0 * std::f32::consts::PI / f;
                        if wavelen < high_wavelen {
                            f
                        } else if wavelen > low_wavelen {
                            f / factor
                        } else {
                            let smooth = (original_context / wavelen - low_freq_factor)
                                / (high_freq_factor - low_freq_factor);
                            (1.0 - smooth) * f / factor + smooth * f
                        }
                    })
                    .collect()
            }
        }
    }
}

/// The f32 at `key`, if present; an error naming the key unless it is finite and positive.
fn positive_f32(md: &Metadata, key: &str) -> Result<Option<f32>, ModelError> {
    match md.get_f32(key)? {
        Some(v) if !(v.is_finite() && v > 0.0) => {
            Err(ModelError::invalid(format!("{key} must be positive")))
        }
        v => Ok(v),
    }
}

/// theta_i = base^(-2i/d) for i in 0..d/2.
fn inv_freqs(rope_dims: usize, base: f32) -> Vec<f32> {
    (0..rope_dims / 2)
        .map(|i| base.powf(-((2 * i) as f32) / rope_dims as f32))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tiny() -> ModelConfig {
        let bytes = crate::testing::tiny_model_gguf("llama", 7);
        let parsed = gguf::parse(&bytes).expect("tiny model parses");
        ModelConfig::from_metadata(&parsed.metadata).expect("tiny config")
    }

    #[test]
    fn rope_freq_factors_divide_the_global_frequencies() {
        let mut cfg = tiny();
        let before = cfg.layers[0].rope_inv_freq.clone();
        let factors: Vec<f32> = (0..before.len()).map(|i| 1.0 + i as f32).collect();
        cfg.apply_rope_freq_factors(&factors)
            .expect("valid factors");
        for (i, (b, a)) in before.iter().zip(&cfg.layers[0].rope_inv_freq).enumerate() {
            assert!((b / (1.0 + i as f32) - a).abs() <= 1e-7 * b.abs());
        }
    }

    #[test]
    fn rope_freq_factors_of_the_wrong_length_are_refused() {
        let mut cfg = tiny();
        assert!(cfg.apply_rope_freq_factors(&[1.0]).is_err());
    }
}
