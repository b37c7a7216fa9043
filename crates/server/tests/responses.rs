//! `/v1/responses` against a real engine on the tiny model: whole and streamed responses,
//! instructions, chaining through `previous_response_id`, the store, and what is refused.

mod common;

use axum::http::StatusCode;
use axum::Router;
use common::*;
use serde_json::{json, Value};

/// A greedy, EOS-ignoring request of `max` tokens with `extra` fields.
fn req(input: Value, max: u64, extra: Value) -> Value {
    let mut b = json!({"input": input, "max_output_tokens": max, "temperature": 0});
    for (k, v) in extra.as_object().expect("object") {
        b[k] = v.clone();
    }
    b
}

fn text_of(r: &Value) -> String {
    r["output"][0]["content"][0]["text"]
        .as_str()
        .expect("output text")
        .to_string()
}

/// The SSE frames of a body: (event name, data JSON).
fn frames(body: &str) -> Vec<(String, Value)> {
    body.split("\n\n")
        .filter(|f| !f.trim().is_empty())
        .map(|f| {
            let mut name = String::new();
            let mut data = String::new();
            for line in f.lines() {
                if let Some(n) = line.strip_prefix("event: ") {
                    name = n.to_string();
                } else if let Some(d) = line.strip_prefix("data: ") {
                    data.push_str(d);
                }
            }
            (name, serde_json::from_str(&data).expect("data is JSON"))
        })
        .collect()
}

async fn create(app: &Router, body: &Value) -> Value {
    let (s, b) = post(app, "/v1/responses", body).await;
    assert_eq!(s, StatusCode::OK, "{b}");
    b
}

#[tokio::test]
async fn a_response_has_the_object_shape_clients_read() {
    let state = tiny_state();
    let id = model_id(&state);
    let app = server::router(state);
    let r = create(&app, &req(json!("hello there"), 4, json!({"user": "u1"}))).await;
    assert_eq!(r["object"], "response");
    assert!(r["id"].as_str().is_some_and(|i| i.starts_with("resp_")));
    assert_eq!(r["model"], id.as_str());
    // The tiny model may stop early on its EOS: completed then, incomplete at the limit.
    let status = r["status"].as_str().expect("status");
    let out = r["usage"]["output_tokens"].as_u64().expect("output_tokens");
    if out == 4 {
        assert_eq!(status, "incomplete");
        assert_eq!(r["incomplete_details"]["reason"], "max_output_tokens");
    } else {
        assert_eq!(status, "completed");
    }
    let msg = &r["output"][0];
    assert_eq!(msg["type"], "message");
    assert_eq!(msg["role"], "assistant");
    assert_eq!(msg["content"][0]["type"], "output_text");
    let input = r["usage"]["input_tokens"].as_u64().expect("input_tokens");
    assert_eq!(r["usage"]["total_tokens"].as_u64(), Some(input + out));
    assert_eq!(r["user"], "u1");
    assert_eq!(r["tools"], json!([]));
    assert_eq!(r["text"]["format"]["type"], "text");
    // The same at the root path.
    let (s, _) = post(&app, "/responses", &req(json!("hi"), 1, json!({}))).await;
    assert_eq!(s, StatusCode::OK);
}

#[tokio::test]
async fn instructions_come_first_and_are_echoed() {
    let app = server::router(tiny_state());
    let plain = create(&app, &req(json!("hello"), 2, json!({}))).await;
    let with = create(
        &app,
        &req(json!("hello"), 2, json!({"instructions": "be terse"})),
    )
    .await;
    assert_eq!(with["instructions"], "be terse");
    assert!(plain["instructions"].is_null());
    // The same as a system message given in the input.
    let as_items = json!([{"role": "system", "content": "be terse"},
        {"role": "user", "content": [{"type": "input_text", "text": "hello"}]}]);
    let items = create(&app, &req(as_items, 2, json!({}))).await;
    assert_eq!(
        with["usage"]["input_tokens"], items["usage"]["input_tokens"],
        "{with} {items}"
    );
    assert_eq!(text_of(&with), text_of(&items));
    assert!(
        with["usage"]["input_tokens"].as_u64() > plain["usage"]["input_tokens"].as_u64(),
        "{with} {plain}"
    );
}

