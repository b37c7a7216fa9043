//! `/v1/completions` and `/v1/completions/render`: the request (`protocol`), its validation
//! into a job (`validate`), the handler with its whole reply and its chunk stream writer
//! (`handler`), and the render route (`render`). Everything shared goes through the serving
//! facade (`serving`).

pub mod handler;
pub mod protocol;
pub mod render;
mod stream;
pub mod validate;

pub use protocol::{CompletionBody, CompletionRequest};
pub use validate::completion_job;
