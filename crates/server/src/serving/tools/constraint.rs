//! The constraint a `required` or named `tool_choice` puts on the output, so that the reply
//! always parses as calls: the JSON the calls form (a schema) and the exact text around it for
//! the template's family (a grammar in llguidance's Lark syntax, the JSON inlined with
//! `%json {…}`).
//!
//! One call is an object `{"name": <const>, <arguments key>: <the tool's parameters schema>}`
//! with no other keys; `required` allows any tool (`anyOf`), a named choice only that one.
//! With parallel calls the Hermes and Llama grammars repeat the call (`"\n"` / `"; "` between),
//! and Mistral's array takes one or more items; without, exactly one.
//!
//! Under `auto`, a strict tool makes a lazy grammar instead (`strict_auto`): free text, with
//! every call that opens with the family's marker held to its schema.
//!
//! The chat route compiles the grammar into the request's engine constraint
//! (`structured::with_tool_grammar`), so the reply cannot be anything but calls.

use serde_json::{json, Value};

use super::family::{Family, Markers, HERMES_CLOSE, HERMES_OPEN, MISTRAL_OPEN};
use super::request::{Choice, Tool};

/// What the output of a constrained tool choice must be.
#[derive(Clone, Debug, PartialEq)]
pub struct ToolConstraint {
    pub family: Family,
    /// The JSON schema of the calls: one call object, or (Mistral's array shape) an array.
    pub schema: Value,
    /// The whole output as a Lark grammar for llguidance (`start` is the rule).
    pub lark: String,
}

/// The constraint for `choice`, or `None` when the output is free (`none`, `auto` without
/// strict tools).
pub fn tool_call_constraint(
    tools: &[Tool],
    choice: &Choice,
    parallel: bool,
    family: Family,
    markers: &Markers,
) -> Option<ToolConstraint> {
    let allowed: Vec<&Tool> = match choice {
        Choice::None => return None,
        Choice::Auto if tools.iter().any(|t| t.strict) => {
            return strict_auto(tools, parallel, family, markers)
        }
        Choice::Auto => return None,
        Choice::Required => tools.iter().collect(),
        Choice::Named(name) => tools.iter().filter(|t| &t.name == name).collect(),
    };
    let key = family.arguments_key();
    let mut one: Vec<Value> = allowed.iter().map(|t| call_schema(t, key)).collect();
    let call = match one.len() {
        1 => one.remove(0),
        _ => json!({ "anyOf": one }),
    };
    let inline = compact(call.clone());
    let (schema, lark) = match family {
        Family::Hermes => {
            let open = lark_string(&format!("{HERMES_OPEN}\n"));
            let close = lark_string(&format!("\n{HERMES_CLOSE}"));
            (
                call.clone(),
                repeated(
                    parallel,
                    &format!("{open} %json {inline} {close}"),
                    "\"\\n\"",
                ),
            )
        }
        Family::Llama3Json => (
            call.clone(),
            repeated(parallel, &format!("%json {inline}"), "\"; \""),
        ),
        Family::Mistral => {
            let mut array = json!({ "type": "array", "items": call, "minItems": 1 });
            if !parallel {
                array["maxItems"] = json!(1);
            }
            // The marker is a control token in Mistral's vocabularies: named by id then.
            let open = match markers.id_of(MISTRAL_OPEN) {
                Some(id) => format!("<[{id}]>"),
                None => lark_string(MISTRAL_OPEN),
            };
            let lark = format!("start: {open} %json {}\n", compact(array.clone()));
            (array, lark)
        }
    };
    Some(ToolConstraint {
        family,
        schema,
        lark,
    })
}