#[tokio::test]
async fn streamed_events_reassemble_to_the_whole_response() {
    let app = server::router(tiny_state());
    let body = req(json!("once upon a time"), 8, json!({}));
    let whole = create(&app, &body).await;
    let mut streamed = body.clone();
    streamed["stream"] = json!(true);
    let (s, h, text) = send(&app, "POST", "/v1/responses", streamed.to_string(), None).await;
    assert_eq!(s, StatusCode::OK);
    assert!(h["content-type"]
        .to_str()
        .is_ok_and(|c| c.starts_with("text/event-stream")));
    let frames = frames(&text);
    for (i, (name, data)) in frames.iter().enumerate() {
        assert_eq!(data["type"], name.as_str(), "the event name is its type");
        assert_eq!(data["sequence_number"].as_u64(), Some(i as u64));
    }
    let names: Vec<&str> = frames.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        &names[..4],
        [
            "response.created",
            "response.in_progress",
            "response.output_item.added",
            "response.content_part.added"
        ]
    );
    let terminal = if whole["status"] == "completed" {
        "response.completed"
    } else {
        "response.incomplete"
    };
    assert_eq!(
        &names[names.len() - 4..],
        [
            "response.output_text.done",
            "response.content_part.done",
            "response.output_item.done",
            terminal
        ]
    );
    let deltas: String = frames
        .iter()
        .filter(|(n, _)| n == "response.output_text.delta")
        .map(|(_, d)| d["delta"].as_str().expect("delta"))
        .collect();
    assert_eq!(deltas, text_of(&whole));
    let last = &frames[frames.len() - 1].1["response"];
    assert_eq!(text_of(last), text_of(&whole));
    assert_eq!(
        last["usage"]["output_tokens"],
        whole["usage"]["output_tokens"]
    );
    assert_eq!(frames[0].1["response"]["status"], "in_progress");
    // The streamed response was stored too.
    let id = last["id"].as_str().expect("id");
    let (s, stored) = get(&app, &format!("/v1/responses/{id}")).await;
    assert_eq!(s, StatusCode::OK, "{stored}");
}

#[tokio::test]
async fn previous_response_id_continues_the_conversation() {
    let app = server::router(tiny_state());
    let first = create(&app, &req(json!("my name is Ada"), 4, json!({}))).await;
    let id = first["id"].as_str().expect("id");
    let next = req(
        json!("what is my name?"),
        4,
        json!({"previous_response_id": id}),
    );
    let chained = create(&app, &next).await;
    assert_eq!(chained["previous_response_id"], id);
    // The same as giving the whole conversation explicitly.
    let explicit = json!([{"role": "user", "content": "my name is Ada"},
        {"type": "message", "role": "assistant", "id": "msg_x", "status": "completed",
         "content": [{"type": "output_text", "text": text_of(&first), "annotations": []}]},
        {"role": "user", "content": "what is my name?"}]);
    let whole = create(&app, &req(explicit, 4, json!({}))).await;
    assert_eq!(
        chained["usage"]["input_tokens"],
        whole["usage"]["input_tokens"]
    );
    assert_eq!(text_of(&chained), text_of(&whole));
    // A chain of chains: the third turn sees both before it.
    let third = create(
        &app,
        &req(
            json!("and again?"),
            2,
            json!({"previous_response_id": chained["id"]}),
        ),
    )
    .await;
    assert!(
        third["usage"]["input_tokens"].as_u64() > chained["usage"]["total_tokens"].as_u64(),
        "{third}"
    );
}

#[tokio::test]
async fn stored_responses_are_retrieved_and_deleted_and_store_false_keeps_none() {
    let app = server::router(tiny_state());
    let r = create(&app, &req(json!("hi"), 3, json!({}))).await;
    let id = r["id"].as_str().expect("id");
    let (s, text) = get(&app, &format!("/v1/responses/{id}")).await;
    assert_eq!(s, StatusCode::OK);
    let got: Value = serde_json::from_str(&text).expect("json");
    assert_eq!(got, r);
    let (s, _, text) = send(&app, "DELETE", &format!("/responses/{id}"), "", None).await;
    assert_eq!(s, StatusCode::OK, "{text}");
    let deleted: Value = serde_json::from_str(&text).expect("json");
    assert_eq!(
        deleted,
        json!({"id": id, "object": "response", "deleted": true})
    );
    let (s, _) = get(&app, &format!("/v1/responses/{id}")).await;
    assert_eq!(s, StatusCode::NOT_FOUND);
    let (s, _, _) = send(&app, "DELETE", &format!("/v1/responses/{id}"), "", None).await;
    assert_eq!(s, StatusCode::NOT_FOUND);
    let unstored = create(&app, &req(json!("hi"), 1, json!({"store": false}))).await;
    assert_eq!(unstored["store"], false);
    let id = unstored["id"].as_str().expect("id");
    let (s, _) = get(&app, &format!("/v1/responses/{id}")).await;
    assert_eq!(s, StatusCode::NOT_FOUND);
    let (s, b) = post(
        &app,
        "/v1/responses",
        &req(json!("x"), 1, json!({"previous_response_id": id})),
    )
    .await;
    assert_error(s, &b, StatusCode::BAD_REQUEST, Some("previous_response_id"));
    assert_eq!(b["error"]["code"], "previous_response_not_found");
}

