//! What an encoder file is: its architecture family, shapes and pooling, from GGUF metadata.

use gguf::Metadata;

use crate::ModelError;

/// The encoder architectures Tessera runs (`general.architecture`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EncoderArch {
    /// BERT: learned absolute positions, separate or fused QKV with biases, GELU FFN.
    Bert,
    /// nomic-bert: RoPE instead of position embeddings, fused QKV, a SwiGLU FFN.
    NomicBert,
}

impl EncoderArch {
    /// The `general.architecture` strings accepted, for messages.
    pub const SUPPORTED: &'static [&'static str] = &["bert", "nomic-bert"];

    pub fn from_name(name: &str) -> Option<EncoderArch> {
        match name {
            "bert" => Some(EncoderArch::Bert),
            "nomic-bert" => Some(EncoderArch::NomicBert),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            EncoderArch::Bert => "bert",
            EncoderArch::NomicBert => "nomic-bert",
        }
    }
}

/// Whether a GGUF file holds a generative (decoder) model, an encoder, or a decoder converted
/// as an embedding model (its `<arch>.pooling_type` set to a pooling other than none, as
/// llama.cpp's converter writes for Qwen3-Embedding).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ModelKind {
    Decoder,
    Encoder,
    DecoderEmbedder,
}

impl ModelKind {
    /// Whether the model computes embeddings (or scores) rather than generating.
    pub fn embeds(self) -> bool {
        self != ModelKind::Decoder
    }
}

/// Tells an encoder file from a decoder one by its `general.architecture`; an architecture
/// neither side runs is an error naming the supported ones.
pub fn model_kind(md: &Metadata) -> Result<ModelKind, ModelError> {
    let name = md.require_str("general.architecture")?;
    if EncoderArch::from_name(name).is_some() {
        Ok(ModelKind::Encoder)
    } else if crate::Arch::from_name(name).is_some() {
        let pooling = md.get_u32(&format!("{name}.pooling_type"))?;
        Ok(match pooling.and_then(Pooling::from_gguf) {
            Some(p) if p != Pooling::None => ModelKind::DecoderEmbedder,
            _ => ModelKind::Decoder,
        })
    } else {
        Err(ModelError::UnsupportedArch {
            name: name.to_string(),
        })
    }
}

/// How an input's token states become its output (`<arch>.pooling_type`, llama.cpp's values).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pooling {
    /// Every token's state (0).
    None,
    /// The mean of the tokens' states (1).
    Mean,
    /// The first token's (`[CLS]`) state (2).
    Cls,
    /// The last token's state (3).
    Last,
    /// The classifier head over the first token: relevance scores (4; rerankers).
    Rank,
}

impl Pooling {
    /// llama.cpp's number for the pooling type.
    pub fn from_gguf(v: u32) -> Option<Pooling> {
        Some(match v {
            0 => Pooling::None,
            1 => Pooling::Mean,
            2 => Pooling::Cls,
            3 => Pooling::Last,
            4 => Pooling::Rank,
            _ => return None,
        })
    }

    /// The names `--pooling` takes (as llama-server's).
    pub fn from_name(name: &str) -> Option<Pooling> {
        Some(match name {
            "none" => Pooling::None,
            "mean" => Pooling::Mean,
            "cls" => Pooling::Cls,
            "last" => Pooling::Last,
            "rank" => Pooling::Rank,
            _ => return None,
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            Pooling::None => "none",
            Pooling::Mean => "mean",
            Pooling::Cls => "cls",
            Pooling::Last => "last",
            Pooling::Rank => "rank",
        }
    }
}

/// The arithmetic of an encoder's float (F32 / F16 / BF16) projections, vLLM's `--dtype`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dtype {
    /// `bfloat16` where the CPU multiplies BF16 natively (AVX-512 BF16), else `float32`.
    Auto,
    /// Weights as the file stores them, activations in f32, f32 sums.
    Float32,
    /// Weights and activations rounded to BF16, f32 sums (`kernels::bf16dot`): about 1.45x the
    /// matmul speed with AVX-512 BF16, the same bits (emulated, no faster) elsewhere; with
    /// AMX-BF16, tiles about 5x faster still, whose sums agree to f32 accuracy.
    Bfloat16,
}

