//! The Llama 3.x JSON family: a call is a JSON object `{"name": …, "parameters": {…}}`
//! (`arguments` is taken too). It opens the reply, or follows `<|python_tag|>`; further calls
//! follow it, separated by `;` and whitespace. Text after `<|python_tag|>` that is not such an
//! object (Python for built-in tools) is not a call.

use super::call::{call_from_json, container_end, skip_ws, Read, Scan};

/// Reads a region that should start (after whitespace and an optional `;`) with a call object.
pub fn read(region: &str, finished: bool) -> Read {
    let (lead, mut body) = skip_ws(region);
    let mut used = lead;
    if let Some(after) = body.strip_prefix(';') {
        let (gap, rest) = skip_ws(after);
        used += 1 + gap;
        body = rest;
    }
    if body.is_empty() {
        return Read::wait(finished);
    }
    let end = match container_end(body) {
        Scan::Complete(end) if body.starts_with('{') => end,
        Scan::Incomplete => return Read::wait(finished),
        Scan::Complete(_) | Scan::Invalid => return Read::Malformed,
    };
    match call_from_json(&body[..end], "parameters") {
        Some(call) => Read::Calls {
            calls: vec![call],
            used: used + end,
        },
        None => Read::Malformed,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_object_with_name_and_parameters_is_a_call() {
        let r = r#" {"name": "get_weather", "parameters": {"city": "Oslo"}}; {"name": "#;
        let Read::Calls { calls, used } = read(r, false) else {
            panic!("a call")
        };
        assert_eq!(calls[0].name, "get_weather");
        assert_eq!(calls[0].arguments, r#"{"city":"Oslo"}"#);
        assert_eq!(&r[used..], r#"; {"name": "#);
        // The next call, after the separator.
        assert_eq!(read(&r[used..], false), Read::Incomplete);
        assert_eq!(read(&r[used..], true), Read::Malformed);
    }

    #[test]
    fn json_that_is_not_a_call_is_malformed() {
        assert_eq!(read(r#"{"answer": 42}"#, false), Read::Malformed);
        assert_eq!(read(r#"[{"name": "f"}]"#, false), Read::Malformed);
        assert_eq!(
            read("brave_search.call(query=\"x\")", false),
            Read::Malformed
        );
        assert_eq!(
            read(r#"{"name": "f", "parameters": {"#, false),
            Read::Incomplete
        );
        assert_eq!(
            read(r#"{"name": "f", "parameters": {"#, true),
            Read::Malformed
        );
    }
}
