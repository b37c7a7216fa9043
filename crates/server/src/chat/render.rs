//! `POST /v1/chat/completions/render`: the templated conversation as the token ids and
//! settings it would run with.

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::State;
use axum::response::{IntoResponse, Response};

use super::protocol::CHAT;
use crate::base::{body_bytes, ApiError};
use crate::protocol::request::CommonParams;
use crate::serving::lora::served_as;
use crate::serving::openai_body;
use crate::serving::render::{rendered, Rendered};
use crate::serving::state::AppState;

use super::protocol::{ChatCompletionBody, ChatRequest};
use super::validate::chat_job;

/// `/v1/chat/completions/render`: one rendered request (the templated conversation).
#[utoipa::path(post, path = "/v1/chat/completions/render", tag = "render",
    request_body(content = ChatCompletionBody, content_type = "application/json"),
    responses((status = 200, description = "The rendered request", body = Rendered)))]
pub async fn render(
    State(state): State<AppState>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let m = state.model()?;
    let bytes = body_bytes(body, state.config().body_limit)?;
    let (req, common): (ChatRequest, CommonParams) = openai_body(&bytes, CHAT)?;
    let model = served_as(common.model.as_deref(), m);
    let job = chat_job(req, common, m, state.config())?;
    let prompt = job
        .prompts
        .first()
        .ok_or_else(|| ApiError::Internal("a chat job without a prompt".into()))?;
    Ok(axum::Json(rendered(&job, prompt, "chatcmpl-", &model)).into_response())
}
