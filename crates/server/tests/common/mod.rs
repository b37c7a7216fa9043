//! Shared test setup: a real engine on the tiny generated Llama model, and request helpers.
#![allow(dead_code)]

use std::sync::atomic::{AtomicU64, Ordering};

use axum::body::Body;
use axum::http::{Request, StatusCode};
use axum::Router;
use engine::EngineConfig;
use serde_json::Value;
use server::{AppState, ServerConfig};
use tower::ServiceExt;

pub mod gate;

/// A Jinja chat template for the tiny model (which has none of its own).
pub const TEST_TEMPLATE: &str = "{{ bos_token }}{% for m in messages %}{{ m.role }}: \
    {{ m.content }}\n{% endfor %}{% if add_generation_prompt %}assistant:{% endif %}";

/// `server::load_model` on the CPU runner, as `tessera serve` loads a file: an embedding model
/// when the file is one or `pooling` asks, else a decoder; one thread.
pub fn load_cpu(
    path: &std::path::Path,
    cfg: EngineConfig,
    template: Option<String>,
    pooling: Option<model::Pooling>,
) -> Result<server::Loaded, String> {
    let file = path.to_path_buf();
    server::load_model(path, cfg, template, move || {
        let embeds = gguf::GgufFile::open(&file)
            .is_ok_and(|f| model::model_kind(f.metadata()).is_ok_and(model::ModelKind::embeds));
        if pooling.is_some() || embeds {
            let m = model::load_embedder(&file, 1, model::Dtype::Auto)?;
            let pooling = pooling.unwrap_or(m.embedder.pooling());
            let embedder = m.embedder;
            Ok((
                engine::CpuModel::Embedder { embedder, pooling },
                m.tokenizer,
            ))
        } else {
            let m = model::load(&file, 1)?;
            Ok((
                engine::CpuModel::Decoder(Box::new(m.transformer)),
                m.tokenizer,
            ))
        }
    })
}

pub fn engine_config() -> EngineConfig {
    EngineConfig {
        kv_bytes: 4 << 20,
        max_waiting: 64,
        ..EngineConfig::default()
    }
}

/// A loaded tiny model (written to a temp file, loaded, and the file removed).
pub fn tiny_loaded(cfg: EngineConfig, template: Option<&str>) -> server::Loaded {
    tiny_loaded_arch("llama", cfg, template)
}

/// Like `tiny_loaded`, for another tiny architecture (see `model::testing::TINY_ARCHS`).
pub fn tiny_loaded_arch(arch: &str, cfg: EngineConfig, template: Option<&str>) -> server::Loaded {
    with_tiny_file(arch, |path| {
        load_cpu(path, cfg, template.map(str::to_string), None)
    })
}

/// The tiny state, its runner's steps let through by `gate` (see `gate::Gate`).
pub fn tiny_gated_state(gate: &gate::Gate) -> AppState {
    let gate = gate.clone();
    let loaded = with_tiny_file("llama", |path| {
        let file = path.to_path_buf();
        server::load_model(
            path,
            engine_config(),
            Some(TEST_TEMPLATE.into()),
            move || {
                let m = model::load(&file, 1)?;
                Ok((gate.wrap(m.transformer), m.tokenizer))
            },
        )
    });
    AppState::with_model(ServerConfig::default(), loaded)
}

/// Writes the tiny model of `arch` to a temp file, runs `load` on it and removes the file.
fn with_tiny_file(
    arch: &str,
    load: impl FnOnce(&std::path::Path) -> Result<server::Loaded, String>,
) -> server::Loaded {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let path = std::env::temp_dir().join(format!(
        "tessera-server-test-{}-{}.gguf",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::write(&path, model::testing::tiny_model_gguf(arch, 7)).expect("write temp model");
    let loaded = load(&path);
    let _ = std::fs::remove_file(&path);
    loaded.expect("the tiny model loads")
}

pub fn tiny_state() -> AppState {
    state_with(
        ServerConfig::default(),
        engine_config(),
        Some(TEST_TEMPLATE),
    )
}

pub fn state_with(cfg: ServerConfig, ecfg: EngineConfig, template: Option<&str>) -> AppState {
    AppState::with_model(cfg, tiny_loaded(ecfg, template))
}

/// The model id the tiny state serves.
pub fn model_id(state: &AppState) -> String {
    state.loaded().expect("loaded").model_id.clone()
}

/// Sends one request through the router; returns status, headers and the body text.
pub async fn send(
    app: &Router,
    method: &str,
    uri: &str,
    body: impl Into<Body>,
    auth: Option<&str>,
) -> (StatusCode, axum::http::HeaderMap, String) {
    let mut req = Request::builder()
        .method(method)
        .uri(uri)
        .header("content-type", "application/json");
    if let Some(a) = auth {
        req = req.header("authorization", a);
    }
    let req = req.body(body.into()).expect("request builds");
    let resp = app
        .clone()
        .oneshot(req)
        .await
        .expect("router is infallible");
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

/// POSTs JSON; returns status and the parsed body (Null if it is not JSON).
pub async fn post(app: &Router, uri: &str, body: &Value) -> (StatusCode, Value) {
    let (s, _, text) = send(app, "POST", uri, body.to_string(), None).await;
    (s, serde_json::from_str(&text).unwrap_or(Value::Null))
}

pub async fn get(app: &Router, uri: &str) -> (StatusCode, String) {
    let (s, _, text) = send(app, "GET", uri, Body::empty(), None).await;
    (s, text)
}

/// Asserts an OpenAI error body with the given status and (optionally) param.
pub fn assert_error(status: StatusCode, body: &Value, want: StatusCode, param: Option<&str>) {
    assert_eq!(status, want, "body: {body}");
    let e = &body["error"];
    assert!(
        e["message"].as_str().is_some_and(|m| !m.is_empty()),
        "{body}"
    );
    assert!(e["type"].is_string(), "{body}");
    assert!(
        e.get("param").is_some() && e.get("code").is_some(),
        "{body}"
    );
    if let Some(p) = param {
        assert_eq!(e["param"], p, "{body}");
    }
}
