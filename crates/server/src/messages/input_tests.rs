use serde_json::json;

use super::*;
use crate::base::parse_body;
use crate::messages::protocol::MessagesRequest;

fn req(v: Value) -> MessagesRequest {
    parse_body(v.to_string().as_bytes()).expect("parses")
}

fn convert(v: Value) -> Result<Vec<Message>, ApiError> {
    let r = req(v);
    messages(r.system.as_ref(), r.messages.as_deref().unwrap_or_default())
}

fn param(e: ApiError) -> Option<String> {
    match e {
        ApiError::BadRequest { param, .. } => param,
        _ => None,
    }
}

#[test]
fn system_text_and_blocks_become_chat_messages() {
    let m = convert(json!({
        "system": [{"type": "text", "text": "Be "}, {"type": "text", "text": "brief.", "cache_control": {"type": "ephemeral"}}],
        "messages": [
            {"role": "user", "content": "Hi"},
            {"role": "assistant", "content": [{"type": "text", "text": "Hello"}]},
            {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}
        ]
    }))
    .expect("valid");
    let got: Vec<(&str, &str)> = m
        .iter()
        .map(|m| (m.role.as_str(), m.content.as_str()))
        .collect();
    assert_eq!(
        got,
        [
            ("system", "Be brief."),
            ("user", "Hi"),
            ("assistant", "Hello"),
            ("user", "ab")
        ]
    );
}

#[test]
fn tool_use_and_tool_result_become_calls_and_tool_messages() {
    let m = convert(json!({"messages": [
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": [
            {"type": "text", "text": "Let me look."},
            {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}}
        ]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "toolu_1", "content": [{"type": "text", "text": "18 C"}]},
            {"type": "tool_result", "tool_use_id": "toolu_2", "content": "down", "is_error": true},
            {"type": "text", "text": "And now?"}
        ]}
    ]}))
    .expect("valid");
    assert_eq!(m.len(), 5);
    assert_eq!(m[1].role, "assistant");
    assert_eq!(m[1].content, "Let me look.");
    let calls = m[1].tool_calls.as_ref().expect("calls");
    assert_eq!(
        calls[0],
        json!({"id": "toolu_1", "type": "function",
            "function": {"name": "get_weather", "arguments": {"city": "Paris"}}})
    );
    assert_eq!(
        (m[2].role.as_str(), m[2].content.as_str()),
        ("tool", "18 C")
    );
    assert_eq!(m[2].tool_call_id.as_deref(), Some("toolu_1"));
    assert_eq!(
        m[2].name.as_deref(),
        Some("get_weather"),
        "named after its call"
    );
    assert_eq!(m[3].content, "Error: down");
    assert_eq!(m[3].name, None, "no call has that id");
    assert_eq!(
        (m[4].role.as_str(), m[4].content.as_str()),
        ("user", "And now?")
    );
}

#[test]
fn assistant_thinking_blocks_become_the_messages_reasoning() {
    let m = convert(json!({
        "messages": [
            {"role": "user", "content": "Hi"},
            {"role": "assistant", "content": [
                {"type": "thinking", "thinking": "Greet ", "signature": ""},
                {"type": "thinking", "thinking": "back.", "signature": "anything"},
                {"type": "text", "text": "Hello"}
            ]},
            {"role": "user", "content": "Bye"}
        ]
    }))
    .expect("valid");
    assert_eq!(m[1].content, "Hello");
    assert_eq!(m[1].reasoning_content.as_deref(), Some("Greet back."));
    assert_eq!(m[0].reasoning_content, None);
}

