//! Tool calls and tool results sent back in a conversation, as the chat template gets them.
//!
//! Hugging Face templates read an assistant message's calls as
//! `{"id", "type": "function", "function": {"name", "arguments"}}` with `arguments` an object
//! (they write it out with `tojson`), while OpenAI clients send the arguments as JSON text: the
//! text is parsed here, and text that is not a JSON object is a 400 naming it.

use serde_json::{json, Value};

use crate::base::ApiError;
use crate::protocol::request::ToolCallIn;

/// The calls of message `i`, for the template.
pub fn calls(i: usize, calls: &[ToolCallIn]) -> Result<Vec<Value>, ApiError> {
    calls
        .iter()
        .enumerate()
        .map(|(j, c)| {
            let path = format!("messages[{i}].tool_calls[{j}]");
            if c.kind.as_deref().is_some_and(|k| k != "function") {
                return Err(ApiError::invalid(
                    &format!("{path}.type"),
                    "only `function` tool calls are supported",
                ));
            }
            let arguments = match &c.function.arguments {
                Value::String(s) => serde_json::from_str::<Value>(s).ok(),
                v => Some(v.clone()),
            };
            let Some(arguments @ Value::Object(_)) = arguments else {
                return Err(ApiError::invalid(
                    &format!("{path}.function.arguments"),
                    "arguments must be the JSON text of an object",
                ));
            };
            // The client's order, `id` first, as transformers' templates see it (a template
            // may write the call out with `tojson`).
            let mut call = serde_json::Map::new();
            if let Some(id) = &c.id {
                call.insert("id".into(), json!(id));
            }
            call.insert("type".into(), json!("function"));
            call.insert(
                "function".into(),
                json!({ "name": c.function.name, "arguments": arguments }),
            );
            Ok(Value::Object(call))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::base::parse_body;
    use crate::protocol::request::ChatMessage;

    fn message(v: Value) -> ChatMessage {
        parse_body(v.to_string().as_bytes()).expect("parses")
    }

    #[test]
    fn arguments_text_becomes_an_object() {
        let m = message(json!({"role": "assistant", "content": null, "tool_calls": [
            {"id": "call_1", "type": "function",
             "function": {"name": "f", "arguments": "{\"city\": \"Paris\"}"}}]}));
        let out = calls(2, m.tool_calls.as_deref().expect("calls")).expect("valid");
        assert_eq!(
            serde_json::to_string(&out).expect("serializes"),
            r#"[{"id":"call_1","type":"function","function":{"name":"f","arguments":{"city":"Paris"}}}]"#
        );
    }

    #[test]
    fn arguments_that_are_not_an_object_are_refused_by_path() {
        for args in [json!("{nope"), json!("[1]"), json!(3)] {
            let m = message(json!({"role": "assistant", "tool_calls": [
                {"id": "c", "type": "function", "function": {"name": "f", "arguments": args}}]}));
            let e = calls(1, m.tool_calls.as_deref().expect("calls")).expect_err("refused");
            let ApiError::BadRequest { param, .. } = e else {
                panic!("a 400")
            };
            assert_eq!(
                param.as_deref(),
                Some("messages[1].tool_calls[0].function.arguments")
            );
        }
    }
}
