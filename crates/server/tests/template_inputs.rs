//! What requests hand the chat template, against a real engine on the tiny model with
//! templates that print it: `chat_template_kwargs` (chat, `/tokenize`, `/v1/responses`) and
//! the thinking of earlier assistant turns (chat's `reasoning_content`, Messages' `thinking`
//! blocks, Responses' `reasoning` items).

mod common;

use axum::http::StatusCode;
use common::*;
use serde_json::{json, Value};

/// `TEST_TEMPLATE`, then `[mood]` when the request sets `mood`.
const MOOD_TEMPLATE: &str = "{{ bos_token }}{% for m in messages %}{{ m.role }}: \
    {{ m.content }}\n{% endfor %}{% if mood is defined %}[{{ mood }}]{% endif %}\
    {% if add_generation_prompt %}assistant:{% endif %}";

fn app() -> axum::Router {
    server::router(state_with(
        Default::default(),
        engine_config(),
        Some(MOOD_TEMPLATE),
    ))
}

fn msgs() -> Value {
    json!([{"role": "user", "content": "hi"}])
}

/// The prompt `/tokenize` renders for `body` (read back through `/detokenize`), and its length.
async fn tokenized(app: &axum::Router, body: &Value) -> (String, u64) {
    let (s, t) = post(app, "/tokenize", body).await;
    assert_eq!(s, StatusCode::OK, "{t}");
    let (_, d) = post(app, "/detokenize", &json!({"tokens": t["tokens"]})).await;
    let text = d["prompt"].as_str().expect("prompt").to_string();
    (text, t["count"].as_u64().expect("count"))
}

/// The prompt of `msgs()` with the request fields `extra`.
async fn rendered(app: &axum::Router, extra: Value) -> String {
    let mut body = json!({"messages": msgs()});
    for (k, v) in extra.as_object().expect("object") {
        body[k] = v.clone();
    }
    tokenized(app, &body).await.0
}

#[tokio::test]
async fn tokenize_renders_the_template_with_the_requests_variables() {
    let app = app();
    let plain = rendered(&app, json!({})).await;
    let glad = rendered(&app, json!({"chat_template_kwargs": {"mood": "glad"}})).await;
    assert!(!plain.contains('['), "{plain:?}");
    assert!(glad.ends_with("user: hi\n[glad]assistant:"), "{glad:?}");
    // The server's own variables are not the request's to set.
    let (s, b) = post(
        &app,
        "/tokenize",
        &json!({"messages": msgs(), "chat_template_kwargs": {"messages": []}}),
    )
    .await;
    assert_error(s, &b, StatusCode::BAD_REQUEST, Some("chat_template_kwargs"));
}

#[tokio::test]
async fn responses_render_the_template_with_the_requests_variables() {
    let app = app();
    let input_tokens = |extra: Value| {
        let app = app.clone();
        async move {
            let mut body = json!({"input": "hi", "max_output_tokens": 1, "temperature": 0});
            for (k, v) in extra.as_object().expect("object") {
                body[k] = v.clone();
            }
            let (s, r) = post(&app, "/v1/responses", &body).await;
            assert_eq!(s, StatusCode::OK, "{r}");
            r["usage"]["input_tokens"].as_u64().expect("input_tokens")
        }
    };
    let plain = input_tokens(json!({})).await;
    let glad = input_tokens(json!({"chat_template_kwargs": {"mood": "glad"}})).await;
    assert!(glad > plain, "{glad} > {plain}");
    // The same prompt as /tokenize renders with the same variables.
    let body = json!({"messages": msgs(), "chat_template_kwargs": {"mood": "glad"}});
    assert_eq!(tokenized(&app, &body).await.1, glad);
}

/// Prints each message's thinking, when it has some, before its text.
const THINKING_TEMPLATE: &str = "{% for m in messages %}{{ m.role }}: \
    {% if m.reasoning_content %}<r>{{ m.reasoning_content }}</r>{% endif %}{{ m.content }}\n\
    {% endfor %}{% if add_generation_prompt %}assistant:{% endif %}";

#[tokio::test]
async fn earlier_thinking_reaches_the_template_from_every_route() {
    let app = server::router(state_with(
        Default::default(),
        engine_config(),
        Some(THINKING_TEMPLATE),
    ));
    let chat = json!([
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "hello", "reasoning_content": "greet"},
        {"role": "user", "content": "bye"}
    ]);
    let (text, want) = tokenized(&app, &json!({"messages": chat})).await;
    assert!(
        text.contains("assistant: <r>greet</r>hello\nuser: bye"),
        "{text:?}"
    );
    // vLLM's newer name for the same field.
    let renamed = json!([
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "hello", "reasoning": "greet"},
        {"role": "user", "content": "bye"}
    ]);
    assert_eq!(tokenized(&app, &json!({"messages": renamed})).await.1, want);
    // Messages: thinking blocks; the prompt is counted the same.
    let anthropic = json!({"messages": [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": [
            {"type": "thinking", "thinking": "greet", "signature": ""},
            {"type": "text", "text": "hello"}
        ]},
        {"role": "user", "content": "bye"}
    ]});
    let (s, c) = post(&app, "/v1/messages/count_tokens", &anthropic).await;
    assert_eq!(s, StatusCode::OK, "{c}");
    assert_eq!(c["input_tokens"].as_u64(), Some(want));
    // Responses: a reasoning item before the assistant message it led to.
    let input = json!([
        {"role": "user", "content": "hi"},
        {"type": "reasoning", "summary": [], "content": [{"type": "reasoning_text", "text": "greet"}]},
        {"role": "assistant", "content": [{"type": "output_text", "text": "hello"}]},
        {"role": "user", "content": "bye"}
    ]);
    let body = json!({"input": input, "max_output_tokens": 1, "temperature": 0});
    let (s, r) = post(&app, "/v1/responses", &body).await;
    assert_eq!(s, StatusCode::OK, "{r}");
    assert_eq!(r["usage"]["input_tokens"].as_u64(), Some(want));
}

#[tokio::test]
async fn thinking_in_the_wrong_place_is_refused_by_its_path() {
    let app = app();
    let (s, b) = post(
        &app,
        "/v1/chat/completions",
        &json!({"messages": [{"role": "user", "content": "hi", "reasoning_content": "x"}]}),
    )
    .await;
    assert_error(
        s,
        &b,
        StatusCode::BAD_REQUEST,
        Some("messages[0].reasoning_content"),
    );
    let dangling = json!([
        {"role": "user", "content": "hi"},
        {"type": "reasoning", "content": [{"type": "reasoning_text", "text": "x"}]}
    ]);
    let (s, b) = post(&app, "/v1/responses", &json!({"input": dangling})).await;
    assert_error(s, &b, StatusCode::BAD_REQUEST, Some("input[1].type"));
    let wrong_part = json!([
        {"role": "user", "content": [{"type": "reasoning_text", "text": "x"}]}
    ]);
    let (s, b) = post(&app, "/v1/responses", &json!({"input": wrong_part})).await;
    assert_error(s, &b, StatusCode::BAD_REQUEST, Some("input[0].content[0]"));
}
