//! Handler behaviour against a real engine on the tiny model, through `Router::oneshot`.

mod common;

use axum::body::Body;
use axum::http::StatusCode;
use common::*;
use serde_json::{json, Value};

#[tokio::test]
async fn completion_returns_text_usage_and_finish_reason() {
    let app = server::router(tiny_state());
    let body =
        json!({"prompt": "hello world", "max_tokens": 5, "temperature": 0, "ignore_eos": true});
    let (s, b) = post(&app, "/v1/completions", &body).await;
    assert_eq!(s, StatusCode::OK, "{b}");
    assert_eq!(b["object"], "text_completion");
    assert_eq!(b["choices"][0]["finish_reason"], "length");
    assert!(b["choices"][0]["text"].is_string());
    assert_eq!(b["usage"]["completion_tokens"], 5);
    let p = b["usage"]["prompt_tokens"].as_u64().expect("prompt_tokens");
    assert_eq!(b["usage"]["total_tokens"].as_u64(), Some(p + 5));
    assert!(b["usage"]["prompt_tokens_details"]["cached_tokens"].is_u64());
}

#[tokio::test]
async fn greedy_completions_are_repeatable() {
    let app = server::router(tiny_state());
    let body =
        json!({"prompt": [1, 40, 41, 42], "max_tokens": 6, "temperature": 0, "ignore_eos": true});
    let (_, a) = post(&app, "/v1/completions", &body).await;
    let (_, b) = post(&app, "/v1/completions", &body).await;
    assert_eq!(a["choices"][0]["text"], b["choices"][0]["text"]);
}

#[tokio::test]
async fn n_and_several_prompts_give_one_choice_each() {
    let app = server::router(tiny_state());
    let body =
        json!({"prompt": ["one", "two"], "n": 3, "max_tokens": 2, "ignore_eos": true, "seed": 5});
    let (s, b) = post(&app, "/v1/completions", &body).await;
    assert_eq!(s, StatusCode::OK, "{b}");
    let idx: Vec<u64> = b["choices"]
        .as_array()
        .expect("choices")
        .iter()
        .map(|c| c["index"].as_u64().expect("index"))
        .collect();
    assert_eq!(idx, vec![0, 1, 2, 3, 4, 5]);
    assert_eq!(b["usage"]["completion_tokens"], 12);
}

#[tokio::test]
async fn echo_with_zero_max_tokens_scores_the_prompt() {
    let app = server::router(tiny_state());
    let prompt = vec![1, 40, 41, 42, 43];
    let body = json!({"prompt": prompt, "max_tokens": 0, "echo": true, "logprobs": 2});
    let (s, b) = post(&app, "/v1/completions", &body).await;
    assert_eq!(s, StatusCode::OK, "{b}");
    let lp = &b["choices"][0]["logprobs"];
    let tl = lp["token_logprobs"].as_array().expect("token_logprobs");
    assert_eq!(tl.len(), prompt.len());
    assert!(tl[0].is_null(), "the first prompt token has no log-prob");
    for v in &tl[1..] {
        let x = v.as_f64().expect("a number");
        assert!(x <= 0.0, "{x}");
    }
    assert!(lp["top_logprobs"][1]
        .as_object()
        .is_some_and(|m| !m.is_empty() && m.len() <= 2));
    assert_eq!(b["usage"]["completion_tokens"], 0);
    let (_, d) = post(&app, "/detokenize", &json!({"tokens": prompt})).await;
    let decoded = d["prompt"].as_str().expect("prompt").replace("<s>", "");
    assert_eq!(
        b["choices"][0]["text"].as_str().map(str::trim),
        Some(decoded.trim())
    );
}

#[tokio::test]
async fn logprobs_list_the_asked_number_of_alternatives() {
    let app = server::router(tiny_state());
    let body = json!({"prompt": "abc", "max_tokens": 3, "logprobs": 3, "ignore_eos": true});
    let (_, b) = post(&app, "/v1/completions", &body).await;
    let lp = &b["choices"][0]["logprobs"];
    assert_eq!(lp["tokens"].as_array().map(Vec::len), Some(3));
    for top in lp["top_logprobs"].as_array().expect("top") {
        assert!(
            top.as_object().is_some_and(|m| (1..=3).contains(&m.len())),
            "{top}"
        );
    }
    let chat = json!({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2,
        "logprobs": true, "top_logprobs": 2, "ignore_eos": true});
    let (s, b) = post(&app, "/v1/chat/completions", &chat).await;
    assert_eq!(s, StatusCode::OK, "{b}");
    let content = b["choices"][0]["logprobs"]["content"]
        .as_array()
        .expect("content");
    assert_eq!(content.len(), 2);
    assert_eq!(content[0]["top_logprobs"].as_array().map(Vec::len), Some(2));
}

