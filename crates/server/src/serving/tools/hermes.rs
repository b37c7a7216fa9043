//! The Hermes family (Qwen 2.5, Qwen 3, Hermes 2/3): after `<tool_call>`, one JSON object
//! `{"name": …, "arguments": {…}}`, then `</tool_call>`. Whitespace around the object is free.
//! A block the model left unclosed when it stopped counts if its object is complete (small
//! models often end with the object and the end-of-turn token). A region opened without
//! `<tool_call>` (the object opens the reply or follows a call) is closed by its fence's
//! ```` ``` ````, or is the object alone.

use super::call::{call_from_json, container_end, skip_ws, Read, Scan};

/// Reads the region after an opening that `close` ends (`None`: the object alone).
pub fn read(region: &str, finished: bool, close: Option<&str>) -> Read {
    let (lead, body) = skip_ws(region);
    if body.is_empty() {
        return Read::wait(finished);
    }
    let end = match container_end(body) {
        Scan::Complete(end) => end,
        Scan::Incomplete => return Read::wait(finished),
        Scan::Invalid => return Read::Malformed,
    };
    let Some(call) = call_from_json(&body[..end], "arguments") else {
        return Read::Malformed;
    };
    let (gap, rest) = skip_ws(&body[end..]);
    let used = match close {
        None => lead + end,
        Some(c) if rest.starts_with(c) => lead + end + gap + c.len(),
        Some(_) if rest.is_empty() && finished => region.len(),
        Some(c) if c.starts_with(rest) && !finished => return Read::Incomplete,
        Some(_) => return Read::Malformed,
    };
    Read::Calls {
        calls: vec![call],
        used,
    }
}

#[cfg(test)]
mod tests {
    use super::super::call::ParsedCall;
    use super::super::family::HERMES_CLOSE;
    use super::*;

    const TAG: Option<&str> = Some(HERMES_CLOSE);

    fn call(name: &str, arguments: &str) -> ParsedCall {
        ParsedCall {
            name: name.into(),
            arguments: arguments.into(),
        }
    }

    #[test]
    fn a_closed_block_is_one_call() {
        let r =
            "\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>rest";
        assert_eq!(
            read(r, false, TAG),
            Read::Calls {
                calls: vec![call("get_weather", r#"{"city":"Paris"}"#)],
                used: r.len() - 4
            }
        );
    }

    #[test]
    fn a_block_waits_for_its_object_and_its_closing_tag() {
        let full = "\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call>";
        for cut in 0..full.len() - 1 {
            assert_eq!(read(&full[..cut], false, TAG), Read::Incomplete, "{cut}");
        }
        assert!(matches!(read(full, false, TAG), Read::Calls { .. }));
    }

    #[test]
    fn an_unclosed_block_counts_only_when_the_output_ended() {
        let r = "{\"name\": \"f\", \"arguments\": {\"a\": 1}}\n";
        assert_eq!(read(r, false, TAG), Read::Incomplete);
        assert_eq!(
            read(r, true, TAG),
            Read::Calls {
                calls: vec![call("f", r#"{"a":1}"#)],
                used: r.len()
            }
        );
        assert_eq!(read("{\"name\": \"f\", \"argu", true, TAG), Read::Malformed);
    }

    #[test]
    fn a_bare_object_ends_the_region() {
        let r = " {\"name\": \"f\", \"arguments\": {}}\n{\"name\"";
        assert_eq!(
            read(r, false, None),
            Read::Calls {
                calls: vec![call("f", "{}")],
                used: r.find('\n').expect("newline")
            }
        );
    }

    #[test]
    fn malformed_blocks_are_told_as_soon_as_they_cannot_be_calls() {
        assert_eq!(read("\nsure, here", false, TAG), Read::Malformed);
        assert_eq!(
            read("{\"name\": \"f\"} and more", false, TAG),
            Read::Malformed
        );
        assert_eq!(
            read("{\"nam\": \"f\"}</tool_call>", false, TAG),
            Read::Malformed
        );
        assert_eq!(read("{\"name\": \"f\", ]", false, TAG), Read::Malformed);
        assert_eq!(
            read("{'name': 'f'}</tool_call>", false, TAG),
            Read::Malformed
        );
    }
}
