//! `/v1/embeddings`, `/rerank` and `/v1/rerank`, on an embedding model: the requests
//! (`protocol`), their validation into token ids (`validate`), the handlers (`handler`) and what
//! is done to each pooled row before it is sent (`vectors`). Generation routes on an embedding
//! model, and these routes on a generative one, answer a 400 saying why.

pub mod handler;
pub mod protocol;
mod validate;
pub mod vectors;

pub use protocol::{EmbeddingsBody, RerankBody};