#[tokio::test]
async fn chat_completion_answers_as_the_assistant() {
    let state = tiny_state();
    let id = model_id(&state);
    let app = server::router(state);
    let body = json!({"model": id, "messages": [{"role": "system", "content": "be nice"},
        {"role": "user", "content": [{"type": "text", "text": "hi"}]}],
        "max_completion_tokens": 4, "ignore_eos": true, "user": "someone"});
    let (s, b) = post(&app, "/v1/chat/completions", &body).await;
    assert_eq!(s, StatusCode::OK, "{b}");
    assert_eq!(b["object"], "chat.completion");
    assert_eq!(b["model"], id.as_str());
    assert_eq!(b["choices"][0]["message"]["role"], "assistant");
    assert_eq!(b["choices"][0]["finish_reason"], "length");
    assert_eq!(b["usage"]["completion_tokens"], 4);
}

#[tokio::test]
async fn stop_strings_end_generation_before_the_stop() {
    let app = server::router(tiny_state());
    let body = json!({"prompt": [1, 40], "max_tokens": 12, "temperature": 0, "ignore_eos": true});
    let (_, full) = post(&app, "/v1/completions", &body).await;
    let text = full["choices"][0]["text"]
        .as_str()
        .expect("text")
        .to_string();
    let Some(stop) = text.chars().nth(3).filter(|c| !c.is_whitespace()) else {
        return; // nothing printable to stop on in this continuation
    };
    let mut stopped = body.clone();
    stopped["stop"] = json!(stop.to_string());
    let (_, b) = post(&app, "/v1/completions", &stopped).await;
    let cut = b["choices"][0]["text"].as_str().expect("text");
    assert!(!cut.contains(stop), "{cut:?} contains {stop:?}");
    assert!(text.starts_with(cut));
    assert_eq!(b["choices"][0]["finish_reason"], "stop");
}

#[tokio::test]
async fn tokenize_and_detokenize_round_trip() {
    let app = server::router(tiny_state());
    let (s, t) = post(&app, "/tokenize", &json!({"prompt": "hello world"})).await;
    assert_eq!(s, StatusCode::OK, "{t}");
    let tokens = t["tokens"].as_array().expect("tokens").clone();
    assert_eq!(t["count"].as_u64(), Some(tokens.len() as u64));
    assert_eq!(t["max_model_len"], 256);
    let (_, d) = post(&app, "/detokenize", &json!({"tokens": tokens})).await;
    assert!(
        d["prompt"]
            .as_str()
            .expect("prompt")
            .ends_with("hello world"),
        "{d}"
    );
    let (_, no_bos) = post(
        &app,
        "/tokenize",
        &json!({"prompt": "hello world", "add_special_tokens": false}),
    )
    .await;
    assert_eq!(no_bos["count"].as_u64(), Some(tokens.len() as u64 - 1));
    let (s, b) = post(&app, "/detokenize", &json!({"tokens": [99999999]})).await;
    assert_error(s, &b, StatusCode::BAD_REQUEST, Some("tokens"));
}

#[tokio::test]
async fn models_and_health_describe_the_loaded_model() {
    let state = tiny_state();
    let id = model_id(&state);
    let app = server::router(state);
    let (s, body) = get(&app, "/v1/models").await;
    assert_eq!(s, StatusCode::OK);
    let b: Value = serde_json::from_str(&body).expect("json");
    assert_eq!(b["data"][0]["id"], id.as_str());
    assert_eq!(get(&app, "/health").await.0, StatusCode::OK);
}

#[tokio::test]
async fn health_is_503_until_the_model_is_loaded() {
    let state = server::AppState::new(server::ServerConfig::default());
    let app = server::router(state.clone());
    assert_eq!(
        get(&app, "/health").await.0,
        StatusCode::SERVICE_UNAVAILABLE
    );
    let (s, b) = post(&app, "/v1/completions", &json!({"prompt": "x"})).await;
    assert_error(s, &b, StatusCode::SERVICE_UNAVAILABLE, None);
    state.set_loaded(tiny_loaded(engine_config(), None));
    assert_eq!(get(&app, "/health").await.0, StatusCode::OK);
}

