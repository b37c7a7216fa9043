//! A reply's content blocks and why it stopped, the same for the whole message and its stream.
//!
//! [`Blocks`] takes the reply as the tool parser gives it out (`tools::Out`: content and whole
//! calls, in the order written) and says what changed at each step, so that the stream driver
//! sends the matching events: text goes into the open text block (opened by the first text
//! after a call or at the start); a call closes it and is a `tool_use` block of its own. With a
//! reasoning parser the thinking (`Out::Reasoning`) is a `thinking` block of its own, before.
//!
//! The engine reports a stop string only as `Stop`, with the text cut before it; which of
//! `stop_sequences` it was is read back from the generated tokens: decoded as the engine
//! decodes them, the text that follows what was sent starts with it.

use engine::FinishReason;
use serde_json::{Map, Value};
use tokenizer::Tokenizer;

use crate::base::new_id;
use crate::serving::tools::{Family, Out, ParsedCall};

use super::protocol::ContentBlock;

/// What one step of [`Blocks`] changed, by block index.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Change {
    /// A thinking block was opened (empty).
    ThinkingStart(usize),
    /// Thinking was appended to the open thinking block.
    ThinkingDelta(usize, String),
    /// A text block was opened (empty).
    TextStart(usize),
    /// Text was appended to the open text block.
    TextDelta(usize, String),
    /// A tool_use block was added, whole.
    ToolUse(usize),
    /// The block is finished.
    Stop(usize),
}

/// A reply's content, assembled.
#[derive(Debug, Default)]
pub struct Blocks {
    pub blocks: Vec<ContentBlock>,
    /// Whether the last block is text still taking text.
    open: bool,
    /// Whether the last block is thinking still taking thinking.
    thinking: bool,
    /// The template's family, for the shape of call ids.
    family: Option<Family>,
}

impl Blocks {
    pub fn new(family: Option<Family>) -> Blocks {
        Blocks {
            family,
            ..Blocks::default()
        }
    }

    /// Takes one piece of the reply.
    pub fn push(&mut self, out: Out, changes: &mut Vec<Change>) {
        match out {
            Out::Content(text) | Out::Reasoning(text) if text.is_empty() => {}
            Out::Reasoning(text) => {
                if !self.thinking {
                    self.finish(changes);
                    self.blocks.push(ContentBlock::Thinking {
                        thinking: String::new(),
                        signature: String::new(),
                    });
                    self.thinking = true;
                    changes.push(Change::ThinkingStart(self.blocks.len() - 1));
                }
                if let Some(ContentBlock::Thinking { thinking, .. }) = self.blocks.last_mut() {
                    thinking.push_str(&text);
                }
                changes.push(Change::ThinkingDelta(self.blocks.len() - 1, text));
            }
            Out::Content(text) => {
                self.close_thinking(changes);
                if !self.open {
                    self.blocks.push(ContentBlock::Text {
                        text: String::new(),
                    });
                    self.open = true;
                    changes.push(Change::TextStart(self.blocks.len() - 1));
                }
                if let Some(ContentBlock::Text { text: t }) = self.blocks.last_mut() {
                    t.push_str(&text);
                }
                changes.push(Change::TextDelta(self.blocks.len() - 1, text));
            }
            Out::Call(c) => {
                self.finish(changes);
                let block = self.tool_use(c);
                self.blocks.push(block);
                let at = self.blocks.len() - 1;
                changes.push(Change::ToolUse(at));
                changes.push(Change::Stop(at));
            }
        }
    }

    /// Closes the open text or thinking block, if any.
    pub fn finish(&mut self, changes: &mut Vec<Change>) {
        if std::mem::take(&mut self.open) {
            changes.push(Change::Stop(self.blocks.len() - 1));
        }
        self.close_thinking(changes);
    }

    fn close_thinking(&mut self, changes: &mut Vec<Change>) {
        if std::mem::take(&mut self.thinking) {
            changes.push(Change::Stop(self.blocks.len() - 1));
        }
    }

    /// The number of tool_use blocks.
    pub fn calls(&self) -> usize {
        let call = |b: &&ContentBlock| matches!(b, ContentBlock::ToolUse { .. });
        self.blocks.iter().filter(call).count()
    }

    /// A call as a block: its id in the shape the family's templates accept back (Mistral's
    /// 9 characters), else Anthropic's `toolu_…`; its arguments as the input object.
    fn tool_use(&self, c: ParsedCall) -> ContentBlock {
        let id = match self.family {
            Some(Family::Mistral) => Family::Mistral.call_id(),
            _ => new_id("toolu_"),
        };
        let input = serde_json::from_str::<Value>(&c.arguments)
            .ok()
            .filter(Value::is_object)
            .unwrap_or_else(|| Value::Object(Map::new()));
        ContentBlock::ToolUse {
            id,
            name: c.name,
            input,
        }
    }
}

