//! What OpenAI, vLLM and llama-server clients rely on beyond the basic routes: the routes
//! without `/v1`, served model names, 404 for an unknown model, one model by id, refused
//! unsupported fields, CORS, and the default `max_tokens` bounded by the KV pool.

mod common;

use axum::body::Body;
use axum::http::{HeaderMap, Request, StatusCode};
use axum::Router;
use common::*;
use engine::EngineConfig;
use serde_json::{json, Value};
use server::ServerConfig;
use tower::ServiceExt;

/// Sends a request with extra headers; returns status, headers and body text.
async fn send_with(
    app: &Router,
    method: &str,
    uri: &str,
    headers: &[(&str, &str)],
    body: String,
) -> (StatusCode, HeaderMap, String) {
    let mut req = Request::builder().method(method).uri(uri);
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let req = req.body(Body::from(body)).expect("request builds");
    let resp = app.clone().oneshot(req).await.expect("infallible");
    let status = resp.status();
    let headers = resp.headers().clone();
    let bytes = axum::body::to_bytes(resp.into_body(), usize::MAX)
        .await
        .expect("body reads");
    (
        status,
        headers,
        String::from_utf8_lossy(&bytes).into_owned(),
    )
}

#[tokio::test]
async fn the_openai_routes_answer_without_the_v1_prefix_too() {
    let app = server::router(tiny_state());
    let body = json!({"prompt": "hello", "max_tokens": 3, "temperature": 0, "ignore_eos": true});
    let (s, a) = post(&app, "/completions", &body).await;
    assert_eq!(s, StatusCode::OK, "{a}");
    let (_, b) = post(&app, "/v1/completions", &body).await;
    assert_eq!(a["choices"][0]["text"], b["choices"][0]["text"]);
    let chat = json!({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2});
    let (s, c) = post(&app, "/chat/completions", &chat).await;
    assert_eq!(s, StatusCode::OK, "{c}");
    assert_eq!(c["object"], "chat.completion");
    let (s, models) = get(&app, "/models").await;
    assert_eq!(s, StatusCode::OK);
    assert!(models.contains("\"object\":\"list\""), "{models}");
}

#[tokio::test]
async fn one_model_by_id_and_an_unknown_one_is_a_404() {
    let state = tiny_state();
    let id = model_id(&state);
    let app = server::router(state);
    for prefix in ["/v1", ""] {
        let (s, text) = get(&app, &format!("{prefix}/models/{id}")).await;
        assert_eq!(s, StatusCode::OK, "{text}");
        let card: Value = serde_json::from_str(&text).expect("json");
        assert_eq!(card["id"], id.as_str());
        assert_eq!(card["object"], "model");
        assert_eq!(card["max_model_len"], 256);
    }
    let (s, text) = get(&app, "/v1/models/gpt-9").await;
    let b: Value = serde_json::from_str(&text).expect("json");
    assert_error(s, &b, StatusCode::NOT_FOUND, Some("model"));
    assert_eq!(b["error"]["code"], "model_not_found");
    assert_eq!(b["error"]["type"], "invalid_request_error");
}

#[tokio::test]
async fn served_model_names_are_all_accepted_and_the_first_is_reported() {
    let cfg = ServerConfig {
        served_model_names: vec!["first".into(), "second".into()],
        ..ServerConfig::default()
    };
    let state = state_with(cfg, engine_config(), Some(TEST_TEMPLATE));
    let root = state.loaded().expect("loaded").root.clone();
    let app = server::router(state);
    let (_, text) = get(&app, "/v1/models").await;
    let list: Value = serde_json::from_str(&text).expect("json");
    let ids: Vec<&str> = list["data"]
        .as_array()
        .expect("data")
        .iter()
        .filter_map(|c| c["id"].as_str())
        .collect();
    assert_eq!(ids, ["first", "second"]);
    assert_eq!(list["data"][1]["root"], root.as_str());
    let body = json!({"model": "second", "messages": [{"role": "user", "content": "hi"}],
        "max_tokens": 2});
    let (s, b) = post(&app, "/v1/chat/completions", &body).await;
    assert_eq!(s, StatusCode::OK, "{b}");
    assert_eq!(b["model"], "first");
    // The file name is no longer a name of the model.
    let body = json!({"model": root, "prompt": "x", "max_tokens": 1});
    let (s, b) = post(&app, "/v1/completions", &body).await;
    assert_error(s, &b, StatusCode::NOT_FOUND, Some("model"));
}

