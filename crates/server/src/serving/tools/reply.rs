//! Reading one choice's reply, token by token: its reasoning (with a reasoning parser), its
//! content and its calls (with tools). The same reader serves a stream and, over the collected
//! tokens, a whole reply.
//!
//! A token is read as its decoded text, except a hidden marker token (a control token such as
//! `[TOOL_CALLS]` or `</think>`, which the detokenizer drops), read as its marker. The reasoning
//! splitter reads first; only the content it gives out reaches the call parser.

use super::call::ParsedCall;
use super::family::Markers;
use super::parser::{CallParser, Out};
use super::request::ToolParse;
use crate::serving::reasoning::{Reasoning, Splitter};
use crate::serving::run::Outcome;

/// What a choice's `reader` releases for token `id` (`None`: the reply's end) decoded as
/// `text`; without a reader (no tools, no reasoning parser) the text is content as it is.
pub fn read_next(reader: Option<&mut ChoiceReader>, id: Option<u32>, text: String) -> Vec<Out> {
    match reader {
        Some(r) => r.next(id, &text),
        None => vec![Out::Content(text)],
    }
}

/// One choice's reader.
#[derive(Debug)]
pub struct ChoiceReader {
    split: Option<Splitter>,
    parser: Option<CallParser>,
    markers: Markers,
}

impl ChoiceReader {
    /// A reader for a reply with tools and/or reasoning; `None` when there is neither (the
    /// reply is then its text).
    pub fn new(tools: Option<&ToolParse>, reasoning: Option<&Reasoning>) -> Option<ChoiceReader> {
        if tools.is_none() && reasoning.is_none() {
            return None;
        }
        let none = Markers::default();
        let markers = tools
            .map_or(&none, |t| &t.markers)
            .merged(reasoning.map_or(&none, |r| &r.markers));
        Some(ChoiceReader {
            split: reasoning.map(|r| Splitter::new(r.parser)),
            parser: tools.map(|p| CallParser::new(p.family, p.max_calls)),
            markers,
        })
    }

    /// Reads token `id`, decoded as `text`; returns what became final.
    pub fn token(&mut self, id: u32, text: &str) -> Vec<Out> {
        let piece = self.markers.piece(id, text).to_string();
        self.read(&piece, false)
    }

    /// The reply ended with `text` still to read; returns everything left.
    pub fn end(&mut self, text: &str) -> Vec<Out> {
        self.read(text, true)
    }

    /// A stream's next read: token `id` (`Some`) or, with `None`, the reply's end.
    pub fn next(&mut self, id: Option<u32>, text: &str) -> Vec<Out> {
        match id {
            Some(id) => self.token(id, text),
            None => self.end(text),
        }
    }

    fn read(&mut self, piece: &str, finished: bool) -> Vec<Out> {
        let mut parts = Vec::new();
        match &mut self.split {
            Some(s) => {
                s.feed(piece, &mut parts);
                if finished {
                    s.finish(&mut parts);
                }
            }
            None => parts.push(Out::Content(piece.to_string())),
        }
        let Some(parser) = &mut self.parser else {
            return parts.into_iter().filter(|p| !is_empty(p)).collect();
        };
        let mut out = Vec::new();
        for p in parts {
            match p {
                Out::Content(t) => parser.feed(&t, &mut out),
                other => out.push(other),
            }
        }
        if finished {
            parser.finish(&mut out);
        }
        out
    }

    /// Calls read so far.
    pub fn calls(&self) -> usize {
        self.parser.as_ref().map_or(0, CallParser::calls)
    }
}

fn is_empty(o: &Out) -> bool {
    matches!(o, Out::Content(t) | Out::Reasoning(t) if t.is_empty())
}

/// A whole reply's reasoning, content and calls.
pub fn read_outcome(
    tools: Option<&ToolParse>,
    reasoning: Option<&Reasoning>,
    o: &Outcome,
) -> (String, String, Vec<ParsedCall>) {
    let mut thinking = String::new();
    let mut content = String::new();
    let mut calls = Vec::new();
    for out in outcome_outs(tools, reasoning, o) {
        match out {
            Out::Reasoning(t) => thinking.push_str(&t),
            Out::Content(t) => content.push_str(&t),
            Out::Call(c) => calls.push(c),
        }
    }
    (thinking, content, calls)
}

