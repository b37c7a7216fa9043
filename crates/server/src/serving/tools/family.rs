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
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use tokenizer::Tokenizer;

use crate::base::new_id;

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

    /// A fresh id for a call the model made, in the shape the family's templates accept when
    /// the call comes back in a conversation: Mistral's templates raise on any id that is not
    /// 9 letters or digits, so Mistral calls get exactly that; the others get OpenAI's `call_…`.
    pub fn call_id(self) -> String {
        match self {
            Family::Mistral => alphanumeric_id(),
            Family::Hermes | Family::Llama3Json => new_id("call_"),
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

/// 9 letters or digits, unique per process for 62^9 ids: a counter and the clock mixed
/// (splitmix64) so that ids do not look sequential, written in base 62.
fn alphanumeric_id() -> String {
    const DIGITS: &[u8] = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    let mut z = nanos.wrapping_add(
        NEXT.fetch_add(1, Relaxed)
            .wrapping_mul(0x9e37_79b9_7f4a_7c15),
    );
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^= z >> 31;
    (0..9)
        .map(|_| {
            let d = DIGITS[(z % 62) as usize] as char;
            z /= 62;
            d
        })
        .collect()
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
        Markers::of_texts(family.marker_texts(), tok)
    }

    /// The control tokens of `tok` whose text is one of `texts`.
    pub fn of_texts(texts: &[&'static str], tok: &Tokenizer) -> Markers {
        let by_id = texts
            .iter()
            .filter_map(|&m| {
                let id = tok.token_to_id(m)?;
                tok.is_special(id).then_some((id, m))
            })
            .collect();
        Markers { by_id }
    }

    /// These markers and `other`'s.
    pub fn merged(&self, other: &Markers) -> Markers {
        let mut by_id = self.by_id.clone();
        by_id.extend(other.by_id.iter().map(|(&k, &v)| (k, v)));
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

    /// The tool parts of a Mistral v0.3-style template: the calls written back after
    /// `[TOOL_CALLS]`, each id checked as Mistral's templates check it (a string of length 9),
    /// raising otherwise.
    const MISTRAL_TOOLS: &str = "{%- for m in messages %}{%- if m.tool_calls %}[TOOL_CALLS][\
        {%- for c in m.tool_calls %}{%- if c.id is not string or c.id|length != 9 %}\
        {{- raise_exception('Tool call IDs should be alphanumeric strings with length 9!') }}\
        {%- endif %}{\"name\": \"{{ c.function.name }}\", \"id\": \"{{ c.id }}\"}{%- endfor %}]\
        {%- elif m.role == 'tool' %}{%- if m.tool_call_id|length != 9 %}\
        {{- raise_exception('Tool call IDs should be alphanumeric strings with length 9!') }}\
        {%- endif %}[TOOL_RESULTS]{{ m.content }}[/TOOL_RESULTS]\
        {%- else %}[INST]{{ m.content }}[/INST]{%- endif %}{%- endfor %}";

    fn round_trip(id: &str) -> Result<String, crate::serving::chat_template::RenderError> {
        use crate::serving::chat_template::{ChatTemplate, Message};
        let t = ChatTemplate::jinja(MISTRAL_TOOLS.into()).expect("compiles");
        assert_eq!(t.tool_family(), Some(Family::Mistral));
        let call = serde_json::json!({"id": id, "type": "function",
            "function": {"name": "f", "arguments": {}}});
        let messages = [
            Message::text("user", "Weather?"),
            Message {
                tool_calls: Some(vec![call]),
                ..Message::text("assistant", "")
            },
            Message {
                tool_call_id: Some(id.into()),
                ..Message::text("tool", "sunny")
            },
        ];
        t.render(&messages, None, true, "", "", None)
    }

    #[test]
    fn mistral_call_ids_are_what_its_templates_accept_back() {
        let ids: Vec<String> = (0..1000).map(|_| Family::Mistral.call_id()).collect();
        for id in &ids {
            assert_eq!(id.len(), 9, "{id}");
            assert!(id.chars().all(|c| c.is_ascii_alphanumeric()), "{id}");
        }
        let distinct: std::collections::HashSet<&String> = ids.iter().collect();
        assert_eq!(distinct.len(), ids.len(), "ids repeat");
        let out = round_trip(&ids[0]).expect("a Mistral id renders");
        assert!(out.contains(&format!("\"id\": \"{}\"", ids[0])), "{out}");
        // OpenAI's shape, which the other families get, makes the template raise.
        let hermes = Family::Hermes.call_id();
        assert!(hermes.starts_with("call_"), "{hermes}");
        let e = round_trip(&hermes).expect_err("raises");
        assert!(e.0.contains("length 9"), "{e}");
    }
}