#[tokio::test]
async fn fields_that_would_change_the_output_are_refused_by_name() {
    let app = server::router(tiny_state());
    let chat = |extra: Value| {
        let mut b = json!({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2});
        for (k, v) in extra.as_object().expect("object") {
            b[k] = v.clone();
        }
        b
    };
    let refused = [
        (
            "/v1/chat/completions",
            chat(json!({"response_format": {"type": "xml"}})),
            "response_format",
        ),
        (
            "/v1/chat/completions",
            chat(json!({"tools": [{"type": "function", "function": {"name": "f"}}]})),
            "tools",
        ),
        (
            "/v1/chat/completions",
            chat(json!({"tool_choice": "required"})),
            "tool_choice",
        ),
        (
            "/v1/chat/completions",
            // A schema the grammar library cannot compile.
            chat(json!({"guided_json": {"type": "strnig"}})),
            "guided_json",
        ),
        (
            "/v1/chat/completions",
            chat(json!({"guided_whitespace_pattern": " "})),
            "guided_whitespace_pattern",
        ),
        (
            "/v1/completions",
            json!({"prompt": "x", "max_tokens": 2, "best_of": 3}),
            "best_of",
        ),
        (
            "/v1/completions",
            json!({"prompt": "x", "max_tokn": 2}),
            "max_tokn",
        ),
        (
            "/tokenize",
            json!({"prompt": "x", "return_token_strs": true}),
            "return_token_strs",
        ),
    ];
    for (uri, body, param) in refused {
        let (s, b) = post(&app, uri, &body).await;
        assert_error(s, &b, StatusCode::BAD_REQUEST, Some(param));
    }
    // Accepted and ignored, no-op values, and nulls pass.
    let fine = chat(json!({"user": "u", "metadata": {"k": "v"}, "store": false,
        "response_format": {"type": "text"}, "tools": [], "tool_choice": "none",
        "parallel_tool_calls": true, "service_tier": "auto", "seed": null, "functions": null}));
    let (s, b) = post(&app, "/v1/chat/completions", &fine).await;
    assert_eq!(s, StatusCode::OK, "{b}");
}

#[tokio::test]
async fn cors_preflights_need_no_key_and_only_allowed_origins_get_headers() {
    let cfg = ServerConfig {
        api_key: Some("sekrit".into()),
        allowed_origins: vec!["http://ok.example".into()],
        ..ServerConfig::default()
    };
    let app = server::router(state_with(cfg, engine_config(), Some(TEST_TEMPLATE)));
    let preflight = |origin: &'static str| {
        [
            ("origin", origin),
            ("access-control-request-method", "POST"),
            (
                "access-control-request-headers",
                "authorization, content-type",
            ),
        ]
    };
    let (s, h, _) = send_with(
        &app,
        "OPTIONS",
        "/v1/chat/completions",
        &preflight("http://ok.example"),
        String::new(),
    )
    .await;
    assert!(s.is_success(), "{s}");
    assert_eq!(h["access-control-allow-origin"], "http://ok.example");
    let allowed_headers = h["access-control-allow-headers"].to_str().expect("ascii");
    assert!(
        allowed_headers.contains("authorization"),
        "{allowed_headers}"
    );
    assert!(h["access-control-allow-methods"]
        .to_str()
        .is_ok_and(|m| m.contains("POST")));
    let (s, h, _) = send_with(
        &app,
        "OPTIONS",
        "/v1/chat/completions",
        &preflight("http://evil.example"),
        String::new(),
    )
    .await;
    assert!(s.is_success(), "{s}");
    assert!(h.get("access-control-allow-origin").is_none(), "{h:?}");
    // The actual request: headers for the allowed origin, on errors too; the key still counts.
    let auth = ("authorization", "Bearer sekrit");
    let (s, h, _) = send_with(
        &app,
        "GET",
        "/v1/models",
        &[("origin", "http://ok.example"), auth],
        String::new(),
    )
    .await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(h["access-control-allow-origin"], "http://ok.example");
    let (s, h, _) = send_with(
        &app,
        "GET",
        "/v1/models",
        &[("origin", "http://ok.example")],
        String::new(),
    )
    .await;
    assert_eq!(s, StatusCode::UNAUTHORIZED);
    assert_eq!(h["access-control-allow-origin"], "http://ok.example");
    let (_, h, _) = send_with(
        &app,
        "GET",
        "/v1/models",
        &[("origin", "http://evil.example"), auth],
        String::new(),
    )
    .await;
    assert!(h.get("access-control-allow-origin").is_none(), "{h:?}");
}

