//! Structured output: the request fields that hold the output to a grammar, read into one
//! `engine::constraint::Constraint` and compiled before the request is queued.
//!
//! - OpenAI's `response_format`: `{"type": "text"}` (no constraint), `{"type": "json_object"}`,
//!   `{"type": "json_schema", "json_schema": {"name", "schema", "strict", "description"}}`;
//! - vLLM's `guided_json` (a schema, as an object or as JSON text), `guided_regex`,
//!   `guided_choice` (a list of strings), `guided_grammar` (a Lark grammar).
//!
//! At most one of them may ask for a constraint. A constraint the grammar library cannot
//! compile is a 400 naming the field and the library's reason; compiling runs on a blocking
//! thread (a first compilation may take milliseconds), and compiled grammars are cached by the
//! engine, so a repeated schema costs a lookup.

use engine::constraint::Constraint;
use serde_json::{Map, Value};

use crate::base::ApiError;
use crate::protocol::request::CommonParams;
use crate::serving::state::Loaded;
use crate::serving::validate::Job;

/// A constraint and the field it came from (the `param` of its errors).
#[derive(Debug)]
pub struct Asked {
    pub constraint: Constraint,
    pub param: &'static str,
}

/// The constraint the request's fields ask for, if any.
pub fn constraint(c: &CommonParams) -> Result<Option<Asked>, ApiError> {
    let mut asked = Vec::new();
    if let Some(v) = &c.response_format {
        if let Some(constraint) = response_format(v)? {
            asked.push(Asked {
                constraint,
                param: "response_format",
            });
        }
    }
    if let Some(v) = &c.guided_json {
        asked.push(Asked {
            constraint: Constraint::JsonSchema(schema_value(v, "guided_json")?),
            param: "guided_json",
        });
    }
    if let Some(v) = &c.guided_regex {
        asked.push(Asked {
            constraint: Constraint::Regex(v.clone()),
            param: "guided_regex",
        });
    }
    if let Some(v) = &c.guided_choice {
        if v.is_empty() {
            return Err(ApiError::invalid("guided_choice", "guided_choice is empty"));
        }
        asked.push(Asked {
            constraint: Constraint::Choice(v.clone()),
            param: "guided_choice",
        });
    }
    if let Some(v) = &c.guided_grammar {
        asked.push(Asked {
            constraint: Constraint::Lark(v.clone()),
            param: "guided_grammar",
        });
    }
    if asked.len() > 1 {
        let names: Vec<&str> = asked.iter().map(|a| a.param).collect();
        return Err(ApiError::invalid(
            asked[1].param,
            format!(
                "only one output constraint per request; got {}",
                names.join(", ")
            ),
        ));
    }
    Ok(asked.pop())
}

/// `response_format`: `None` for plain text.
fn response_format(v: &Value) -> Result<Option<Constraint>, ApiError> {
    const P: &str = "response_format";
    let obj = v
        .as_object()
        .ok_or_else(|| ApiError::invalid(P, "response_format must be an object"))?;
    let kind = obj.get("type").and_then(Value::as_str);
    let allowed: &[&str] = match kind {
        Some("text") | Some("json_object") => &["type"],
        Some("json_schema") => &["type", "json_schema"],
        _ => {
            return Err(ApiError::invalid(
                P,
                "response_format.type must be \"text\", \"json_object\" or \"json_schema\"",
            ))
        }
    };
    only_keys(obj, allowed, P)?;
    Ok(match kind {
        Some("json_object") => Some(Constraint::JsonObject),
        Some("json_schema") => Some(Constraint::JsonSchema(json_schema(obj.get("json_schema"))?)),
        _ => None,
    })
}

/// `response_format.json_schema`: `{name, schema, strict, description}`. The schema is always
/// enforced, so `strict` (true or false) changes nothing.
fn json_schema(v: Option<&Value>) -> Result<Value, ApiError> {
    const P: &str = "response_format.json_schema";
    let obj = v
        .and_then(Value::as_object)
        .ok_or_else(|| ApiError::invalid(P, "json_schema must be an object with a `schema`"))?;
    only_keys(obj, &["name", "schema", "strict", "description"], P)?;
    schema_of(obj, P)
}

/// The schema of a `json_schema` format's fields (`name`, `schema`, `strict`, `description`).
fn schema_of(obj: &Map<String, Value>, param: &str) -> Result<Value, ApiError> {
    if obj.get("name").is_some_and(|n| !n.is_string()) {
        return Err(ApiError::invalid(param, "`name` must be a string"));
    }
    if obj
        .get("strict")
        .is_some_and(|s| !s.is_boolean() && !s.is_null())
    {
        return Err(ApiError::invalid(param, "`strict` must be a boolean"));
    }
    match obj.get("schema") {
        Some(s) => schema_value(s, param),
        None => Err(ApiError::invalid(param, "`schema` is required")),
    }
}

