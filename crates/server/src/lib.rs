//! Tessera's OpenAI-compatible HTTP server (axum).
//!
//! One file per concern: `openai` (request shapes), `fields` (which top-level fields a route
//! accepts), `response` (response shapes, with the head and `usage` completions and chat
//! share), `validate` (the one place input is checked and turned into engine requests),
//! `responses/` (the Responses API: its wire format, stream and store), `chat_template`, `run`
//! (submitting to the engine, collecting or merging events), `sse` (streamed responses),
//! `logprobs`, `metrics` (Prometheus text), `observe` (a span and a log line per request),
//! `telemetry` (the log and trace pipeline), `error` (the one `ApiError`), `auth`, `cors`,
//! `state`, and `routes/` (one file per route group). The HTTP layer only ever sees a stream of
//! events per request; the engine
//! thread does the work.

pub mod auth;
pub mod chat_template;
pub mod cors;
pub mod error;
pub mod fields;
pub mod logprobs;
pub mod metrics;
pub mod observe;
pub mod openai;
pub mod response;
pub mod responses;
pub mod routes;
pub mod run;
pub mod sse;
pub mod state;
pub mod telemetry;
pub mod validate;

pub use error::ApiError;
pub use routes::router;
pub use state::{load_model, AppState, Loaded, ServerConfig};

/// Serves the application on `listener` until `shutdown` completes, then waits for open
/// connections to finish (graceful shutdown).
pub async fn serve(
    listener: tokio::net::TcpListener,
    state: AppState,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    axum::serve(listener, router(state))
        .with_graceful_shutdown(shutdown)
        .await
}