impl Dtype {
    /// The names `--dtype` takes (as vLLM's).
    pub fn from_name(name: &str) -> Option<Dtype> {
        Some(match name {
            "auto" => Dtype::Auto,
            "float32" => Dtype::Float32,
            "bfloat16" => Dtype::Bfloat16,
            _ => return None,
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            Dtype::Auto => "auto",
            Dtype::Float32 => "float32",
            Dtype::Bfloat16 => "bfloat16",
        }
    }

    /// Whether the projections run in BF16 on this CPU.
    pub fn bf16(self) -> bool {
        match self {
            Dtype::Auto => kernels::bf16dot::native_bf16(),
            Dtype::Float32 => false,
            Dtype::Bfloat16 => true,
        }
    }
}

/// The hyper-parameters of an encoder.
#[derive(Clone, Debug)]
pub struct EncoderConfig {
    pub arch: EncoderArch,
    pub n_layers: usize,
    pub d_model: usize,
    pub n_heads: usize,
    pub head_dim: usize,
    pub d_ff: usize,
    pub vocab_size: usize,
    /// Positions the model was trained for (its context).
    pub context_length: usize,
    /// LayerNorm epsilon.
    pub eps: f32,
    /// nomic-bert: RoPE inverse frequencies (NeoX pairs over the whole head).
    pub rope_inv_freq: Vec<f32>,
    /// The file's pooling (mean when it names none).
    pub pooling: Pooling,
}

impl EncoderConfig {
    pub fn from_metadata(md: &Metadata) -> Result<EncoderConfig, ModelError> {
        let name = md.require_str("general.architecture")?;
        let arch = EncoderArch::from_name(name).ok_or_else(|| ModelError::UnsupportedArch {
            name: name.to_string(),
        })?;
        let key = |k: &str| format!("{name}.{k}");
        let n_layers = md.require_u32(&key("block_count"))? as usize;
        let d_model = md.require_u32(&key("embedding_length"))? as usize;
        let d_ff = md.require_u32(&key("feed_forward_length"))? as usize;
        let n_heads = md.require_u32(&key("attention.head_count"))? as usize;
        if let Some(kv) = md.get_u32(&key("attention.head_count_kv"))? {
            if kv as usize != n_heads {
                return Err(ModelError::invalid(format!(
                    "{} = {kv} differs from the head count {n_heads}: grouped-query attention \
                     is not supported in encoders",
                    key("attention.head_count_kv")
                )));
            }
        }
        if n_layers == 0 || d_model == 0 || d_ff == 0 || n_heads == 0 {
            return Err(ModelError::invalid("a model dimension is zero"));
        }
        if !d_model.is_multiple_of(n_heads) {
            return Err(ModelError::invalid(
                "embedding_length is not a multiple of head_count",
            ));
        }
        let head_dim = d_model / n_heads;
        if md.get_bool(&key("attention.causal"))? == Some(true) {
            return Err(ModelError::invalid(format!(
                "{} is true: a causal {name} is not supported",
                key("attention.causal")
            )));
        }
        let eps = md
            .get_f32(&key("attention.layer_norm_epsilon"))?
            .unwrap_or(1e-12);
        let context_length = md.require_u32(&key("context_length"))? as usize;
        let vocab_size = match md.get_array("tokenizer.ggml.tokens")? {
            Some(a) => a.len(),
            None => md.require_u32(&key("vocab_size"))? as usize,
        };
        let pooling = match md.get_u32(&key("pooling_type"))? {
            None => Pooling::Mean,
            Some(v) => Pooling::from_gguf(v).ok_or_else(|| {
                ModelError::invalid(format!(
                    "{} = {v} is not a pooling type",
                    key("pooling_type")
                ))
            })?,
        };
        let rope_inv_freq = match arch {
            EncoderArch::Bert => Vec::new(),
            EncoderArch::NomicBert => {
                if !head_dim.is_multiple_of(2) {
                    return Err(ModelError::invalid("head dimension must be even for RoPE"));
                }
                let base = md.get_f32(&key("rope.freq_base"))?.unwrap_or(10_000.0);
                (0..head_dim / 2)
                    .map(|i| base.powf(-((2 * i) as f32) / head_dim as f32))
                    .collect()
            }
        };
        Ok(EncoderConfig {
            arch,
            n_layers,
            d_model,
            n_heads,
            head_dim,
            d_ff,
            vocab_size,
            context_length,
            eps,
            rope_inv_freq,
            pooling,
        })
    }
}
