//! Tool calling on `/v1/responses`: the request's flat function tools and `tool_choice` turned
//! into chat's shape, so the same `tools::setup_fields` checks them, renders them through the
//! chat template and tells how to read the reply (and, for `required` or a named function,
//! which grammar holds it to calls).
//!
//! Responses tools are `{"type": "function", "name", "description", "parameters", "strict"}`
//! (chat nests them under `function`), a named choice is `{"type": "function", "name"}`; errors
//! name the Responses path (`tools[0].name`, not chat's `tools[0].function.name`).
//! `max_tool_calls`, with tools, must be 1: one call per response, as
//! `parallel_tool_calls: false`.

use serde::Deserialize;
use serde_json::Value;

use crate::base::ApiError;
use crate::protocol::request::{
    FunctionDef, NamedFunction, NamedToolChoice, ToolChoiceIn, ToolDef,
};
use crate::responses::request::ResponsesRequest;
use crate::serving::state::Loaded;
use crate::serving::tools::{self, ToolFields, ToolSetup};

/// A Responses function tool as sent.
#[derive(Debug, Deserialize)]
struct FlatTool {
    #[serde(rename = "type")]
    kind: String,
    name: Option<String>,
    description: Option<String>,
    parameters: Option<Value>,
    strict: Option<bool>,
}

/// The tool part of a Responses request, checked (an empty setup without tools).
pub fn setup(req: &ResponsesRequest, m: &Loaded) -> Result<ToolSetup, ApiError> {
    let defs = match &req.tools {
        None => Vec::new(),
        Some(list) => list
            .iter()
            .enumerate()
            .map(|(i, v)| tool_def(i, v))
            .collect::<Result<_, _>>()?,
    };
    let choice = req.tool_choice.as_ref().map(tool_choice).transpose()?;
    let parallel = match (req.max_tool_calls, defs.is_empty()) {
        (None, _) | (Some(_), true) => req.parallel_tool_calls,
        (Some(1), false) => Some(false),
        (Some(_), false) => {
            return Err(ApiError::invalid(
                "max_tool_calls",
                "with tools, max_tool_calls can only be 1 (one call per response, as \
                 parallel_tool_calls: false) or left out",
            ))
        }
    };
    let fields = ToolFields {
        tools: Some(&defs),
        choice: choice.as_ref(),
        parallel,
    };
    tools::setup_fields(fields, m.chat_template.tool_family(), m.engine.tokenizer())
        .map_err(flat_paths)
}

/// One `tools` entry in chat's shape.
fn tool_def(i: usize, v: &Value) -> Result<ToolDef, ApiError> {
    let t: FlatTool = serde_json::from_value(v.clone())
        .map_err(|e| ApiError::invalid(&format!("tools[{i}]"), format!("invalid tool: {e}")))?;
    if t.kind != "function" {
        return Err(ApiError::invalid(
            &format!("tools[{i}].type"),
            format!(
                "tool type `{}` is not supported (only `function`: there are no built-in tools)",
                t.kind
            ),
        ));
    }
    let name = t.name.ok_or_else(|| {
        ApiError::invalid(&format!("tools[{i}].name"), "a function tool needs `name`")
    })?;
    Ok(ToolDef {
        kind: t.kind,
        function: Some(FunctionDef {
            name,
            description: t.description,
            parameters: t.parameters,
            strict: t.strict,
        }),
    })
}

/// `tool_choice` in chat's shape.
fn tool_choice(v: &Value) -> Result<ToolChoiceIn, ApiError> {
    if let Some(mode) = v.as_str() {
        return Ok(ToolChoiceIn::Mode(mode.to_string()));
    }
    let named = v.as_object().and_then(|o| {
        let name = o.get("name")?.as_str()?;
        (o.get("type")? == "function" && o.len() == 2).then(|| name.to_string())
    });
    match named {
        Some(name) => Ok(ToolChoiceIn::Named(NamedToolChoice {
            kind: "function".into(),
            function: Some(NamedFunction { name }),
        })),
        None => Err(ApiError::invalid(
            "tool_choice",
            "tool_choice is \"none\", \"auto\", \"required\" or {\"type\": \"function\", \
             \"name\": …}",
        )),
    }
}

/// Chat's `tools[i].function.x` paths as the Responses API's `tools[i].x`.
fn flat_paths(e: ApiError) -> ApiError {
    match e {
        ApiError::BadRequest {
            message,
            param: Some(p),
            code,
        } if p.starts_with("tools[") => ApiError::BadRequest {
            message,
            param: Some(p.replacen(".function", "", 1)),
            code,
        },
        e => e,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn param(e: ApiError) -> Option<String> {
        match e {
            ApiError::BadRequest { param, .. } => param,
            _ => None,
        }
    }

    #[test]
    fn flat_tools_and_choices_take_chat_shape() {
        let d = tool_def(
            0,
            &json!({"type": "function", "name": "f", "parameters": {"type": "object"}}),
        )
        .expect("valid");
        let f = d.function.expect("a function");
        assert_eq!((d.kind.as_str(), f.name.as_str()), ("function", "f"));
        assert_eq!(f.parameters, Some(json!({"type": "object"})));
        let c = tool_choice(&json!({"type": "function", "name": "f"})).expect("valid");
        assert!(
            matches!(&c, ToolChoiceIn::Named(n) if n.function.as_ref().map(|f| f.name.as_str()) == Some("f"))
        );
        assert!(matches!(
            tool_choice(&json!("required")).expect("valid"),
            ToolChoiceIn::Mode(m) if m == "required"
        ));
    }

    #[test]
    fn bad_tools_and_choices_are_named_by_their_responses_path() {
        let e = tool_def(1, &json!({"type": "web_search"})).expect_err("refused");
        assert_eq!(param(e), Some("tools[1].type".into()));
        let e = tool_def(0, &json!({"type": "function"})).expect_err("refused");
        assert_eq!(param(e), Some("tools[0].name".into()));
        let e = tool_choice(&json!({"type": "function", "function": {"name": "f"}}))
            .expect_err("chat's shape is not the Responses shape");
        assert_eq!(param(e), Some("tool_choice".into()));
        let e = flat_paths(ApiError::invalid("tools[2].function.strict", "x"));
        assert_eq!(param(e), Some("tools[2].strict".into()));
    }
}
