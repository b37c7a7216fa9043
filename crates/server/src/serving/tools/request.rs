//! `tools`, `tool_choice` and `parallel_tool_calls` of a chat request, checked and turned into
//! what the rest of the request needs: the tools the chat template shows the model, how to read
//! the reply, and (for `required` or a named function) the constraint its output must obey.
//!
//! - `tool_choice` defaults to `auto` with tools and `none` without; `required` or a named
//!   function without tools, or a name that is not among them, is a 400.
//! - `none`: the tools are not shown to the model (as llama-server does), so it answers in text;
//!   the reply is not parsed for calls.
//! - `auto`, `required`, named: the tools are rendered through the template's `tools`
//!   variable and the reply is parsed for the template's family of calls; a template of no
//!   known family is a 400 (the tools could not be shown, or the calls not read).
//! - `parallel_tool_calls: false` keeps at most one call per reply.
//! - A tool with `strict: true` under `auto`: the reply is free text, and every call in it
//!   is held to its tool's schema by a grammar (`constraint`). Llama 3's calls are bare JSON
//!   with no marker to start the grammar at: refused there.

use serde_json::{json, Value};

use super::constraint::{tool_call_constraint, ToolConstraint};
use super::family::{Family, Markers};
use crate::base::ApiError;
use crate::protocol::request::{FunctionDef, ToolChoiceIn, ToolDef};

/// Which calls the model may or must make.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Choice {
    None,
    Auto,
    Required,
    /// This function, exactly once (or once per call with parallel calls).
    Named(String),
}

/// A validated function tool.
#[derive(Clone, Debug)]
pub struct Tool {
    pub name: String,
    pub description: Option<String>,
    /// The arguments' JSON schema (an object), if given.
    pub parameters: Option<Value>,
    /// `strict: true`: calls of it must follow `parameters`, also under `auto`.
    pub strict: bool,
}

impl Tool {
    /// The tool as the chat template sees it, OpenAI's shape with absent fields left out.
    pub fn rendered(&self) -> Value {
        let mut function = json!({ "name": self.name });
        if let Some(d) = &self.description {
            function["description"] = json!(d);
        }
        if let Some(p) = &self.parameters {
            function["parameters"] = p.clone();
        }
        json!({ "type": "function", "function": function })
    }
}

/// How to read one reply for calls.
#[derive(Clone, Debug)]
pub struct ToolParse {
    pub family: Family,
    pub max_calls: usize,
    pub markers: Markers,
}

/// The tool part of a chat request, validated.
#[derive(Debug, Default)]
pub struct ToolSetup {
    /// The tools for the chat template's `tools` (`None`: not shown).
    pub rendered: Option<Vec<Value>>,
    /// How to read the reply (`None`: it is plain content).
    pub parse: Option<ToolParse>,
    /// What the output must match (`required` and named choices).
    pub constraint: Option<ToolConstraint>,
}

/// The tool fields of a request, in chat's shape (`/v1/responses` converts its own to it).
#[derive(Clone, Copy, Debug, Default)]
pub struct ToolFields<'a> {
    pub tools: Option<&'a [ToolDef]>,
    pub choice: Option<&'a ToolChoiceIn>,
    pub parallel: Option<bool>,
}

/// Checks the tool fields of a request for a template of `family` over `tok`'s vocabulary.
pub fn setup_fields(
    f: ToolFields<'_>,
    family: Option<Family>,
    tok: &tokenizer::Tokenizer,
) -> Result<ToolSetup, ApiError> {
    let tools = tools(f.tools)?;
    let choice = choice(f.choice, &tools)?;
    if choice == Choice::None || tools.is_empty() {
        return Ok(ToolSetup::default());
    }
    let family = family.ok_or_else(|| {
        ApiError::invalid(
            "tools",
            "this model's chat template has no known tool-call format (Hermes/Qwen \
             `<tool_call>`, Llama 3 JSON, Mistral `[TOOL_CALLS]`), so it cannot be given tools; \
             start the server with --chat-template FILE",
        )
    })?;
    let strict_auto = choice == Choice::Auto && tools.iter().any(|t| t.strict);
    if strict_auto && family == Family::Llama3Json {
        let i = tools.iter().position(|t| t.strict).unwrap_or_default();
        return Err(ApiError::invalid(
            &format!("tools[{i}].function.strict"),
            "strict tools under tool_choice \"auto\" are not supported for Llama 3 templates \
             (their calls are bare JSON, with no marker to start the schema at); use \
             \"required\" or a named tool_choice, which hold every call to its schema",
        ));
    }
    let parallel = f.parallel.unwrap_or(true);
    let markers = Markers::new(family, tok);
    Ok(ToolSetup {
        rendered: Some(tools.iter().map(Tool::rendered).collect()),
        constraint: tool_call_constraint(&tools, &choice, parallel, family, &markers),
        parse: Some(ToolParse {
            family,
            max_calls: if parallel { usize::MAX } else { 1 },
            markers,
        }),
    })
}

/// The `tools` of a request, checked: function tools with distinct names.
pub fn tools(defs: Option<&[ToolDef]>) -> Result<Vec<Tool>, ApiError> {
    let tools = defs
        .unwrap_or_default()
        .iter()
        .enumerate()
        .map(|(i, d)| tool(i, d))
        .collect::<Result<Vec<_>, _>>()?;
    for (i, t) in tools.iter().enumerate() {
        if tools[..i].iter().any(|u| u.name == t.name) {
            return Err(ApiError::invalid(
                &format!("tools[{i}].function.name"),
                format!("two tools are named `{}`", t.name),
            ));
        }
    }
    Ok(tools)
}

