//! LoRA adapters through the HTTP API on the tiny model: chosen by `model` (vLLM's) or by
//! `lora` ids (llama-server's), listed in `/v1/models` with their parent, global scales with
//! `GET` / `POST /lora-adapters`, loaded and unloaded at run time behind the API key, and
//! refused with errors naming the field.

mod common;

use std::path::PathBuf;

use axum::http::StatusCode;
use common::*;
use engine::EngineConfig;
use serde_json::{json, Value};
use server::ServerConfig;

/// Adapter file `name` in this process's temp dir: the tiny llama adapter of `seed`.
fn adapter_file(name: &str, seed: u64) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("tessera-server-lora-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let path = dir.join(name);
    let tmp = dir.join(format!("{name}.{:?}.tmp", std::thread::current().id()));
    std::fs::write(&tmp, model::testing::lora::tiny_lora_gguf("llama", seed)).expect("write");
    std::fs::rename(&tmp, &path).expect("rename");
    path
}

fn lora_state(cfg: ServerConfig) -> server::AppState {
    let ecfg = EngineConfig {
        loras: vec![
            ("sql".into(), adapter_file("sql.gguf", 40)),
            ("poet".into(), adapter_file("poet.gguf", 41)),
        ],
        ..engine_config()
    };
    state_with(cfg, ecfg, Some(TEST_TEMPLATE))
}

/// The greedy completion of a fixed prompt with `extra` fields.
async fn complete(app: &axum::Router, extra: Value) -> String {
    let mut body = json!({"prompt": [1, 40, 41, 42], "max_tokens": 8, "temperature": 0,
        "ignore_eos": true});
    for (k, v) in extra.as_object().expect("object") {
        body[k] = v.clone();
    }
    let (s, b) = post(app, "/v1/completions", &body).await;
    assert_eq!(s, StatusCode::OK, "{b}");
    b["choices"][0]["text"].as_str().expect("text").to_string()
}

#[tokio::test]
async fn adapters_are_chosen_by_model_name_or_by_lora_ids() {
    let state = lora_state(ServerConfig::default());
    let app = server::router(state.clone());
    let base = complete(&app, json!({})).await;
    let sql = complete(&app, json!({"model": "sql"})).await;
    let poet = complete(&app, json!({"model": "poet"})).await;
    assert_ne!(sql, base, "the adapter changes the output");
    assert_ne!(poet, sql);
    let by_id = json!({"lora": [{"id": 0, "scale": 1.0}]});
    assert_eq!(complete(&app, by_id).await, sql);
    let scale_0 = json!({"lora": [{"id": 0, "scale": 0.0}]});
    assert_eq!(complete(&app, scale_0).await, base);
    assert_eq!(
        complete(&app, json!({"model": model_id(&state)})).await,
        base
    );
    // Chat takes `lora` too.
    let chat = json!({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 3,
        "lora": [{"id": 1, "scale": 0.5}]});
    let (s, b) = post(&app, "/v1/chat/completions", &chat).await;
    assert_eq!(s, StatusCode::OK, "{b}");
    // `/v1/models`: the base, then each adapter with its parent.
    let (s, text) = get(&app, "/v1/models").await;
    assert_eq!(s, StatusCode::OK);
    let list: Value = serde_json::from_str(&text).expect("json");
    let ids: Vec<&str> = list["data"]
        .as_array()
        .expect("data")
        .iter()
        .map(|c| c["id"].as_str().expect("id"))
        .collect();
    assert_eq!(ids, vec![model_id(&state).as_str(), "sql", "poet"]);
    assert_eq!(list["data"][0]["parent"], Value::Null);
    assert_eq!(list["data"][1]["parent"], model_id(&state));
    assert!(list["data"][1]["root"]
        .as_str()
        .is_some_and(|r| r.ends_with("sql.gguf")));
    let (s, text) = get(&app, "/v1/models/poet").await;
    assert_eq!(s, StatusCode::OK);
    let card: Value = serde_json::from_str(&text).expect("json");
    assert_eq!(card["parent"], model_id(&state));
}

/// The text and the reported model of a greedy reply to "hi" on `route` (chat, messages or
/// responses) with `model`.
async fn reply(app: &axum::Router, route: &str, model: &str) -> (String, String) {
    let user = json!([{"role": "user", "content": "hi"}]);
    let body = match route {
        "/v1/responses" => json!({"model": model, "input": user, "max_output_tokens": 8,
            "temperature": 0, "store": false}),
        _ => json!({"model": model, "messages": user, "max_tokens": 8, "temperature": 0}),
    };
    let (s, b) = post(app, route, &body).await;
    assert_eq!(s, StatusCode::OK, "{route}: {b}");
    let text = match route {
        "/v1/chat/completions" => b["choices"][0]["message"]["content"].clone(),
        "/v1/messages" => b["content"][0]["text"].clone(),
        _ => b["output"][0]["content"][0]["text"].clone(),
    };
    let model = b["model"].as_str().expect("model").to_string();
    (text.as_str().unwrap_or_default().to_string(), model)
}

