//! Gemma's turn format, built in for gemma3 models whose GGUF has no chat template.

use super::{Message, RenderError};

/// Gemma's turn format, written out (the same output as Gemma 3's Hugging Face template).
pub fn gemma_turns(
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
