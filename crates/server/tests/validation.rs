//! Every kind of bad input gets a 400 with the OpenAI error body, naming the field at fault.

mod common;

use axum::http::StatusCode;
use common::*;
use serde_json::{json, Value};

async fn expect_400(uri: &str, body: Value, param: Option<&str>) {
    let state = tiny_state();
    let app = server::router(state);
    let (s, b) = post(&app, uri, &body).await;
    assert_error(s, &b, StatusCode::BAD_REQUEST, param);
}

#[tokio::test]
async fn malformed_json_is_a_400() {
    let app = server::router(tiny_state());
    for body in ["{", "not json", "", "[1, 2", "{\"prompt\": \"x\",}"] {
        let (s, _, text) = send(&app, "POST", "/v1/completions", body, None).await;
        let b: Value = serde_json::from_str(&text).expect("error body is JSON");
        assert_error(s, &b, StatusCode::BAD_REQUEST, None);
    }
}

#[tokio::test]
async fn wrong_types_name_the_field() {
    expect_400(
        "/v1/completions",
        json!({"prompt": "hi", "temperature": "hot"}),
        Some("temperature"),
    )
    .await;
    expect_400(
        "/v1/completions",
        json!({"prompt": "hi", "n": 1.5}),
        Some("n"),
    )
    .await;
    expect_400(
        "/v1/chat/completions",
        json!({"messages": "hello"}),
        Some("messages"),
    )
    .await;
    expect_400(
        "/v1/completions",
        json!({"prompt": {"text": "hi"}}),
        Some("prompt"),
    )
    .await;
    expect_400("/v1/completions", json!([1, 2, 3]), None).await;
}

#[tokio::test]
async fn unknown_model_is_a_404_model_not_found() {
    let app = server::router(tiny_state());
    let (s, b) = post(
        &app,
        "/v1/completions",
        &json!({"model": "gpt-9", "prompt": "hi"}),
    )
    .await;
    // 404, as OpenAI and vLLM answer (the official clients raise NotFoundError).
    assert_error(s, &b, StatusCode::NOT_FOUND, Some("model"));
    assert_eq!(b["error"]["code"], "model_not_found");
}

#[tokio::test]
async fn empty_prompts_and_messages_are_refused() {
    expect_400("/v1/completions", json!({"prompt": ""}), Some("prompt")).await;
    expect_400("/v1/completions", json!({"prompt": []}), Some("prompt")).await;
    expect_400(
        "/v1/completions",
        json!({"prompt": ["a", ""]}),
        Some("prompt"),
    )
    .await;
    expect_400("/v1/completions", json!({"prompt": [[]]}), Some("prompt")).await;
    expect_400("/v1/completions", json!({"max_tokens": 3}), Some("prompt")).await;
    expect_400(
        "/v1/chat/completions",
        json!({"messages": []}),
        Some("messages"),
    )
    .await;
    expect_400("/v1/chat/completions", json!({}), Some("messages")).await;
}

#[tokio::test]
async fn out_of_range_sampling_values_are_refused() {
    let cases = [
        ("temperature", json!(-0.5)),
        ("top_p", json!(0.0)),
        ("top_p", json!(1.5)),
        ("top_k", json!(-2)),
        ("min_p", json!(1.5)),
        ("presence_penalty", json!(3.0)),
        ("frequency_penalty", json!(-2.5)),
        ("repetition_penalty", json!(0.0)),
        ("n", json!(0)),
        ("n", json!(17)),
        ("logprobs", json!(21)),
        ("priority", json!(1i64 << 40)),
    ];
    for (field, v) in cases {
        let mut body = json!({"prompt": "hello", "max_tokens": 2});
        body[field] = v;
        expect_400("/v1/completions", body, Some(field)).await;
    }
}

