//! `POST /v1/completions/render`: the request as the token ids and settings it would run with.

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::State;
use axum::response::{IntoResponse, Response};

use super::protocol::COMPLETIONS;
use crate::base::{body_bytes, ApiError};
use crate::protocol::request::CommonParams;
use crate::serving::lora::served_as;
use crate::serving::openai_body;
use crate::serving::render::{rendered, Rendered};
use crate::serving::state::AppState;

use super::protocol::{CompletionBody, CompletionRequest};
use super::validate::completion_job;

/// `/v1/completions/render`: a list, one rendered request per prompt.
#[utoipa::path(post, path = "/v1/completions/render", tag = "render",
    request_body(content = CompletionBody, content_type = "application/json"),
    responses((status = 200, description = "One rendered request per prompt",
        body = Vec<Rendered>)))]
pub async fn render(
    State(state): State<AppState>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let m = state.model()?;
    let bytes = body_bytes(body, state.config().body_limit)?;
    let (req, common): (CompletionRequest, CommonParams) = openai_body(&bytes, COMPLETIONS)?;
    let model = served_as(common.model.as_deref(), m);
    let job = completion_job(req, common, m, state.config())?;
    let list: Vec<Rendered> = job
        .prompts
        .iter()
        .map(|p| rendered(&job, p, "cmpl-", &model))
        .collect();
    Ok(axum::Json(list).into_response())
}
