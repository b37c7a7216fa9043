//! `ApiError`: the one error type of the HTTP layer.
//!
//! Every failure a handler can meet becomes an `ApiError`, and this file alone decides its HTTP
//! status, its OpenAI-style body `{"error": {"message", "type", "param", "code"}}` and the label
//! it is counted under in `tessera_request_errors_total`, and on the Messages API its Anthropic
//! body `{"type": "error", "error": {"type", "message"}}` and status (the response of an error
//! carries the error itself, so the app's layer for those routes re-renders it, whichever layer
//! it came from). Internal details are logged, never sent: a client sees "internal error" and
//! the log has the cause.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use engine::EngineError;
use serde::Serialize;
use utoipa::ToSchema;

/// Why a request failed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ApiError {
    /// The request is malformed or out of range (400).
    #[error("{message}")]
    BadRequest {
        message: String,
        /// The offending field, when one is to blame.
        param: Option<String>,
        /// A machine-readable reason, e.g. `model_not_found`.
        code: Option<&'static str>,
    },
    /// Missing or wrong API key (401).
    #[error("invalid or missing API key")]
    Unauthorized,
    /// No such route (404).
    #[error("no route for {0}")]
    NotFound(String),
    /// No such model or stored response (404, e.g. code `model_not_found`).
    #[error("{message}")]
    Missing {
        message: String,
        param: Option<String>,
        code: Option<&'static str>,
    },
    /// The body is larger than the limit (413).
    #[error("the request body exceeds {limit} bytes")]
    PayloadTooLarge { limit: usize },
    /// The waiting line is full (429, with Retry-After).
    #[error("{0}")]
    Overloaded(String),
    /// The model is still loading (503).
    #[error("the model is still loading")]
    NotReady,
    /// The server is shutting down (503).
    #[error("the server is shutting down")]
    ShuttingDown,
    /// The body did not arrive within `--body-read-timeout` (408).
    #[error("the request body did not arrive within {secs} s")]
    BodyTimeout { secs: u64 },
    /// The request did not finish within `--request-timeout` (504).
    #[error("the request did not finish within the server's {secs} s deadline")]
    Timeout { secs: u64 },
    /// A bug or an engine failure (500); the cause is logged, not sent.
    #[error("internal error: {0}")]
    Internal(String),
}