#[tokio::test]
async fn positive_values_below_the_f32_range_are_accepted() {
    // 5e-324 is in (0, 1]; narrowed to the sampler's f32 it would be 0 and refused.
    let app = server::router(tiny_state());
    let body = json!({"prompt": "hello", "max_tokens": 2, "top_p": 5e-324,
        "repetition_penalty": 5e-324});
    let (s, b) = post(&app, "/v1/completions/render", &body).await;
    assert_eq!(s, StatusCode::OK, "{b}");
    let p = &b[0]["sampling_params"];
    assert!(p["top_p"].as_f64().is_some_and(|v| v > 0.0), "{b}");
    assert!(
        p["repetition_penalty"].as_f64().is_some_and(|v| v > 0.0),
        "{b}"
    );
}

#[tokio::test]
async fn max_tokens_below_one_needs_echo() {
    expect_400(
        "/v1/completions",
        json!({"prompt": "hi", "max_tokens": 0}),
        Some("max_tokens"),
    )
    .await;
    expect_400(
        "/v1/completions",
        json!({"prompt": "hi", "max_tokens": -1}),
        Some("max_tokens"),
    )
    .await;
    expect_400(
        "/v1/chat/completions",
        json!({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 0}),
        Some("max_tokens"),
    )
    .await;
    expect_400(
        "/v1/chat/completions",
        json!({"messages": [{"role": "user", "content": "hi"}], "max_completion_tokens": 0}),
        Some("max_completion_tokens"),
    )
    .await;
}

#[tokio::test]
async fn prompts_longer_than_the_context_are_refused() {
    let long: Vec<u32> = vec![40; 300]; // the tiny model's context is 256
    expect_400(
        "/v1/completions",
        json!({"prompt": long, "max_tokens": 1}),
        Some("prompt"),
    )
    .await;
    let fits: Vec<u32> = vec![40; 200];
    expect_400(
        "/v1/completions",
        json!({"prompt": fits, "max_tokens": 100}),
        Some("max_tokens"),
    )
    .await;
    let words = "hello ".repeat(400);
    expect_400(
        "/v1/chat/completions",
        json!({"messages": [{"role": "user", "content": words}]}),
        Some("messages"),
    )
    .await;
}

#[tokio::test]
async fn prompts_that_can_never_fit_the_pool_are_refused() {
    // A pool of 4 tiles of 16 tokens cannot hold 100 tokens: the engine's refusal is a 400 too.
    let ecfg = engine::EngineConfig {
        // One tile of the tiny model (3 layers, one KV group) is 6,144 bytes.
        kv_bytes: 4 * 6144,
        ..engine_config()
    };
    let state = state_with(server::ServerConfig::default(), ecfg, None);
    let app = server::router(state);
    let prompt: Vec<u32> = vec![40; 100];
    let (s, b) = post(
        &app,
        "/v1/completions",
        &json!({"prompt": prompt, "max_tokens": 100}),
    )
    .await;
    assert_error(s, &b, StatusCode::BAD_REQUEST, None);
}

#[tokio::test]
async fn token_ids_outside_the_vocabulary_are_refused() {
    expect_400(
        "/v1/completions",
        json!({"prompt": [1, 999999]}),
        Some("prompt"),
    )
    .await;
    expect_400(
        "/v1/completions",
        json!({"prompt": [1, -3]}),
        Some("prompt"),
    )
    .await;
    expect_400(
        "/v1/completions",
        json!({"prompt": "hi", "stop_token_ids": [999999]}),
        Some("stop_token_ids"),
    )
    .await;
    expect_400(
        "/v1/completions",
        json!({"prompt": "hi", "logit_bias": {"999999": 1}}),
        Some("logit_bias"),
    )
    .await;
    expect_400(
        "/v1/completions",
        json!({"prompt": "hi", "logit_bias": {"abc": 1}}),
        Some("logit_bias"),
    )
    .await;
    expect_400(
        "/v1/completions",
        json!({"prompt": "hi", "logit_bias": {"5": 101}}),
        Some("logit_bias"),
    )
    .await;
}