/// One `tools` entry: a function with a valid name and, if given, an object schema.
fn tool(i: usize, d: &ToolDef) -> Result<Tool, ApiError> {
    if d.kind != "function" {
        return Err(ApiError::invalid(
            &format!("tools[{i}].type"),
            format!("tool type `{}` is not supported (only `function`)", d.kind),
        ));
    }
    let Some(FunctionDef {
        name,
        description,
        parameters,
        strict,
    }) = &d.function
    else {
        return Err(ApiError::invalid(
            &format!("tools[{i}].function"),
            "a function tool needs `function`",
        ));
    };
    let name_ok = (1..=64).contains(&name.len())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    if !name_ok {
        return Err(ApiError::invalid(
            &format!("tools[{i}].function.name"),
            "a function name is 1 to 64 letters, digits, underscores or dashes",
        ));
    }
    if parameters.as_ref().is_some_and(|p| !p.is_object()) {
        return Err(ApiError::invalid(
            &format!("tools[{i}].function.parameters"),
            "parameters must be a JSON schema object",
        ));
    }
    Ok(Tool {
        name: name.clone(),
        description: description.clone(),
        parameters: parameters.clone(),
        strict: strict.unwrap_or(false),
    })
}

fn choice(given: Option<&ToolChoiceIn>, tools: &[Tool]) -> Result<Choice, ApiError> {
    let choice = match given {
        None if tools.is_empty() => Choice::None,
        None => Choice::Auto,
        Some(ToolChoiceIn::Mode(m)) => match m.as_str() {
            "none" => Choice::None,
            "auto" => Choice::Auto,
            "required" => Choice::Required,
            other => {
                return Err(ApiError::invalid(
                    "tool_choice",
                    format!(
                        "tool_choice `{other}` is not one of \"none\", \"auto\", \"required\" \
                         or a named function"
                    ),
                ))
            }
        },
        Some(ToolChoiceIn::Named(n)) => {
            let name = match (&n.function, n.kind.as_str()) {
                (Some(f), "function") => &f.name,
                _ => {
                    return Err(ApiError::invalid(
                        "tool_choice",
                        "a named tool_choice is {\"type\": \"function\", \"function\": \
                         {\"name\": …}}",
                    ))
                }
            };
            if !tools.iter().any(|t| &t.name == name) {
                return Err(ApiError::invalid(
                    "tool_choice",
                    format!("tool_choice names `{name}`, which is not among the tools"),
                ));
            }
            Choice::Named(name.clone())
        }
    };
    if matches!(choice, Choice::Required | Choice::Named(_)) && tools.is_empty() {
        return Err(ApiError::invalid(
            "tool_choice",
            "tool_choice \"required\" or a named function needs tools",
        ));
    }
    Ok(choice)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::base::parse_body;

    /// The tool fields of a chat body.
    #[derive(serde::Deserialize)]
    struct ChatTools {
        tools: Option<Vec<ToolDef>>,
        tool_choice: Option<ToolChoiceIn>,
    }

    fn chat(body: Value) -> ChatTools {
        parse_body(body.to_string().as_bytes()).expect("parses")
    }

    fn tools() -> Vec<Tool> {
        let req = chat(json!({"tools": [
            {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}},
            {"type": "function", "function": {"name": "get_time"}}]}));
        req.tools
            .iter()
            .flatten()
            .enumerate()
            .map(|(i, d)| tool(i, d).expect("valid"))
            .collect()
    }

    fn param(e: ApiError) -> Option<String> {
        match e {
            ApiError::BadRequest { param, .. } => param,
            _ => None,
        }
    }

    #[test]
    fn tool_choice_defaults_follow_the_tools() {
        assert_eq!(choice(None, &[]).expect("ok"), Choice::None);
        assert_eq!(choice(None, &tools()).expect("ok"), Choice::Auto);
        let named =
            chat(json!({"tool_choice": {"type": "function", "function": {"name": "get_time"}}}));
        assert_eq!(
            choice(named.tool_choice.as_ref(), &tools()).expect("ok"),
            Choice::Named("get_time".into())
        );
    }

    #[test]
    fn bad_choices_are_refused_by_name() {
        for c in [
            json!("sometimes"),
            json!({"type": "function", "function": {"name": "nope"}}),
            json!({"type": "custom", "function": {"name": "get_time"}}),
        ] {
            let req = chat(json!({ "tool_choice": c }));
            let e = choice(req.tool_choice.as_ref(), &tools()).expect_err("refused");
            assert_eq!(param(e), Some("tool_choice".into()), "{c}");
        }
        let req = chat(json!({"tool_choice": "required"}));
        let e = choice(req.tool_choice.as_ref(), &[]).expect_err("needs tools");
        assert_eq!(param(e), Some("tool_choice".into()));
    }

    #[test]
    fn bad_tools_are_refused_by_path() {
        let cases = [
            (json!({"type": "retrieval"}), "tools[0].type"),
            (json!({"type": "function"}), "tools[0].function"),
            (
                json!({"type": "function", "function": {"name": "a b"}}),
                "tools[0].function.name",
            ),
            (
                json!({"type": "function", "function": {"name": "f", "parameters": [1]}}),
                "tools[0].function.parameters",
            ),
        ];
        for (t, path) in cases {
            let req = chat(json!({ "tools": [t] }));
            let d = &req.tools.as_ref().expect("tools")[0];
            assert_eq!(param(tool(0, d).expect_err("refused")), Some(path.into()));
        }
    }

    #[test]
    fn a_rendered_tool_keeps_the_schema_and_leaves_out_what_is_absent() {
        let t = &tools()[0];
        assert_eq!(
            t.rendered().to_string(),
            r#"{"type":"function","function":{"name":"get_weather","parameters":{"type":"object"}}}"#
        );
    }
}