/// `/v1/responses`' `text`: `{"format": …}` with the format `{"type": "text"}` (no
/// constraint), `{"type": "json_object"}` or `{"type": "json_schema", "name", "schema",
/// "strict", "description"}` (the `json_schema` fields flat, as the Responses API has them).
pub fn text_format(text: Option<&Value>) -> Result<Option<Asked>, ApiError> {
    const P: &str = "text.format";
    let Some(text) = text else {
        return Ok(None);
    };
    let obj = text
        .as_object()
        .ok_or_else(|| ApiError::invalid("text", "text must be an object"))?;
    only_keys(obj, &["format"], "text")?;
    let Some(format) = obj.get("format").filter(|f| !f.is_null()) else {
        return Ok(None);
    };
    let f = format
        .as_object()
        .ok_or_else(|| ApiError::invalid(P, "text.format must be an object"))?;
    let constraint = match f.get("type").and_then(Value::as_str) {
        Some("text") => {
            only_keys(f, &["type"], P)?;
            None
        }
        Some("json_object") => {
            only_keys(f, &["type"], P)?;
            Some(Constraint::JsonObject)
        }
        Some("json_schema") => {
            only_keys(f, &["type", "name", "schema", "strict", "description"], P)?;
            Some(Constraint::JsonSchema(schema_of(f, P)?))
        }
        _ => {
            return Err(ApiError::invalid(
                P,
                "text.format.type must be \"text\", \"json_object\" or \"json_schema\"",
            ))
        }
    };
    Ok(constraint.map(|constraint| Asked {
        constraint,
        param: P,
    }))
}

/// A JSON schema given as an object (or boolean), or as JSON text (vLLM accepts both).
fn schema_value(v: &Value, param: &str) -> Result<Value, ApiError> {
    match v {
        Value::Object(_) | Value::Bool(_) => Ok(v.clone()),
        Value::String(s) => match serde_json::from_str::<Value>(s) {
            Ok(parsed @ (Value::Object(_) | Value::Bool(_))) => Ok(parsed),
            Ok(_) => Err(ApiError::invalid(param, "the schema must be a JSON object")),
            Err(e) => Err(ApiError::invalid(
                param,
                format!("the schema is not valid JSON: {e}"),
            )),
        },
        _ => Err(ApiError::invalid(param, "the schema must be a JSON object")),
    }
}

fn only_keys(obj: &Map<String, Value>, allowed: &[&str], param: &str) -> Result<(), ApiError> {
    match obj.keys().find(|k| !allowed.contains(&k.as_str())) {
        Some(k) => Err(ApiError::invalid(
            param,
            format!("unsupported key `{k}` in {param}"),
        )),
        None => Ok(()),
    }
}

/// The constraint of a request whose tools ask for `tool_grammar` (`tool_choice` `required`, a
/// named function, or a strict tool under `auto`): that grammar, compiled and enforced like
/// any other. A request that also asks for a response format is a 400: the reply cannot follow
/// both.
pub fn with_tool_grammar(
    asked: Option<Asked>,
    tool_grammar: Option<String>,
) -> Result<Option<Asked>, ApiError> {
    match (asked, tool_grammar) {
        (Some(a), Some(_)) => Err(ApiError::invalid(
            a.param,
            format!(
                "`{}` cannot be combined with tool_choice \"required\", a named function or \
                 a strict tool: the reply is then held to the tool-call grammar",
                a.param
            ),
        )),
        (None, Some(lark)) => Ok(Some(Asked {
            constraint: Constraint::Lark(lark),
            param: "tool_choice",
        })),
        (asked, None) => Ok(asked),
    }
}

