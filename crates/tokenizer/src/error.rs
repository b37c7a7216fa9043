//! Errors raised while building a tokenizer from a vocabulary or GGUF metadata.
//!
//! Encoding and decoding never fail: any text can be tokenized (byte fallback) and any id list
//! decoded (unknown ids decode to nothing), so only construction returns `TokenizerError`.

/// Why a vocabulary could not be turned into a [`crate::Tokenizer`].
#[derive(Debug, thiserror::Error)]
pub enum TokenizerError {
    /// A required metadata key is absent.
    #[error("missing GGUF metadata key `{key}`")]
    MissingKey { key: &'static str },
    /// A metadata key exists but has the wrong type.
    #[error(transparent)]
    Metadata(#[from] gguf::GgufError),
    /// A metadata array has the wrong element type.
    #[error(
        "GGUF metadata key `{key}` should be an array of {expected}, found an array of {found}"
    )]
    BadArray {
        key: &'static str,
        expected: &'static str,
        found: &'static str,
    },
    /// `tokenizer.ggml.model` names a tokenizer family we do not implement.
    #[error("unsupported tokenizer model `{model}` (supported: llama, gpt2, bert, gemma4)")]
    UnsupportedModel { model: String },
    /// `tokenizer.ggml.pre` names a BPE pre-tokenizer we do not implement.
    #[error(
        "unsupported BPE pre-tokenizer `{pre}` (supported: {})",
        crate::PreTokenizer::supported_names()
    )]
    UnsupportedPreTokenizer { pre: String },
    /// The vocabulary has no tokens.
    #[error("vocabulary is empty")]
    EmptyVocab,
    /// A per-token array (scores, token types) is shorter than the token list.
    #[error("`{what}` has {len} entries but the vocabulary has {n_tokens} tokens")]
    LengthMismatch {
        what: &'static str,
        len: usize,
        n_tokens: usize,
    },
    /// Two tokens share the same text, so text -> id would be ambiguous.
    #[error("token text {text:?} appears twice (ids {first} and {second})")]
    DuplicateToken {
        text: String,
        first: u32,
        second: u32,
    },
    /// The vocabulary has more tokens than fit in a `u32` id.
    #[error("vocabulary has {n_tokens} tokens, more than u32 ids can address")]
    TooManyTokens { n_tokens: usize },
}
