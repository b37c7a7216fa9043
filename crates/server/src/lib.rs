//! Tessera's OpenAI-compatible HTTP server (axum).
//!
//! One file per concern: `openai` (request shapes), `fields` (which top-level fields a route
//! accepts), `response` (response shapes, with the head and `usage` completions and chat
//! share), `validate` (the one place input is checked and turned into engine requests),
//! `responses/` (the Responses API: its wire format, stream and store), `chat_template`, `run`
//! (submitting to the engine, collecting or merging events), `sse` (streamed responses),
//! `logprobs`, `metrics` (Prometheus text), `openapi` (the `/openapi.json` document, from the
//! types), `observe` (a span and a log line per request), `telemetry` (the log and trace
//! pipeline), `error` (the one `ApiError`), `auth`, `cors`, `state`, `tools/` (tool calling:
//! the request's tools, each template family's call syntax, the parser of replies), `guard`
//! (per-request id, body limit, deadline and panic containment), `http` (the accept loop with
//! the connection limits), and `routes/` (one file per route group). The HTTP layer only ever
//! sees a stream of events per request; the engine thread does the work.

pub mod auth;
pub mod base;
pub mod chat_template;
pub mod cors;
pub mod fields;
pub mod guard;
pub mod http;
pub mod logprobs;
pub mod metrics;
pub mod observe;
pub mod openai;
pub mod openapi;
pub mod response;
pub mod responses;
pub mod routes;
pub mod run;
pub mod sse;
pub mod state;
pub mod structured;
pub mod telemetry;
pub mod tools;
pub mod validate;

pub use base::ApiError;
pub use http::serve;
pub use routes::router;
pub use state::{load_model, AppState, Loaded, ServerConfig};
