//! Tool calling through the router on the tiny model: what is accepted, what is refused, and
//! how the tools reach the prompt. (The tiny model's output is noise: calls themselves are
//! tested on real models in tests/e2e/test_tools.py and per family in `tools::parser`.)

mod common;

use axum::http::StatusCode;
use common::*;
use serde_json::{json, Value};
use server::ServerConfig;

/// A Hermes-family template: tools listed as JSON, calls and results written back.
const HERMES_TEMPLATE: &str = "{% if tools %}<tools>{% for t in tools %}{{ t | tojson }}{% endfor %}\
    </tools>{% endif %}{% for m in messages %}{{ m.role }}: {{ m.content }}\
    {% for c in m.tool_calls or [] %}<tool_call>{\"name\": \"{{ c.function.name }}\", \"arguments\": \
    {{ c.function.arguments | tojson }}}</tool_call>{% endfor %}\n{% endfor %}\
    {% if add_generation_prompt %}assistant:{% endif %}";

fn weather() -> Value {
    json!({"type": "function", "function": {"name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}})
}

fn chat(extra: Value) -> Value {
    let mut b = json!({"messages": [{"role": "user", "content": "weather?"}], "max_tokens": 4});
    for (k, v) in extra.as_object().expect("object") {
        b[k] = v.clone();
    }
    b
}

fn hermes_app() -> axum::Router {
    server::router(state_with(
        ServerConfig::default(),
        engine_config(),
        Some(HERMES_TEMPLATE),
    ))
}

/// The prompt text `/tokenize` renders for a chat body.
async fn prompt(app: &axum::Router, body: &Value) -> String {
    let (s, t) = post(app, "/tokenize", body).await;
    assert_eq!(s, StatusCode::OK, "{t}");
    let (s, d) = post(app, "/detokenize", &json!({"tokens": t["tokens"]})).await;
    assert_eq!(s, StatusCode::OK, "{d}");
    d["prompt"].as_str().expect("text").to_string()
}

#[tokio::test]
async fn tools_reach_the_prompt_as_the_template_writes_them() {
    let app = hermes_app();
    let history = json!([
        {"role": "user", "content": "weather?"},
        {"role": "assistant", "content": null, "tool_calls": [{"id": "call_1", "type": "function",
            "function": {"name": "get_weather", "arguments": "{\"city\": \"Oslo\"}"}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "sunny"}]);
    let text = prompt(&app, &json!({"messages": history, "tools": [weather()]})).await;
    assert!(
        text.contains(
            "<tools>{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \
             \"parameters\": {\"type\": \"object\", \"properties\": {\"city\": {\"type\": \"string\"}}}}}</tools>"
        ),
        "{text}"
    );
    assert!(
        text.contains("<tool_call>{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}</tool_call>"),
        "{text}"
    );
    assert!(text.contains("tool: sunny"), "{text}");
}

#[tokio::test]
async fn every_tool_choice_answers_and_a_forced_call_parses() {
    let app = hermes_app();
    for choice in [json!("auto"), json!("none")] {
        for stream in [false, true] {
            let body = chat(json!({"tools": [weather()], "tool_choice": choice, "stream": stream}));
            let (s, b) = post(&app, "/v1/chat/completions", &body).await;
            assert_eq!(s, StatusCode::OK, "{choice} {b}");
        }
    }
    // `required` and a named function hold the reply to the call syntax (a grammar): whatever
    // the (random) model prefers, what it writes is the start of a call of `get_weather`.
    for choice in [
        json!("required"),
        json!({"type": "function", "function": {"name": "get_weather"}}),
    ] {
        let body = chat(json!({"tools": [weather()], "tool_choice": choice, "max_tokens": 48}));
        let (s, b) = post(&app, "/v1/chat/completions", &body).await;
        assert_eq!(s, StatusCode::OK, "{choice} {b}");
        let choice0 = &b["choices"][0];
        if choice0["finish_reason"] == "tool_calls" {
            let call = &choice0["message"]["tool_calls"][0]["function"];
            assert_eq!(call["name"], "get_weather", "{b}");
        } else {
            // Cut by max_tokens inside the call: the text so far is a call's start.
            assert_eq!(choice0["finish_reason"], "length", "{b}");
            let seen = choice0["message"]["content"].as_str().unwrap_or("");
            assert!(
                seen.starts_with("<tool_call>\n{\"name\": \"get_weather\", \"arguments\":"),
                "{b}"
            );
        }
        // With a response format too, the reply cannot be both: refused.
        let body = chat(json!({"tools": [weather()], "tool_choice": choice,
            "response_format": {"type": "json_object"}}));
        let (s, b) = post(&app, "/v1/chat/completions", &body).await;
        assert_error(s, &b, StatusCode::BAD_REQUEST, Some("response_format"));
    }
    let body = chat(
        json!({"tools": [weather()], "tool_choice": {"type": "function", "function": {"name": "nope"}}}),
    );
    let (s, b) = post(&app, "/v1/chat/completions", &body).await;
    assert_error(s, &b, StatusCode::BAD_REQUEST, Some("tool_choice"));
    let body = chat(json!({"tools": [{"type": "function", "function": {"name": "bad name"}}]}));
    let (s, b) = post(&app, "/v1/chat/completions", &body).await;
    assert_error(
        s,
        &b,
        StatusCode::BAD_REQUEST,
        Some("tools[0].function.name"),
    );
}

#[tokio::test]
async fn a_template_without_a_tool_format_refuses_tools_and_tool_messages() {
    let app = server::router(tiny_state());
    let (s, b) = post(
        &app,
        "/v1/chat/completions",
        &chat(json!({"tools": [weather()]})),
    )
    .await;
    assert_error(s, &b, StatusCode::BAD_REQUEST, Some("tools"));
    // `none` does not show the tools, so any template will do.
    let body = chat(json!({"tools": [weather()], "tool_choice": "none"}));
    let (s, b) = post(&app, "/v1/chat/completions", &body).await;
    assert_eq!(s, StatusCode::OK, "{b}");
    let body = json!({"max_tokens": 2, "messages": [{"role": "user", "content": "x"},
        {"role": "tool", "tool_call_id": "call_1", "content": "42"}]});
    let (s, b) = post(&app, "/v1/chat/completions", &body).await;
    assert_error(s, &b, StatusCode::BAD_REQUEST, Some("messages[1]"));
}
