//! Anthropic's request shapes as the chat path takes them.
//!
//! - `system` (text or text blocks) is the first message, role `system`.
//! - A user message's text blocks are one user message; each `tool_result` block is a `tool`
//!   message answering its `tool_use_id` (named after the call it answers, for templates that
//!   show the name), in the order the blocks come; an error result's text is prefixed with
//!   `Error: `, so the model sees that the call failed.
//! - An assistant message's text is its content, its `tool_use` blocks its `tool_calls`
//!   (`input` as the arguments object, as templates read it) and its `thinking` blocks its
//!   `reasoning_content` (the signature is not checked: this server signs nothing).
//! - `tools` (`name`, `description`, `input_schema`, `strict`) become chat's function tools and
//!   `tool_choice` chat's: `auto` → `auto`, `any` → `required`, `tool` → the named function,
//!   `none` → `none`; `disable_parallel_tool_use` → at most one call. Errors name Anthropic's
//!   paths (`tools[0].name`).
//!
//! Any other block kind (image, document, redacted thinking…) is a 400 naming its path and
//! saying what is not supported.

use serde_json::{json, Value};

use crate::base::ApiError;
use crate::protocol::request::{
    FunctionDef, NamedFunction, NamedToolChoice, ToolChoiceIn, ToolDef,
};
use crate::serving::chat_template::Message;

use super::protocol::{Block, Content, InputMessage, ToolChoice, ToolIn};

/// The system prompt and the conversation as chat messages.
pub fn messages(
    system: Option<&Content>,
    turns: &[InputMessage],
) -> Result<Vec<Message>, ApiError> {
    let mut out = Vec::with_capacity(turns.len() + 1);
    if let Some(system) = system {
        out.push(Message::text("system", text_of(system, "system")?));
    }
    for (i, turn) in turns.iter().enumerate() {
        match turn.role.as_str() {
            "user" => user(i, &turn.content, &mut out)?,
            "assistant" => out.push(assistant(i, &turn.content)?),
            other => {
                return Err(ApiError::invalid(
                    &format!("messages[{i}].role"),
                    format!(
                        "role must be `user` or `assistant`, not `{other}` (the system prompt \
                         is the top-level `system`)"
                    ),
                ))
            }
        }
    }
    Ok(out)
}

/// The text of `content` (a string, or text blocks only), blamed on `path`.
fn text_of(content: &Content, path: &str) -> Result<String, ApiError> {
    match content {
        Content::Text(t) => Ok(t.clone()),
        Content::Blocks(blocks) => {
            let mut text = String::new();
            for (j, b) in blocks.iter().enumerate() {
                let at = format!("{path}[{j}]");
                match b.kind.as_str() {
                    "text" => text.push_str(&block_text(b, &at)?),
                    other => return Err(unsupported(&at, other, "text")),
                }
            }
            Ok(text)
        }
    }
}

/// A text block's text (`citations`, if sent, must be empty).
fn block_text(b: &Block, at: &str) -> Result<String, ApiError> {
    if b.citations.as_ref().is_some_and(|c| c != &json!([])) {
        return Err(ApiError::invalid(
            &format!("{at}.citations"),
            "citations are not supported",
        ));
    }
    b.text
        .clone()
        .ok_or_else(|| ApiError::invalid(&format!("{at}.text"), "a text block needs `text`"))
}

/// The 400 for a block of a kind this place does not take.
fn unsupported(at: &str, kind: &str, allowed: &str) -> ApiError {
    let why = match kind {
        "image" | "document" => "only text input is supported".to_string(),
        "thinking" => "thinking blocks are only taken in assistant turns".into(),
        "redacted_thinking" => {
            "redacted_thinking blocks cannot be read by this server (it never writes them)".into()
        }
        _ => format!("blocks of type `{kind}` are not supported here (only {allowed})"),
    };
    ApiError::invalid(&format!("{at}.type"), why)
}

/// A user turn: its text, and a `tool` message per `tool_result`, in order.
fn user(i: usize, content: &Content, out: &mut Vec<Message>) -> Result<(), ApiError> {
    let blocks = match content {
        Content::Text(t) => {
            out.push(Message::text("user", t.clone()));
            return Ok(());
        }
        Content::Blocks(b) => b,
    };
    let mut text: Option<String> = None;
    for (j, b) in blocks.iter().enumerate() {
        let at = format!("messages[{i}].content[{j}]");
        match b.kind.as_str() {
            "text" => text
                .get_or_insert_with(String::new)
                .push_str(&block_text(b, &at)?),
            "tool_result" => {
                if let Some(t) = text.take() {
                    out.push(Message::text("user", t));
                }
                let result = tool_result(b, &at, out)?;
                out.push(result);
            }
            other => return Err(unsupported(&at, other, "text and tool_result")),
        }
    }
    if let Some(t) = text {
        out.push(Message::text("user", t));
    } else if blocks.is_empty() {
        out.push(Message::text("user", ""));
    }
    Ok(())
}

/// A `tool_result` block as the `tool` message answering its call.
fn tool_result(b: &Block, at: &str, before: &[Message]) -> Result<Message, ApiError> {
    let id = b.tool_use_id.clone().ok_or_else(|| {
        ApiError::invalid(
            &format!("{at}.tool_use_id"),
            "a tool_result block needs `tool_use_id`",
        )
    })?;
    let mut text = match &b.content {
        None => String::new(),
        Some(c) => text_of(c, &format!("{at}.content"))?,
    };
    if b.is_error == Some(true) {
        text = format!("Error: {text}");
    }
    let name = before
        .iter()
        .rev()
        .flat_map(|m| m.tool_calls.iter().flatten())
        .find(|c| c["id"] == id.as_str())
        .and_then(|c| c["function"]["name"].as_str())
        .map(String::from);
    Ok(Message {
        tool_call_id: Some(id),
        name,
        ..Message::text("tool", text)
    })
}

