//! The bottom layer: what every other module may use and which uses nothing of the server.
//!
//! `error` (the one `ApiError`, its status, body and label), `context` (the request's id and
//! deadline, in a task-local), `ids` (object ids, wall-clock seconds) and `body` (reading a
//! body, a JSON body or a parameter into an `ApiError` on failure). Invariant: no file here
//! names `crate::` anything outside `base` (the module-graph test holds every layer to this).

pub mod body;
pub mod context;
pub mod error;
pub mod ids;

pub use body::{body_bytes, param, parse_body};
pub use error::{
    AnthropicError, AnthropicErrorBody, ApiError, ErrorBody, ErrorLabel, ERROR_LABELS,
};
pub use ids::{new_id, unix_now};