#[tokio::test]
async fn without_allowed_origins_there_are_no_cors_headers_and_any_origin_is_a_star() {
    let app = server::router(tiny_state());
    let (_, h, _) = send_with(
        &app,
        "GET",
        "/v1/models",
        &[("origin", "http://ok.example")],
        String::new(),
    )
    .await;
    assert!(h.get("access-control-allow-origin").is_none(), "{h:?}");
    let (s, _, _) = send_with(
        &app,
        "OPTIONS",
        "/v1/models",
        &[
            ("origin", "http://ok.example"),
            ("access-control-request-method", "GET"),
        ],
        String::new(),
    )
    .await;
    assert!(
        !s.is_success(),
        "no preflight answer without --allowed-origins: {s}"
    );
    let cfg = ServerConfig {
        allowed_origins: vec!["*".into()],
        ..ServerConfig::default()
    };
    let app = server::router(state_with(cfg, engine_config(), Some(TEST_TEMPLATE)));
    let (_, h, _) = send_with(
        &app,
        "GET",
        "/v1/models",
        &[("origin", "http://anything.example")],
        String::new(),
    )
    .await;
    assert_eq!(h["access-control-allow-origin"], "*");
}

/// A tiny-model state whose KV pool holds less than the 256-token context for one sequence.
fn small_pool_state() -> server::AppState {
    let ecfg = EngineConfig {
        kv_bytes: 48 << 10,
        ..engine_config()
    };
    state_with(ServerConfig::default(), ecfg, Some(TEST_TEMPLATE))
}

#[tokio::test]
async fn without_max_tokens_chat_generates_to_the_end_of_what_the_pool_holds() {
    let state = small_pool_state();
    let info = state.loaded().expect("loaded").engine.info().clone();
    let limit = info.max_seq_len;
    assert!(
        limit < info.context_length,
        "the pool must be the limit: {info:?}"
    );
    let app = server::router(state);
    let (_, models) = get(&app, "/v1/models").await;
    let models: Value = serde_json::from_str(&models).expect("json");
    assert_eq!(
        models["data"][0]["max_model_len"].as_u64(),
        Some(limit as u64)
    );
    let body = json!({"messages": [{"role": "user", "content": "hi"}], "ignore_eos": true});
    let (s, b) = post(&app, "/v1/chat/completions", &body).await;
    assert_eq!(s, StatusCode::OK, "{b}");
    assert_eq!(b["choices"][0]["finish_reason"], "length");
    assert_eq!(b["usage"]["total_tokens"].as_u64(), Some(limit as u64));
    // An explicit max_tokens past the limit is the client's choice: refused, naming it.
    let prompt = b["usage"]["prompt_tokens"].as_u64().expect("prompt_tokens");
    let over = limit as u64 - prompt + 1;
    let body = json!({"messages": [{"role": "user", "content": "hi"}], "max_tokens": over});
    let (s, b) = post(&app, "/v1/chat/completions", &body).await;
    assert_error(s, &b, StatusCode::BAD_REQUEST, Some("max_tokens"));
    assert_eq!(b["error"]["code"], "context_length_exceeded");
    assert!(
        b["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("KV pool")),
        "{b}"
    );
}
