//! Tessera's OpenAI-compatible HTTP server (axum).
//!
//! Layers, each importing only the ones before it (a test, `tests/module_graph.rs`, fails on
//! any import cycle among the top-level modules):
//! 1. `base`: `ApiError`, the request's id and deadline, ids and time, body reading. Imports
//!    nothing of the server. `telemetry` (the log and trace pipeline) likewise.
//! 2. `protocol`: the OpenAI pieces endpoints share (sampling fields, messages, tools, the
//!    response head and `usage`, log-probs), which top-level fields a route accepts, and a
//!    request body's OpenAPI schema.
//! 3. `serving`: the facade every endpoint calls (parse → validate → constrain → submit) and
//!    its services: state, the shared checks, the chat template, tool calling, structured
//!    output, the engine runs, SSE, per-request tracing.
//! 4. The endpoint families, one folder each: `chat`, `completions`, `responses`,
//!    `embeddings` (with rerank), `messages` (Anthropic's Messages API), `lora` (LoRA adapter
//!    management); and
//!    `routes`, the small routes (models, tokenize, health, metrics, worker, debug, playground).
//! 5. `app`: the router wiring them with the guard, key check and CORS, the accept loop and the
//!    OpenAPI document. The HTTP layer only ever sees a stream of events per request; the engine
//!    thread does the work.
//!
//! Adding an endpoint family (say `/v1/embeddings`):
//! 1. create `src/embeddings/` with `protocol.rs` (the request type, its `request_body!`
//!    schema, and its `Route`: what it accepts untyped), the
//!    validation into a job if it generates, and `handler.rs` (the `#[utoipa::path]` handlers,
//!    calling the `serving` facade); keep any state it needs with `AppState::endpoint_state`;
//! 2. declare it here (`pub mod embeddings;`);
//! 3. register its routes in `app::Served` (`openai_routes` for `/v1` routes) and its
//!    handlers in `app::openapi`'s `paths(...)`.
//!
//! It imports `base`, `protocol` and `serving`, never another endpoint folder or `app`.

pub mod app;
pub mod base;
pub mod chat;
pub mod completions;
pub mod embeddings;
pub mod lora;
pub mod messages;
pub mod protocol;
pub mod responses;
pub mod routes;
pub mod serving;
pub mod telemetry;

pub use app::http::serve;
pub use app::router;
pub use app::{cors, http, openapi};
pub use base::ApiError;
pub use serving::state::{load_model, AppState, Loaded, ServerConfig};
pub use serving::{chat_template, observe, tools};
