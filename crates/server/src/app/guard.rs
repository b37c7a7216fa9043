//! Per-request protections: a request id, the body limit, the deadline and panic containment.
//!
//! `layer` wraps every route. It
//! - names the request: the client's `x-request-id` when it is a sane token (1 to 128 of
//!   `A-Z a-z 0-9 . _ : -`), else a fresh `req-<16 hex digits>`; the id is sent back in the
//!   `x-request-id` response header and appears in internal-error messages, so a client's
//!   report can be matched with the server log;
//! - refuses a request for a key-protected route without the key before reading its body (401,
//!   `Connection: close`; see `auth::needs_key_before_body`);
//! - reads the whole body before any handler runs, within `body_read_timeout`. A body over
//!   `body_limit` is answered 413 in the OpenAI error shape, but only after the rest of it has
//!   been read and discarded (up to `DRAIN_LIMIT` bytes past the limit): a server that answers
//!   and closes while the client is still sending makes the client's kernel see a reset, and the
//!   client never reads the 413. A client that sent `Expect: 100-continue` has not sent the body
//!   yet and gets the 413 at once (it then never sends it);
//! - bounds the request by `request_timeout` (when set): a whole response not ready by then is
//!   answered 504, and a stream still running then ends with an in-band error (the streams read
//!   the deadline with `base::context::deadline`); either way the engine's receivers are
//!   dropped, which aborts the requests;
//! - turns a panic in a handler into a 500 with the request id (the connection and the server
//!   go on; the engine thread contains its own panics).
//!
//! The id and the deadline live in a task-local while the handler runs (`base::context`:
//! `current` / `within` carry them into response streams, which are polled after the handler
//! returned).

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, HeaderName, HeaderValue};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use futures_util::{FutureExt, StreamExt};

use crate::app::auth;
use crate::base::context::{panic_message, within, Context};
use crate::base::ApiError;
use crate::serving::state::AppState;

/// The response header carrying the request id.
pub static REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");

/// Most bytes read and discarded past the body limit before the 413 is sent; a larger body
/// gets its 413 with `Connection: close` at that point (its client may then see a reset).
pub const DRAIN_LIMIT: u64 = 64 << 20;

/// Middleware: see the module comment.
pub async fn layer(State(state): State<AppState>, req: Request, next: Next) -> Response {
    let cfg = state.config();
    let id: Arc<str> = client_id(req.headers()).unwrap_or_else(fresh_id).into();
    let timeout = cfg.request_timeout;
    let ctx = Context::new(id.clone(), timeout);
    let (limit, body_timeout) = (cfg.body_limit, cfg.body_read_timeout);
    let api_key = cfg.api_key.clone();
    let mut resp = within(Some(ctx.clone()), async move {
        if let Some(key) = &api_key {
            if auth::needs_key_before_body(req.method()) && !auth::authorized(req.headers(), key) {
                // Before reading a byte of the body; its rest stays unread.
                return closing(ApiError::Unauthorized.into_response());
            }
        }
        let req = match read_body(req, limit, body_timeout).await {
            Ok(r) => r,
            Err(e) => return e,
        };
        let run = AssertUnwindSafe(next.run(req)).catch_unwind();
        let outcome = match ctx.deadline() {
            Some((at, t)) => match tokio::time::timeout_at(at, run).await {
                Ok(o) => o,
                Err(_) => return ApiError::Timeout { secs: t.as_secs() }.into_response(),
            },
            None => run.await,
        };
        outcome.unwrap_or_else(|panic| {
            let what = panic_message(panic.as_ref());
            ApiError::Internal(format!("a handler panicked: {what}")).into_response()
        })
    })
    .await;
    if let Ok(v) = HeaderValue::from_str(&id) {
        resp.headers_mut().insert(REQUEST_ID.clone(), v);
    }
    resp
}

/// The client's `x-request-id`, when it is a sane token.
fn client_id(headers: &HeaderMap) -> Option<String> {
    let v = headers.get(&REQUEST_ID)?.to_str().ok()?;
    let ok = (1..=128).contains(&v.len())
        && v.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._:-".contains(&b));
    ok.then(|| v.to_string())
}

/// A new id: `req-` and 16 hex digits, unique within the process and unpredictable across
/// processes (a per-process random hash key over a counter).
fn fresh_id() -> String {
    static KEYS: OnceLock<RandomState> = OnceLock::new();
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let mut h = KEYS.get_or_init(RandomState::new).build_hasher();
    h.write_u64(NEXT.fetch_add(1, Relaxed));
    format!("req-{:016x}", h.finish())
}

