//! `/v1/responses`: create a response (streamed or whole), retrieve or delete a stored one.

use axum::body::Bytes;
use axum::extract::rejection::{BytesRejection, PathRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use utoipa::IntoParams;

use super::request::RESPONSES;
use crate::base::parse_body;
use crate::base::ApiError;
use crate::protocol::fields::{self, struct_fields};
use crate::responses::request::ResponsesBody;
use crate::responses::request::ResponsesRequest;
use crate::responses::wire::{Deleted, ResponseObject, Status, StreamEvent};
use crate::responses::{prepare, stream};
use crate::serving::run;
use crate::serving::state::AppState;
use crate::serving::tools;

use super::store;
use crate::base::{body_bytes, param};
use crate::serving;

/// `POST /v1/responses`.
#[utoipa::path(post, path = "/v1/responses", tag = "openai",
    request_body(content = ResponsesBody, content_type = "application/json"),
    responses((status = 200, description = "The response, whole (JSON) or streamed \
        (`stream: true`: one event per `event:`/`data:` pair, named by its `type`)",
        content((ResponseObject = "application/json"), (StreamEvent = "text/event-stream")))))]
pub async fn create(
    State(state): State<AppState>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let m = state.model()?;
    let bytes = body_bytes(body, state.config().body_limit)?;
    let req: ResponsesRequest = parse_body(&bytes)?;
    fields::check(&bytes, RESPONSES, &[struct_fields::<ResponsesRequest>()])?;
    let mut prep = prepare(req, m, state.config(), &store::of(&state))?;
    serving::constrain(&mut prep.job, prep.asked.take(), m).await?;
    let choices = serving::submit(&prep.job, &m.engine).await?;
    if prep.job.stream {
        return Ok(stream::respond(run::merge(choices), prep, state.clone()));
    }
    let out = run::collect_all(choices)
        .await?
        .pop()
        .ok_or_else(|| ApiError::Internal("a response without its choice".into()))?;
    let outs = tools::outcome_outs(prep.job.tools.as_ref(), prep.job.reasoning.as_ref(), &out);
    let mut items = prep.items();
    let mut changes = Vec::new();
    for o in outs {
        items.push(o, &mut changes);
    }
    items.finish(Status::of(out.reason).finished_item(), &mut changes);
    let obj = prep.finish(items.items, out.reason, &out.usage);
    prep.keep(&obj, &store::of(&state));
    Ok(axum::Json(obj).into_response())
}

/// The query of `GET /v1/responses/{id}`: any other parameter is a 400.
#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct RetrieveQuery {
    /// Only `false`: a stored response is not streamed again.
    stream: Option<bool>,
}

/// `GET /v1/responses/{id}`: a stored response (not re-streamed: `stream=true` is refused).
#[utoipa::path(get, path = "/v1/responses/{id}", tag = "openai",
    params(("id" = String, Path, description = "A stored response's id (`resp_…`)"),
        RetrieveQuery),
    responses((status = 200, description = "The stored response", body = ResponseObject)))]
pub async fn retrieve(
    State(state): State<AppState>,
    id: Result<Path<String>, PathRejection>,
    query: Result<Query<RetrieveQuery>, QueryRejection>,
) -> Result<Response, ApiError> {
    let Path(id) = param(id, "id")?;
    let Query(query) = param(query, "stream")?;
    if query.stream == Some(true) {
        return Err(ApiError::invalid(
            "stream",
            "streaming a stored response again is not supported",
        ));
    }
    let stored = store::of(&state).get(&id).ok_or_else(|| not_found(&id))?;
    Ok(axum::Json(stored.object).into_response())
}

/// `DELETE /v1/responses/{id}`.
#[utoipa::path(delete, path = "/v1/responses/{id}", tag = "openai",
    params(("id" = String, Path, description = "A stored response's id (`resp_…`)")),
    responses((status = 200, description = "The response was removed", body = Deleted)))]
pub async fn delete(
    State(state): State<AppState>,
    id: Result<Path<String>, PathRejection>,
) -> Result<Response, ApiError> {
    let Path(id) = param(id, "id")?;
    if !store::of(&state).remove(&id) {
        return Err(not_found(&id));
    }
    let body = Deleted {
        id,
        object: "response",
        deleted: true,
    };
    Ok(axum::Json(body).into_response())
}

fn not_found(id: &str) -> ApiError {
    ApiError::Missing {
        message: format!("no stored response with id `{id}`"),
        param: None,
        code: None,
    }
}
