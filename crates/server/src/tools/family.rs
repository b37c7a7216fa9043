//! Tool-call families: the text shape a chat template teaches its model for a call, told apart
//! by the template's own source.
//!
//! The rule, first match wins:
//! 1. the template contains `<tool_call>` → [`Family::Hermes`] (Qwen 2.5, Qwen 3, Hermes 2/3):
//!    `<tool_call>\n{"name": …, "arguments": {…}}\n</tool_call>`, one block per call (the
//!    object is taken bare or in a ```` ```json ```` fence too where the reply starts or a call
//!    ended, as small Qwen models write it);
//! 2. it contains `[TOOL_CALLS]` → [`Family::Mistral`]: `[TOOL_CALLS][{"name": …,
//!    "arguments": {…}}, …]`, or the newer `[TOOL_CALLS]name[ARGS]{…}` per call;
//! 3. it contains `<|start_header_id|>` and either `<|python_tag|>` or `"parameters"` →
//!    [`Family::Llama3Json`] (Llama 3.1 / 3.2 / 3.3): a JSON object `{"name": …, "parameters":
//!    {…}}` opening the reply or following `<|python_tag|>`, several separated by `;`.
//!
//! A template matching none has no known family: tools are refused with it.
//!
//! Some families' markers are control tokens (`[TOOL_CALLS]`, `<|python_tag|>`), which the
//! engine's detokenizer hides; [`Markers`] maps such token ids back to their text so the parser
//! sees them.

use std::collections::HashMap;

use tokenizer::Tokenizer;

/// How a model writes tool calls.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Family {
    /// `<tool_call>{"name": …, "arguments": …}</tool_call>` (Qwen 2.5, Hermes).
    Hermes,
    /// A bare JSON object `{"name": …, "parameters": …}` (Llama 3.x).
    Llama3Json,
    /// `[TOOL_CALLS]` followed by a JSON array of calls, or `name[ARGS]{…}`.
    Mistral,
}

impl Family {
    /// The family of a chat template's source, by the rule in the module header.
    pub fn detect(template: &str) -> Option<Family> {
        if template.contains(HERMES_OPEN) {
            Some(Family::Hermes)
        } else if template.contains(MISTRAL_OPEN) {
            Some(Family::Mistral)
        } else if template.contains("<|start_header_id|>")
            && (template.contains(LLAMA_TAG) || template.contains("\"parameters\""))
        {
            Some(Family::Llama3Json)
        } else {
            None
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Family::Hermes => "hermes",
            Family::Llama3Json => "llama3_json",
            Family::Mistral => "mistral",
        }
    }

    /// The strings that open a call region in the output.
    pub fn openings(self) -> &'static [&'static str] {
        match self {
            Family::Hermes => &[HERMES_OPEN],
            Family::Llama3Json => &[LLAMA_TAG],
            Family::Mistral => &[MISTRAL_OPEN],
        }
    }

    /// How a call region opens where a call may stand without a marker: at the start of the
    /// reply and right after a call (`rest` is the text there, leading whitespace skipped).
    /// Llama 3 writes its calls bare (`;` between them); small Qwen models often leave out
    /// `<tool_call>`, writing the object bare or in a Markdown fence.
    pub fn bare_opening(self, rest: &str, after_call: bool) -> Bare {
        if rest.is_empty() {
            return Bare::Maybe;
        }
        match self {
            Family::Mistral => Bare::No,
            _ if rest.starts_with('{') => Bare::Yes {
                len: 0,
                close: None,
            },
            Family::Llama3Json if after_call && rest.starts_with(';') => Bare::Yes {
                len: 0,
                close: None,
            },
            Family::Llama3Json => Bare::No,
            Family::Hermes => {
                if let Some(f) = FENCES.iter().find(|f| rest.starts_with(*f)) {
                    Bare::Yes {
                        len: f.len(),
                        close: Some(FENCE_CLOSE),
                    }
                } else if FENCES.iter().any(|f| f.starts_with(rest)) {
                    Bare::Maybe
                } else {
                    Bare::No
                }
            }
        }
    }

    /// What closes a region opened by `marker` (the readers of the other families need none).
    pub fn closing(self, marker: &str) -> Option<&'static str> {
        (marker == HERMES_OPEN).then_some(HERMES_CLOSE)
    }

    /// The key the family writes a call's arguments under.
    pub fn arguments_key(self) -> &'static str {
        match self {
            Family::Llama3Json => "parameters",
            Family::Hermes | Family::Mistral => "arguments",
        }
    }

    /// Every marker string of the family, openings and separators (for [`Markers`]).
    fn marker_texts(self) -> &'static [&'static str] {
        match self {
            Family::Hermes => &[HERMES_OPEN, HERMES_CLOSE],
            Family::Llama3Json => &[LLAMA_TAG],
            Family::Mistral => &[MISTRAL_OPEN, MISTRAL_ARGS, MISTRAL_CALL_ID],
        }
    }
}

