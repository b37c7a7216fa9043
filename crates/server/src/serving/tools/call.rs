//! What every family's reader shares: the parsed call, the answer a reader gives about a call
//! region, and the two JSON helpers (where a bracketed value ends; a call object's name and
//! arguments).
//!
//! A reader is asked about the text after a call's opening marker and answers `Incomplete`
//! only while more text could still complete a valid call: once text has arrived that no
//! continuation can make valid, it answers `Malformed`, and with `finished` set it never
//! answers `Incomplete`. That makes every decision independent of how the text was split into
//! tokens.

use serde_json::{Map, Value};

/// A call as the model wrote it: the function name and its arguments, as compact JSON text of
/// an object (key order as the model wrote them).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParsedCall {
    pub name: String,
    pub arguments: String,
}

/// A reader's answer about a call region.
#[derive(Debug, PartialEq, Eq)]
pub enum Read {
    /// More text could still complete a valid call.
    Incomplete,
    /// Valid calls, using the first `used` bytes of the region.
    Calls { calls: Vec<ParsedCall>, used: usize },
    /// No continuation can make this a valid call.
    Malformed,
}

impl Read {
    /// `Incomplete`, or `Malformed` when no more text is coming.
    pub fn wait(finished: bool) -> Read {
        if finished {
            Read::Malformed
        } else {
            Read::Incomplete
        }
    }
}

/// Where a JSON value that starts with a bracket ends.
#[derive(Debug, PartialEq, Eq)]
pub enum Scan {
    /// The byte index just past the closing bracket.
    Complete(usize),
    Incomplete,
    /// Not a bracketed value, or a bracket closed by the wrong kind.
    Invalid,
}

/// Scans the object or array at the start of `s`, matching brackets outside strings. Only the
/// nesting is checked here; `serde_json` checks the rest once the value is complete.
pub fn container_end(s: &str) -> Scan {
    let mut closers: Vec<u8> = Vec::new();
    let mut in_string = false;
    let mut escaped = false;
    for (i, b) in s.bytes().enumerate() {
        if i == 0 && b != b'{' && b != b'[' {
            return Scan::Invalid;
        }
        if in_string {
            match b {
                _ if escaped => escaped = false,
                b'\\' => escaped = true,
                b'"' => in_string = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'{' => closers.push(b'}'),
            b'[' => closers.push(b']'),
            b'}' | b']' => {
                if closers.pop() != Some(b) {
                    return Scan::Invalid;
                }
                if closers.is_empty() {
                    return Scan::Complete(i + 1);
                }
            }
            _ => {}
        }
    }
    Scan::Incomplete
}

/// A call from a parsed object: a non-empty string `name`, and arguments under `args_key` or
/// the other usual key (`arguments` / `parameters`): an object, a string holding one, or
/// absent for a function without parameters.
pub fn call_from_object(obj: &Map<String, Value>, args_key: &str) -> Option<ParsedCall> {
    let name = obj.get("name")?.as_str()?;
    if name.is_empty() {
        return None;
    }
    let other = if args_key == "arguments" {
        "parameters"
    } else {
        "arguments"
    };
    let args = match obj.get(args_key).or_else(|| obj.get(other)) {
        None => Value::Object(Map::new()),
        Some(Value::String(s)) => serde_json::from_str::<Value>(s).ok()?,
        Some(v) => v.clone(),
    };
    if !args.is_object() {
        return None;
    }
    Some(ParsedCall {
        name: name.to_string(),
        arguments: args.to_string(),
    })
}

/// A call from the complete JSON text of one call object.
pub fn call_from_json(text: &str, args_key: &str) -> Option<ParsedCall> {
    match serde_json::from_str::<Value>(text).ok()? {
        Value::Object(obj) => call_from_object(&obj, args_key),
        _ => None,
    }
}

/// Splits `s` into its leading whitespace's length and the rest.
pub fn skip_ws(s: &str) -> (usize, &str) {
    let rest = s.trim_start();
    (s.len() - rest.len(), rest)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn container_end_matches_brackets_outside_strings() {
        assert_eq!(
            container_end(r#"{"a": "}{", "b": [1, {"c": 2}]} tail"#),
            Scan::Complete(31)
        );
        assert_eq!(container_end(r#"[{"a": "\"]"}]"#), Scan::Complete(14));
        assert_eq!(container_end(r#"{"a": [1, 2"#), Scan::Incomplete);
        assert_eq!(container_end(r#"{"a": "x\"#), Scan::Incomplete);
        assert_eq!(container_end(r#"{"a": [1}"#), Scan::Invalid);
        assert_eq!(container_end("x{}"), Scan::Invalid);
        assert_eq!(container_end(""), Scan::Incomplete);
    }

    #[test]
    fn a_call_object_needs_a_name_and_object_arguments() {
        let c = call_from_json(
            r#"{"name": "f", "arguments": {"b": 1, "a": [2]}}"#,
            "arguments",
        );
        assert_eq!(
            c,
            Some(ParsedCall {
                name: "f".into(),
                arguments: r#"{"b":1,"a":[2]}"#.into()
            })
        );
        // The other family's key, arguments as a JSON string, and no arguments at all.
        let c = call_from_json(r#"{"name": "f", "parameters": {"x": 1}}"#, "arguments");
        assert_eq!(c.map(|c| c.arguments), Some(r#"{"x":1}"#.into()));
        let c = call_from_json(r#"{"name": "f", "arguments": "{\"x\": 1}"}"#, "arguments");
        assert_eq!(c.map(|c| c.arguments), Some(r#"{"x":1}"#.into()));
        let c = call_from_json(r#"{"name": "f"}"#, "parameters");
        assert_eq!(c.map(|c| c.arguments), Some("{}".into()));
        for bad in [
            r#"{"arguments": {}}"#,
            r#"{"name": "", "arguments": {}}"#,
            r#"{"name": 3, "arguments": {}}"#,
            r#"{"name": "f", "arguments": [1]}"#,
            r#"{"name": "f", "arguments": "not json"}"#,
            r#"["f"]"#,
            r#"{"name": "f", "arguments": {}"#,
        ] {
            assert_eq!(call_from_json(bad, "arguments"), None, "{bad}");
        }
    }
}
