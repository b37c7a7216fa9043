//! Model hyper-parameters read from GGUF metadata.
//!
//! One `ModelConfig` describes every supported architecture: the differences between Gemma 3,
//! Llama, Qwen 2 and Qwen 3 are a handful of switches (norm placement, QK-norm, QKV bias, the
//! activation, the RoPE layout, per-layer sliding windows) rather than separate code paths.
//! Everything the forward pass needs to know per layer is resolved here once, at load, into
//! `LayerSpec`s, so the hot loop never looks at metadata.

use gguf::Metadata;

use crate::rope::{inv_freqs, RopeScaling};
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
    /// OLMoE: Llama-style pre-norms, OLMo 2's QK-norm over the whole of Q and of K, and a
    /// mixture-of-experts FFN (softmax over all experts, top-k not renormalised) in every layer.
    Olmoe,
    /// Granite (3.x): Llama with four multipliers (embeddings, attention, residual, logits).
    Granite,
    /// Granite MoE: Granite's multipliers over a mixture-of-experts FFN (top-k renormalised),
    /// plus an ungated shared expert when the file gives its width (Granite MoE Shared).
    GraniteMoe,
    /// Phi 3 / 3.5: fused QKV and gate-up projections, LongRoPE frequency factors.
    Phi3,
    /// gpt-oss: attention with biases, per-head sinks and every other layer a sliding window,
    /// YaRN RoPE, and a mixture of experts with biases and SwiGLU-OAI in every layer.
    GptOss,
}

impl Arch {
    /// The `general.architecture` strings we accept, for error messages.
    pub const SUPPORTED: &'static [&'static str] = &[
        "gemma2",
        "gemma3",
        "gpt-oss",
        "granite",
        "granitemoe",
        "llama",
        "olmo2",
        "olmoe",
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
            "gpt-oss" => Some(Arch::GptOss),
            "llama" => Some(Arch::Llama),
            "olmo2" => Some(Arch::Olmo2),
            "olmoe" => Some(Arch::Olmoe),
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
            Arch::GptOss => "gpt-oss",
            Arch::Llama => "llama",
            Arch::Olmo2 => "olmo2",
            Arch::Olmoe => "olmoe",
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
    /// gpt-oss's experts: `min(g, 7) * sigmoid(1.702 * min(g, 7)) * (clamp(u, -7, 7) + 1)`
    /// (ggml's `swiglu_oai` with the constants llama.cpp gives it).
    SwigluOai,
}

impl Activation {
    /// SwiGLU-OAI's `alpha` and `limit`, as llama.cpp hard-codes them for gpt-oss.
    pub const OAI_ALPHA: f32 = 1.702;
    pub const OAI_LIMIT: f32 = 7.0;
}

/// How RoPE pairs up the dimensions of a head.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RopeStyle {
    /// Adjacent pairs (`x[2i]`, `x[2i+1]`): GGUF Llama (its Q/K weights are permuted for this).
    Interleaved,
    /// Halves (`x[i]`, `x[i + d/2]`): "NeoX" style, used by Gemma and Qwen.
    Neox,
}

/// Per-layer attention settings, resolved at load.
#[derive(Clone, Debug, PartialEq)]
pub struct LayerSpec {
    /// `Some(w)`: a query at position p sees keys at positions p-w+1 ..= p only.
    pub window: Option<usize>,
    /// Inverse frequencies of RoPE for this layer, one per rotated pair.
    pub rope_inv_freq: Vec<f32>,
    /// RoPE's cos and sin are multiplied by this (YaRN's attention factor; else 1).
    pub rope_mscale: f32,
}

