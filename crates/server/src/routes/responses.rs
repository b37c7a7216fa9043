//! `/v1/responses`: create a response (streamed or whole), retrieve or delete a stored one.

use std::collections::HashMap;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Path, Query, State};
use axum::response::{IntoResponse, Response};

use crate::error::ApiError;
use crate::fields::{self, struct_fields, Route};
use crate::openai::ResponsesRequest;
use crate::responses::wire::Deleted;
use crate::responses::{prepare, stream};
use crate::run;
use crate::state::AppState;
use crate::validate::parse_body;

use super::body_bytes;

/// `POST /v1/responses`.
pub async fn create(
    State(state): State<AppState>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let m = state.model()?;
    let bytes = body_bytes(body, state.config().body_limit)?;
    let req: ResponsesRequest = parse_body(&bytes)?;
    fields::check(
        &bytes,
        Route::Responses,
        &[struct_fields::<ResponsesRequest>()],
    )?;
    let prep = prepare(req, m, state.config(), state.responses())?;
    let choices = run::start(&prep.job, &m.engine).await?;
    if prep.job.stream {
        return Ok(stream::respond(run::merge(choices), prep, state.clone()));
    }
    let out = run::collect_all(choices)
        .await?
        .pop()
        .ok_or_else(|| ApiError::Internal("a response without its choice".into()))?;
    let obj = prep.finish(out.text, out.reason, &out.usage);
    prep.keep(&obj, state.responses());
    Ok(axum::Json(obj).into_response())
}

/// `GET /v1/responses/{id}`: a stored response (not re-streamed: `stream=true` is refused).
pub async fn retrieve(
    State(state): State<AppState>,
    Path(id): Path<String>,
    Query(query): Query<HashMap<String, String>>,
) -> Result<Response, ApiError> {
    if query.get("stream").is_some_and(|v| v == "true") {
        return Err(ApiError::invalid(
            "stream",
            "streaming a stored response again is not supported",
        ));
    }
    let stored = state.responses().get(&id).ok_or_else(|| not_found(&id))?;
    Ok(axum::Json(stored.object).into_response())
}

/// `DELETE /v1/responses/{id}`.
pub async fn delete(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    if !state.responses().remove(&id) {
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