#[tokio::test]
async fn other_inconsistent_fields_are_refused() {
    let msgs = json!([{"role": "user", "content": "hi"}]);
    expect_400(
        "/v1/chat/completions",
        json!({"messages": msgs, "top_logprobs": 2}),
        Some("top_logprobs"),
    )
    .await;
    expect_400(
        "/v1/completions",
        json!({"prompt": "hi", "stop": [""]}),
        Some("stop"),
    )
    .await;
    expect_400(
        "/v1/completions",
        json!({"prompt": "hi", "stream_options": {"include_usage": true}}),
        Some("stream_options"),
    )
    .await;
    expect_400(
        "/v1/chat/completions",
        json!({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]}),
        Some("messages[0].content"),
    )
    .await;
    let app = server::router(tiny_state());
    let body = json!({"messages": [{"role": "user"}], "model": "nope"});
    let (s, b) = post(&app, "/v1/chat/completions", &body).await;
    assert_error(s, &b, StatusCode::NOT_FOUND, Some("model"));
}

#[tokio::test]
async fn chat_on_a_model_without_a_template_is_refused() {
    let state = state_with(server::ServerConfig::default(), engine_config(), None);
    let app = server::router(state);
    let (s, b) = post(
        &app,
        "/v1/chat/completions",
        &json!({"messages": [{"role": "user", "content": "hi"}]}),
    )
    .await;
    assert_error(s, &b, StatusCode::BAD_REQUEST, Some("messages"));
}

/// A chat template Tessera cannot render as transformers does stops the model from loading, and
/// the error names the template's line and the reason.
#[test]
fn a_chat_template_that_cannot_render_is_refused_at_load_with_its_line() {
    let path = std::env::temp_dir().join(format!("tessera-refused-{}.gguf", std::process::id()));
    std::fs::write(&path, model::testing::tiny_model_gguf("llama", 7)).expect("write temp model");
    let load = |template: &str| {
        common::load_cpu(&path, engine_config(), Some(template.into()), None).err()
    };
    let cases = [
        // Python's Markup escapes the string added to it: refused.
        (
            "{% for m in messages %}\n{{ m.content }}\n{{ '<'|safe + m.role }}{% endfor %}",
            "chat template line 3: `|safe` beside `+`",
        ),
        // A syntax error.
        (
            "{{ messages }}\n\n{% if %}",
            "chat template line 3: syntax error",
        ),
    ];
    let errors: Vec<Option<String>> = cases.iter().map(|(t, _)| load(t)).collect();
    let fine = load("{{ (messages|first).content|safe ~ '!' }}");
    let _ = std::fs::remove_file(&path);
    for ((template, want), got) in cases.iter().zip(errors) {
        let got = got.unwrap_or_else(|| panic!("{template:?} loaded"));
        assert!(got.starts_with(want), "{template:?}: {got}");
    }
    assert_eq!(fine, None, "a template that renders loads");
}

#[tokio::test]
async fn bad_query_strings_get_the_openai_400_naming_the_parameter() {
    let app = server::router(tiny_state());
    let cases = [
        ("/v1/loads?include=core&include=core", "include"),
        ("/v1/responses/resp_x?stream=null", "stream"),
        ("/v1/responses/resp_x?stream=false&stream=false", "stream"),
        ("/v1/responses/resp_x?starting_after=3", "stream"),
    ];
    for (uri, param) in cases {
        let (s, _, text) = send(&app, "GET", uri, "", None).await;
        let b: Value = serde_json::from_str(&text).unwrap_or_else(|_| panic!("{uri}: {text}"));
        assert_error(s, &b, StatusCode::BAD_REQUEST, Some(param));
    }
    let (s, _, _) = send(&app, "GET", "/v1/responses/resp_x?stream=false", "", None).await;
    assert_eq!(s, StatusCode::NOT_FOUND);
}
