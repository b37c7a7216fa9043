//! Turning chat messages into prompt text.
//!
//! Three sources, in order of precedence: a `--chat-template FILE`, the GGUF's
//! `tokenizer.chat_template`, and, for gemma3 models without one, Gemma's turn format built in
//! (`<start_of_turn>user\n…<end_of_turn>\n<start_of_turn>model\n`, the system message folded into
//! the first user turn, as Gemma's own template does). Jinja templates run in minijinja set up to
//! render as transformers' `apply_chat_template` renders in Python's Jinja2 (`jinja`: its
//! globals, `tojson` with its options, Python's printing and tests): 69 of llama.cpp's 70
//! official templates render the same text in both (`tests/official_chat_templates.rs`). A
//! template that does not compile, or that needs what this renderer cannot reproduce (a `|safe`
//! string beside `+`, `jinja::unsupported`: the 70th), is refused when it is loaded, naming its
//! line.
//!
//! The rendered text contains the BOS token when the template writes it, so callers tokenize it
//! without adding special tokens and with special-token parsing on.
//!
//! A template gets what transformers gives it: `messages` (each `Message` as the client's
//! message, tool calls with their arguments as an object), `tools` (OpenAI's tool objects, or
//! `None`), `documents` (`None` unless `chat_template_kwargs` gives them),
//! `add_generation_prompt`, `bos_token`, `eos_token` and the request's `chat_template_kwargs`.
//! A Jinja template's tool-call family is told from its source when it is compiled.

use minijinja::{context, Environment, Value as JinjaValue};
use serde_json::Value;

use crate::serving::reasoning::ReasoningParser;
use crate::serving::tools::Family;

mod gemma;
mod jinja;
mod lex;
mod pyjson;
mod python;
mod strftime;
mod tilde;

pub use strftime::Clock;

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
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
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
    /// An assistant message's thinking, sent back in a conversation (Qwen3's and the R1
    /// distills' templates read `message.reasoning_content`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reasoning_content: Option<String>,
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

impl ChatTemplate {
    /// Compiles a Jinja template (a broken template is an error at startup, not per request).
    pub fn jinja(source: String) -> Result<ChatTemplate, String> {
        ChatTemplate::jinja_with_clock(source, Clock::System)
    }

    /// `jinja`, with `strftime_now` reading `clock`.
    pub fn jinja_with_clock(source: String, clock: Clock) -> Result<ChatTemplate, String> {
        let env = jinja::environment(&source, clock)?;
        let tool_family = Family::detect(&source);
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
        ChatTemplate::choose_with_clock(override_source, gguf_source, arch, Clock::System)
    }

    /// `choose`, with `strftime_now` reading `clock`.
    pub fn choose_with_clock(
        override_source: Option<String>,
        gguf_source: Option<String>,
        arch: &str,
        clock: Clock,
    ) -> Result<ChatTemplate, String> {
        match override_source.or(gguf_source) {
            Some(src) => ChatTemplate::jinja_with_clock(src, clock),
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
                let describe = |e| RenderError(format!("chat template {}", jinja::describe(&e)));
                let tmpl = env.get_template(jinja::TEMPLATE_NAME).map_err(describe)?;
                let extra = JinjaValue::from_serialize(kwargs);
                let documents = kwargs.and_then(|k| k.get("documents"));
                tmpl.render(context! {
                    messages => messages,
                    tools => tools.map_or_else(python::none, JinjaValue::from_serialize),
                    documents => documents.map_or_else(python::none, JinjaValue::from_serialize),
                    add_generation_prompt => add_generation_prompt,
                    bos_token => bos,
                    eos_token => eos,
                    ..extra
                })
                .map_err(describe)
            }
            ChatTemplate::GemmaTurns => {
                if tools.is_some() || messages.iter().any(Message::is_tool_related) {
                    return Err(RenderError(
                        "Gemma's built-in turn format has no tool calls".into(),
                    ));
                }
                gemma::gemma_turns(messages, add_generation_prompt, bos)
            }
            ChatTemplate::None => Err(RenderError(
                "this model has no chat template; use /v1/completions or start the server \
                 with --chat-template FILE"
                    .into(),
            )),
        }
    }
}

#[cfg(test)]
mod tests;
