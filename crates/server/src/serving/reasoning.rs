//! Reasoning output: the thinking a reasoning model writes before its answer, split from the
//! answer as it is generated.
//!
//! Three parsers (`--reasoning-parser`), told from the chat template when not given
//! (`ReasoningParser::detect`):
//! - `deepseek_r1` (the DeepSeek-R1 distills, Qwen3 thinking models whose template opens the
//!   think block itself): the prompt already ends with `<think>`, so everything up to `</think>`
//!   is reasoning, even without an opening tag (a `<think>` the model writes anyway is
//!   dropped); a reply that never closes the block is all reasoning (as vLLM's parser has it);
//! - `qwen3`: reasoning only when the reply opens with `<think>` (leading whitespace allowed),
//!   up to `</think>` (or the end); a reply that does not open with it is all content, which is
//!   what `chat_template_kwargs: {"enable_thinking": false}` gives (the template then writes an
//!   empty think block into the prompt);
//! - `gpt-oss` (the harmony format): messages `<|channel|>NAME<|message|>TEXT<|end|>`, each
//!   after `<|start|>assistant` but the first; the `analysis` channel is reasoning, every other
//!   channel (`final`) content. A reply that does not open with `<|channel|>` is all content.
//!
//! Whitespace right after an opening tag and right after `</think>` is dropped (Qwen3 and R1
//! write `<think>\n` and `</think>\n\n`). Markers that are control tokens (hidden by the
//! detokenizer) are read back as their text through `Markers`, as for tool calls.
//!
//! One `Splitter` serves a streamed reply (fed token by token) and a whole one (fed its tokens
//! the same way), and its decisions depend only on the text, never on how it was split: a
//! possible partial marker at the end of what it has is held back until the next piece tells.
//! It gives out `Out::Reasoning` and `Out::Content`; the content goes on to the tool-call
//! parser (`tools::ChoiceReader`), which so never sees the thinking.
//!
//! A structured-output or tool grammar holds the answer, not the thinking: the request's
//! constraint follows `Reasoning::lead_grammar` (`engine::constraint::Constraint::After`),
//! which lets the reply think freely first, in the parser's format.

use tokenizer::Tokenizer;

use super::tools::{Markers, Out};

pub const THINK_OPEN: &str = "<think>";
pub const THINK_CLOSE: &str = "</think>";
/// The harmony format's markers (gpt-oss).
pub const CHANNEL: &str = "<|channel|>";
pub const MESSAGE: &str = "<|message|>";
pub const END: &str = "<|end|>";
pub const START: &str = "<|start|>";
pub const RETURN: &str = "<|return|>";
pub const CALL: &str = "<|call|>";
/// What ends a harmony message's text (`<|start|>` and `<|channel|>` also begin the next
/// header when a model leaves out `<|end|>`).
const BODY_ENDS: [&str; 5] = [END, RETURN, CALL, START, CHANNEL];

/// How a model writes its reasoning.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReasoningParser {
    DeepSeekR1,
    Qwen3,
    GptOss,
}

