//! `/v1/embeddings` and `/rerank`: the requests as they arrive, their bodies' OpenAPI schemas,
//! and the responses (OpenAI's embedding list; the Jina / Cohere rerank results that
//! llama-server and vLLM return).

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::protocol::fields::{NoOp, Route};
use crate::protocol::schema::request_body;

/// `input`: a text, texts, token ids, or lists of token ids.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(untagged)]
pub enum EmbeddingInput {
    Text(String),
    Texts(Vec<String>),
    Tokens(Vec<i64>),
    TokenLists(Vec<Vec<i64>>),
}

#[derive(Debug, Deserialize, ToSchema)]
pub struct EmbeddingRequest {
    pub model: Option<String>,
    /// Required (typed as optional so that its absence gets a 400 naming it).
    #[schema(required = true, nullable = false)]
    pub input: Option<EmbeddingInput>,
    /// `float` (the default) or `base64` (the little-endian f32 bytes of each vector).
    pub encoding_format: Option<String>,
    /// Keep the first `dimensions` values of each vector, then normalise again (Matryoshka
    /// models such as nomic-embed-text-v1.5 are trained for it).
    #[schema(minimum = 1)]
    pub dimensions: Option<i64>,
    /// vLLM's: keep only the last k tokens of each input (-1: as many as the context holds);
    /// without it an input longer than the context is a 400.
    #[schema(minimum = -1)]
    pub truncate_prompt_tokens: Option<i64>,
    /// L2-normalise each vector (default true, as llama-server does).
    pub normalize: Option<bool>,
    /// Lower runs sooner.
    pub priority: Option<i32>,
}

/// Embeddings accept nothing beyond their typed fields (and `IGNORED`, which has `user`).
pub const EMBEDDINGS: Route = Route::new(&[]);

request_body!(
    EmbeddingsBody,
    "EmbeddingRequest",
    EMBEDDINGS,
    "The body of `/v1/embeddings`.",
    [EmbeddingRequest],
    examples: [
        r#"{"input": "search_query: what is a tile?"}"#,
        r#"{"input": ["first text", "second text"], "encoding_format": "base64", "dimensions": 256}"#,
        r#"{"input": [[101, 7592, 102]], "truncate_prompt_tokens": -1}"#
    ]
);

/// One embedding of the list.
#[derive(Debug, Serialize, ToSchema)]
pub struct EmbeddingData {
    /// Always `"embedding"`.
    pub object: &'static str,
    pub index: usize,
    pub embedding: EmbeddingValue,
}

/// A vector as floats, or as base64 of its little-endian f32 bytes.
#[derive(Debug, Serialize, ToSchema)]
#[serde(untagged)]
pub enum EmbeddingValue {
    Float(Vec<f32>),
    Base64(String),
}

#[derive(Debug, Serialize, ToSchema)]
pub struct EmbeddingUsage {
    pub prompt_tokens: usize,
    pub total_tokens: usize,
}

/// The response of `/v1/embeddings`.
#[derive(Debug, Serialize, ToSchema)]
pub struct EmbeddingList {
    /// Always `"list"`.
    pub object: &'static str,
    pub data: Vec<EmbeddingData>,
    pub model: String,
    pub usage: EmbeddingUsage,
}

/// A document to rerank: its text, or `{"text": ...}`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(untagged)]
pub enum RerankDocument {
    Text(String),
    Object { text: String },
}

impl RerankDocument {
    pub fn text(&self) -> &str {
        match self {
            RerankDocument::Text(t) | RerankDocument::Object { text: t } => t,
        }
    }
}

#[derive(Debug, Deserialize, ToSchema)]
pub struct RerankRequest {
    pub model: Option<String>,
    /// Required (typed as optional so that its absence gets a 400 naming it).
    #[schema(required = true, nullable = false)]
    pub query: Option<String>,
    /// Required.
    #[schema(required = true, nullable = false)]
    pub documents: Option<Vec<RerankDocument>>,
    /// Return only the best `top_n` (default: all).
    #[schema(minimum = 1)]
    pub top_n: Option<i64>,
    /// Include each document's text in its result (default false).
    pub return_documents: Option<bool>,
    /// Lower runs sooner.
    pub priority: Option<i32>,
}

/// Cohere's `max_chunks_per_doc` and `rank_fields` change nothing here only at their defaults.
const RERANK_NO_OP: &[NoOp] = &[NoOp {
    key: "max_chunks_per_doc",
    accepts: |v| v.as_i64() == Some(1),
    why: "max_chunks_per_doc is not supported: a document longer than the context is a 400",
}];

/// What a rerank body accepts beyond its typed fields.
pub const RERANK: Route = Route::new(RERANK_NO_OP);

request_body!(
    RerankBody,
    "RerankRequest",
    RERANK,
    "The body of `/rerank` and `/v1/rerank` (Jina / Cohere shape).",
    [RerankRequest],
    examples: [
        r#"{"query": "what is a tile?", "documents": ["A tile holds K and V.", "Paris is in France."], "top_n": 1, "return_documents": true}"#
    ]
);

#[derive(Debug, Serialize, ToSchema)]
pub struct RerankText {
    pub text: String,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct RerankResult {
    pub index: usize,
    pub relevance_score: f32,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub document: Option<RerankText>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct RerankUsage {
    pub prompt_tokens: usize,
    pub total_tokens: usize,
}

/// The response of `/rerank`: results by decreasing score.
#[derive(Debug, Serialize, ToSchema)]
pub struct RerankResponse {
    pub id: String,
    pub model: String,
    pub results: Vec<RerankResult>,
    pub usage: RerankUsage,
}
