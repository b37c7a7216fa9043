//! `POST /v1/messages` (a reply, whole or streamed) and `POST /v1/messages/count_tokens`.

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use engine::FinishReason;
use tokenizer::Tokenizer;

use crate::base::{body_bytes, parse_body, ApiError};
use crate::protocol::fields::{self, struct_fields};
use crate::serving::run::{self, Outcome};
use crate::serving::state::AppState;
use crate::serving::{self, observe, tools};

use super::protocol::{
    CountTokensBody, CountTokensRequest, MessageObject, MessageUsage, MessagesBody,
    MessagesRequest, TokenCount, MESSAGES,
};
use super::reply::{matched_stop, stop_reason, Blocks};
use super::validate::{count, prepare, Prepared};
use super::wire::MessageStreamEvent;
use super::{message, stream};

/// `POST /v1/messages`.
#[utoipa::path(post, path = "/v1/messages", tag = "anthropic",
    request_body(content = MessagesBody, content_type = "application/json"),
    responses((status = 200, description = "The reply, whole (JSON) or streamed (`stream: true`: \
        one event per `event:`/`data:` pair, named by its `type`)",
        content((MessageObject = "application/json"), (MessageStreamEvent = "text/event-stream")))))]
pub async fn create(
    State(state): State<AppState>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let m = state.model()?;
    let bytes = body_bytes(body, state.config().body_limit)?;
    let req: MessagesRequest = parse_body(&bytes)?;
    fields::check(&bytes, MESSAGES, &[struct_fields::<MessagesRequest>()])?;
    let mut prep = prepare(req, m, state.config())?;
    serving::constrain(&mut prep.job, prep.asked.take(), m).await?;
    observe::name_response(&prep.id);
    let tok = m.engine.tokenizer().clone();
    let choices = serving::submit(&prep.job, &m.engine).await?;
    if prep.job.stream {
        return Ok(stream::respond(run::merge(choices), prep, tok));
    }
    let out = run::collect_all(choices)
        .await?
        .pop()
        .ok_or_else(|| ApiError::Internal("a reply without its choice".into()))?;
    Ok(axum::Json(whole(&prep, &tok, out)?).into_response())
}

/// The whole reply.
fn whole(prep: &Prepared, tok: &Tokenizer, out: Outcome) -> Result<MessageObject, ApiError> {
    if out.reason == FinishReason::Abort {
        return Err(ApiError::Internal("the engine aborted the request".into()));
    }
    let outs = tools::outcome_outs(prep.job.tools.as_ref(), prep.job.reasoning.as_ref(), &out);
    let mut blocks = Blocks::new(prep.job.tools.as_ref().map(|t| t.family));
    let mut changes = Vec::new();
    for o in outs {
        blocks.push(o, &mut changes);
    }
    blocks.finish(&mut changes);
    let ids: Vec<u32> = out.tokens.iter().map(|t| t.id).collect();
    let stop = matched_stop(&prep.stops, tok, &ids, &out.text);
    let reason = stop_reason(out.reason, blocks.calls(), stop.as_deref());
    let usage = MessageUsage::new(
        prep.prompt_tokens,
        out.usage.cached_tokens,
        out.usage.completion_tokens,
    );
    Ok(message(prep, blocks.blocks, Some(reason), stop, usage))
}

/// `POST /v1/messages/count_tokens`: the prompt's length, as `/v1/messages` would render it.
#[utoipa::path(post, path = "/v1/messages/count_tokens", tag = "anthropic",
    request_body(content = CountTokensBody, content_type = "application/json"),
    responses((status = 200, description = "The prompt's length in tokens", body = TokenCount)))]
pub async fn count_tokens(
    State(state): State<AppState>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let m = state.model()?;
    let bytes = body_bytes(body, state.config().body_limit)?;
    let req: CountTokensRequest = parse_body(&bytes)?;
    fields::check(&bytes, MESSAGES, &[struct_fields::<CountTokensRequest>()])?;
    let input_tokens = count(&req, m)?;
    Ok(axum::Json(TokenCount { input_tokens }).into_response())
}