#[tokio::test]
async fn api_key_guards_the_api_but_not_health() {
    let cfg = server::ServerConfig {
        api_key: Some("sk-test".into()),
        ..Default::default()
    };
    let app = server::router(state_with(cfg, engine_config(), None));
    let body = json!({"prompt": "x", "max_tokens": 1}).to_string();
    let (s, _, _) = send(&app, "POST", "/v1/completions", body.clone(), None).await;
    assert_eq!(s, StatusCode::UNAUTHORIZED);
    let (s, _, _) = send(
        &app,
        "POST",
        "/v1/completions",
        body.clone(),
        Some("Bearer sk-tesT"),
    )
    .await;
    assert_eq!(s, StatusCode::UNAUTHORIZED);
    let (s, _, _) = send(
        &app,
        "POST",
        "/v1/completions",
        body,
        Some("Bearer sk-test"),
    )
    .await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(get(&app, "/health").await.0, StatusCode::OK);
}

#[tokio::test]
async fn a_full_waiting_line_is_a_429_with_retry_after() {
    let ecfg = engine::EngineConfig {
        max_waiting: 0,
        ..engine_config()
    };
    let app = server::router(state_with(server::ServerConfig::default(), ecfg, None));
    let body = json!({"prompt": "x", "max_tokens": 1}).to_string();
    let (s, h, text) = send(&app, "POST", "/v1/completions", body, None).await;
    assert_eq!(s, StatusCode::TOO_MANY_REQUESTS, "{text}");
    assert!(h.get("retry-after").is_some());
}

#[tokio::test]
async fn oversized_bodies_are_a_413() {
    let cfg = server::ServerConfig {
        body_limit: 1024,
        ..Default::default()
    };
    let app = server::router(state_with(cfg, engine_config(), None));
    let big = json!({"prompt": "x".repeat(4096)}).to_string();
    let (s, _, text) = send(&app, "POST", "/v1/completions", big, None).await;
    assert_eq!(s, StatusCode::PAYLOAD_TOO_LARGE, "{text}");
    assert!(text.contains("\"error\""));
}

#[tokio::test]
async fn metrics_count_tokens_and_errors() {
    let app = server::router(tiny_state());
    post(
        &app,
        "/v1/completions",
        &json!({"prompt": "x", "max_tokens": 3, "ignore_eos": true}),
    )
    .await;
    post(&app, "/v1/completions", &json!({"prompt": "x", "top_p": 7})).await;
    let (_, _, _) = send(&app, "GET", "/nowhere", Body::empty(), None).await;
    let (s, text) = get(&app, "/metrics").await;
    assert_eq!(s, StatusCode::OK);
    let value = |line_start: &str| -> f64 {
        text.lines()
            .find(|l| l.starts_with(line_start))
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("no {line_start} in\n{text}"))
    };
    assert_eq!(value("tessera_generation_tokens_total "), 3.0);
    assert_eq!(
        value("tessera_request_errors_total{type=\"invalid_request\"}"),
        1.0
    );
    assert_eq!(
        value("tessera_request_errors_total{type=\"not_found\"}"),
        1.0
    );
    assert_eq!(
        value("tessera_request_success_total{finished_reason=\"length\"}"),
        1.0
    );
    assert_eq!(value("tessera_time_to_first_token_seconds_count "), 1.0);
    assert!(value("tessera_kv_tiles_total ") > 0.0);
    assert!(text.contains("tessera_tokens_per_step_bucket{le=\"+Inf\"}"));
    // The engine publishes its counts right after the last event: allow it a moment.
    assert!(wait_for_tiles_freed(&app).await, "tiles still in use");
}

async fn wait_for_tiles_freed(app: &axum::Router) -> bool {
    for _ in 0..100 {
        let (_, text) = get(app, "/metrics").await;
        if text.lines().any(|l| l == "tessera_kv_tiles_used 0.0") {
            return true;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    false
}

#[tokio::test]
async fn gemma_models_without_a_template_chat_in_gemma_turns() {
    let loaded = tiny_loaded_arch("gemma3", engine_config(), None);
    let app = server::router(server::AppState::with_model(Default::default(), loaded));
    let msgs = json!([{"role": "user", "content": "hi"}]);
    let (s, t) = post(&app, "/tokenize", &json!({"messages": msgs})).await;
    assert_eq!(s, StatusCode::OK, "{t}");
    let (_, d) = post(&app, "/detokenize", &json!({"tokens": t["tokens"]})).await;
    let text = d["prompt"].as_str().expect("prompt");
    assert!(
        text.ends_with("<start_of_turn>user\nhi<end_of_turn>\n<start_of_turn>model\n"),
        "{text:?}"
    );
    let (s, b) = post(
        &app,
        "/v1/chat/completions",
        &json!({"messages": msgs, "max_tokens": 2}),
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{b}");
}