/// `stop_reason`: `tool_use` when a reply that stopped by itself made calls, `stop_sequence`
/// when one of them ended it, `end_turn` at the end of its turn, `max_tokens` at the limit
/// (`fit_max_tokens` keeps the limit within the context, so the context never cuts first).
pub fn stop_reason(reason: FinishReason, calls: usize, stop: Option<&str>) -> &'static str {
    match reason {
        FinishReason::Length => "max_tokens",
        _ if calls > 0 => "tool_use",
        _ if stop.is_some() => "stop_sequence",
        _ => "end_turn",
    }
}

/// The stop sequence that ended a reply of tokens `ids` whose text sent was `sent`: the
/// shortest of `stops` the rest of the decoded text starts with (the first one complete).
pub fn matched_stop(stops: &[String], tok: &Tokenizer, ids: &[u32], sent: &str) -> Option<String> {
    if stops.is_empty() {
        return None;
    }
    let mut d = tok.incremental_decoder(true);
    let mut all: String = ids.iter().map(|&id| d.push(id)).collect();
    all.push_str(&d.flush());
    let rest = all.strip_prefix(sent)?;
    stops
        .iter()
        .filter(|s| rest.starts_with(s.as_str()))
        .min_by_key(|s| s.len())
        .cloned()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(name: &str, args: &str) -> Out {
        Out::Call(ParsedCall {
            name: name.into(),
            arguments: args.into(),
        })
    }

    #[test]
    fn text_and_calls_become_blocks_in_order() {
        let mut b = Blocks::new(Some(Family::Hermes));
        let mut changes = Vec::new();
        for out in [
            Out::Content("Sure".into()),
            Out::Content(String::new()),
            Out::Content(".".into()),
            call("f", r#"{"city": "Paris"}"#),
            call("g", "not json"),
            Out::Content("Done".into()),
        ] {
            b.push(out, &mut changes);
        }
        b.finish(&mut changes);
        assert_eq!(
            changes,
            vec![
                Change::TextStart(0),
                Change::TextDelta(0, "Sure".into()),
                Change::TextDelta(0, ".".into()),
                Change::Stop(0),
                Change::ToolUse(1),
                Change::Stop(1),
                Change::ToolUse(2),
                Change::Stop(2),
                Change::TextStart(3),
                Change::TextDelta(3, "Done".into()),
                Change::Stop(3),
            ]
        );
        assert_eq!(b.calls(), 2);
        let v = serde_json::to_value(&b.blocks).expect("serializes");
        assert_eq!(v[0], serde_json::json!({"type": "text", "text": "Sure."}));
        assert_eq!(v[1]["input"], serde_json::json!({"city": "Paris"}));
        assert!(v[1]["id"].as_str().is_some_and(|i| i.starts_with("toolu_")));
        assert_ne!(v[1]["id"], v[2]["id"]);
        assert_eq!(v[2]["input"], serde_json::json!({}));
    }

    #[test]
    fn stop_reasons_follow_anthropic_s_order() {
        use FinishReason::*;
        assert_eq!(stop_reason(Stop, 0, None), "end_turn");
        assert_eq!(stop_reason(Stop, 0, Some("x")), "stop_sequence");
        assert_eq!(stop_reason(Stop, 2, None), "tool_use");
        assert_eq!(stop_reason(Length, 1, None), "max_tokens");
    }

    #[test]
    fn the_matched_stop_sequence_is_read_back_from_the_tokens() {
        let bytes = model::testing::tiny_model_gguf("llama", model::testing::TINY_SEED);
        let parsed = gguf::parse(&bytes).expect("tiny model parses");
        let tok = Tokenizer::from_metadata(&parsed.metadata).expect("tiny vocabulary builds");
        let ids = tok.encode("hello world, and more", false, false);
        let mut d = tok.incremental_decoder(true);
        let all: String = ids.iter().map(|&id| d.push(id)).collect();
        let at = all.find("world").expect("decoded text has the word");
        let sent = &all[..at];
        let stops = ["xyz".to_string(), "wor".into(), "world".into()];
        assert_eq!(
            matched_stop(&stops, &tok, &ids, sent).as_deref(),
            Some("wor")
        );
        assert_eq!(matched_stop(&stops[..1], &tok, &ids, sent), None);
        assert_eq!(matched_stop(&[], &tok, &ids, sent), None);
        assert_eq!(
            matched_stop(&stops, &tok, &ids, &all),
            None,
            "ended by itself"
        );
    }
}