/// `auto` with a strict tool: free text, in which every call is held to its tool's schema
/// (every tool's, strict or not). The text is a terminal that cannot contain the family's
/// marker (llguidance's `&` / `~` operators), so the only way past a marker is a call; the
/// text before a marked call is a lazy terminal ending at the first marker. Hermes: calls and
/// text alternate (`parallel_tool_calls: false`: one call at most). The parser also reads a
/// call written bare or in a ```` ```json ```` fence where a call may stand bare (the reply's
/// start, right after a call): there text cannot open like that, and those forms are calls
/// of the grammar, held to the schema like marked ones.
/// Mistral: one `[TOOL_CALLS]` array ends the reply.
fn strict_auto(
    tools: &[Tool],
    parallel: bool,
    family: Family,
    markers: &Markers,
) -> Option<ToolConstraint> {
    let key = family.arguments_key();
    let mut one: Vec<Value> = tools.iter().map(|t| call_schema(t, key)).collect();
    let call = match one.len() {
        1 => one.remove(0),
        _ => json!({ "anyOf": one }),
    };
    let opening = family.openings().first().copied()?;
    let marker_rx = regex_escape(opening);
    let marker_rx = lark_regex_body(&marker_rx);
    let no_marker = format!("~/(?s:.*){marker_rx}(?s:.*)/");
    let text = format!("TEXT: /(?s:.*)/ & {no_marker}\n");
    let (schema, lark) = match family {
        Family::Hermes => {
            // Where the parser looks for a bare call (leading whitespace skipped), text
            // cannot open like one: there a call is a call of the grammar.
            let not_bare = r"~/\s*(\{|```json\n|```\n)(?s:.*)/";
            let bodies: Vec<String> = tools.iter().map(|t| call_body(t, key)).collect();
            let close = lark_string(&format!("\n{HERMES_CLOSE}"));
            let times = if parallel { "*" } else { "?" };
            let lark = format!(
                "start: call{times} TEXT\n\
                 call: head \"\\n\" body {close} | body | \"```json\\n\" body \"\\n```\"\n\
                 body: {}\n\
                 head[lazy]: HEAD\n\
                 HEAD: /(?s:.*){marker_rx}/ & {not_bare}\n\
                 TEXT: /(?s:.*)/ & {no_marker} & {not_bare}\n",
                bodies.join(" | ")
            );
            (call, lark)
        }
        Family::Mistral => {
            let mut array = json!({ "type": "array", "items": call, "minItems": 1 });
            if !parallel {
                array["maxItems"] = json!(1);
            }
            let array_json = compact(array.clone());
            // A control-token marker cannot occur in text: the text simply ends at it. A
            // marker that is text ends a lazy head, as with Hermes.
            let lark = match markers.id_of(MISTRAL_OPEN) {
                Some(id) => format!("start: TEXT (<[{id}]> %json {array_json})?\n{text}"),
                None => format!(
                    "start: TEXT | head %json {array_json}\nhead[lazy]: /(?s:.*){marker_rx}/\n{text}"
                ),
            };
            (array, lark)
        }
        Family::Llama3Json => return None,
    };
    Some(ToolConstraint {
        family,
        schema,
        lark,
    })
}

/// One call of `t` as Lark: the object's opening and name as literal text, then its
/// arguments as inline JSON. (An inline `%json` is a lexeme class of its own, and llguidance
/// picks one class where several could start; opening with a literal keeps the choice between
/// a call and text in the grammar's own class.)
fn call_body(t: &Tool, key: &str) -> String {
    let params = t
        .parameters
        .clone()
        .unwrap_or_else(|| json!({ "type": "object" }));
    let head = format!("{{\"name\": {}, \"{key}\": ", Value::String(t.name.clone()));
    format!("{} %json {} \"}}\"", lark_string(&head), compact(params))
}

/// A regex's text inside Lark's `/…/` (a `/` escaped).
fn lark_regex_body(rx: &str) -> String {
    rx.replace('/', "\\/")
}

