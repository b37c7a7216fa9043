//! The per-request log line (`observe`), read back as JSON from a subscriber installed for the
//! test's thread: one line per request once it ends, carrying the caller's trace id, the
//! response id, token counts, engine timings, finish reasons and the outcome.

mod common;

use std::io::Write;
use std::sync::{Arc, Mutex};

use axum::body::Body;
use axum::http::{Request, StatusCode};
use common::*;
use serde_json::{json, Value};
use tower::ServiceExt;
use tracing_subscriber::layer::SubscriberExt;

const TRACE_ID: &str = "4bf92f3577b34da6a3ce929d0e0e4736";

#[derive(Clone, Default)]
struct Buf(Arc<Mutex<Vec<u8>>>);

impl Write for Buf {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.lock().expect("log buffer").extend_from_slice(b);
        Ok(b.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Buf {
    /// The request lines logged so far, parsed.
    fn requests(&self) -> Vec<Value> {
        let text = String::from_utf8(self.0.lock().expect("log buffer").clone()).expect("utf-8");
        text.lines()
            .map(|l| serde_json::from_str::<Value>(l).expect("each line is JSON"))
            .filter(|v| v["target"] == server::observe::TARGET)
            .collect()
    }
}

/// Installs a JSON log subscriber for this thread (the tests run on a current-thread runtime).
fn capture() -> (Buf, tracing::subscriber::DefaultGuard) {
    let buf = Buf::default();
    let w = buf.clone();
    let layer = tracing_subscriber::fmt::layer()
        .json()
        .flatten_event(true)
        .with_writer(move || w.clone());
    let guard = tracing::subscriber::set_default(tracing_subscriber::registry().with(layer));
    (buf, guard)
}

async fn call(
    app: &axum::Router,
    uri: &str,
    body: &Value,
    traceparent: Option<&str>,
) -> (StatusCode, String) {
    let mut req = Request::builder()
        .method("POST")
        .uri(uri)
        .header("content-type", "application/json");
    if let Some(tp) = traceparent {
        req = req.header("traceparent", tp);
    }
    let req = req
        .body(Body::from(body.to_string()))
        .expect("request builds");
    let resp = app
        .clone()
        .oneshot(req)
        .await
        .expect("router is infallible");
    let status = resp.status();
    let bytes = axum::body::to_bytes(resp.into_body(), usize::MAX)
        .await
        .expect("body reads");
    (status, String::from_utf8_lossy(&bytes).into_owned())
}

#[tokio::test]
async fn a_request_logs_one_line_with_its_trace_usage_and_timings() {
    let (logs, _guard) = capture();
    let app = server::router(tiny_state());
    let tp = format!("00-{TRACE_ID}-00f067aa0ba902b7-01");
    let body = json!({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4,
        "ignore_eos": true});
    let (s, text) = call(&app, "/v1/chat/completions", &body, Some(&tp)).await;
    assert_eq!(s, StatusCode::OK, "{text}");
    let resp: Value = serde_json::from_str(&text).expect("JSON body");

    let lines = logs.requests();
    assert_eq!(lines.len(), 1, "{lines:?}");
    let l = &lines[0];
    assert_eq!(l["id"], resp["id"]);
    assert_eq!(l["trace_id"], TRACE_ID);
    assert_eq!(l["model"], resp["model"]);
    assert_eq!(l["status"], 200);
    assert_eq!(l["outcome"], "ok");
    assert_eq!(l["prompt_tokens"], resp["usage"]["prompt_tokens"]);
    assert_eq!(l["output_tokens"], 4);
    assert_eq!(
        l["cached_tokens"],
        resp["usage"]["prompt_tokens_details"]["cached_tokens"]
    );
    assert_eq!(l["finish_reason"], "length");
    assert_eq!(l["preemptions"], 0);
    let secs = |k: &str| l[k].as_f64().unwrap_or_else(|| panic!("{k} in {l}"));
    assert!(secs("queue_s") <= secs("ttft_s"), "{l}");
    assert!(secs("ttft_s") <= secs("e2e_s"), "{l}");
    assert!(secs("decode_s") >= 0.0 && secs("prefill_s") >= 0.0, "{l}");
}

#[tokio::test]
async fn a_streamed_request_is_logged_when_its_stream_ends() {
    let (logs, _guard) = capture();
    let app = server::router(tiny_state());
    let body = json!({"prompt": "hello", "max_tokens": 3, "n": 2, "stream": true,
        "ignore_eos": true});
    let (s, text) = call(&app, "/v1/completions", &body, None).await;
    assert_eq!(s, StatusCode::OK, "{text}");
    assert!(text.contains("[DONE]"));
    let lines = logs.requests();
    assert_eq!(lines.len(), 1, "{lines:?}");
    let l = &lines[0];
    assert_eq!(l["outcome"], "ok");
    assert_eq!(l["output_tokens"], 6, "two choices of three tokens");
    assert_eq!(l["finish_reason"], "length,length");
    assert!(
        l.get("trace_id").is_none(),
        "no traceparent, no export: {l}"
    );
    assert!(
        l["id"].as_str().is_some_and(|id| id.starts_with("cmpl-")),
        "{l}"
    );
}

#[tokio::test]
async fn refused_and_abandoned_requests_are_logged_with_their_outcome() {
    let (logs, _guard) = capture();
    let app = server::router(tiny_state());
    let (s, _) = call(
        &app,
        "/v1/completions",
        &json!({"prompt": "x", "max_tokens": -1}),
        None,
    )
    .await;
    assert_eq!(s, StatusCode::BAD_REQUEST);

    // A stream whose client reads the headers and leaves.
    let body = json!({"prompt": "hello", "max_tokens": 200, "stream": true, "ignore_eos": true});
    let req = Request::builder()
        .method("POST")
        .uri("/v1/completions")
        .header("content-type", "application/json")
        .body(Body::from(body.to_string()))
        .expect("request builds");
    let resp = app
        .clone()
        .oneshot(req)
        .await
        .expect("router is infallible");
    assert_eq!(resp.status(), StatusCode::OK);
    drop(resp);

    let lines = logs.requests();
    assert_eq!(lines.len(), 2, "{lines:?}");
    assert_eq!(lines[0]["status"], 400);
    assert_eq!(lines[0]["outcome"], "error");
    assert_eq!(lines[0]["error"], "invalid_request");
    assert_eq!(lines[1]["status"], 200);
    assert_eq!(lines[1]["outcome"], "cancelled");
}
