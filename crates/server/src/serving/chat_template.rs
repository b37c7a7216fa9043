//! Turning chat messages into prompt text.
//!
//! Three sources, in order of precedence: a `--chat-template FILE`, the GGUF's
//! `tokenizer.chat_template`, and, for gemma3 models without one, Gemma's turn format built in
//! (`<start_of_turn>user\n…<end_of_turn>\n<start_of_turn>model\n`, the system message folded into
//! the first user turn, as Gemma's own template does). Jinja templates run in minijinja as
//! Hugging Face runs them in Python's Jinja: `trim_blocks` and `lstrip_blocks` on, Python
//! string methods (`.strip()`, `.startswith()`, …) enabled.
//!
//! The rendered text contains the BOS token when the template writes it, so callers tokenize it
//! without adding special tokens and with special-token parsing on.
//!
//! Tools reach a template as its `tools` variable (absent: `none`), and their schemas come out
//! through `tojson` as Python's `json.dumps` writes them (`", "` and `": "` between items, keys
//! in the order given, `indent` honoured), since that is the text the model was trained on.
//! A Jinja template's tool-call family is told from its source when it is compiled.

use minijinja::value::{Kwargs, Value as JinjaValue};
use minijinja::{context, Environment, ErrorKind};
use serde_json::Value;

use crate::serving::reasoning::ReasoningParser;
use crate::serving::tools::Family;

/// Template variables the server sets itself, which `chat_template_kwargs` may not replace.
pub const RESERVED_KWARGS: [&str; 5] = [
    "messages",
    "tools",
    "add_generation_prompt",
    "bos_token",
    "eos_token",
];

/// One message after validation: a role, plain text, and for tool calling the calls of an
/// assistant message or the call a `tool` message answers.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize)]
pub struct Message {
    pub role: String,
    pub content: String,
    /// An assistant message's calls, `{"id", "type", "function": {"name", "arguments"}}`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_calls: Option<Vec<Value>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

impl Message {
    /// A message of plain text.
    pub fn text(role: impl Into<String>, content: impl Into<String>) -> Message {
        Message {
            role: role.into(),
            content: content.into(),
            ..Message::default()
        }
    }

    /// Whether the message carries tool calls or a tool result.
    pub fn is_tool_related(&self) -> bool {
        self.tool_calls.is_some() || self.role == "tool"
    }
}

/// Why a conversation cannot be rendered (the client's fault: a 400).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct RenderError(pub String);

/// How this model's chat prompts are built.
pub enum ChatTemplate {
    Jinja {
        env: Box<Environment<'static>>,
        tool_family: Option<Family>,
        /// The reasoning parser its source and generation prompt call for.
        reasoning: Option<ReasoningParser>,
    },
    GemmaTurns,
    /// No template and no built-in format: chat is refused.
    None,
}

const TEMPLATE_NAME: &str = "chat";

impl ChatTemplate {
    /// Compiles a Jinja template (a broken template is an error at startup, not per request).
    pub fn jinja(source: String) -> Result<ChatTemplate, String> {
        let mut env = Environment::new();
        // As Hugging Face (and llama.cpp) render chat templates.
        env.set_trim_blocks(true);
        env.set_lstrip_blocks(true);
        minijinja_contrib::add_to_environment(&mut env);
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        env.add_function(
            "raise_exception",
            |msg: String| -> Result<String, minijinja::Error> {
                Err(minijinja::Error::new(ErrorKind::InvalidOperation, msg))
            },
        );
        env.add_filter("tojson", tojson);
        let tool_family = Family::detect(&source);
        env.add_template_owned(TEMPLATE_NAME, source.clone())
            .map_err(|e| format!("chat template: {e}"))?;
        let mut t = ChatTemplate::Jinja {
            env: Box::new(env),
            tool_family,
            reasoning: None,
        };
        // The generation prompt after one user turn (a template that cannot render it without
        // the real special tokens is told by its source alone).
        let prompt = t
            .render(&[Message::text("user", "hi")], None, true, "", "", None)
            .ok();
        if let ChatTemplate::Jinja { reasoning, .. } = &mut t {
            *reasoning = ReasoningParser::detect(&source, prompt.as_deref());
        }
        Ok(t)
    }

    /// The reasoning parser this template's model needs, told from the template.
    pub fn reasoning_parser(&self) -> Option<ReasoningParser> {
        match self {
            ChatTemplate::Jinja { reasoning, .. } => *reasoning,
            ChatTemplate::GemmaTurns | ChatTemplate::None => None,
        }
    }

    /// How this template's model writes tool calls (`None`: tools are not supported).
    pub fn tool_family(&self) -> Option<Family> {
        match self {
            ChatTemplate::Jinja { tool_family, .. } => *tool_family,
            ChatTemplate::GemmaTurns | ChatTemplate::None => None,
        }
    }

    /// Picks the template: the override, else the GGUF's, else the built-in one for `arch`.
    pub fn choose(
        override_source: Option<String>,
        gguf_source: Option<String>,
        arch: &str,
    ) -> Result<ChatTemplate, String> {
        match override_source.or(gguf_source) {
            Some(src) => ChatTemplate::jinja(src),
            None if arch == "gemma3" => Ok(ChatTemplate::GemmaTurns),
            None => Ok(ChatTemplate::None),
        }
    }

