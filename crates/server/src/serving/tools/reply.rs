//! Reading one choice's reply for calls, token by token: the same reader serves a stream and,
//! over the collected tokens, a whole reply.
//!
//! A token is read as its decoded text, except a hidden marker token (a control token such as
//! `[TOOL_CALLS]`, which the detokenizer drops), read as its marker.

use super::call::ParsedCall;
use super::family::Markers;
use super::parser::{CallParser, Out};
use super::request::ToolParse;
use crate::serving::run::Outcome;

/// One choice's reader.
#[derive(Debug)]
pub struct ChoiceReader {
    parser: CallParser,
    markers: Markers,
}

impl ChoiceReader {
    pub fn new(parse: &ToolParse) -> ChoiceReader {
        ChoiceReader {
            parser: CallParser::new(parse.family, parse.max_calls),
            markers: parse.markers.clone(),
        }
    }

    /// Reads token `id`, decoded as `text`; returns what became final.
    pub fn token(&mut self, id: u32, text: &str) -> Vec<Out> {
        let mut out = Vec::new();
        self.parser.feed(self.markers.piece(id, text), &mut out);
        out
    }

    /// The reply ended with `text` still to read; returns everything left.
    pub fn end(&mut self, text: &str) -> Vec<Out> {
        let mut out = Vec::new();
        self.parser.feed(text, &mut out);
        self.parser.finish(&mut out);
        out
    }

    /// Calls read so far.
    pub fn calls(&self) -> usize {
        self.parser.calls()
    }
}

/// A whole reply's content and calls.
pub fn read_outcome(parse: &ToolParse, o: &Outcome) -> (String, Vec<ParsedCall>) {
    let mut content = String::new();
    let mut calls = Vec::new();
    for out in outcome_outs(parse, o) {
        match out {
            Out::Content(t) => content.push_str(&t),
            Out::Call(c) => calls.push(c),
        }
    }
    (content, calls)
}

/// A whole reply's content and calls in the order the model wrote them (what a stream's
/// reader gives out, token by token, over the same reply).
pub fn outcome_outs(parse: &ToolParse, o: &Outcome) -> Vec<Out> {
    let mut reader = ChoiceReader::new(parse);
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
        let (content, calls) = read_outcome(&parse, &o);
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
        assert_eq!(read_outcome(&parse, &o).0, o.text);
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
        let mut reader = ChoiceReader::new(&parse);
        let mut outs: Vec<Out> = tokens
            .iter()
            .flat_map(|&(id, t)| reader.token(id, t))
            .collect();
        outs.extend(reader.end("\n</tool_call>"));
        let content: String = outs
            .iter()
            .filter_map(|o| match o {
                Out::Content(t) => Some(t.as_str()),
                Out::Call(_) => None,
            })
            .collect();
        let calls: Vec<ParsedCall> = outs
            .into_iter()
            .filter_map(|o| match o {
                Out::Call(c) => Some(c),
                Out::Content(_) => None,
            })
            .collect();
        assert_eq!(reader.calls(), 1);
        assert_eq!((content, calls), read_outcome(&parse, &o));
    }
}