#[tokio::test]
async fn every_generating_route_computes_with_the_adapter_model_names_and_reports_it() {
    let state = lora_state(ServerConfig::default());
    let app = server::router(state.clone());
    let served = model_id(&state);
    for route in ["/v1/chat/completions", "/v1/messages", "/v1/responses"] {
        let (base, base_model) = reply(&app, route, &served).await;
        let (sql, sql_model) = reply(&app, route, "sql").await;
        assert_ne!(sql, base, "{route}: the adapter changes the reply");
        assert_eq!(
            (base_model.as_str(), sql_model.as_str()),
            (served.as_str(), "sql")
        );
    }
    let body = json!({"model": "poet", "prompt": "hi", "max_tokens": 2});
    let (s, b) = post(&app, "/v1/completions", &body).await;
    assert_eq!(s, StatusCode::OK, "{b}");
    assert_eq!(b["model"], "poet");
    // The render routes name the model the request would run with, the adapter's too.
    let (s, b) = post(&app, "/v1/completions/render", &body).await;
    assert_eq!(s, StatusCode::OK, "{b}");
    assert_eq!(b[0]["model"], "poet");
    let chat = json!({"model": "sql", "messages": [{"role": "user", "content": "hi"}]});
    let (s, b) = post(&app, "/v1/chat/completions/render", &chat).await;
    assert_eq!(s, StatusCode::OK, "{b}");
    assert_eq!(b["model"], "sql");
    let (s, b) = post(
        &app,
        "/v1/chat/completions/render",
        &json!({"model": served,
        "messages": [{"role": "user", "content": "hi"}]}),
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{b}");
    assert_eq!(b["model"], served.as_str());
}

#[tokio::test]
async fn global_scales_apply_to_requests_that_name_no_adapter() {
    let app = server::router(lora_state(ServerConfig::default()));
    let base = complete(&app, json!({})).await;
    let sql = complete(&app, json!({"model": "sql"})).await;
    let (s, text) = get(&app, "/lora-adapters").await;
    assert_eq!(s, StatusCode::OK);
    let list: Value = serde_json::from_str(&text).expect("json");
    assert_eq!(list[0]["id"], 0);
    assert_eq!(list[0]["name"], "sql");
    assert_eq!(list[0]["scale"], 0.0);
    assert!(list[1]["path"]
        .as_str()
        .is_some_and(|p| p.ends_with("poet.gguf")));
    let (s, b) = post(&app, "/lora-adapters", &json!([{"id": 0, "scale": 1.0}])).await;
    assert_eq!(s, StatusCode::OK, "{b}");
    assert_eq!(complete(&app, json!({})).await, sql);
    // A request's own choice wins: `[]` is the base model.
    assert_eq!(complete(&app, json!({"lora": []})).await, base);
    let (_, text) = get(&app, "/lora-adapters").await;
    let list: Value = serde_json::from_str(&text).expect("json");
    assert_eq!(
        (list[0]["scale"].clone(), list[1]["scale"].clone()),
        (json!(1.0), json!(0.0))
    );
    // A bad entry changes nothing.
    let (s, b) = post(&app, "/lora-adapters", &json!([{"id": 7, "scale": 1.0}])).await;
    assert_error(s, &b, StatusCode::BAD_REQUEST, Some("[0].id"));
    assert_eq!(complete(&app, json!({})).await, sql);
}

#[tokio::test]
async fn adapters_load_and_unload_at_run_time_behind_the_api_key() {
    let cfg = ServerConfig {
        api_key: Some("k".into()),
        ..ServerConfig::default()
    };
    let app = server::router(state_with(cfg, engine_config(), Some(TEST_TEMPLATE)));
    let key = Some("Bearer k");
    let path = adapter_file("late.gguf", 42);
    let load = json!({"lora_name": "late", "lora_path": path}).to_string();
    let (s, _, _) = send(&app, "POST", "/v1/load_lora_adapter", load.clone(), None).await;
    assert_eq!(s, StatusCode::UNAUTHORIZED);
    let (s, _, text) = send(&app, "POST", "/v1/load_lora_adapter", load.clone(), key).await;
    assert_eq!(s, StatusCode::OK, "{text}");
    assert!(text.contains("late"), "{text}");
    let (s, _, _) = send(&app, "POST", "/v1/load_lora_adapter", load, key).await;
    assert_eq!(s, StatusCode::BAD_REQUEST, "a name is loaded once");
    let ask = json!({"model": "late", "prompt": "hi", "max_tokens": 2}).to_string();
    let (s, _, text) = send(&app, "POST", "/v1/completions", ask.clone(), key).await;
    assert_eq!(s, StatusCode::OK, "{text}");
    let unload = json!({"lora_name": "late"}).to_string();
    let (s, _, _) = send(
        &app,
        "POST",
        "/v1/unload_lora_adapter",
        unload.clone(),
        None,
    )
    .await;
    assert_eq!(s, StatusCode::UNAUTHORIZED);
    let (s, _, text) = send(&app, "POST", "/v1/unload_lora_adapter", unload.clone(), key).await;
    assert_eq!(s, StatusCode::OK, "{text}");
    let (s, _, text) = send(&app, "POST", "/v1/completions", ask, key).await;
    let b: Value = serde_json::from_str(&text).expect("json");
    assert_error(s, &b, StatusCode::NOT_FOUND, Some("model"));
    let (s, _, text) = send(&app, "POST", "/v1/unload_lora_adapter", unload, key).await;
    let b: Value = serde_json::from_str(&text).expect("json");
    assert_error(s, &b, StatusCode::NOT_FOUND, Some("lora_name"));
}

#[tokio::test]
async fn adapter_errors_are_4xx_naming_the_field() {
    let app = server::router(lora_state(ServerConfig::default()));
    let cases = [
        (json!({"model": "nope"}), StatusCode::NOT_FOUND, "model"),
        (
            json!({"lora": [{"id": 5, "scale": 1.0}]}),
            StatusCode::BAD_REQUEST,
            "lora[0].id",
        ),
        (
            json!({"model": "sql", "lora": [{"id": 0, "scale": 0.5}]}),
            StatusCode::BAD_REQUEST,
            "lora[0].id",
        ),
        (
            json!({"lora": [{"id": 0, "scale": 1e300}]}),
            StatusCode::BAD_REQUEST,
            "lora[0].scale",
        ),
    ];
    for (extra, status, param) in cases {
        let mut body = json!({"prompt": "hi", "max_tokens": 2});
        for (k, v) in extra.as_object().expect("object") {
            body[k] = v.clone();
        }
        let (s, b) = post(&app, "/v1/completions", &body).await;
        assert_error(s, &b, status, Some(param));
    }
    let (s, b) = post(
        &app,
        "/v1/completions",
        &json!({"prompt": "hi", "lora": [{"id": 0}]}),
    )
    .await;
    assert_error(s, &b, StatusCode::BAD_REQUEST, None);
    // Files: missing, another architecture's adapter, a weight the model does not have.
    let dir = adapter_file("sql.gguf", 40).with_file_name("");
    let qwen = dir.join("qwen2-adapter.gguf");
    std::fs::write(&qwen, model::testing::lora::tiny_lora_gguf("qwen2", 1)).expect("write");
    let mut w =
        model::testing::lora::tiny_lora_writer("llama", 1, &["attn_q"], 8, 16.0).expect("writer");
    w.add_tensor(
        "blk.9.attn_q.weight.lora_a",
        &[64, 8],
        gguf::GgmlType::F32,
        vec![0; 2048],
    );
    w.add_tensor(
        "blk.9.attn_q.weight.lora_b",
        &[8, 64],
        gguf::GgmlType::F32,
        vec![0; 2048],
    );
    let layer = dir.join("layer-adapter.gguf");
    std::fs::write(&layer, w.write_to_vec()).expect("write");
    let files = [
        (dir.join("missing.gguf"), vec!["missing.gguf"]),
        (qwen, vec!["qwen2-adapter.gguf", "qwen2"]),
        (layer, vec!["layer-adapter.gguf", "blk.9.attn_q.weight"]),
    ];
    for (path, words) in files {
        let body = json!({"lora_name": "x", "lora_path": path});
        let (s, b) = post(&app, "/v1/load_lora_adapter", &body).await;
        assert_error(s, &b, StatusCode::BAD_REQUEST, Some("lora_path"));
        let msg = b["error"]["message"].as_str().expect("message");
        for w in words {
            assert!(msg.contains(w), "{msg} lacks {w}");
        }
    }
    for (body, param) in [
        (
            json!({"lora_name": "sql", "lora_path": "x.gguf"}),
            "lora_name",
        ),
        (json!({"lora_name": "", "lora_path": "x.gguf"}), "lora_name"),
        (
            json!({"lora_name": "y", "lora_path": "x.gguf", "load_inplace": true}),
            "load_inplace",
        ),
    ] {
        let (s, b) = post(&app, "/v1/load_lora_adapter", &body).await;
        assert_error(s, &b, StatusCode::BAD_REQUEST, Some(param));
    }
}