    pub fn describe(&self) -> &'static str {
        match self {
            ChatTemplate::Jinja { .. } => "jinja",
            ChatTemplate::GemmaTurns => "built-in gemma turns",
            ChatTemplate::None => "none",
        }
    }

    /// Renders the conversation with `tools` (OpenAI's tool objects) if any; `bos`/`eos` are
    /// the tokenizer's special-token texts; `kwargs` (a request's `chat_template_kwargs`) are
    /// more variables of the template's context, as transformers passes them (the server's
    /// own variables, `RESERVED_KWARGS`, are checked apart by the caller and win here).
    pub fn render(
        &self,
        messages: &[Message],
        tools: Option<&[Value]>,
        add_generation_prompt: bool,
        bos: &str,
        eos: &str,
        kwargs: Option<&serde_json::Map<String, Value>>,
    ) -> Result<String, RenderError> {
        match self {
            ChatTemplate::Jinja { env, .. } => {
                let tmpl = env
                    .get_template(TEMPLATE_NAME)
                    .map_err(|e| RenderError(format!("chat template: {e}")))?;
                let extra = JinjaValue::from_serialize(kwargs);
                tmpl.render(context! {
                    messages => messages,
                    tools => tools,
                    add_generation_prompt => add_generation_prompt,
                    bos_token => bos,
                    eos_token => eos,
                    ..extra
                })
                .map_err(|e| RenderError(format!("chat template: {e}")))
            }
            ChatTemplate::GemmaTurns => {
                if tools.is_some() || messages.iter().any(Message::is_tool_related) {
                    return Err(RenderError(
                        "Gemma's built-in turn format has no tool calls".into(),
                    ));
                }
                gemma_turns(messages, add_generation_prompt, bos)
            }
            ChatTemplate::None => Err(RenderError(
                "this model has no chat template; use /v1/completions or start the server \
                 with --chat-template FILE"
                    .into(),
            )),
        }
    }
}

/// Jinja's `tojson` as Hugging Face templates expect it: Python's `json.dumps(value,
/// ensure_ascii=False, indent=indent)`, not HTML-escaped.
fn tojson(value: &JinjaValue, kwargs: Kwargs) -> Result<JinjaValue, minijinja::Error> {
    let indent: Option<usize> = kwargs.get("indent")?;
    kwargs.assert_all_used()?;
    let json = serde_json::to_value(value)
        .map_err(|e| minijinja::Error::new(ErrorKind::InvalidOperation, format!("tojson: {e}")))?;
    let mut out = String::new();
    py_json(&json, indent, 0, &mut out);
    Ok(JinjaValue::from_safe_string(out))
}

/// Writes `v` as Python's `json.dumps` does: `", "` / `": "` without indent; with it, one item
/// a line and `","` / `": "`.
fn py_json(v: &Value, indent: Option<usize>, level: usize, out: &mut String) {
    let items: Vec<(Option<&String>, &Value)> = match v {
        Value::Array(a) if !a.is_empty() => a.iter().map(|x| (None, x)).collect(),
        Value::Object(o) if !o.is_empty() => o.iter().map(|(k, x)| (Some(k), x)).collect(),
        // Scalars, `[]` and `{}`: serde_json writes them as Python does.
        _ => return out.push_str(&v.to_string()),
    };
    let (open, close) = if v.is_array() { ('[', ']') } else { ('{', '}') };
    out.push(open);
    for (i, (key, x)) in items.into_iter().enumerate() {
        match (i, indent) {
            (0, None) => {}
            (_, None) => out.push_str(", "),
            (_, Some(n)) => {
                if i > 0 {
                    out.push(',');
                }
                out.push('\n');
                out.push_str(&" ".repeat(n * (level + 1)));
            }
        }
        if let Some(k) = key {
            out.push_str(&Value::String(k.clone()).to_string());
            out.push_str(": ");
        }
        py_json(x, indent, level + 1, out);
    }
    if let Some(n) = indent {
        out.push('\n');
        out.push_str(&" ".repeat(n * level));
    }
    out.push(close);
}

/// Gemma's turn format, written out (the same output as Gemma 3's Hugging Face template).
fn gemma_turns(
    messages: &[Message],
    add_generation_prompt: bool,
    bos: &str,
) -> Result<String, RenderError> {
    let (system, rest) = match messages.split_first() {
        Some((first, rest)) if first.role == "system" || first.role == "developer" => {
            (Some(first.content.trim()), rest)
        }
        _ => (None, messages),
    };
    let mut out = String::from(bos);
    for (i, m) in rest.iter().enumerate() {
        let role = match m.role.as_str() {
            "user" => "user",
            "assistant" | "model" => "model",
            "system" | "developer" => {
                return Err(RenderError(
                    "a system message is only allowed as the first message".into(),
                ))
            }
            other => return Err(RenderError(format!("unsupported role {other:?}"))),
        };
        let expected = if i % 2 == 0 { "user" } else { "model" };
        if role != expected {
            return Err(RenderError(
                "conversation roles must alternate user/assistant/user/... (after an optional \
                 system message)"
                    .into(),
            ));
        }
        out.push_str("<start_of_turn>");
        out.push_str(role);
        out.push('\n');
        if i == 0 {
            if let Some(s) = system {
                out.push_str(s);
                out.push_str("\n\n");
            }
        }
        out.push_str(m.content.trim());
        out.push_str("<end_of_turn>\n");
    }
    if add_generation_prompt {
        out.push_str("<start_of_turn>model\n");
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
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
}
