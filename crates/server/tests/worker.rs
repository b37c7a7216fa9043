//! What a gateway asks of a worker (`/v1/loads`, `/version`, `/server_info`, `/model_info`),
//! the render routes, and draining, against a real engine on the tiny model.

mod common;

use axum::http::StatusCode;
use common::*;
use serde_json::{json, Value};

async fn get_json(app: &axum::Router, uri: &str) -> (StatusCode, Value) {
    let (s, text) = get(app, uri).await;
    (s, serde_json::from_str(&text).unwrap_or(Value::Null))
}

#[tokio::test]
async fn loads_report_one_rank_in_sglang_shape() {
    let state = tiny_state();
    let info = state.loaded().expect("loaded").engine.info().clone();
    let app = server::router(state);
    let uri = "/v1/loads?include=core,disagg,queues,memory";
    let (s, b) = get_json(&app, uri).await;
    assert_eq!(s, StatusCode::OK, "{b}");
    assert_eq!(b["dp_rank_count"], 1);
    let ts = b["timestamp"].as_str().expect("timestamp");
    assert!(ts.len() == 20 && ts.ends_with('Z'), "{ts}");
    let l = &b["loads"][0];
    assert_eq!(l["dp_rank"], 0);
    assert_eq!(l["num_running_reqs"], 0);
    assert_eq!(l["num_waiting_reqs"], 0);
    assert_eq!(l["num_total_reqs"], 0);
    assert_eq!(l["num_used_tokens"], 0);
    let capacity = (info.kv_tiles * info.tile_size) as u64;
    assert_eq!(l["max_total_num_tokens"].as_u64(), Some(capacity));
    assert_eq!(l["token_usage"], 0.0);
    assert_eq!(
        l["max_running_requests"].as_u64(),
        Some(info.max_seqs as u64)
    );
    // Throughput is not measured, so it is absent, not a zero that reads as idle.
    assert!(l.get("gen_throughput").is_none(), "{l}");
    let (s, b) = get_json(&app, "/v1/loads?include=core,bogus").await;
    assert_error(s, &b, StatusCode::BAD_REQUEST, Some("include"));
}

#[tokio::test]
async fn loads_count_the_prefix_cache_hits() {
    let app = server::router(tiny_state());
    let prompt: Vec<u32> = (1..=40).collect();
    let body = json!({"prompt": prompt, "max_tokens": 1, "temperature": 0});
    for _ in 0..2 {
        let (s, b) = post(&app, "/v1/completions", &body).await;
        assert_eq!(s, StatusCode::OK, "{b}");
    }
    let (_, b) = get_json(&app, "/v1/loads").await;
    let rate = b["loads"][0]["cache_hit_rate"].as_f64().expect("rate");
    // The second request finds the first one's full tiles: a hit rate above zero, below one.
    assert!(rate > 0.0 && rate < 1.0, "{b}");
}

#[tokio::test]
async fn version_server_info_and_model_info_describe_the_worker() {
    let state = tiny_state();
    let id = model_id(&state);
    let app = server::router(state);
    let (s, v) = get_json(&app, "/version").await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(v["version"], env!("CARGO_PKG_VERSION"));
    for uri in ["/server_info", "/get_server_info"] {
        let (s, b) = get_json(&app, uri).await;
        assert_eq!(s, StatusCode::OK, "{uri}");
        assert_eq!(b["served_model_name"], id.as_str(), "{b}");
        assert_eq!(b["dp_size"], 1);
        assert_eq!(b["max_model_len"], 256);
        assert!(b["max_total_tokens"].as_u64().is_some_and(|t| t > 0), "{b}");
    }
    for uri in ["/model_info", "/get_model_info"] {
        let (s, b) = get_json(&app, uri).await;
        assert_eq!(s, StatusCode::OK, "{uri}");
        assert_eq!(b["is_generation"], true);
        assert_eq!(b["architectures"][0], "llama", "{b}");
    }
}

#[tokio::test]
async fn worker_routes_take_the_api_key() {
    let cfg = server::ServerConfig {
        api_key: Some("sk-w".into()),
        ..Default::default()
    };
    let app = server::router(state_with(cfg, engine_config(), Some(TEST_TEMPLATE)));
    for uri in ["/v1/loads", "/version", "/server_info", "/model_info"] {
        let (s, _, _) = send(&app, "GET", uri, "", None).await;
        assert_eq!(s, StatusCode::UNAUTHORIZED, "{uri}");
        let (s, _, _) = send(&app, "GET", uri, "", Some("Bearer sk-w")).await;
        assert_eq!(s, StatusCode::OK, "{uri}");
    }
}

