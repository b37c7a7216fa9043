//! `chat_template_kwargs` on every route that renders a chat template (chat, `/tokenize`,
//! `/v1/responses`), against a real engine on the tiny model with a template that prints the
//! variable.

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

async fn rendered(app: &axum::Router, extra: Value) -> String {
    let mut body = json!({"messages": msgs()});
    for (k, v) in extra.as_object().expect("object") {
        body[k] = v.clone();
    }
    let (s, t) = post(app, "/tokenize", &body).await;
    assert_eq!(s, StatusCode::OK, "{t}");
    let (_, d) = post(app, "/detokenize", &json!({"tokens": t["tokens"]})).await;
    d["prompt"].as_str().expect("prompt").to_string()
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
    let (s, t) = post(
        &app,
        "/tokenize",
        &json!({"messages": msgs(), "chat_template_kwargs": {"mood": "glad"}}),
    )
    .await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(t["count"].as_u64(), Some(glad));
}
