//! Why the engine could not start: a bad configuration, KV storage the model cannot use, or a
//! model that failed to load. (Why a *request* failed is `request::EngineError`.)

use runner::RunError;

/// An `EngineConfig` value out of range.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum ConfigError {
    #[error("tile size must be in 1..=1024, not {0}")]
    TileSize(usize),
    #[error("max-seqs must be at least 1")]
    MaxSeqs,
    #[error("max-itl-slowdown must be 0 (off) or at least 1, not {0}")]
    ItlSlowdown(f64),
    #[error("slo-{0}-ms must be a positive number of milliseconds")]
    SloTarget(&'static str),
    #[error("max-batch-tokens ({max_batch_tokens}) must be at least max-seqs ({max_seqs}): every decoder needs a slot")]
    BatchTokens {
        max_batch_tokens: usize,
        max_seqs: usize,
    },
    #[error("speculative-tokens must be in 1..=64, not {0}")]
    SpeculativeTokens(usize),
    #[error("n-gram lengths must satisfy 1 <= min <= max <= 64, not {0}..={1}")]
    NgramRange(usize, usize),
    #[error("KV events describe the prefix cache: they need it on")]
    KvEventsWithoutPrefixCache,
    #[error("{0}")]
    Pooling(&'static str),
    #[error("max-loras must be at least 1")]
    MaxLoras,
}

/// Everything that stops `EngineHandle::spawn` or `Engine::new`.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("invalid engine configuration: {0}")]
    Config(#[from] ConfigError),
    /// The KV storage type does not fit the model (e.g. q8_0 on rows that are not whole blocks).
    #[error(transparent)]
    KvLayout(RunError),
    #[error("KV memory of {bytes} bytes is too small: one tile per KV group needs {min_bytes}")]
    KvTooSmall { bytes: usize, min_bytes: usize },
    #[error("the runner has {tiles} KV tiles; one per KV group ({groups}) is the least it can serve with")]
    TooFewTiles { tiles: usize, groups: usize },
    /// The loader given to `spawn` failed.
    #[error("{0}")]
    Load(#[source] Box<dyn std::error::Error + Send + Sync>),
    #[error("KV tier: {0}")]
    Tier(String),
    /// The draft model could not be loaded or does not fit the served model.
    #[error("draft model: {0}")]
    Draft(String),
    /// A LoRA adapter given at start could not be loaded.
    #[error("LoRA adapter '{name}': {msg}")]
    Lora { name: String, msg: String },
    #[error("cannot start the engine thread: {0}")]
    Thread(#[source] std::io::Error),
    #[error("the engine thread died while loading the model")]
    Died,
}
