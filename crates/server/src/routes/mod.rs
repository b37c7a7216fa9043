//! The small routes: the model list, `/tokenize` and `/detokenize`, `/health`, `/metrics`
//! (`metrics` renders the Prometheus text), the gateway's worker routes (`worker`), the KV
//! index dump (`debug`) and the playground page (`playground`). Like the endpoint folders they
//! sit above the serving layer and below the app, which wires them.

pub mod debug;
pub mod metrics;
pub mod misc;
pub mod playground;
pub mod protocol;
pub mod worker;

use axum::body::Body;
use axum::response::Response;

/// An empty 200 (health).
pub(crate) fn empty_ok() -> Response {
    Response::new(Body::empty())
}