/// Whether a call region opens where a call may stand bare.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Bare {
    /// It does: the opening is `len` bytes, and `close` ends the region.
    Yes {
        len: usize,
        close: Option<&'static str>,
    },
    /// More text will tell.
    Maybe,
    No,
}

/// Markdown fences around a bare call (Hermes).
const FENCES: &[&str] = &["```json\n", "```\n"];
const FENCE_CLOSE: &str = "```";

pub const HERMES_OPEN: &str = "<tool_call>";
pub const HERMES_CLOSE: &str = "</tool_call>";
pub const LLAMA_TAG: &str = "<|python_tag|>";
pub const MISTRAL_OPEN: &str = "[TOOL_CALLS]";
pub const MISTRAL_ARGS: &str = "[ARGS]";
pub const MISTRAL_CALL_ID: &str = "[CALL_ID]";

/// The family's marker strings that are hidden control tokens of this vocabulary, by token id.
#[derive(Clone, Debug, Default)]
pub struct Markers {
    by_id: HashMap<u32, &'static str>,
}

impl Markers {
    /// The control tokens of `tok` whose text is one of `family`'s markers.
    pub fn new(family: Family, tok: &Tokenizer) -> Markers {
        let by_id = family
            .marker_texts()
            .iter()
            .filter_map(|&m| {
                let id = tok.token_to_id(m)?;
                tok.is_special(id).then_some((id, m))
            })
            .collect();
        Markers { by_id }
    }

    /// Markers given directly, for tests without a vocabulary.
    #[cfg(test)]
    pub fn from_pairs(pairs: &[(u32, &'static str)]) -> Markers {
        Markers {
            by_id: pairs.iter().copied().collect(),
        }
    }

    /// The text the parser should see for token `id` whose decoded text is `text`: the marker
    /// when `id` is a hidden marker token, else `text` itself.
    pub fn piece<'a>(&self, id: u32, text: &'a str) -> &'a str {
        match self.by_id.get(&id) {
            Some(m) if text.is_empty() => m,
            _ => text,
        }
    }

    /// The token id of a hidden marker, if `marker` is one (for grammars that must name it).
    pub fn id_of(&self, marker: &str) -> Option<u32> {
        self.by_id
            .iter()
            .find_map(|(&id, &m)| (m == marker).then_some(id))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_family_is_told_by_its_template_text() {
        let qwen = "{%- if tools %}<tools>{{ tool | tojson }}</tools> <tool_call>\n{\"name\": \
                    <function-name>}</tool_call>{% endif %}<|im_start|>";
        assert_eq!(Family::detect(qwen), Some(Family::Hermes));
        let llama31 = "<|start_header_id|>system<|end_header_id|>{{- '<|python_tag|>' }}\
                       {\"name\": function name, \"parameters\": dictionary}";
        assert_eq!(Family::detect(llama31), Some(Family::Llama3Json));
        let llama32 = "<|start_header_id|>{{- '{\"name\": \"' + tool_call.name + '\", ' }}\
                       {{- '\"parameters\": ' }}";
        assert_eq!(Family::detect(llama32), Some(Family::Llama3Json));
        let mistral = "[INST]{% if tools %}[AVAILABLE_TOOLS]{{ tools|tojson }}\
                       [/AVAILABLE_TOOLS]{% endif %}[TOOL_CALLS]{{ calls|tojson }}";
        assert_eq!(Family::detect(mistral), Some(Family::Mistral));
    }

    #[test]
    fn templates_without_a_call_format_have_no_family() {
        let gemma = "{{ bos_token }}<start_of_turn>user\n{{ m.content }}<end_of_turn>";
        assert_eq!(Family::detect(gemma), None);
        // Llama 3 without tools (3.0): the header tokens alone are not enough.
        assert_eq!(
            Family::detect("<|start_header_id|>{{ m.role }}<|end_header_id|>"),
            None
        );
    }
}
