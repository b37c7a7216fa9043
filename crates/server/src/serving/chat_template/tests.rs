use super::*;

fn msg(role: &str, content: &str) -> Message {
    Message::text(role, content)
}

#[test]
fn gemma_turns_fold_the_system_message_into_the_first_user_turn() {
    let t = ChatTemplate::GemmaTurns;
    let out = t
        .render(
            &[
                msg("system", "Be brief."),
                msg("user", " Hi "),
                msg("assistant", "Hello"),
            ],
            None,
            true,
            "<bos>",
            "<eos>",
            None,
        )
        .expect("renders");
    assert_eq!(
        out,
        "<bos><start_of_turn>user\nBe brief.\n\nHi<end_of_turn>\n\
         <start_of_turn>model\nHello<end_of_turn>\n<start_of_turn>model\n"
    );
}

#[test]
fn gemma_turns_refuse_two_user_turns_in_a_row() {
    let t = ChatTemplate::GemmaTurns;
    assert!(t
        .render(
            &[msg("user", "a"), msg("user", "b")],
            None,
            true,
            "",
            "",
            None
        )
        .is_err());
}

#[test]
fn jinja_templates_get_messages_and_python_string_methods() {
    let src = "{{ bos_token }}{% for m in messages %}[{{ m.role }}]{{ m.content.strip() }}\
               {% endfor %}{% if add_generation_prompt %}[assistant]{% endif %}";
    let t = ChatTemplate::jinja(src.into()).expect("compiles");
    let out = t
        .render(&[msg("user", "  hi  ")], None, true, "<s>", "</s>", None)
        .expect("renders");
    assert_eq!(out, "<s>[user]hi[assistant]");
}

#[test]
fn chat_template_kwargs_are_template_variables_and_tell_the_reasoning_parser() {
    let src = "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n\
               {% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n\
               {% if enable_thinking is defined and not enable_thinking %}<think>\n\n\
               </think>\n\n{% endif %}{% endif %}{{ extra | default('') }}";
    let t = ChatTemplate::jinja(src.into()).expect("compiles");
    assert_eq!(t.reasoning_parser(), Some(ReasoningParser::Qwen3));
    let kwargs = serde_json::json!({"enable_thinking": false, "extra": "!"});
    let out = t
        .render(&[msg("user", "hi")], None, true, "", "", kwargs.as_object())
        .expect("renders");
    assert_eq!(
        out,
        "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n!"
    );
    // The server's own variables win over a kwarg of the same name.
    let kwargs = serde_json::json!({"add_generation_prompt": false});
    let out = t
        .render(&[msg("user", "hi")], None, true, "", "", kwargs.as_object())
        .expect("renders");
    assert!(out.ends_with("assistant\n"), "{out}");
    // A template whose generation prompt opens the think block is DeepSeek-R1's.
    let r1 = ChatTemplate::jinja(
        "{% for m in messages %}<|User|>{{ m.content }}{% endfor %}\
         {% if add_generation_prompt %}<|Assistant|><think>\n{% endif %}"
            .into(),
    )
    .expect("compiles");
    assert_eq!(r1.reasoning_parser(), Some(ReasoningParser::DeepSeekR1));
    assert_eq!(ChatTemplate::GemmaTurns.reasoning_parser(), None);
}

#[test]
fn raise_exception_in_a_template_is_a_render_error() {
    let t = ChatTemplate::jinja("{{ raise_exception('nope') }}".into()).expect("compiles");
    let e = t.render(&[], None, true, "", "", None).expect_err("raises");
    assert!(e.0.contains("nope"), "{e}");
}

#[test]
fn a_model_without_any_template_refuses_chat() {
    let t = ChatTemplate::choose(None, None, "llama").expect("no template is fine");
    assert!(t
        .render(&[msg("user", "x")], None, true, "", "", None)
        .is_err());
}

#[test]
fn tojson_writes_what_python_json_dumps_writes() {
    let src = "{{ tools | tojson }}|{{ tools[0] | tojson(indent=2) }}|{{ [] | tojson }}";
    let t = ChatTemplate::jinja(src.into()).expect("compiles");
    let tools: Vec<Value> = vec![serde_json::json!({"type": "function", "function":
        {"name": "f", "description": "a <b> & \"c\" é", "parameters": {"z": 1, "a": [1.5, true, null]}}})];
    let out = t
        .render(&[], Some(&tools), true, "", "", None)
        .expect("renders");
    assert_eq!(
        out,
        "[{\"type\": \"function\", \"function\": {\"name\": \"f\", \"description\": \
         \"a <b> & \\\"c\\\" é\", \"parameters\": {\"z\": 1, \"a\": [1.5, true, null]}}}]|{\n  \
         \"type\": \"function\",\n  \"function\": {\n    \"name\": \"f\",\n    \
         \"description\": \"a <b> & \\\"c\\\" é\",\n    \"parameters\": {\n      \"z\": 1,\n      \
         \"a\": [\n        1.5,\n        true,\n        null\n      ]\n    }\n  }\n}|[]"
    );
}

