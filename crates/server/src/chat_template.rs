//! Turning chat messages into prompt text.
//!
//! Three sources, in order of precedence: a `--chat-template FILE`, the GGUF's
//! `tokenizer.chat_template`, and, for gemma3 models without one, Gemma's turn format built in
//! (`<start_of_turn>user\n…<end_of_turn>\n<start_of_turn>model\n`, the system message folded into
//! the first user turn, as Gemma's own template does). Jinja templates run in minijinja with
//! Python string methods (`.strip()`, `.startswith()`, …) enabled, because Hugging Face
//! templates are written against Python's Jinja.
//!
//! The rendered text contains the BOS token when the template writes it, so callers tokenize it
//! without adding special tokens and with special-token parsing on.

use minijinja::{context, Environment, ErrorKind};

/// One message after validation: a role and plain text.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct Message {
    pub role: String,
    pub content: String,
}

/// Why a conversation cannot be rendered (the client's fault: a 400).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct RenderError(pub String);

/// How this model's chat prompts are built.
pub enum ChatTemplate {
    Jinja(Box<Environment<'static>>),
    GemmaTurns,
    /// No template and no built-in format: chat is refused.
    None,
}

const TEMPLATE_NAME: &str = "chat";

impl ChatTemplate {
    /// Compiles a Jinja template (a broken template is an error at startup, not per request).
    pub fn jinja(source: String) -> Result<ChatTemplate, String> {
        let mut env = Environment::new();
        minijinja_contrib::add_to_environment(&mut env);
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        env.add_function(
            "raise_exception",
            |msg: String| -> Result<String, minijinja::Error> {
                Err(minijinja::Error::new(ErrorKind::InvalidOperation, msg))
            },
        );
        env.add_template_owned(TEMPLATE_NAME, source)
            .map_err(|e| format!("chat template: {e}"))?;
        Ok(ChatTemplate::Jinja(Box::new(env)))
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
            ChatTemplate::Jinja(_) => "jinja",
            ChatTemplate::GemmaTurns => "built-in gemma turns",
            ChatTemplate::None => "none",
        }
    }

    /// Renders the conversation; `bos`/`eos` are the tokenizer's special-token texts.
    pub fn render(
        &self,
        messages: &[Message],
        add_generation_prompt: bool,
        bos: &str,
        eos: &str,
    ) -> Result<String, RenderError> {
        match self {
            ChatTemplate::Jinja(env) => {
                let tmpl = env
                    .get_template(TEMPLATE_NAME)
                    .map_err(|e| RenderError(format!("chat template: {e}")))?;
                tmpl.render(context! {
                    messages => messages,
                    add_generation_prompt => add_generation_prompt,
                    bos_token => bos,
                    eos_token => eos,
                })
                .map_err(|e| RenderError(format!("chat template: {e}")))
            }
            ChatTemplate::GemmaTurns => gemma_turns(messages, add_generation_prompt, bos),
            ChatTemplate::None => Err(RenderError(
                "this model has no chat template; use /v1/completions or start the server \
                 with --chat-template FILE"
                    .into(),
            )),
        }
    }
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
        Message {
            role: role.into(),
            content: content.into(),
        }
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
                true,
                "<bos>",
                "<eos>",
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
            .render(&[msg("user", "a"), msg("user", "b")], true, "", "")
            .is_err());
    }

    #[test]
    fn jinja_templates_get_messages_and_python_string_methods() {
        let src = "{{ bos_token }}{% for m in messages %}[{{ m.role }}]{{ m.content.strip() }}\
                   {% endfor %}{% if add_generation_prompt %}[assistant]{% endif %}";
        let t = ChatTemplate::jinja(src.into()).expect("compiles");
        let out = t
            .render(&[msg("user", "  hi  ")], true, "<s>", "</s>")
            .expect("renders");
        assert_eq!(out, "<s>[user]hi[assistant]");
    }

    #[test]
    fn raise_exception_in_a_template_is_a_render_error() {
        let t = ChatTemplate::jinja("{{ raise_exception('nope') }}".into()).expect("compiles");
        let e = t.render(&[], true, "", "").expect_err("raises");
        assert!(e.0.contains("nope"), "{e}");
    }

    #[test]
    fn a_model_without_any_template_refuses_chat() {
        let t = ChatTemplate::choose(None, None, "llama").expect("no template is fine");
        assert!(t.render(&[msg("user", "x")], true, "", "").is_err());
    }
}