impl ReasoningParser {
    /// The parsers by their `--reasoning-parser` names.
    pub const NAMES: [&'static str; 3] = ["deepseek_r1", "qwen3", "gpt-oss"];

    pub fn from_name(name: &str) -> Option<ReasoningParser> {
        match name {
            "deepseek_r1" => Some(ReasoningParser::DeepSeekR1),
            "qwen3" => Some(ReasoningParser::Qwen3),
            "gpt-oss" | "gpt_oss" => Some(ReasoningParser::GptOss),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            ReasoningParser::DeepSeekR1 => "deepseek_r1",
            ReasoningParser::Qwen3 => "qwen3",
            ReasoningParser::GptOss => "gpt-oss",
        }
    }

    /// The parser a chat template's model needs, from the template's source and, when it could
    /// be rendered, its generation prompt (a user turn rendered with `add_generation_prompt`):
    /// harmony's channel markers → `gpt-oss`; a generation prompt that ends with `<think>` →
    /// `deepseek_r1`; `<think>` or `</think>` anywhere in the source → `qwen3`; else none.
    pub fn detect(source: &str, generation_prompt: Option<&str>) -> Option<ReasoningParser> {
        if source.contains(CHANNEL) && source.contains(MESSAGE) && source.contains("analysis") {
            Some(ReasoningParser::GptOss)
        } else if generation_prompt.is_some_and(|p| p.trim_end().ends_with(THINK_OPEN)) {
            Some(ReasoningParser::DeepSeekR1)
        } else if source.contains(THINK_OPEN) || source.contains(THINK_CLOSE) {
            Some(ReasoningParser::Qwen3)
        } else {
            None
        }
    }

    /// The marker texts this parser reads.
    fn marker_texts(self) -> &'static [&'static str] {
        match self {
            ReasoningParser::DeepSeekR1 | ReasoningParser::Qwen3 => &[THINK_OPEN, THINK_CLOSE],
            ReasoningParser::GptOss => &[CHANNEL, MESSAGE, END, START, RETURN, CALL],
        }
    }
}

/// The served model's reasoning parser and its markers that are control tokens.
#[derive(Clone, Debug)]
pub struct Reasoning {
    pub parser: ReasoningParser,
    pub markers: Markers,
}

impl Reasoning {
    pub fn new(parser: ReasoningParser, tok: &Tokenizer) -> Reasoning {
        Reasoning {
            parser,
            markers: Markers::of_texts(parser.marker_texts(), tok),
        }
    }