/// A whole reply's reasoning, content and calls in the order the model wrote them (what a
/// stream's reader gives out, token by token, over the same reply).
pub fn outcome_outs(
    tools: Option<&ToolParse>,
    reasoning: Option<&Reasoning>,
    o: &Outcome,
) -> Vec<Out> {
    let Some(mut reader) = ChoiceReader::new(tools, reasoning) else {
        return vec![Out::Content(o.text.clone())];
    };
    let mut outs = Vec::new();
    let mut from = 0;
    for t in &o.tokens {
        let text = o.text.get(from..t.text_end).unwrap_or_default();
        from = t.text_end;
        outs.extend(reader.token(t.id, text));
    }
    outs.extend(reader.end(o.text.get(from..).unwrap_or_default()));
    outs
}

#[cfg(test)]
mod tests {
    use engine::{FinishReason, Usage};

    use super::super::family::{Family, MISTRAL_OPEN};
    use super::*;
    use crate::serving::run::TokenOut;

    /// An outcome of tokens `(id, text)`, with `tail` flushed at the end.
    fn outcome(tokens: &[(u32, &str)], tail: &str) -> Outcome {
        let mut text = String::new();
        let mut outs = Vec::new();
        for &(id, t) in tokens {
            text.push_str(t);
            outs.push(TokenOut {
                id,
                logprob: None,
                text_end: text.len(),
            });
        }
        text.push_str(tail);
        Outcome {
            index: 0,
            prompt_index: 0,
            text,
            tokens: outs,
            prompt_logprobs: None,
            reason: FinishReason::Stop,
            usage: Usage::default(),
        }
    }

    #[test]
    fn a_hidden_marker_token_is_read_as_its_marker() {
        let parse = ToolParse {
            family: Family::Mistral,
            max_calls: usize::MAX,
            markers: Markers::from_pairs(&[(5, MISTRAL_OPEN)]),
        };
        let o = outcome(
            &[
                (9, "Ok."),
                (5, ""),
                (6, "[{\"name\": \"f\", "),
                (7, "\"arguments\": {}}]"),
            ],
            "",
        );
        let (_, content, calls) = read_outcome(Some(&parse), None, &o);
        assert_eq!(content, "Ok.");
        assert_eq!(calls.len(), 1);
        assert_eq!(calls[0].name, "f");
        // The same text from another token id (not the marker) stays text.
        let o = outcome(
            &[
                (9, "Ok."),
                (8, ""),
                (6, "[{\"name\": \"f\", "),
                (7, "\"arguments\": {}}]"),
            ],
            "",
        );
        assert_eq!(read_outcome(Some(&parse), None, &o).1, o.text);
    }

    #[test]
    fn the_stream_reader_and_the_whole_reading_agree() {
        let parse = ToolParse {
            family: Family::Hermes,
            max_calls: usize::MAX,
            markers: Markers::default(),
        };
        let tokens = [
            (1, "Sure"),
            (2, ".\n<tool"),
            (3, "_call>\n{\"name\": \"g\", "),
            (4, "\"arguments\": {\"x\": 1}}"),
        ];
        let o = outcome(&tokens, "\n</tool_call>");
        let mut reader = ChoiceReader::new(Some(&parse), None).expect("a reader");
        let mut outs: Vec<Out> = tokens
            .iter()
            .flat_map(|&(id, t)| reader.token(id, t))
            .collect();
        outs.extend(reader.end("\n</tool_call>"));
        let content: String = outs
            .iter()
            .filter_map(|o| match o {
                Out::Content(t) => Some(t.as_str()),
                _ => None,
            })
            .collect();
        let calls: Vec<ParsedCall> = outs
            .into_iter()
            .filter_map(|o| match o {
                Out::Call(c) => Some(c),
                _ => None,
            })
            .collect();
        assert_eq!(reader.calls(), 1);
        let (_, whole_content, whole_calls) = read_outcome(Some(&parse), None, &o);
        assert_eq!((content, calls), (whole_content, whole_calls));
    }
}