/// The request with its body read whole, or the response refusing it.
async fn read_body(req: Request, limit: usize, timeout: Duration) -> Result<Request, Response> {
    let (parts, body) = req.into_parts();
    let too_large = || ApiError::PayloadTooLarge { limit }.into_response();
    let declared = parts
        .headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > limit as u64) {
        let waits = parts
            .headers
            .get(header::EXPECT)
            .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"100-continue"));
        // A client waiting for 100 Continue has sent nothing: refuse before it does. One
        // announcing more than can be drained is refused at once too.
        if waits || declared.is_some_and(|n| n > limit as u64 + DRAIN_LIMIT) {
            return Err(closing(too_large()));
        }
    }
    let read = async {
        let mut stream = body.into_data_stream();
        let mut buf = Vec::with_capacity(declared.map_or(0, |n| n.min(limit as u64) as usize));
        while let Some(chunk) = stream.next().await {
            let chunk = chunk.map_err(|e| {
                ApiError::bad(format!("cannot read the request body: {e}")).into_response()
            })?;
            if buf.len() + chunk.len() > limit {
                let mut seen = (buf.len() + chunk.len()) as u64;
                while seen <= limit as u64 + DRAIN_LIMIT {
                    match stream.next().await {
                        Some(Ok(c)) => seen += c.len() as u64,
                        // Read to the end (or the client gave up): the 413 can be read.
                        _ => return Err(too_large()),
                    }
                }
                return Err(closing(too_large()));
            }
            buf.extend_from_slice(&chunk);
        }
        Ok(Bytes::from(buf))
    };
    match tokio::time::timeout(timeout, read).await {
        Ok(Ok(bytes)) => Ok(Request::from_parts(parts, Body::from(bytes))),
        Ok(Err(resp)) => Err(resp),
        Err(_) => Err(closing(
            ApiError::BodyTimeout {
                secs: timeout.as_secs(),
            }
            .into_response(),
        )),
    }
}

/// `resp` with `Connection: close` (the rest of the body stays unread).
fn closing(mut resp: Response) -> Response {
    resp.headers_mut()
        .insert(header::CONNECTION, HeaderValue::from_static("close"));
    resp
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::base::context::request_id;
    use axum::http::StatusCode;
    use axum::routing::get;
    use axum::Router;
    use tower::ServiceExt;

    /// A router with the guard around test-only handlers (a panicking one, a slow one).
    fn app(cfg: crate::ServerConfig) -> Router {
        let state = AppState::new(cfg);
        Router::new()
            .route("/ok", get(|| async { "fine" }))
            .route(
                "/panic",
                get(|| async {
                    if request_id().is_some() {
                        panic!("template exploded");
                    }
                    "unreachable without a request id"
                }),
            )
            .route(
                "/slow",
                get(|| async {
                    tokio::time::sleep(Duration::from_secs(5)).await;
                    "late"
                }),
            )
            .layer(axum::middleware::from_fn_with_state(state.clone(), layer))
            .with_state(state)
    }

    async fn call(app: &Router, path: &str) -> (StatusCode, HeaderMap, serde_json::Value) {
        let req = Request::builder()
            .uri(path)
            .body(Body::empty())
            .expect("request");
        let resp = app.clone().oneshot(req).await.expect("infallible");
        let (status, headers) = (resp.status(), resp.headers().clone());
        let bytes = axum::body::to_bytes(resp.into_body(), usize::MAX)
            .await
            .expect("body");
        let v = serde_json::from_slice(&bytes).unwrap_or(serde_json::Value::Null);
        (status, headers, v)
    }

    #[tokio::test]
    async fn a_panicking_handler_is_a_500_naming_the_request_and_serving_goes_on() {
        let app = app(crate::ServerConfig::default());
        let (status, headers, body) = call(&app, "/panic").await;
        assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR);
        let id = headers
            .get(&REQUEST_ID)
            .and_then(|v| v.to_str().ok())
            .expect("an id header");
        assert_eq!(body["error"]["type"], "internal_error");
        let msg = body["error"]["message"].as_str().expect("a message");
        assert!(msg.contains(id), "{msg} should name {id}");
        assert!(
            !msg.contains("exploded"),
            "the cause is logged, not sent: {msg}"
        );
        let (status, _, _) = call(&app, "/ok").await;
        assert_eq!(status, StatusCode::OK);
    }

    #[tokio::test]
    async fn a_request_past_its_deadline_gets_504() {
        let app = app(crate::ServerConfig {
            request_timeout: Some(Duration::from_millis(200)),
            ..crate::ServerConfig::default()
        });
        let t0 = std::time::Instant::now();
        let (status, _, body) = call(&app, "/slow").await;
        assert_eq!(status, StatusCode::GATEWAY_TIMEOUT);
        assert_eq!(body["error"]["type"], "timeout_error");
        assert!(t0.elapsed() < Duration::from_secs(2));
        assert_eq!(call(&app, "/ok").await.0, StatusCode::OK);
    }

    #[test]
    fn client_ids_are_kept_only_when_sane() {
        let mut h = HeaderMap::new();
        h.insert(&REQUEST_ID, HeaderValue::from_static("abc-1.2:3_x"));
        assert_eq!(client_id(&h).as_deref(), Some("abc-1.2:3_x"));
        h.insert(&REQUEST_ID, HeaderValue::from_static("has space"));
        assert_eq!(client_id(&h), None);
        assert_ne!(fresh_id(), fresh_id());
    }
}
