//! Reading what a request carries: the body's bytes (413 past the limit), a JSON body as a
//! type, a path or query parameter; each failure an `ApiError` naming what was wrong.

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::http::StatusCode;
use serde::de::DeserializeOwned;

use super::error::ApiError;

/// Parses a JSON body; errors name the field (`param`) where parsing stopped.
pub fn parse_body<T: DeserializeOwned>(body: &[u8]) -> Result<T, ApiError> {
    let de = &mut serde_json::Deserializer::from_slice(body);
    serde_path_to_error::deserialize(de).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner();
        let param = (path != "." && !path.is_empty()).then_some(path);
        let message = if inner.is_syntax() || inner.is_eof() {
            format!("malformed JSON body: {inner}")
        } else {
            format!("invalid request body: {inner}")
        };
        ApiError::BadRequest {
            message,
            param,
            code: None,
        }
    })
}

/// A path or query parameter as the handler's type, or the OpenAI 400 naming `param` (axum's
/// own rejection is plain text, which no OpenAI client can read).
pub fn param<T, E: std::fmt::Display>(extracted: Result<T, E>, param: &str) -> Result<T, ApiError> {
    extracted.map_err(|e| ApiError::invalid(param, format!("invalid `{param}`: {e}")))
}

/// The request body, or 413 past the limit.
pub fn body_bytes(body: Result<Bytes, BytesRejection>, limit: usize) -> Result<Bytes, ApiError> {
    body.map_err(|rej| {
        if rej.status() == StatusCode::PAYLOAD_TOO_LARGE {
            ApiError::PayloadTooLarge { limit }
        } else {
            ApiError::bad(format!("cannot read the request body: {rej}"))
        }
    })
}