/// An assistant turn: its text and its calls.
fn assistant(i: usize, content: &Content) -> Result<Message, ApiError> {
    let blocks = match content {
        Content::Text(t) => return Ok(Message::text("assistant", t.clone())),
        Content::Blocks(b) => b,
    };
    let mut m = Message::text("assistant", "");
    for (j, b) in blocks.iter().enumerate() {
        let at = format!("messages[{i}].content[{j}]");
        match b.kind.as_str() {
            "text" => m.content.push_str(&block_text(b, &at)?),
            "tool_use" => {
                let call = tool_use(b, &at)?;
                m.tool_calls.get_or_insert_with(Vec::new).push(call);
            }
            "thinking" => {
                let Some(Value::String(t)) = &b.thinking else {
                    return Err(ApiError::invalid(
                        &format!("{at}.thinking"),
                        "a thinking block needs `thinking` text",
                    ));
                };
                m.reasoning_content
                    .get_or_insert_with(String::new)
                    .push_str(t);
            }
            other => return Err(unsupported(&at, other, "text, thinking and tool_use")),
        }
    }
    Ok(m)
}

/// A `tool_use` block as a call the chat template reads.
fn tool_use(b: &Block, at: &str) -> Result<Value, ApiError> {
    let need = |f: &str| ApiError::invalid(&format!("{at}.{f}"), format!("a tool_use needs `{f}`"));
    let id = b.id.as_deref().ok_or_else(|| need("id"))?;
    let name = b.name.as_deref().ok_or_else(|| need("name"))?;
    let input = b.input.clone().ok_or_else(|| need("input"))?;
    if !input.is_object() {
        return Err(ApiError::invalid(
            &format!("{at}.input"),
            "a tool_use's input must be an object",
        ));
    }
    Ok(json!({"id": id, "type": "function",
        "function": {"name": name, "arguments": input}}))
}

/// `tools` in chat's shape.
pub fn tool_defs(tools: Option<&[ToolIn]>) -> Result<Vec<ToolDef>, ApiError> {
    let Some(tools) = tools else {
        return Ok(Vec::new());
    };
    let mut defs = Vec::with_capacity(tools.len());
    for (i, t) in tools.iter().enumerate() {
        if let Some(kind) = t.kind.as_deref().filter(|&k| k != "custom") {
            return Err(ApiError::invalid(
                &format!("tools[{i}].type"),
                format!(
                    "tool type `{kind}` is not supported (only client tools, type `custom` or \
                     absent: there are no server tools)"
                ),
            ));
        }
        let name = t
            .name
            .clone()
            .ok_or_else(|| ApiError::invalid(&format!("tools[{i}].name"), "a tool needs `name`"))?;
        let schema = t.input_schema.clone().ok_or_else(|| {
            ApiError::invalid(
                &format!("tools[{i}].input_schema"),
                "a tool needs `input_schema`",
            )
        })?;
        defs.push(ToolDef {
            kind: "function".into(),
            function: Some(FunctionDef {
                name,
                description: t.description.clone(),
                parameters: Some(schema),
                strict: t.strict,
            }),
        });
    }
    Ok(defs)
}

/// `tool_choice` in chat's shape, and whether parallel calls are allowed.
pub fn tool_choice(c: &ToolChoice) -> Result<(ToolChoiceIn, Option<bool>), ApiError> {
    let mode = |m: &str| ToolChoiceIn::Mode(m.to_string());
    let choice = match (c.kind.as_str(), &c.name) {
        ("auto", None) => mode("auto"),
        ("any", None) => mode("required"),
        ("none", None) => mode("none"),
        ("tool", Some(name)) => ToolChoiceIn::Named(NamedToolChoice {
            kind: "function".into(),
            function: Some(NamedFunction { name: name.clone() }),
        }),
        ("tool", None) => {
            return Err(ApiError::invalid(
                "tool_choice.name",
                "tool_choice of type `tool` needs `name`",
            ))
        }
        ("auto" | "any" | "none", Some(_)) => {
            return Err(ApiError::invalid(
                "tool_choice.name",
                "only tool_choice of type `tool` takes `name`",
            ))
        }
        (other, _) => {
            return Err(ApiError::invalid(
                "tool_choice.type",
                format!("tool_choice type is `auto`, `any`, `tool` or `none`, not `{other}`"),
            ))
        }
    };
    if c.kind == "none" && c.disable_parallel_tool_use.is_some() {
        return Err(ApiError::invalid(
            "tool_choice.disable_parallel_tool_use",
            "tool_choice `none` takes no disable_parallel_tool_use",
        ));
    }
    Ok((choice, c.disable_parallel_tool_use.map(|d| !d)))
}

/// Chat's paths in a tool error (`tools[0].function.name`) as Anthropic's
/// (`tools[0].name`, `tools[0].input_schema`, `tools[0].strict`), and `tool_choice`'s.
pub fn anthropic_paths(e: ApiError) -> ApiError {
    match e {
        ApiError::BadRequest {
            message,
            param: Some(p),
            code,
        } => {
            let p = if p.starts_with("tools[") {
                p.replacen(".function.parameters", ".input_schema", 1)
                    .replacen(".function", "", 1)
            } else if p.starts_with("tool_choice.function") {
                "tool_choice.name".into()
            } else {
                p
            };
            ApiError::BadRequest {
                message,
                param: Some(p),
                code,
            }
        }
        e => e,
    }
}

#[cfg(test)]
#[path = "input_tests.rs"]
mod tests;