#[tokio::test]
async fn completion_render_equals_tokenize_per_prompt() {
    let state = tiny_state();
    let id = model_id(&state);
    let app = server::router(state);
    let prompts = ["hello world", "the cat sat"];
    let body = json!({"prompt": prompts, "max_tokens": 7, "temperature": 0.5, "seed": 3});
    let (s, b) = post(&app, "/v1/completions/render", &body).await;
    assert_eq!(s, StatusCode::OK, "{b}");
    let list = b.as_array().expect("a list");
    assert_eq!(list.len(), 2);
    for (r, p) in list.iter().zip(prompts) {
        let (_, t) = post(&app, "/tokenize", &json!({"prompt": p})).await;
        assert_eq!(r["token_ids"], t["tokens"], "{p}");
        assert_eq!(r["model"], id.as_str());
        assert!(r["request_id"]
            .as_str()
            .is_some_and(|i| i.starts_with("cmpl-")));
        assert_eq!(r["sampling_params"]["max_tokens"], 7);
        assert_eq!(r["sampling_params"]["temperature"], 0.5);
        assert_eq!(r["sampling_params"]["seed"], 3);
        assert_eq!(r["stream"], false);
    }
}

#[tokio::test]
async fn chat_render_equals_the_template_then_tokenize() {
    let app = server::router(tiny_state());
    let messages = json!([{"role": "user", "content": "Hi there"}]);
    let body = json!({"messages": messages, "stream": true, "max_tokens": 4});
    let (s, b) = post(&app, "/v1/chat/completions/render", &body).await;
    assert_eq!(s, StatusCode::OK, "{b}");
    let (_, t) = post(&app, "/tokenize", &json!({"messages": messages})).await;
    assert_eq!(b["token_ids"], t["tokens"], "{b}");
    assert!(b["request_id"]
        .as_str()
        .is_some_and(|i| i.starts_with("chatcmpl-")));
    assert_eq!(b["stream"], true);
    assert_eq!(b["stream_options"]["include_usage"], false);
}

#[tokio::test]
async fn render_refuses_what_the_route_refuses() {
    let app = server::router(tiny_state());
    let (s, b) = post(
        &app,
        "/v1/completions/render",
        &json!({"prompt": "x", "model": "nope"}),
    )
    .await;
    assert_error(s, &b, StatusCode::NOT_FOUND, None);
    let (s, b) = post(
        &app,
        "/v1/chat/completions/render",
        &json!({"messages": [{"role": "user", "content": "x"}], "return_token_offsets": true}),
    )
    .await;
    assert_error(s, &b, StatusCode::BAD_REQUEST, Some("return_token_offsets"));
}

#[tokio::test]
async fn draining_fails_health_and_refuses_new_requests_but_keeps_the_probes() {
    let state = tiny_state();
    let app = server::router(state.clone());
    assert_eq!(get(&app, "/health").await.0, StatusCode::OK);
    state.drain();
    assert_eq!(
        get(&app, "/health").await.0,
        StatusCode::SERVICE_UNAVAILABLE
    );
    let body = json!({"prompt": "x", "max_tokens": 1}).to_string();
    let (s, headers, text) = send(&app, "POST", "/v1/completions", body, None).await;
    assert_eq!(s, StatusCode::SERVICE_UNAVAILABLE, "{text}");
    assert_eq!(headers["connection"], "close");
    let b: Value = serde_json::from_str(&text).expect("json");
    assert_eq!(b["error"]["type"], "service_unavailable", "{b}");
    // The gateway may still read the load and the metrics of a draining replica.
    assert_eq!(get(&app, "/v1/loads").await.0, StatusCode::OK);
    assert_eq!(get(&app, "/metrics").await.0, StatusCode::OK);
}

#[tokio::test]
async fn metrics_carry_the_cache_config_info_gauge() {
    let state = tiny_state();
    let info = state.loaded().expect("loaded").engine.info().clone();
    let app = server::router(state);
    let (_, text) = get(&app, "/metrics").await;
    let want = format!(
        "tessera_cache_config_info{{tile_size=\"{}\",num_tiles=\"{}\"}} 1.0",
        info.tile_size, info.kv_tiles
    );
    assert!(text.contains(&want), "{text}");
}
