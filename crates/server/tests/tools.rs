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

/// The SSE events of a streamed response body: (name, data).
fn events(body: &str) -> Vec<(String, Value)> {
    body.split("\n\n")
        .filter_map(|f| {
            let name = f.lines().find_map(|l| l.strip_prefix("event: "))?;
            let data = f.lines().find_map(|l| l.strip_prefix("data: "))?;
            Some((name.to_string(), serde_json::from_str(data).expect("JSON")))
        })
        .collect()
}

#[tokio::test]
async fn responses_take_flat_tools_and_a_named_choice_gives_a_function_call_item() {
    let app = hermes_app();
    let tool = json!({"type": "function", "name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}});
    let body = json!({"input": "weather?", "max_output_tokens": 48, "temperature": 0,
        "tools": [tool], "tool_choice": {"type": "function", "name": "get_weather"}});
    let (s, whole) = post(&app, "/v1/responses", &body).await;
    assert_eq!(s, StatusCode::OK, "{whole}");
    assert_eq!(whole["tools"], json!([tool]), "tools are echoed");
    let item = &whole["output"][0];
    if whole["status"] == "completed" {
        assert_eq!(item["type"], "function_call", "{whole}");
        assert_eq!(item["name"], "get_weather");
        assert!(item["call_id"]
            .as_str()
            .is_some_and(|c| c.starts_with("call_")));
        let args: Value = serde_json::from_str(item["arguments"].as_str().expect("text"))
            .expect("the arguments are JSON");
        assert!(args.is_object(), "{args}");
    } else {
        // Cut by max_output_tokens inside the call: the text so far is a call's start.
        let text = item["content"][0]["text"].as_str().expect("text");
        assert!(
            text.starts_with("<tool_call>\n{\"name\": \"get_weather\", \"arguments\":"),
            "{whole}"
        );
    }
    // Streamed: the same items, a call as added / arguments delta / done / item done.
    let mut streamed = body.clone();
    streamed["stream"] = json!(true);
    let (s, _, raw) = send(&app, "POST", "/v1/responses", streamed.to_string(), None).await;
    assert_eq!(s, StatusCode::OK, "{raw}");
    let evs = events(&raw);
    let last = &evs.last().expect("events").1["response"];
    let strip_ids = |v: &Value| {
        let mut v = v.clone();
        for item in v.as_array_mut().into_iter().flatten() {
            item["id"] = Value::Null;
            item["call_id"] = Value::Null;
        }
        v
    };
    assert_eq!(strip_ids(&last["output"]), strip_ids(&whole["output"]));
    if whole["status"] == "completed" {
        let names: Vec<&str> = evs.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(
            names[2..6],
            [
                "response.output_item.added",
                "response.function_call_arguments.delta",
                "response.function_call_arguments.done",
                "response.output_item.done"
            ]
        );
        assert_eq!(evs[3].1["delta"], item["arguments"]);
    }
    // A call and its output sent back are accepted (as an assistant call and a tool message).
    let input = json!([{"role": "user", "content": "weather?"},
        {"type": "function_call", "call_id": "call_1", "name": "get_weather",
         "arguments": "{\"city\": \"Oslo\"}"},
        {"type": "function_call_output", "call_id": "call_1", "output": "sunny"}]);
    let body = json!({"input": input, "max_output_tokens": 2});
    let (s, b) = post(&app, "/v1/responses", &body).await;
    assert_eq!(s, StatusCode::OK, "{b}");
    // Refused by their Responses paths: chat's nested shape, and max_tool_calls above 1.
    for (extra, param) in [
        (
            json!({"tools": [{"type": "function", "function": {"name": "f"}}]}),
            "tools[0].name",
        ),
        (
            json!({"tools": [tool], "max_tool_calls": 2}),
            "max_tool_calls",
        ),
        (
            json!({"tools": [tool], "tool_choice": "required",
                "text": {"format": {"type": "json_object"}}}),
            "text.format",
        ),
    ] {
        let mut body = json!({"input": "x", "max_output_tokens": 2});
        for (k, v) in extra.as_object().expect("object") {
            body[k] = v.clone();
        }
        let (s, b) = post(&app, "/v1/responses", &body).await;
        assert_error(s, &b, StatusCode::BAD_REQUEST, Some(param));
    }
}

/// Walks `text` byte by byte through the grammar: `Ok(complete)` when every token is
/// allowed (and whether the grammar could end there), `Err(bytes)` with the text accepted
/// before the first token it refused.
fn walk(state: &server::AppState, lark: &str, text: &str) -> Result<bool, String> {
    let m = state.loaded().expect("loaded");
    let c = m
        .engine
        .compile(&engine::constraint::Constraint::Lark(lark.into()))
        .expect("the grammar compiles");
    let mut mask = c.processor();
    let tok = m.engine.tokenizer();
    // One byte token per byte (the tiny vocabulary's `<0xNN>`): `encode` would put
    // SentencePiece's space before the text, which a grammar at the reply's start refuses.
    let ids: Vec<u32> = text
        .bytes()
        .map(|b| {
            tok.token_to_id(&format!("<0x{b:02X}>"))
                .expect("a byte token")
        })
        .collect();
    for (i, &id) in ids.iter().enumerate() {
        if !mask.allows(id) {
            return Err(tok.decode(&ids[..i], false));
        }
        model::LogitsProcessor::accept(&mut mask, id);
    }
    let eos = tok.eos_id().expect("an EOS");
    Ok(mask.allows(eos))
}

#[test]
fn a_strict_tool_under_auto_leaves_text_free_and_holds_marked_calls_to_the_schema() {
    use server::tools::constraint::tool_call_constraint;
    use server::tools::request::{Choice, Tool};
    use server::tools::{Family, Markers};
    let tools = [Tool {
        name: "get_weather".into(),
        description: None,
        parameters: Some(
            json!({"type": "object", "properties": {"city": {"type": "string"}},
            "required": ["city"], "additionalProperties": false}),
        ),
        strict: true,
    }];
    let state = state_with(
        ServerConfig::default(),
        engine_config(),
        Some(HERMES_TEMPLATE),
    );
    let call = "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}\n</tool_call>";
    for parallel in [true, false] {
        let c = tool_call_constraint(
            &tools,
            &Choice::Auto,
            parallel,
            Family::Hermes,
            &Markers::default(),
        )
        .expect("a strict tool under auto has a grammar");
        let lark = c.lark;
        // Text alone, text around a call; where the parser reads a bare or fenced call (the
        // reply's start), that is a call of the grammar too, held to the schema.
        assert_eq!(
            walk(&state, &lark, "It is sunny, no call needed."),
            Ok(true)
        );
        assert_eq!(
            walk(&state, &lark, &format!("Let me see.\n{call}\nDone.")),
            Ok(true)
        );
        let bare = "{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}";
        assert_eq!(walk(&state, &lark, bare), Ok(true));
        assert_eq!(
            walk(&state, &lark, &format!("```json\n{bare}\n```")),
            Ok(true)
        );
        assert_eq!(walk(&state, &lark, &format!("ok {bare}")), Ok(true));
        let e = walk(&state, &lark, "{\"name\": \"x\"}").expect_err("not a tool");
        assert_eq!(e, "{\"name\": \"");
        let e = walk(
            &state,
            &lark,
            "{\"name\": \"get_weather\", \"arguments\": {\"city\": 1",
        )
        .expect_err("a number is not a city");
        assert!(e.ends_with("\"city\": "), "{e}");
        // After the marker, only the tool's schema.
        let bad = "Ok <tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": 3}}";
        let e = walk(&state, &lark, bad).expect_err("a number is not a city");
        assert!(e.ends_with("\"city\": "), "{e}");
        let e = walk(&state, &lark, "<tool_call>\nhello").expect_err("not a call");
        assert_eq!(e, "<tool_call>\n");
        let e = walk(&state, &lark, "<tool_call>\n{\"name\": \"rm\"").expect_err("not a tool");
        assert!(e.ends_with("{\"name\": \""), "{e}");
        // Two calls: only with parallel calls.
        let two = walk(&state, &lark, &format!("{call}\n{call}"));
        if parallel {
            assert_eq!(two, Ok(true));
        } else {
            assert!(two.is_err(), "{two:?}");
        }
    }
}

#[test]
fn a_strict_tool_under_auto_holds_a_mistral_call_array_after_its_marker() {
    use server::tools::constraint::tool_call_constraint;
    use server::tools::request::{Choice, Tool};
    use server::tools::{Family, Markers};
    let tools = [Tool {
        name: "f".into(),
        description: None,
        parameters: Some(
            json!({"type": "object", "properties": {"n": {"type": "integer"}},
            "required": ["n"], "additionalProperties": false}),
        ),
        strict: true,
    }];
    let state = state_with(
        ServerConfig::default(),
        engine_config(),
        Some(HERMES_TEMPLATE),
    );
    let c = tool_call_constraint(
        &tools,
        &Choice::Auto,
        true,
        Family::Mistral,
        &Markers::default(),
    )
    .expect("a grammar");
    assert_eq!(walk(&state, &c.lark, "Just text."), Ok(true));
    let ok = "Sure.[TOOL_CALLS][{\"name\": \"f\", \"arguments\": {\"n\": 2}}]";
    assert_eq!(walk(&state, &c.lark, ok), Ok(true));
    let e = walk(&state, &c.lark, "[TOOL_CALLS]f[ARGS]").expect_err("the array form only");
    assert_eq!(e, "[TOOL_CALLS]");
}
