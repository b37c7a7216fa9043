//! The Mistral family. After `[TOOL_CALLS]`, either a JSON array of call objects
//! (`[{"name": …, "arguments": {…}, "id": …}, …]`, Mistral 7B v0.3, Nemo, Small 3.1) or one call
//! written `name[ARGS]{…}` (Mistral Small 3.2, Magistral; each call has its own
//! `[TOOL_CALLS]`), optionally with `[CALL_ID]id` before `[ARGS]`.

use super::call::{call_from_object, container_end, skip_ws, ParsedCall, Read, Scan};
use super::family::{MISTRAL_ARGS, MISTRAL_CALL_ID};
use serde_json::Value;

/// Reads the region after `[TOOL_CALLS]`.
pub fn read(region: &str, finished: bool) -> Read {
    let (lead, body) = skip_ws(region);
    if body.is_empty() {
        return Read::wait(finished);
    }
    if body.starts_with('[') {
        return array(lead, body, finished);
    }
    named(lead, body, finished)
}

/// `[{"name": …, "arguments": …}, …]`: every element must be a call.
fn array(lead: usize, body: &str, finished: bool) -> Read {
    let end = match container_end(body) {
        Scan::Complete(end) => end,
        Scan::Incomplete => return Read::wait(finished),
        Scan::Invalid => return Read::Malformed,
    };
    let Ok(Value::Array(items)) = serde_json::from_str::<Value>(&body[..end]) else {
        return Read::Malformed;
    };
    let calls: Option<Vec<ParsedCall>> = items
        .iter()
        .map(|v| v.as_object().and_then(|o| call_from_object(o, "arguments")))
        .collect();
    match calls {
        Some(calls) if !calls.is_empty() => Read::Calls {
            calls,
            used: lead + end,
        },
        _ => Read::Malformed,
    }
}

/// `name[ARGS]{…}` or `name[CALL_ID]id[ARGS]{…}`.
fn named(lead: usize, body: &str, finished: bool) -> Read {
    let Some(at) = body.find(MISTRAL_ARGS) else {
        // A name (and id) has no spaces or braces: past one, this is not a call.
        let plausible = !body.contains(|c: char| c.is_whitespace() || c == '{' || c == '"');
        return if plausible {
            Read::wait(finished)
        } else {
            Read::Malformed
        };
    };
    let head = &body[..at];
    let name = head.split(MISTRAL_CALL_ID).next().unwrap_or(head);
    let name_ok = !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'));
    if !name_ok {
        return Read::Malformed;
    }
    let args_at = at + MISTRAL_ARGS.len();
    let (gap, args) = skip_ws(&body[args_at..]);
    if args.is_empty() {
        return Read::wait(finished);
    }
    let end = match container_end(args) {
        Scan::Complete(end) if args.starts_with('{') => end,
        Scan::Incomplete => return Read::wait(finished),
        Scan::Complete(_) | Scan::Invalid => return Read::Malformed,
    };
    let mut obj = serde_json::Map::new();
    obj.insert("name".into(), Value::String(name.to_string()));
    match serde_json::from_str::<Value>(&args[..end]) {
        Ok(v) => obj.insert("arguments".into(), v),
        Err(_) => return Read::Malformed,
    };
    match call_from_object(&obj, "arguments") {
        Some(call) => Read::Calls {
            calls: vec![call],
            used: lead + args_at + gap + end,
        },
        None => Read::Malformed,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(r: Read) -> Vec<String> {
        match r {
            Read::Calls { calls, .. } => calls.into_iter().map(|c| c.name).collect(),
            other => panic!("not calls: {other:?}"),
        }
    }

    #[test]
    fn an_array_of_calls_is_read_whole() {
        let r = r#"[{"name": "a", "arguments": {"x": 1}, "id": "abcdefghi"}, {"name": "b", "arguments": {}}]"#;
        assert_eq!(names(read(r, false)), ["a", "b"]);
        assert_eq!(read(&r[..r.len() - 1], false), Read::Incomplete);
        assert_eq!(read(&r[..r.len() - 1], true), Read::Malformed);
        assert_eq!(read(r#"[{"name": "a"}, 3]"#, false), Read::Malformed);
        assert_eq!(read("[]", false), Read::Malformed);
    }

    #[test]
    fn the_name_args_form_is_one_call() {
        let r = r#"get_weather[ARGS]{"city": "Lyon"}[TOOL_CALLS]"#;
        let Read::Calls { calls, used } = read(r, false) else {
            panic!("a call")
        };
        assert_eq!(calls[0].name, "get_weather");
        assert_eq!(calls[0].arguments, r#"{"city":"Lyon"}"#);
        assert_eq!(&r[used..], "[TOOL_CALLS]");
        let with_id = r#"f[CALL_ID]a1b2c3d4e[ARGS]{}"#;
        assert_eq!(names(read(with_id, false)), ["f"]);
        assert_eq!(read("get_wea", false), Read::Incomplete);
        assert_eq!(read("get_weather[AR", false), Read::Incomplete);
        assert_eq!(read("get_weather[ARGS]{\"c", false), Read::Incomplete);
    }

    #[test]
    fn prose_after_the_marker_is_malformed() {
        assert_eq!(read("I cannot call tools", false), Read::Malformed);
        assert_eq!(read("bad name[ARGS]{}", false), Read::Malformed);
        assert_eq!(read("f[ARGS][1]", false), Read::Malformed);
    }
}