/// The mixture-of-experts FFN of every layer: a router picks `n_used` of `n_expert` SwiGLU
/// experts per token (softmax over all experts' logits, then the top `n_used`), whose outputs
/// are summed with the picked probabilities as weights. Qwen 2 MoE adds a shared SwiGLU expert
/// that every token runs, scaled by a sigmoid gate of its own. gpt-oss adds biases to the
/// router and to every expert projection, takes the softmax of the top `n_used` logits only,
/// and activates with SwiGLU-OAI.
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
    /// The shared expert's output is scaled by a sigmoid gate of its own (Qwen 2 MoE's
    /// `ffn_gate_inp_shexp`); Granite MoE's shared expert is added as it is.
    pub shared_gate: bool,
    /// gpt-oss (llama.cpp's `SOFTMAX_WEIGHT` gating): the top `n_used` logits are picked
    /// first and their softmax is the weights (what renormalised top-k probabilities are in
    /// exact arithmetic, computed as llama.cpp does).
    pub softmax_after_topk: bool,
    /// gpt-oss: `ffn_gate_inp.bias` and `ffn_{gate,up,down}_exps.bias`.
    pub biases: bool,
    /// The experts' activation (SwiGLU, or SwiGLU-OAI for gpt-oss).
    pub activation: Activation,
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
        // Granite MoE and OLMoE give the experts' width as `feed_forward_length`.
        let (d_ff_exp, width_key) = match width {
            Some(w) => (w, key("feed_forward_length")),
            None => {
                let k = key("expert_feed_forward_length");
                (md.require_u32(&k)? as usize, k)
            }
        };
        if n_expert == 0 || n_used == 0 || d_ff_exp == 0 {
            return Err(ModelError::invalid(format!(
                "{}, {} and {width_key} must be positive",
                key("expert_count"),
                key("expert_used_count"),
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
            shared_gate: shared,
            softmax_after_topk: false,
            biases: false,
            activation: Activation::Silu,
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
    /// OLMo 2, OLMoE: the QK-norm spans all of Q and all of K (its weights are that wide).
    pub qk_norm_whole: bool,
    /// RMS-norms before attention and before the MLP (all but OLMo 2).
    pub pre_norms: bool,
    /// Phi 3: one `ffn_up` of twice the width, the gate's rows then the up's.
    pub fused_gate_up: bool,
    /// Phi 3 LongRoPE: the context the short frequency factors are for.
    pub rope_original_context: Option<usize>,
    /// Qwen 2: biases on the Q, K and V projections (required; other files may carry them).
    pub qkv_bias: bool,
    /// gpt-oss: a bias on the attention output projection, `attn_output.bias`.
    pub attn_out_bias: bool,
    /// gpt-oss: a sink logit per query head, `attn_sinks.weight` (see `attention`).
    pub attn_sinks: bool,
    /// The tensor of the norm before the FFN: `ffn_norm.weight`, or for gpt-oss
    /// `post_attention_norm.weight` (llama.cpp's name for it there).
    pub ffn_norm_tensor: &'static str,
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
    /// The file's RoPE scaling, which `layers` already apply.
    pub rope_scaling: RopeScaling,
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
            Arch::Qwen2Moe | Arch::Qwen3Moe | Arch::GptOss => md
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
        let rope_scaling = RopeScaling::from_metadata(md, arch_name, context_length)?;
        let (global_freqs, global_mscale) = rope_scaling.layer(rope_dims, rope_base);
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
            attn_out_bias: false,
            attn_sinks: false,
            ffn_norm_tensor: "ffn_norm.weight",
            embed_scale: 1.0,
            attn_scale: 1.0 / (head_dim as f32).sqrt(),
            final_logit_softcap: md.get_f32(&key("final_logit_softcapping"))?.unwrap_or(0.0),
            attn_softcap: 0.0,
            residual_scale: 1.0,
            logit_scale: 1.0,
            rope_base,
            rope_dims,
            rope_scaling,
            layers: vec![
                LayerSpec {
                    window: None,
                    rope_inv_freq: global_freqs,
                    rope_mscale: global_mscale,
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
            Arch::GptOss => self.apply_gpt_oss(md, key)?,
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
                        layer.rope_mscale = 1.0;
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
                // llama.cpp sizes Granite MoE's experts by `feed_forward_length`.
                let width = std::mem::take(&mut self.d_ff);
                let mut spec = MoeSpec::from_metadata(md, key, true, false, Some(width))?;
                // Granite MoE Shared: a positive width adds a shared SwiGLU expert without a
                // gate (llama.cpp reads the key as optional, 0 meaning none).
                let shared = md.get_u32(&key("expert_shared_feed_forward_length"))?;
                spec.shared_ff = shared.filter(|&v| v > 0).map(|v| v as usize);
                self.moe = Some(spec);
            }
            Arch::Olmo2 => {
                self.post_norms = true;
                self.pre_norms = false;
                self.qk_norm = true;
                self.qk_norm_whole = true;
                self.apply_swa_pattern(md, key, None, 4, false)?;
            }
            Arch::Olmoe => {
                self.qk_norm = true;
                self.qk_norm_whole = true;
                // llama.cpp sizes OLMoE's experts by `feed_forward_length` (its converter
                // writes the experts' width there) and never renormalises the picked weights
                // (OLMoE's `norm_topk_prob` is false, and llama.cpp neither reads nor writes
                // it for this architecture).
                let width = std::mem::take(&mut self.d_ff);
                self.moe = Some(MoeSpec::from_metadata(md, key, false, false, Some(width))?);
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
    /// (default: the global one), scaled as the global layers; attention scores soft-capped by `attn_logit_softcapping`
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
        self.apply_swa_pattern(md, key, Some(4096), 2, true)?;
        let cap = |k: &str| positive_f32(md, &key(k));
        self.attn_softcap = cap("attn_logit_softcapping")?.unwrap_or(50.0);
        self.final_logit_softcap = cap("final_logit_softcapping")?.unwrap_or(30.0);
        if self.n_layers == 46 {
            self.attn_scale = 1.0 / ((self.d_model / self.n_heads) as f32).sqrt();
        }
        Ok(())
    }

    /// gpt-oss, as llama.cpp reads it (its `openai-moe`): NeoX RoPE scaled as the file says
    /// (YaRN in the released files) on every layer; sliding-window layers by
    /// `attention.sliding_window_pattern` (default 2: every even layer) with the window
    /// `attention.sliding_window` (required) and RoPE base `rope.freq_base_swa` (default: the
    /// global one); biases on the Q/K/V projections when the file has them and on the output
    /// projection always; a sink logit per head; queries scaled by 1/sqrt(rope dimensions); the
    /// FFN's norm stored as `post_attention_norm`; a mixture of experts with biases, softmax
    /// over the top-k logits (no renormalisation needed) and SwiGLU-OAI.
    fn apply_gpt_oss(
        &mut self,
        md: &Metadata,
        key: &dyn Fn(&str) -> String,
    ) -> Result<(), ModelError> {
        let window_key = key("attention.sliding_window");
        if md.require_u32(&window_key)? == 0 {
            return Err(ModelError::invalid(format!("{window_key} is zero")));
        }
        self.apply_swa_pattern(md, key, None, 2, true)?;
        self.attn_out_bias = true;
        self.attn_sinks = true;
        self.attn_scale = 1.0 / (self.rope_dims as f32).sqrt();
        self.ffn_norm_tensor = "post_attention_norm.weight";
        let mut moe = MoeSpec::from_metadata(md, key, true, false, None)?;
        moe.softmax_after_topk = true;
        moe.biases = true;
        moe.activation = Activation::SwigluOai;
        self.moe = Some(moe);
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
    /// `rope.freq_base_swa` (default the global one), scaled as the global layers are when
    /// `scaled` (llama.cpp's `rope_freq_scale_train_swa` for the architecture), else not.
    fn apply_swa_pattern(
        &mut self,
        md: &Metadata,
        key: &dyn Fn(&str) -> String,
        default_window: Option<u32>,
        default_pattern: u32,
        scaled: bool,
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
        let (local_freqs, local_mscale) = match scaled {
            true => self.rope_scaling.layer(self.rope_dims, swa_base),
            false => (inv_freqs(self.rope_dims, swa_base), 1.0),
        };
        for (i, layer) in self.layers.iter_mut().enumerate() {
            if pattern == 0 || i % pattern < pattern - 1 {
                layer.window = Some(window as usize);
                layer.rope_inv_freq = local_freqs.clone();
                layer.rope_mscale = local_mscale;
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
    /// their RoPE scaling): every global layer's frequency i becomes `base^(-2i/d) / factor[i]`,
    /// as llama.cpp's `ggml_rope_ext` does with freq_factors. Replaces any metadata scaling
    /// but YaRN, which llama.cpp would apply on top: that pair is refused.
    pub fn apply_rope_freq_factors(&mut self, factors: &[f32]) -> Result<(), ModelError> {
        if matches!(self.rope_scaling, RopeScaling::Yarn(_)) {
            return Err(ModelError::invalid(
                "rope_freqs.weight together with YaRN RoPE scaling is not supported",
            ));
        }
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

/// The f32 at `key`, if present; an error naming the key unless it is finite and positive.
fn positive_f32(md: &Metadata, key: &str) -> Result<Option<f32>, ModelError> {
    match md.get_f32(key)? {
        Some(v) if !(v.is_finite() && v > 0.0) => {
            Err(ModelError::invalid(format!("{key} must be positive")))
        }
        v => Ok(v),
    }
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
