//! `/v1/chat/completions` and `/v1/chat/completions/render`: the request (`protocol`), its
//! validation into a job (`validate`), the handler with its whole reply and its chunk stream
//! writer (`handler`), and the render route (`render`). Everything shared goes through the
//! serving facade (`serving`).

pub mod handler;
pub mod protocol;
pub mod render;
mod stream;
pub mod validate;

pub use protocol::{ChatCompletionBody, ChatRequest};
pub use validate::chat_job;
