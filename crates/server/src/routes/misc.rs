//! The small routes: `/health`, `/v1/models` (and one model by id), `/metrics`, and vLLM's `/tokenize` and
//! `/detokenize`.

use axum::body::Bytes;
use axum::extract::rejection::{BytesRejection, PathRejection};
use axum::extract::{Path, State};
use axum::http::header;
use axum::response::{IntoResponse, Response};

use super::protocol::{DETOKENIZE, TOKENIZE};
use crate::base::parse_body;
use crate::base::ApiError;
use crate::protocol::fields::{self, struct_fields};
use crate::protocol::response::{Detokenized, ModelCard, ModelList, Tokenized};
use crate::routes::metrics;
use crate::routes::protocol::{DetokenizeBody, TokenizeBody};
use crate::routes::protocol::{DetokenizeRequest, TokenizeRequest};
use crate::serving::state::{AppState, Loaded};
use crate::serving::validate::{check_model, max_model_len, render_chat};

use super::empty_ok;
use crate::base::{body_bytes, param};

/// 200 once the model is loaded and while its engine runs; 503 before, from the moment the
/// server starts draining (SIGTERM), and after the engine has stopped (shutdown, or a fault it
/// could not contain).
#[utoipa::path(get, path = "/health", tag = "probes",
    responses((status = 200, description = "Ready to serve (empty body)")))]
pub async fn health(State(state): State<AppState>) -> Result<Response, ApiError> {
    if state.is_draining() || !state.model()?.engine.is_alive() {
        return Err(ApiError::ShuttingDown);
    }
    Ok(empty_ok())
}

/// `GET /v1/models`: one card per served name, the reported one first (as vLLM lists its
/// served model names), then one per LoRA adapter (`parent`: the base model, `root`: the
/// adapter's file).
#[utoipa::path(get, path = "/v1/models", tag = "openai",
    responses((status = 200, description = "The served model names", body = ModelList)))]
pub async fn models(State(state): State<AppState>) -> Result<Response, ApiError> {
    let m = state.model()?;
    let list = ModelList {
        object: "list",
        data: m
            .names()
            .map(|n| card(m, n))
            .chain(adapter_cards(m))
            .collect(),
    };
    Ok(axum::Json(list).into_response())
}

/// `GET /v1/models/{id}`: the card of a served name, or 404 `model_not_found`.
#[utoipa::path(get, path = "/v1/models/{id}", tag = "openai",
    params(("id" = String, Path, description = "A served model name")),
    responses((status = 200, description = "The model's card", body = ModelCard)))]
pub async fn model(
    State(state): State<AppState>,
    id: Result<Path<String>, PathRejection>,
) -> Result<Response, ApiError> {
    let Path(id) = param(id, "id")?;
    let m = state.model()?;
    check_model(Some(&id), m)?;
    let c = adapter_cards(m)
        .find(|c| c.id == id)
        .unwrap_or_else(|| card(m, &id));
    Ok(axum::Json(c).into_response())
}

/// The cards of the LoRA adapters, as vLLM lists them.
fn adapter_cards(m: &Loaded) -> impl Iterator<Item = ModelCard> + '_ {
    m.loras.list().into_iter().map(|e| ModelCard {
        id: e.name,
        root: e.path.display().to_string(),
        parent: Some(m.model_id.clone()),
        ..card(m, &m.model_id)
    })
}

fn card(m: &Loaded, name: &str) -> ModelCard {
    ModelCard {
        id: name.to_string(),
        object: "model",
        created: m.created,
        owned_by: "tessera",
        root: m.root.clone(),
        parent: None,
        max_model_len: max_model_len(m),
    }
}

/// Prometheus text format (answers while loading too, with the server-side counters only).
#[utoipa::path(get, path = "/metrics", tag = "probes",
    responses((status = 200, description = "Prometheus text exposition format 0.0.4",
        body = String, content_type = "text/plain")))]
pub async fn metrics(State(state): State<AppState>) -> Result<Response, ApiError> {
    let body = metrics::render(&state)
        .map_err(|e| ApiError::Internal(format!("cannot encode the metrics: {e}")))?;
    Ok(([(header::CONTENT_TYPE, metrics::CONTENT_TYPE)], body).into_response())
}

/// `{model, prompt, add_special_tokens}` or `{model, messages, add_generation_prompt, tools,
/// chat_template_kwargs}` →
/// `{tokens, count, max_model_len}`.
#[utoipa::path(post, path = "/tokenize", tag = "tokenizer",
    request_body(content = TokenizeBody, content_type = "application/json"),
    responses((status = 200, description = "The token ids", body = Tokenized)))]
pub async fn tokenize(
    State(state): State<AppState>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let m = state.model()?;
    let bytes = body_bytes(body, state.config().body_limit)?;
    let req: TokenizeRequest = parse_body(&bytes)?;
    let honoured = [struct_fields::<TokenizeRequest>()];
    fields::check(&bytes, TOKENIZE, &honoured)?;
    check_model(req.model.as_deref(), m)?;
    let tok = m.engine.tokenizer();
    let tokens = match (req.prompt, req.messages) {
        (Some(p), None) => tok.encode(&p, req.add_special_tokens.unwrap_or(true), true),
        (None, Some(msgs)) => {
            let tools = crate::serving::tools::request::tools(req.tools.as_deref())?;
            let rendered: Vec<_> = tools.iter().map(|t| t.rendered()).collect();
            let rendered = (!rendered.is_empty()).then_some(rendered.as_slice());
            let text = render_chat(
                &msgs,
                rendered,
                req.add_generation_prompt.unwrap_or(true),
                req.chat_template_kwargs.as_ref(),
                m,
            )?;
            tok.encode(&text, req.add_special_tokens.unwrap_or(false), true)
        }
        _ => return Err(ApiError::bad("give exactly one of `prompt` and `messages`")),
    };
    let body = Tokenized {
        count: tokens.len(),
        max_model_len: max_model_len(m),
        tokens,
    };
    Ok(axum::Json(body).into_response())
}

/// `{model, tokens}` → `{prompt}`.
#[utoipa::path(post, path = "/detokenize", tag = "tokenizer",
    request_body(content = DetokenizeBody, content_type = "application/json"),
    responses((status = 200, description = "The text of the ids", body = Detokenized)))]
pub async fn detokenize(
    State(state): State<AppState>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let m = state.model()?;
    let bytes = body_bytes(body, state.config().body_limit)?;
    let req: DetokenizeRequest = parse_body(&bytes)?;
    let honoured = [struct_fields::<DetokenizeRequest>()];
    fields::check(&bytes, DETOKENIZE, &honoured)?;
    check_model(req.model.as_deref(), m)?;
    let vocab = m.engine.info().vocab_size;
    let mut ids = Vec::with_capacity(req.tokens.len());
    for t in req.tokens {
        match u32::try_from(t) {
            Ok(id) if (id as usize) < vocab => ids.push(id),
            _ => {
                return Err(ApiError::invalid(
                    "tokens",
                    format!("token id {t} is outside the vocabulary (0..{vocab})"),
                ))
            }
        }
    }
    let text = m.engine.tokenizer().decode(&ids, false);
    Ok(axum::Json(Detokenized { prompt: text }).into_response())
}