    /// The Lark grammar (rule `lead`) of what a reply writes before its answer, for a
    /// constraint that holds the answer alone (`Constraint::After`):
    /// - `deepseek_r1`: free text up to `</think>` (the prompt opened the block);
    /// - `qwen3`: optionally `<think>`, free text, `</think>`;
    /// - `gpt-oss`: optionally an analysis message, then the final channel's header.
    ///
    /// Up to four whitespace characters may follow `</think>` (unbounded, a small model held
    /// away from what it wanted to write can pad there until `max_tokens`). A marker that is a control token is named by its id
    /// (free text ends where the model draws it); a marker that is text ends a lazy lexeme.
    pub fn lead_grammar(&self) -> String {
        let mark = |text: &str| match self.markers.id_of(text) {
            Some(id) => format!("<[{id}]>"),
            None => serde_json::Value::from(text).to_string(),
        };
        // Free text up to `marker` (included), as an expression and the rule it needs.
        let until = |rule: &str, marker: &str| match self.markers.id_of(marker) {
            Some(id) => (format!("{rule} <[{id}]>"), format!("{rule}: /(?s:.*)/")),
            None => (
                rule.to_string(),
                format!("{rule}[suffix={}]: /(?s:.*)/", mark(marker)),
            ),
        };
        let ws = "WS: /[ \\t\\r\\n]{1,4}/";
        match self.parser {
            ReasoningParser::DeepSeekR1 => {
                let (thought, rule) = until("thought", THINK_CLOSE);
                format!("lead: {thought} WS?\n{rule}\n{ws}\n")
            }
            ReasoningParser::Qwen3 => {
                let (thought, rule) = until("thought", THINK_CLOSE);
                let open = mark(THINK_OPEN);
                format!("lead: ({open} {thought} WS?)?\n{rule}\n{ws}\n")
            }
            ReasoningParser::GptOss => {
                let (analysis, rule) = until("analysis", END);
                let [channel, message, start] = [CHANNEL, MESSAGE, START].map(mark);
                format!(
                    "lead: ({channel} \"analysis\" {message} {analysis} {start} \"assistant\")? \
                     {channel} \"final\" {message}\n{rule}\n"
                )
            }
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    /// Before the reply shows whether it opens with a reasoning marker (qwen3, gpt-oss).
    Opening,
    /// Thinking (`<think>` parsers); `lead`: leading whitespace is still dropped.
    Thinking { lead: bool },
    /// The answer, to the end.
    Content { lead: bool },
    /// gpt-oss: a message header, up to `<|message|>`.
    Header,
    /// gpt-oss: a message's text, of the analysis channel (`reasoning`) or another.
    Body { reasoning: bool },
}

/// Splits one reply into reasoning and content, piece by piece.
#[derive(Debug)]
pub struct Splitter {
    parser: ReasoningParser,
    state: State,
    /// Text received and not yet given out.
    buf: String,
    /// deepseek_r1: whether a `<think>` of the model's own was already dropped.
    opened: bool,
}

impl Splitter {
    pub fn new(parser: ReasoningParser) -> Splitter {
        let state = match parser {
            ReasoningParser::DeepSeekR1 => State::Thinking { lead: true },
            ReasoningParser::Qwen3 | ReasoningParser::GptOss => State::Opening,
        };
        Splitter {
            parser,
            state,
            buf: String::new(),
            opened: false,
        }
    }

    /// Takes the next piece of the reply; appends what became final to `out`.
    pub fn feed(&mut self, piece: &str, out: &mut Vec<Out>) {
        self.buf.push_str(piece);
        while self.step(false, out) {}
    }

    /// The reply ended: appends everything still held.
    pub fn finish(&mut self, out: &mut Vec<Out>) {
        while self.step(true, out) {}
        let rest = std::mem::take(&mut self.buf);
        match self.state {
            State::Thinking { .. } | State::Body { reasoning: true } => push_reasoning(out, rest),
            // A header never finished is text the model wrote, not a message of the format.
            _ => push_content(out, rest),
        }
    }

    /// One decision; true when the state changed and the rest of `buf` needs another look.
    fn step(&mut self, finished: bool, out: &mut Vec<Out>) -> bool {
        match self.state {
            State::Opening => self.opening(finished),
            State::Thinking { lead } => self.thinking(lead, finished, out),
            State::Content { lead } => {
                if lead {
                    self.drop_leading_ws();
                    if self.buf.is_empty() {
                        return false;
                    }
                    self.state = State::Content { lead: false };
                }
                push_content(out, std::mem::take(&mut self.buf));
                false
            }
            State::Header => self.header(),
            State::Body { reasoning } => self.body(reasoning, finished, out),
        }
    }

    /// Whether the reply opens with the parser's reasoning marker.
    fn opening(&mut self, finished: bool) -> bool {
        let marker = match self.parser {
            ReasoningParser::GptOss => CHANNEL,
            _ => THINK_OPEN,
        };
        let lead = self.buf.len() - self.buf.trim_start().len();
        let t = &self.buf[lead..];
        if t.starts_with(marker) {
            self.state = match self.parser {
                // The header keeps its `<|channel|>`, read for the channel's name.
                ReasoningParser::GptOss => {
                    self.buf.drain(..lead);
                    State::Header
                }
                _ => {
                    self.buf.drain(..lead + marker.len());
                    State::Thinking { lead: true }
                }
            };
            true
        } else if marker.starts_with(t) && !finished {
            false
        } else {
            self.state = State::Content { lead: false };
            true
        }
    }

    fn thinking(&mut self, lead: bool, finished: bool, out: &mut Vec<Out>) -> bool {
        if lead {
            self.drop_leading_ws();
            if self.buf.is_empty() {
                return false;
            }
            self.state = State::Thinking { lead: false };
        }
        let close = self.buf.find(THINK_CLOSE);
        // deepseek_r1: the prompt opened the block; a `<think>` of the model's own is dropped.
        if self.parser == ReasoningParser::DeepSeekR1 && !self.opened {
            if let Some(at) = self.buf.find(THINK_OPEN) {
                if close.is_none_or(|c| at < c) {
                    let before: String = self.buf.drain(..at).collect();
                    self.buf.drain(..THINK_OPEN.len());
                    self.opened = true;
                    push_reasoning(out, before);
                    self.state = State::Thinking { lead: true };
                    return true;
                }
            }
        }
        if let Some(at) = close {
            let text: String = self.buf.drain(..at).collect();
            self.buf.drain(..THINK_CLOSE.len());
            push_reasoning(out, text);
            self.state = State::Content { lead: true };
            return true;
        }
        let keep = if finished {
            self.buf.len()
        } else {
            let mut markers = vec![THINK_CLOSE];
            if self.parser == ReasoningParser::DeepSeekR1 && !self.opened {
                markers.push(THINK_OPEN);
            }
            hold_from(&self.buf, &markers)
        };
        let text: String = self.buf.drain(..keep).collect();
        push_reasoning(out, text);
        false
    }

    /// gpt-oss: a header is read whole once its `<|message|>` came.
    fn header(&mut self) -> bool {
        let Some(at) = self.buf.find(MESSAGE) else {
            return false;
        };
        let header: String = self.buf.drain(..at + MESSAGE.len()).collect();
        let channel = header
            .find(CHANNEL)
            .map(|c| &header[c + CHANNEL.len()..at])
            .and_then(|rest| {
                rest.split(|ch: char| ch.is_whitespace() || ch == '<')
                    .next()
            })
            .unwrap_or_default();
        self.state = State::Body {
            reasoning: channel == "analysis",
        };
        true
    }

    fn body(&mut self, reasoning: bool, finished: bool, out: &mut Vec<Out>) -> bool {
        let push = |out: &mut Vec<Out>, t: String| {
            if reasoning {
                push_reasoning(out, t)
            } else {
                push_content(out, t)
            }
        };
        let end = BODY_ENDS
            .iter()
            .filter_map(|&m| self.buf.find(m).map(|at| (at, m)))
            .min();
        if let Some((at, marker)) = end {
            let text: String = self.buf.drain(..at).collect();
            // `<|start|>` and `<|channel|>` belong to the next header; the others end this one.
            if marker != START && marker != CHANNEL {
                self.buf.drain(..marker.len());
            }
            push(out, text);
            self.state = State::Header;
            return true;
        }
        let keep = if finished {
            self.buf.len()
        } else {
            hold_from(&self.buf, &BODY_ENDS)
        };
        let text: String = self.buf.drain(..keep).collect();
        push(out, text);
        false
    }

    fn drop_leading_ws(&mut self) {
        let lead = self.buf.len() - self.buf.trim_start().len();
        self.buf.drain(..lead);
    }
}

/// Where the text that may still be the start of one of `markers` begins (markers are ASCII,
/// so a matching suffix starts on a character boundary).
fn hold_from(buf: &str, markers: &[&str]) -> usize {
    let mut end = buf.len();
    for m in markers {
        if let Some(l) = (1..m.len()).rev().find(|&l| buf.ends_with(&m[..l])) {
            end = end.min(buf.len() - l);
        }
    }
    end
}

fn push_reasoning(out: &mut Vec<Out>, text: String) {
    if text.is_empty() {
        return;
    }
    match out.last_mut() {
        Some(Out::Reasoning(prev)) => prev.push_str(&text),
        _ => out.push(Out::Reasoning(text)),
    }
}

fn push_content(out: &mut Vec<Out>, text: String) {
    if text.is_empty() {
        return;
    }
    match out.last_mut() {
        Some(Out::Content(prev)) => prev.push_str(&text),
        _ => out.push(Out::Content(text)),
    }
}

/// A whole reply split at once (for tests and callers without token ids).
pub fn split_whole(parser: ReasoningParser, text: &str) -> (String, String) {
    let mut s = Splitter::new(parser);
    let mut out = Vec::new();
    s.feed(text, &mut out);
    s.finish(&mut out);
    let (mut reasoning, mut content) = (String::new(), String::new());
    for o in out {
        match o {
            Out::Reasoning(t) => reasoning.push_str(&t),
            Out::Content(t) => content.push_str(&t),
            Out::Call(_) => {}
        }
    }
    (reasoning, content)
}

#[cfg(test)]
#[path = "reasoning_tests.rs"]
mod tests;