/// Marks an error response so the metrics layer can count it by label.
#[derive(Clone, Copy, Debug)]
pub struct ErrorLabel(pub &'static str);

/// Every label `ApiError::label` can return (so the metrics show zeros too).
pub const ERROR_LABELS: &[&str] = &[
    "invalid_request",
    "unauthorized",
    "not_found",
    "payload_too_large",
    "overloaded",
    "not_ready",
    "shutting_down",
    "timeout",
    "internal",
];

impl ApiError {
    /// A 400 blaming `param`.
    pub fn invalid(param: &str, message: impl Into<String>) -> ApiError {
        ApiError::BadRequest {
            message: message.into(),
            param: Some(param.to_string()),
            code: None,
        }
    }

    /// A 400 not tied to one field.
    pub fn bad(message: impl Into<String>) -> ApiError {
        ApiError::BadRequest {
            message: message.into(),
            param: None,
            code: None,
        }
    }

    pub fn status(&self) -> StatusCode {
        match self {
            ApiError::BadRequest { .. } => StatusCode::BAD_REQUEST,
            ApiError::Unauthorized => StatusCode::UNAUTHORIZED,
            ApiError::NotFound(_) | ApiError::Missing { .. } => StatusCode::NOT_FOUND,
            ApiError::PayloadTooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            ApiError::Overloaded(_) => StatusCode::TOO_MANY_REQUESTS,
            ApiError::NotReady | ApiError::ShuttingDown => StatusCode::SERVICE_UNAVAILABLE,
            ApiError::BodyTimeout { .. } => StatusCode::REQUEST_TIMEOUT,
            ApiError::Timeout { .. } => StatusCode::GATEWAY_TIMEOUT,
            ApiError::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    /// The label in `tessera_request_errors_total{type=...}`.
    pub fn label(&self) -> &'static str {
        match self {
            ApiError::BadRequest { .. } => "invalid_request",
            ApiError::Unauthorized => "unauthorized",
            ApiError::NotFound(_) | ApiError::Missing { .. } => "not_found",
            ApiError::PayloadTooLarge { .. } => "payload_too_large",
            ApiError::Overloaded(_) => "overloaded",
            ApiError::NotReady => "not_ready",
            ApiError::ShuttingDown => "shutting_down",
            ApiError::BodyTimeout { .. } | ApiError::Timeout { .. } => "timeout",
            ApiError::Internal(_) => "internal",
        }
    }

    /// OpenAI's `type` field.
    fn kind(&self) -> &'static str {
        match self {
            ApiError::BadRequest { .. }
            | ApiError::NotFound(_)
            | ApiError::Missing { .. }
            | ApiError::PayloadTooLarge { .. } => "invalid_request_error",
            ApiError::Unauthorized => "authentication_error",
            ApiError::Overloaded(_) => "rate_limit_error",
            ApiError::NotReady | ApiError::ShuttingDown => "service_unavailable",
            ApiError::BodyTimeout { .. } | ApiError::Timeout { .. } => "timeout_error",
            ApiError::Internal(_) => "internal_error",
        }
    }

    /// Anthropic's error `type` and status on the Messages API: its own names, and 529 for a
    /// full waiting line (Anthropic's `overloaded_error`; its SDK retries it like a 429).
    pub fn anthropic(&self) -> (StatusCode, &'static str) {
        let status = self.status();
        let kind = match self {
            ApiError::BadRequest { .. } => "invalid_request_error",
            ApiError::Unauthorized => "authentication_error",
            ApiError::NotFound(_) | ApiError::Missing { .. } => "not_found_error",
            ApiError::PayloadTooLarge { .. } => "request_too_large",
            ApiError::Overloaded(_) => {
                return (OVERLOADED, "overloaded_error");
            }
            ApiError::NotReady | ApiError::ShuttingDown => "overloaded_error",
            ApiError::BodyTimeout { .. } | ApiError::Timeout { .. } => "timeout_error",
            ApiError::Internal(_) => "api_error",
        };
        (status, kind)
    }

    /// Anthropic's error body, `{"type": "error", "error": {"type", "message"}}` (the field a
    /// 400 blames is named in the message), with the request id when one is in scope.
    pub fn anthropic_body(&self) -> AnthropicErrorBody {
        let mut message = self.body().error.message;
        if let ApiError::BadRequest { param: Some(p), .. } = self {
            if !message.contains(p.as_str()) {
                message = format!("{p}: {message}");
            }
        }
        AnthropicErrorBody {
            kind: "error",
            error: AnthropicError {
                kind: self.anthropic().1,
                message,
            },
            request_id: super::context::request_id().map(|id| id.to_string()),
        }
    }

    /// The response of this error on the Messages API.
    pub fn anthropic_response(&self) -> Response {
        let mut resp = (self.anthropic().0, axum::Json(self.anthropic_body())).into_response();
        if matches!(self, ApiError::Overloaded(_)) {
            resp.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
        }
        resp.extensions_mut().insert(ErrorLabel(self.label()));
        resp
    }

    /// The body sent to the client.
    pub fn body(&self) -> ErrorBody {
        let (param, code) = match self {
            ApiError::BadRequest { param, code, .. } | ApiError::Missing { param, code, .. } => {
                (param.clone(), *code)
            }
            _ => (None, None),
        };
        let message = match (self, super::context::request_id()) {
            (ApiError::Internal(_), Some(id)) => format!("internal error (request id {id})"),
            (ApiError::Internal(_), None) => "internal error".to_string(),
            (other, _) => other.to_string(),
        };
        ErrorBody {
            error: ErrorDetail {
                message,
                kind: self.kind(),
                param,
                code,
            },
        }
    }
}

/// OpenAI's error body, `{"error": {...}}`; also sent in-band when a stream fails.
#[derive(Debug, Serialize, ToSchema)]
pub struct ErrorBody {
    pub error: ErrorDetail,
}

/// The inside of an error body; `param` and `code` are `null` when they do not apply.
#[derive(Debug, Serialize, ToSchema)]
pub struct ErrorDetail {
    pub message: String,
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub param: Option<String>,
    pub code: Option<&'static str>,
}

/// Anthropic's status for `overloaded_error`.
const OVERLOADED: StatusCode = match StatusCode::from_u16(529) {
    Ok(s) => s,
    Err(_) => StatusCode::SERVICE_UNAVAILABLE,
};

/// Anthropic's error body, `{"type": "error", "error": {"type", "message"}, "request_id"}`;
/// also the data of an `error` event when a Messages stream fails.
#[derive(Debug, Serialize, ToSchema)]
pub struct AnthropicErrorBody {
    /// Always `error`.
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub error: AnthropicError,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub request_id: Option<String>,
}

/// The inside of Anthropic's error body.
#[derive(Debug, Serialize, ToSchema)]
pub struct AnthropicError {
    /// `invalid_request_error`, `authentication_error`, `not_found_error`,
    /// `request_too_large`, `overloaded_error`, `timeout_error` or `api_error`.
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub message: String,
}

impl From<EngineError> for ApiError {
    fn from(e: EngineError) -> ApiError {
        match e {
            EngineError::InvalidRequest(m) => ApiError::bad(m),
            EngineError::Overloaded(m) => ApiError::Overloaded(m),
            EngineError::Stopped => ApiError::ShuttingDown,
            EngineError::Internal(m) => ApiError::Internal(m),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        if let ApiError::Internal(cause) = &self {
            let id = super::context::request_id();
            tracing::error!(request_id = id.as_deref(), "internal error: {cause}");
        }
        let mut resp = (self.status(), axum::Json(self.body())).into_response();
        if matches!(self, ApiError::Overloaded(_)) {
            resp.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
        }
        if matches!(self, ApiError::Unauthorized) {
            resp.headers_mut()
                .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        resp.extensions_mut().insert(ErrorLabel(self.label()));
        // For the layer that answers the Messages API's routes in Anthropic's shape.
        resp.extensions_mut().insert(self);
        resp
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn internal_errors_hide_their_cause_from_clients() {
        let e = ApiError::Internal("secret path /x".into());
        assert_eq!(e.status(), StatusCode::INTERNAL_SERVER_ERROR);
        let text = serde_json::to_string(&e.body()).expect("serializes");
        assert!(!text.contains("secret"));
    }

    #[test]
    fn bad_request_body_names_the_param() {
        let body = serde_json::to_value(ApiError::invalid("top_p", "must be in (0, 1]").body())
            .expect("serializes");
        assert_eq!(body["error"]["param"], "top_p");
        assert_eq!(body["error"]["type"], "invalid_request_error");
        assert!(body["error"]["code"].is_null());
    }

    #[test]
    fn anthropic_bodies_name_the_type_and_the_field() {
        let e = ApiError::invalid("max_tokens", "max_tokens is required");
        let body = serde_json::to_value(e.anthropic_body()).expect("serializes");
        assert_eq!(body["type"], "error");
        assert_eq!(body["error"]["type"], "invalid_request_error");
        assert_eq!(body["error"]["message"], "max_tokens is required");
        let e = ApiError::invalid("top_p", "must be in (0, 1]");
        let body = serde_json::to_value(e.anthropic_body()).expect("serializes");
        assert_eq!(body["error"]["message"], "top_p: must be in (0, 1]");
        assert_eq!(
            ApiError::Unauthorized.anthropic(),
            (StatusCode::UNAUTHORIZED, "authentication_error")
        );
        assert_eq!(
            ApiError::Overloaded("full".into()).anthropic().0.as_u16(),
            529
        );
        let missing = ApiError::Missing {
            message: "no model".into(),
            param: None,
            code: None,
        };
        assert_eq!(
            missing.anthropic(),
            (StatusCode::NOT_FOUND, "not_found_error")
        );
        let e = ApiError::Internal("secret".into());
        assert_eq!(e.anthropic().1, "api_error");
        let text = serde_json::to_string(&e.anthropic_body()).expect("serializes");
        assert!(!text.contains("secret"));
    }

    #[test]
    fn every_variant_has_a_listed_label() {
        let all = [
            ApiError::bad("x"),
            ApiError::Unauthorized,
            ApiError::NotFound("/x".into()),
            ApiError::Missing {
                message: "x".into(),
                param: None,
                code: None,
            },
            ApiError::PayloadTooLarge { limit: 1 },
            ApiError::Overloaded("x".into()),
            ApiError::NotReady,
            ApiError::ShuttingDown,
            ApiError::BodyTimeout { secs: 1 },
            ApiError::Timeout { secs: 1 },
            ApiError::Internal("x".into()),
        ];
        for e in all {
            assert!(ERROR_LABELS.contains(&e.label()), "{e:?}");
        }
    }
}
