//! Tessera's model layer: configuration from GGUF metadata, the weights, the forward pass over a
//! ragged batch, the KV pool it reads and writes through tile tables, and sampling.
//!
//! The model owns no KV cache and no sequences: callers (the engine) hand it a `Batch` and a
//! `KvPool`, and get logits back.

pub mod attention;
pub mod config;
pub mod convert;
pub mod draft_vocab;
pub mod encoder;
pub mod eval;
pub mod forward;
pub mod kv;
pub mod logits;
pub mod lora;
pub mod moe;
pub mod rope;
pub mod sampler;
pub mod session;
#[doc(hidden)]
pub mod testing;
pub mod weights;

use std::path::Path;

pub use config::{Arch, ModelConfig};
pub use encoder::{
    load_embedder, load_encoder, model_kind, DecoderEmbedder, Dtype, Embedder, Encoder,
    LoadedEmbedder, LoadedEncoder, ModelKind, Pooling,
};
pub use forward::Transformer;
pub use kernels::Threads;
pub use kv::{KvDtype, KvLayout, KvPool, TileId};
pub use logits::{LogitBias, LogitsProcessor, Penalties, ProcessorChain, TokenFilter};
pub use lora::{LoraAdapter, Loras};
pub use runner::{Batch, LogitsWanted, LoraId, LoraUse, RunError, SeqChunk};
pub use sampler::{SampleScratch, Sampler, SamplingParams};
pub use session::Session;
pub use tokenizer::Tokenizer;

/// Everything that can go wrong loading or running a model.
#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    #[error(transparent)]
    Gguf(#[from] gguf::GgufError),
    #[error("unsupported architecture {name:?} (supported: {})", config::Arch::SUPPORTED.join(", "))]
    UnsupportedArch { name: String },
    #[error("{path}: {source}")]
    InFile {
        path: String,
        #[source]
        source: Box<ModelError>,
    },
    #[error("invalid model configuration: {0}")]
    Invalid(String),
    #[error("{path}: tensor {name} is missing")]
    MissingTensor { path: String, name: String },
    #[error("{path}: tensor {name}: {problem}")]
    BadTensor {
        path: String,
        name: String,
        problem: String,
    },
    #[error("bad batch: {0}")]
    BadBatch(String),
    #[error("kernel error: {0}")]
    Kernel(String),
    #[error("tokenizer: {0}")]
    Tokenizer(#[from] tokenizer::TokenizerError),
    #[error(transparent)]
    Run(#[from] RunError),
}

/// What a runner reports of a model's failure: a bad batch stays one, anything else failed.
impl From<ModelError> for RunError {
    fn from(e: ModelError) -> RunError {
        match e {
            ModelError::BadBatch(m) => RunError::BadBatch(m),
            ModelError::Run(e) => e,
            e => RunError::Failed(e.to_string()),
        }
    }
}

impl ModelError {
    pub(crate) fn invalid(msg: impl Into<String>) -> ModelError {
        ModelError::Invalid(msg.into())
    }

    pub(crate) fn kernel(e: impl std::fmt::Display) -> ModelError {
        ModelError::Kernel(e.to_string())
    }
}

/// A model ready to run: its tokenizer and its transformer.
pub struct LoadedModel {
    pub tokenizer: Tokenizer,
    pub transformer: Transformer,
}

/// Opens a GGUF file and builds its tokenizer only (no weights are mapped).
pub fn load_tokenizer(path: &Path) -> Result<Tokenizer, ModelError> {
    let file = gguf::GgufFile::open(path)?;
    Tokenizer::from_metadata(file.metadata()).map_err(|e| ModelError::InFile {
        path: path.display().to_string(),
        source: Box::new(e.into()),
    })
}

/// Opens a GGUF file and loads its tokenizer and weights (zero-copy), using `threads` workers.
pub fn load(path: &Path, threads: usize) -> Result<LoadedModel, ModelError> {
    load_merged(path, threads, &[])
}

/// [`load`], with the LoRA adapters `merges` (each a file and its user scale) added into the
/// weights before they are repacked (see `lora::merge_adapter` for the formats).
pub fn load_merged(
    path: &Path,
    threads: usize,
    merges: &[(&Path, f32)],
) -> Result<LoadedModel, ModelError> {
    let file = gguf::GgufFile::open(path)?;
    let in_file = |e: ModelError| ModelError::InFile {
        path: path.display().to_string(),
        source: Box::new(e),
    };
    let mut cfg = ModelConfig::from_metadata(file.metadata()).map_err(in_file)?;
    if let Some(name) = cfg.rope_factors_tensor(|n| file.tensor(n).is_some()) {
        let t = file.require_tensor(name)?;
        let n = t.info.n_elements() as usize;
        let mut factors = vec![0.0; n];
        kernels::dequantize_row(t.info.ggml_type, t.data, &mut factors)
            .map_err(|e| in_file(ModelError::kernel(e)))?;
        cfg.apply_rope_freq_factors(&factors).map_err(in_file)?;
    }
    let tokenizer = Tokenizer::from_metadata(file.metadata()).map_err(|e| in_file(e.into()))?;
    let mut weights = weights::ModelWeights::load_unpacked(file, &cfg)?;
    for &(lora, scale) in merges {
        let adapter = lora::load_adapter(lora, &cfg, &weights)?;
        lora::merge_adapter(&mut weights, &adapter, scale)?;
    }
    weights.pack_for_cpu();
    let transformer = Transformer::new(cfg, weights, kernels::Threads::new(threads.max(1)));
    Ok(LoadedModel {
        tokenizer,
        transformer,
    })
}