#[test]
fn unsupported_and_incomplete_blocks_are_named_by_their_path() {
    let cases = [
        (
            json!({"role": "user", "content": [{"type": "image", "source": {"type": "base64"}}]}),
            "messages[0].content[0].type",
            "text input",
        ),
        (
            json!({"role": "user", "content": [{"type": "thinking", "thinking": "hm", "signature": "s"}]}),
            "messages[0].content[0].type",
            "assistant turns",
        ),
        (
            json!({"role": "assistant", "content": [{"type": "redacted_thinking", "data": "x"}]}),
            "messages[0].content[0].type",
            "redacted_thinking",
        ),
        (
            json!({"role": "assistant", "content": [{"type": "thinking", "signature": "s"}]}),
            "messages[0].content[0].thinking",
            "thinking",
        ),
        (
            json!({"role": "user", "content": [{"type": "tool_use", "id": "t", "name": "f", "input": {}}]}),
            "messages[0].content[0].type",
            "tool_result",
        ),
        (
            json!({"role": "assistant", "content": [{"type": "tool_use", "id": "t", "input": {}}]}),
            "messages[0].content[0].name",
            "name",
        ),
        (
            json!({"role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": "f", "input": [1]}]}),
            "messages[0].content[0].input",
            "object",
        ),
        (
            json!({"role": "user", "content": [{"type": "tool_result", "content": "x"}]}),
            "messages[0].content[0].tool_use_id",
            "tool_use_id",
        ),
        (
            json!({"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t", "content": [{"type": "image"}]}]}),
            "messages[0].content[0].content[0].type",
            "text",
        ),
        (
            json!({"role": "system", "content": "x"}),
            "messages[0].role",
            "system",
        ),
        (
            json!({"role": "user", "content": [{"type": "text"}]}),
            "messages[0].content[0].text",
            "text",
        ),
    ];
    for (message, path, says) in cases {
        let e = convert(json!({"messages": [message]})).expect_err("refused");
        assert!(e.to_string().contains(says), "{path}: {e}");
        assert_eq!(param(e).as_deref(), Some(path));
    }
}

#[test]
fn tools_take_chat_s_shape() {
    let r = req(json!({"tools": [
        {"name": "get_weather", "description": "d", "input_schema": {"type": "object"}},
        {"type": "custom", "name": "g", "input_schema": {"type": "object"}, "strict": true}
    ]}));
    let defs = tool_defs(r.tools.as_deref()).expect("valid");
    let f = defs[0].function.as_ref().expect("a function");
    assert_eq!(defs[0].kind, "function");
    assert_eq!(
        (f.name.as_str(), f.description.as_deref()),
        ("get_weather", Some("d"))
    );
    assert_eq!(f.parameters, Some(json!({"type": "object"})));
    assert_eq!(defs[1].function.as_ref().and_then(|f| f.strict), Some(true));
    for (tool, path) in [
        (
            json!({"type": "web_search_20250305", "name": "web_search"}),
            "tools[0].type",
        ),
        (json!({"input_schema": {}}), "tools[0].name"),
        (json!({"name": "f"}), "tools[0].input_schema"),
    ] {
        let r = req(json!({ "tools": [tool] }));
        let e = tool_defs(r.tools.as_deref()).expect_err("refused");
        assert_eq!(param(e).as_deref(), Some(path));
    }
    let e = anthropic_paths(ApiError::invalid("tools[1].function.parameters", "x"));
    assert_eq!(param(e).as_deref(), Some("tools[1].input_schema"));
    let e = anthropic_paths(ApiError::invalid("tools[1].function.name", "x"));
    assert_eq!(param(e).as_deref(), Some("tools[1].name"));
}

#[test]
fn tool_choices_map_onto_chat_s() {
    let choice = |v: Value| {
        let r = req(json!({ "tool_choice": v }));
        tool_choice(r.tool_choice.as_ref().expect("given"))
    };
    let mode = |c: &ToolChoiceIn| match c {
        ToolChoiceIn::Mode(m) => m.clone(),
        ToolChoiceIn::Named(n) => format!("named {}", n.function.as_ref().map_or("", |f| &f.name)),
    };
    for (v, want, parallel) in [
        (json!({"type": "auto"}), "auto", None),
        (
            json!({"type": "any", "disable_parallel_tool_use": true}),
            "required",
            Some(false),
        ),
        (json!({"type": "none"}), "none", None),
        (
            json!({"type": "tool", "name": "f", "disable_parallel_tool_use": false}),
            "named f",
            Some(true),
        ),
    ] {
        let (c, p) = choice(v).expect("valid");
        assert_eq!((mode(&c).as_str(), p), (want, parallel));
    }
    for (v, path) in [
        (json!({"type": "tool"}), "tool_choice.name"),
        (json!({"type": "auto", "name": "f"}), "tool_choice.name"),
        (json!({"type": "required"}), "tool_choice.type"),
        (
            json!({"type": "none", "disable_parallel_tool_use": true}),
            "tool_choice.disable_parallel_tool_use",
        ),
    ] {
        let e = choice(v).expect_err("refused");
        assert_eq!(param(e).as_deref(), Some(path));
    }
}