#[tokio::test]
async fn the_store_keeps_the_most_recently_used() {
    let cfg = server::ServerConfig {
        max_stored_responses: 2,
        ..server::ServerConfig::default()
    };
    let app = server::router(state_with(cfg, engine_config(), Some(TEST_TEMPLATE)));
    let mut ids = Vec::new();
    for _ in 0..3 {
        let r = create(&app, &req(json!("hi"), 1, json!({}))).await;
        ids.push(r["id"].as_str().expect("id").to_string());
    }
    let (s, _) = get(&app, &format!("/v1/responses/{}", ids[0])).await;
    assert_eq!(s, StatusCode::NOT_FOUND, "the oldest was evicted");
    for id in &ids[1..] {
        let (s, _) = get(&app, &format!("/v1/responses/{id}")).await;
        assert_eq!(s, StatusCode::OK);
    }
}

#[tokio::test]
async fn unsupported_response_settings_are_refused_by_name() {
    let app = server::router(tiny_state());
    let tool = json!([{"type": "function", "name": "f", "parameters": {}}]);
    let refused = [
        // The tiny model's template has no tool-call format.
        (json!({"tools": tool}), "tools"),
        (json!({"text": {"format": {"type": "xml"}}}), "text.format"),
        (json!({"text": {"verbosity": "low"}}), "text"),
        (json!({"reasoning": {"effort": "high"}}), "reasoning"),
        (json!({"truncation": "auto"}), "truncation"),
        (json!({"background": true}), "background"),
        (json!({"top_logprobs": 2}), "top_logprobs"),
        (json!({"n": 2}), "n"),
    ];
    for (extra, param) in refused {
        let (s, b) = post(&app, "/v1/responses", &req(json!("x"), 1, extra)).await;
        assert_error(s, &b, StatusCode::BAD_REQUEST, Some(param));
    }
    let call = json!([{"type": "function_call_output", "call_id": "c", "output": "{}"}]);
    let (s, b) = post(&app, "/v1/responses", &req(call, 1, json!({}))).await;
    assert_error(s, &b, StatusCode::BAD_REQUEST, Some("input[0].type"));
    let image = json!([{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}]);
    let (s, b) = post(&app, "/v1/responses", &req(image, 1, json!({}))).await;
    assert_error(s, &b, StatusCode::BAD_REQUEST, Some("input[0].content[0]"));
    let (s, b) = post(&app, "/v1/responses", &json!({"max_output_tokens": 2})).await;
    assert_error(s, &b, StatusCode::BAD_REQUEST, Some("input"));
    let (s, b) = post(
        &app,
        "/v1/responses",
        &req(json!("x"), 1, json!({"model": "gpt-9"})),
    )
    .await;
    assert_error(s, &b, StatusCode::NOT_FOUND, Some("model"));
    // The values that change nothing pass.
    let fine = json!({"tools": [], "tool_choice": "auto", "text": {"format": {"type": "text"}},
        "truncation": "disabled", "reasoning": {}, "include": [], "metadata": {"k": "v"},
        "parallel_tool_calls": false, "stream_options": null});
    let r = create(&app, &req(json!("x"), 1, fine)).await;
    assert_eq!(r["metadata"], json!({"k": "v"}));
}

#[tokio::test]
async fn text_format_holds_the_output_to_the_schema_whole_and_streamed() {
    let app = server::router(tiny_state());
    let schema = json!({"type": "object", "properties": {"a": {"type": "integer"}},
        "required": ["a"], "additionalProperties": false});
    let format = json!({"text": {"format": {"type": "json_schema", "name": "x", "strict": true,
        "schema": schema}}});
    let r = create(&app, &req(json!("x"), 12, format.clone())).await;
    assert_eq!(r["text"]["format"]["schema"], schema);
    let text = text_of(&r);
    // The (random) tiny model writes what the grammar lets it: the object's start, compact.
    assert!(text.starts_with("{\"a\": "), "{text}");
    if r["status"] == "completed" {
        let v: Value = serde_json::from_str(&text).expect("a complete output is the object");
        assert!(v["a"].is_i64(), "{v}");
    }
    let mut body = req(json!("x"), 12, format);
    body["stream"] = json!(true);
    let (s, _, raw) = send(&app, "POST", "/v1/responses", body.to_string(), None).await;
    assert_eq!(s, StatusCode::OK, "{raw}");
    let streamed: String = frames(&raw)
        .iter()
        .filter(|(n, _)| n == "response.output_text.delta")
        .map(|(_, d)| d["delta"].as_str().expect("delta").to_string())
        .collect();
    assert_eq!(streamed, text);
    let (s, b) = post(
        &app,
        "/v1/responses",
        &req(
            json!("x"),
            4,
            json!({"text": {"format": {"type": "json_schema",
            "name": "x", "schema": {"type": "nonsense"}}}}),
        ),
    )
    .await;
    assert_error(s, &b, StatusCode::BAD_REQUEST, Some("text.format"));
}