/// Compiles `asked` for the model (on a blocking thread) and attaches it to the job's
/// requests, after the thinking when the job splits reasoning from the answer; a grammar the
/// library cannot handle is a 400 naming the field.
pub async fn attach(job: &mut Job, asked: Option<Asked>, m: &Loaded) -> Result<(), ApiError> {
    let Some(Asked { constraint, param }) = asked else {
        return Ok(());
    };
    if job.request.ignore_eos {
        return Err(ApiError::invalid(
            "ignore_eos",
            format!("ignore_eos cannot be combined with `{param}`: a complete output must end"),
        ));
    }
    // With a reasoning parser the grammar holds the answer; the thinking before it is free.
    let constraint = match &job.reasoning {
        Some(r) => Constraint::After {
            lead: r.lead_grammar(),
            then: Box::new(constraint),
        },
        None => constraint,
    };
    let engine = m.engine.clone();
    let compiled = tokio::task::spawn_blocking(move || engine.compile(&constraint))
        .await
        .map_err(|e| ApiError::Internal(format!("compiling the constraint: {e}")))?;
    match compiled {
        Ok(c) => {
            job.request.constraint = Some(c);
            Ok(())
        }
        Err(e) => Err(ApiError::invalid(
            param,
            format!("`{param}` cannot be enforced: {e}"),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn asked(body: &str) -> Result<Option<Asked>, ApiError> {
        let common: CommonParams = serde_json::from_str(body).expect("parses");
        constraint(&common)
    }

    fn param(e: ApiError) -> Option<String> {
        match e {
            ApiError::BadRequest { param, .. } => param,
            _ => None,
        }
    }

    #[test]
    fn each_field_gives_its_constraint() {
        let c = |b: &str| asked(b).expect("valid").map(|a| a.constraint);
        assert_eq!(c(r#"{"response_format": {"type": "text"}}"#), None);
        assert_eq!(
            c(r#"{"response_format": {"type": "json_object"}}"#),
            Some(Constraint::JsonObject)
        );
        let schema = serde_json::json!({"type": "object"});
        assert_eq!(
            c(
                r#"{"response_format": {"type": "json_schema", "json_schema":
                {"name": "x", "strict": true, "schema": {"type": "object"}}}}"#
            ),
            Some(Constraint::JsonSchema(schema.clone()))
        );
        assert_eq!(
            c(r#"{"guided_json": "{\"type\": \"object\"}"}"#),
            Some(Constraint::JsonSchema(schema))
        );
        assert_eq!(
            c(r#"{"guided_regex": "a+"}"#),
            Some(Constraint::Regex("a+".into()))
        );
        assert_eq!(
            c(r#"{"guided_choice": ["a", "b"]}"#),
            Some(Constraint::Choice(vec!["a".into(), "b".into()]))
        );
        assert_eq!(
            c(r#"{"guided_grammar": "start: \"a\""}"#),
            Some(Constraint::Lark("start: \"a\"".into()))
        );
    }

    #[test]
    fn responses_text_formats_are_flat() {
        let f = |v: serde_json::Value| text_format(Some(&v));
        let schema = serde_json::json!({"type": "object"});
        let a = f(
            serde_json::json!({"format": {"type": "json_schema", "name": "x",
            "strict": true, "schema": schema}}),
        )
        .expect("valid")
        .expect("a constraint");
        assert_eq!(
            (a.constraint, a.param),
            (Constraint::JsonSchema(schema), "text.format")
        );
        let a = f(serde_json::json!({"format": {"type": "json_object"}})).expect("valid");
        assert_eq!(a.map(|a| a.constraint), Some(Constraint::JsonObject));
        assert!(f(serde_json::json!({"format": {"type": "text"}}))
            .expect("valid")
            .is_none());
        for (bad, p) in [
            (serde_json::json!({"verbosity": "low"}), "text"),
            (
                serde_json::json!({"format": {"type": "xml"}}),
                "text.format",
            ),
            (
                serde_json::json!({"format": {"type": "json_schema", "name": "x"}}),
                "text.format",
            ),
            (
                serde_json::json!({"format": {"type": "json_schema",
                    "json_schema": {"schema": {}}}}),
                "text.format",
            ),
        ] {
            let e = f(bad.clone()).expect_err("refused");
            assert_eq!(param(e), Some(p.to_string()), "{bad}");
        }
    }

    #[test]
    fn malformed_or_conflicting_constraints_are_named() {
        for (body, p) in [
            (r#"{"response_format": {"type": "xml"}}"#, "response_format"),
            (
                r#"{"response_format": {"type": "text", "x": 1}}"#,
                "response_format",
            ),
            (
                r#"{"response_format": {"type": "json_schema"}}"#,
                "response_format.json_schema",
            ),
            (
                r#"{"response_format": {"type": "json_schema", "json_schema": {"name": "a"}}}"#,
                "response_format.json_schema",
            ),
            (r#"{"guided_json": "{not json"}"#, "guided_json"),
            (r#"{"guided_json": 3}"#, "guided_json"),
            (r#"{"guided_choice": []}"#, "guided_choice"),
            (
                r#"{"guided_regex": "a", "guided_choice": ["a"]}"#,
                "guided_choice",
            ),
        ] {
            let e = asked(body).expect_err(body);
            assert_eq!(param(e), Some(p.to_string()), "{body}");
        }
    }
}