/// The tool parts of Qwen 2.5's template (its GGUF's own text, shortened).
const QWEN_TOOLS: &str = "{%- if tools %}<tools>{%- for tool in tools %}\n{{ tool | tojson }}\
    {%- endfor %}</tools>{%- endif %}{%- for message in messages %}\
    {%- if message.role == \"assistant\" and message.tool_calls %}[a]{{ message.content }}\
    {%- for tool_call in message.tool_calls %}{%- if tool_call.function is defined %}\
    {%- set tool_call = tool_call.function %}{%- endif %}<tool_call>{\"name\": \"\
    {{- tool_call.name }}\", \"arguments\": {{ tool_call.arguments | tojson }}}</tool_call>\
    {%- endfor %}{%- elif message.role == \"tool\" %}[tool]{{ message.content }}\
    {%- else %}[{{ message.role }}]{{ message.content }}{%- endif %}{%- endfor %}";

#[test]
fn tools_and_tool_calls_reach_the_template() {
    let t = ChatTemplate::jinja(QWEN_TOOLS.into()).expect("compiles");
    assert_eq!(t.tool_family(), Some(Family::Hermes));
    let tools = vec![serde_json::json!({"type": "function", "function": {"name": "f"}})];
    let call = serde_json::json!({"id": "call_1", "type": "function",
        "function": {"name": "f", "arguments": {"city": "Paris"}}});
    let messages = [
        msg("user", "Weather?"),
        Message {
            tool_calls: Some(vec![call]),
            ..msg("assistant", "")
        },
        Message {
            tool_call_id: Some("call_1".into()),
            ..msg("tool", "sunny")
        },
    ];
    let out = t
        .render(&messages, Some(&tools), true, "", "", None)
        .expect("renders");
    assert_eq!(
        out,
        // `trim_blocks` drops the newline after `{%- for … %}`, as Python's Jinja does.
        "<tools>{\"type\": \"function\", \"function\": {\"name\": \"f\"}}</tools>[user]Weather?\
         [a]<tool_call>{\"name\": \"f\", \"arguments\": {\"city\": \"Paris\"}}</tool_call>[tool]sunny"
    );
    let plain = t
        .render(&messages[..1], None, true, "", "", None)
        .expect("renders");
    assert_eq!(plain, "[user]Weather?");
}

#[test]
fn gemma_turns_refuse_tools() {
    let t = ChatTemplate::GemmaTurns;
    let tools = vec![serde_json::json!({"type": "function"})];
    assert!(t
        .render(&[msg("user", "x")], Some(&tools), true, "", "", None)
        .is_err());
    let tool_msg = msg("tool", "42");
    assert!(t
        .render(&[msg("user", "x"), tool_msg], None, true, "", "", None)
        .is_err());
}

#[test]
fn templates_see_python_values_tests_and_generators() {
    let render = |src: &str, tools: Option<&[Value]>| {
        ChatTemplate::jinja(src.into()).expect("compiles").render(
            &[msg("user", "hi")],
            tools,
            false,
            "",
            "",
            None,
        )
    };
    let out = render(
        "{{ tools is none }} {{ tools is iterable }} {{ tools is defined }} {{ documents }}|\
         {{ [none, true, 1.5e-7, {'k': 'it\\'s'}] }}|{{ 'x' ~ none ~ false ~ 2 ~ [1] }}|\
         {{ 'ab' is sequence }} {{ true is number }} {{ nothing|length }} {{ [1, 2] | join('-') }}|\
         {% set g = messages|map(attribute='role') %}{{ g|list }}{{ g|list }} {{ g is iterable }}|\
         {{ (none|map('upper')|list) }} {{ [[1], [2]] | upper }}",
        None,
    )
    .expect("renders");
    assert_eq!(
        out,
        "True False True None|[None, True, 1.5e-07, {'k': \"it's\"}]|xNoneFalse2[1]|\
         True True 0 1-2|['user'][] True|[] [[1], [2]]"
    );
    // Python's None is not iterable: a loop over tools that were not given fails, as in
    // transformers; given, they are a list.
    let src = "{% for t in tools %}{{ t.type }}{% endfor %}";
    assert!(render(src, None).is_err());
    let tools = [serde_json::json!({"type": "function"})];
    assert_eq!(render(src, Some(&tools)).expect("renders"), "function");
    // A generator has no length and no JSON.
    assert!(render("{{ messages|map(attribute='role')|length }}", None).is_err());
    assert!(render("{{ messages|select|tojson }}", None).is_err());
}

#[test]
fn strftime_now_reads_the_clock_given() {
    // 2026-02-03 04:05:06 UTC.
    let t = ChatTemplate::jinja_with_clock(
        "{{ strftime_now('%d %b %Y %H:%M') }}".into(),
        Clock::Fixed(1_770_091_506),
    )
    .expect("compiles");
    let out = t.render(&[], None, false, "", "", None).expect("renders");
    assert_eq!(out, "03 Feb 2026 04:05");
}
