//! The serving layer: the one facade every endpoint calls, and the services behind it.
//!
//! A generating endpoint runs the same four steps, each one call here:
//! 1. parse: `openai_body` reads the body as the route's request type and the shared
//!    `CommonParams`, refusing any top-level field the route does not honour;
//! 2. validate: the endpoint's own `*_job` turns the request into a `validate::Job`, from the
//!    shared checks in `validate` (model name, sampling, stops, lengths, `n`, streaming);
//! 3. constrain: `constrain` compiles the structured-output grammar (`structured`) and
//!    attaches it to the engine request;
//! 4. submit: `submit` sends every choice to the engine (`run`) and waits until each is
//!    queued; the endpoint then collects the outcomes or streams them (`sse`).
//!
//! The services: `state` (settings, the loaded model, counters, per-endpoint state),
//! `chat_template`, `lora` (the adapters requests may name, and which a request uses), `tools` (tool calling: request, call syntaxes, reply parser), `reasoning`
//! (the thinking split from the answer, and grammars that start after it), `structured`,
//! `observe` (a span and a log line per request), `render` (a job as vLLM's token-in request).
//! Nothing here imports an endpoint folder or the app: endpoints depend on the facade, never
//! the other way round.

pub mod chat_template;
pub mod events;
pub mod lora;
pub mod observe;
pub mod reasoning;
pub mod render;
pub mod run;
pub mod sse;
pub mod state;
pub mod structured;
pub mod tools;
pub mod validate;

use engine::EngineHandle;
use serde::de::DeserializeOwned;

use crate::base::{parse_body, ApiError};
use crate::protocol::fields::{self, struct_fields, Route};
use crate::protocol::request::CommonParams;
use crate::protocol::response::Head;

pub use state::{load_model, AppState, Loaded, ServerConfig};

/// Parse: a chat or completions body as the route's request `R` and the common parameters,
/// both parsed from the same bytes, with every top-level field checked against what the two
/// honour.
pub fn openai_body<R: DeserializeOwned>(
    bytes: &[u8],
    route: Route,
) -> Result<(R, CommonParams), ApiError> {
    let req: R = parse_body(bytes)?;
    let common: CommonParams = parse_body(bytes)?;
    let honoured = [struct_fields::<CommonParams>(), struct_fields::<R>()];
    fields::check(bytes, route, &honoured)?;
    Ok((req, common))
}

/// Constrain: attaches the grammar of the structured output asked for (if any) to `job`.
pub async fn constrain(
    job: &mut validate::Job,
    asked: Option<structured::Asked>,
    m: &Loaded,
) -> Result<(), ApiError> {
    structured::attach(job, asked, m).await
}

/// Submit: every choice of `job` to the engine, once each is queued (or refused).
pub async fn submit(
    job: &validate::Job,
    engine: &EngineHandle,
) -> Result<Vec<run::Choice>, ApiError> {
    run::start(job, engine).await
}

/// The head of a new completions or chat response (`prefix`: `cmpl`, `chatcmpl`); the
/// request's trace (`observe`) takes its id.
pub fn head(prefix: &str, model: &str) -> Head {
    let head = Head::new(prefix, model);
    observe::name_response(&head.id);
    head
}