/// `s` as a regex matching exactly it: the regex syntax's meta characters escaped (others,
/// like `<`, must not be: `\<` is a word boundary).
fn regex_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len() * 2);
    for c in s.chars() {
        if "\\.+*?()|[]{}^$#&-~".contains(c) {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// `schema` with llguidance's options for compact JSON (`", "` and `": "`, no free
/// whitespace): left free, a small model may pad the call with whitespace until `max_tokens`.
fn compact(mut schema: Value) -> Value {
    if let Some(o) = schema.as_object_mut() {
        o.insert(
            "x-guidance".into(),
            json!({"whitespace_flexible": false, "item_separator": ", ", "key_separator": ": "}),
        );
    }
    schema
}

/// The schema of one call of `t`.
fn call_schema(t: &Tool, key: &str) -> Value {
    let params = t
        .parameters
        .clone()
        .unwrap_or_else(|| json!({ "type": "object" }));
    json!({
        "type": "object",
        "properties": { "name": { "const": t.name }, key: params },
        "required": ["name", key],
        "additionalProperties": false,
    })
}

/// `start: call` or `start: call (SEP call)*`, with `call` the given body.
fn repeated(parallel: bool, call: &str, sep: &str) -> String {
    if parallel {
        format!("start: call ({sep} call)*\ncall: {call}\n")
    } else {
        format!("start: call\ncall: {call}\n")
    }
}

/// A Lark string literal (JSON's escaping is a valid Lark string).
fn lark_string(s: &str) -> String {
    Value::String(s.to_string()).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tools() -> Vec<Tool> {
        vec![
            Tool {
                name: "get_weather".into(),
                description: None,
                parameters: Some(
                    json!({"type": "object", "properties": {"city": {"type": "string"}}}),
                ),
                strict: false,
            },
            Tool {
                name: "get_time".into(),
                description: Some("Now".into()),
                parameters: None,
                strict: false,
            },
        ]
    }

    fn constraint(choice: Choice, parallel: bool, family: Family) -> Option<ToolConstraint> {
        tool_call_constraint(&tools(), &choice, parallel, family, &Markers::default())
    }

    #[test]
    fn free_choices_have_no_constraint() {
        assert_eq!(constraint(Choice::Auto, true, Family::Hermes), None);
        assert_eq!(constraint(Choice::None, true, Family::Hermes), None);
    }

    #[test]
    fn a_named_choice_fixes_the_name_and_the_arguments_schema() {
        let c =
            constraint(Choice::Named("get_weather".into()), false, Family::Hermes).expect("some");
        assert_eq!(
            c.schema,
            json!({"type": "object",
                "properties": {"name": {"const": "get_weather"},
                    "arguments": {"type": "object", "properties": {"city": {"type": "string"}}}},
                "required": ["name", "arguments"], "additionalProperties": false})
        );
        assert!(
            c.lark
                .starts_with("start: call\ncall: \"<tool_call>\\n\" %json {"),
            "{}",
            c.lark
        );
        assert!(c.lark.ends_with("} \"\\n</tool_call>\"\n"), "{}", c.lark);
    }

    #[test]
    fn required_allows_any_tool_and_parallel_calls_repeat() {
        let c = constraint(Choice::Required, true, Family::Llama3Json).expect("some");
        let any = c.schema["anyOf"].as_array().expect("anyOf");
        assert_eq!(any.len(), 2);
        assert_eq!(any[1]["properties"]["name"]["const"], "get_time");
        assert_eq!(any[1]["required"], json!(["name", "parameters"]));
        assert!(
            c.lark
                .starts_with("start: call (\"; \" call)*\ncall: %json {"),
            "{}",
            c.lark
        );
    }

    #[test]
    fn mistral_calls_are_an_array_after_the_marker() {
        let c = constraint(Choice::Required, false, Family::Mistral).expect("some");
        assert_eq!(c.schema["type"], "array");
        assert_eq!(c.schema["maxItems"], 1);
        assert!(
            c.lark.starts_with("start: \"[TOOL_CALLS]\" %json {"),
            "{}",
            c.lark
        );
    }
}
