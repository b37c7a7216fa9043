use proptest::prelude::*;

use super::*;

fn call(name: &str, arguments: &str) -> ParsedCall {
    ParsedCall {
        name: name.into(),
        arguments: arguments.into(),
    }
}

fn whole(family: Family, text: &str) -> (String, Vec<ParsedCall>) {
    parse_whole(family, usize::MAX, [text])
}

/// The text fed one character at a time.
fn by_chars(family: Family, max_calls: usize, text: &str) -> (String, Vec<ParsedCall>) {
    let chars: Vec<String> = text.chars().map(String::from).collect();
    parse_whole(family, max_calls, chars.iter().map(String::as_str))
}

const HERMES_TWO: &str = "Let me check both.\n<tool_call>\n{\"name\": \"get_weather\", \
    \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"get_time\", \
    \"arguments\": {\"tz\": \"CET\"}}\n</tool_call>";

#[test]
fn hermes_content_before_the_calls_stays_content() {
    let (content, calls) = whole(Family::Hermes, HERMES_TWO);
    assert_eq!(content, "Let me check both.");
    assert_eq!(
        calls,
        [
            call("get_weather", r#"{"city":"Paris"}"#),
            call("get_time", r#"{"tz":"CET"}"#)
        ]
    );
    assert_eq!(
        by_chars(Family::Hermes, usize::MAX, HERMES_TWO),
        (content, calls)
    );
}

#[test]
fn output_without_calls_is_content_byte_for_byte() {
    for family in [Family::Hermes, Family::Llama3Json, Family::Mistral] {
        for text in [
            "Hello there.  \n",
            "  a < b and [x] {not json} ",
            "<tool_c",
            "",
        ] {
            // A leading `{` is a bare call region: covered by its own tests.
            assert_eq!(
                whole(family, text),
                (text.to_string(), vec![]),
                "{family:?} {text:?}"
            );
            assert_eq!(
                by_chars(family, usize::MAX, text).0,
                text,
                "{family:?} {text:?}"
            );
        }
    }
}

#[test]
fn malformed_calls_fall_back_to_content() {
    let cases = [
        "Sure <tool_call>\nI would call get_weather</tool_call> ok",
        "<tool_call>{\"name\": \"f\", \"arguments\": {\"a\": 1}</tool_call>",
        "x <tool_call>{\"name\": \"f\", \"arguments\": {\"a\": ",
        "<tool_call>{\"function\": \"f\"}</tool_call>",
    ];
    for text in cases {
        assert_eq!(
            whole(Family::Hermes, text),
            (text.to_string(), vec![]),
            "{text:?}"
        );
        assert_eq!(
            by_chars(Family::Hermes, usize::MAX, text).0,
            text,
            "{text:?}"
        );
    }
    // A malformed block does not stop a later valid one.
    let text = "<tool_call>oops</tool_call> <tool_call>{\"name\": \"f\"}</tool_call>";
    let (content, calls) = whole(Family::Hermes, text);
    assert_eq!(content, "<tool_call>oops</tool_call>");
    assert_eq!(calls, [call("f", "{}")]);
}

#[test]
fn hermes_accepts_an_object_left_unclosed_at_the_end() {
    let text = "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"q\": \"x\"}}\n";
    assert_eq!(
        whole(Family::Hermes, text),
        (String::new(), vec![call("f", r#"{"q":"x"}"#)])
    );
}

#[test]
fn hermes_takes_bare_call_objects_where_the_reply_starts() {
    let text =
        "\n{\"name\": \"a\", \"arguments\": {\"x\": 1}}\n{\"name\": \"b\", \"arguments\": {}}\n";
    let expect = vec![call("a", r#"{"x":1}"#), call("b", "{}")];
    assert_eq!(whole(Family::Hermes, text), (String::new(), expect.clone()));
    assert_eq!(
        by_chars(Family::Hermes, usize::MAX, text),
        (String::new(), expect)
    );
    let fenced = "```json\n{\n  \"name\": \"a\",\n  \"arguments\": {\"x\": 1}\n}\n```\n```json\n{\"name\": \"b\"}\n```";
    let expect = vec![call("a", r#"{"x":1}"#), call("b", "{}")];
    assert_eq!(
        whole(Family::Hermes, fenced),
        (String::new(), expect.clone())
    );
    assert_eq!(
        by_chars(Family::Hermes, usize::MAX, fenced),
        (String::new(), expect)
    );
    // Not a call object, not at the start, or a fence of something else: content.
    for text in [
        "{\"answer\": 1}",
        "Try {\"name\": \"a\", \"arguments\": {}}",
        "```json\n[1, 2]\n```",
        "```python\nprint(1)\n```",
        "```\n{\"name\": \"a\"} trailing\n```",
    ] {
        assert_eq!(
            whole(Family::Hermes, text),
            (text.to_string(), vec![]),
            "{text}"
        );
    }
}

#[test]
fn text_between_and_after_calls_is_content_without_the_surrounding_whitespace() {
    let text = "A\n<tool_call>{\"name\": \"f\"}</tool_call>\n\nB  \n";
    assert_eq!(
        whole(Family::Hermes, text),
        ("AB".to_string(), vec![call("f", "{}")])
    );
}

#[test]
fn a_call_limit_drops_everything_after_the_last_allowed_call() {
    let (content, calls) = parse_whole(Family::Hermes, 1, [HERMES_TWO]);
    assert_eq!(content, "Let me check both.");
    assert_eq!(calls, [call("get_weather", r#"{"city":"Paris"}"#)]);
    assert_eq!(by_chars(Family::Hermes, 1, HERMES_TWO), (content, calls));
}

#[test]
fn llama_calls_open_the_reply_or_follow_the_python_tag() {
    let text = " {\"name\": \"get_weather\", \"parameters\": {\"city\": \"Rome\"}}; \
                {\"name\": \"get_time\", \"parameters\": {}}";
    let expect = vec![
        call("get_weather", r#"{"city":"Rome"}"#),
        call("get_time", "{}"),
    ];
    assert_eq!(
        whole(Family::Llama3Json, text),
        (String::new(), expect.clone())
    );
    assert_eq!(
        by_chars(Family::Llama3Json, usize::MAX, text),
        (String::new(), expect)
    );
    let tagged = "<|python_tag|>{\"name\": \"f\", \"parameters\": {\"a\": [1, 2]}}";
    assert_eq!(
        whole(Family::Llama3Json, tagged),
        (String::new(), vec![call("f", r#"{"a":[1,2]}"#)])
    );
    // A JSON answer, and an object after prose, are not calls.
    for text in [
        "{\"answer\": 42}",
        "The JSON is {\"name\": \"f\", \"parameters\": {}}",
    ] {
        assert_eq!(
            whole(Family::Llama3Json, text),
            (text.to_string(), vec![]),
            "{text}"
        );
        assert_eq!(
            by_chars(Family::Llama3Json, usize::MAX, text).0,
            text,
            "{text}"
        );
    }
}

#[test]
fn mistral_arrays_and_named_calls() {
    let text =
        "[TOOL_CALLS] [{\"name\": \"a\", \"arguments\": {\"x\": 1}, \"id\": \"abcdefghi\"}, \
                {\"name\": \"b\", \"arguments\": {}}]";
    let expect = vec![call("a", r#"{"x":1}"#), call("b", "{}")];
    assert_eq!(
        whole(Family::Mistral, text),
        (String::new(), expect.clone())
    );
    assert_eq!(
        by_chars(Family::Mistral, usize::MAX, text),
        (String::new(), expect)
    );
    let named = "Checking.[TOOL_CALLS]a[ARGS]{\"x\": 1}[TOOL_CALLS]b[ARGS]{}";
    let expect = vec![call("a", r#"{"x":1}"#), call("b", "{}")];
    assert_eq!(
        whole(Family::Mistral, named),
        ("Checking.".to_string(), expect)
    );
    let prose = "[TOOL_CALLS] I cannot.";
    assert_eq!(whole(Family::Mistral, prose), (prose.to_string(), vec![]));
}

/// Splits `text` at the given fractions of its characters.
fn split(text: &str, cuts: &[usize]) -> Vec<String> {
    let chars: Vec<char> = text.chars().collect();
    let mut points: Vec<usize> = cuts.iter().map(|c| c % (chars.len() + 1)).collect();
    points.sort_unstable();
    let mut pieces = Vec::new();
    let mut from = 0;
    for p in points.into_iter().chain([chars.len()]) {
        pieces.push(chars[from..p].iter().collect());
        from = p;
    }
    pieces
}

const SAMPLES: &[(Family, &str)] = &[
    (Family::Hermes, HERMES_TWO),
    (Family::Hermes, "Hi <tool_call> {\"name\": \"f\", \"arguments\": {\"s\": \"}</tool_call>\"}} </tool_call> bye"),
    (Family::Hermes, "<tool_call>not json</tool_call>\n<tool_call>{\"name\": \"g\"}"),
    (Family::Llama3Json, "{\"name\": \"f\", \"parameters\": {\"a\": \"{\"}};{\"name\": \"g\"} tail"),
    (Family::Hermes, " ```json\n{\"name\": \"f\"}\n```\n{\"name\": \"g\", \"arguments\": {}} <tool_call>{\"name\": \"h\"}</tool_call>"),
    (Family::Hermes, "```json\n{\"name\": \"f\", \"arguments\": {\"a\": 1}} oops```"),
    (Family::Mistral, "ok [TOOL_CALLS][{\"name\": \"a\", \"arguments\": {}}] [TOOL_CALLS]b[ARGS]{\"y\": [1]}"),
];

proptest! {
    #[test]
    fn any_split_into_pieces_gives_the_whole_result(
        sample in 0..SAMPLES.len(),
        cuts in proptest::collection::vec(0usize..400, 0..24),
        max_calls in 1usize..4,
    ) {
        let (family, text) = SAMPLES[sample];
        let pieces = split(text, &cuts);
        let streamed = parse_whole(family, max_calls, pieces.iter().map(String::as_str));
        prop_assert_eq!(streamed, parse_whole(family, max_calls, [text]));
    }
}
