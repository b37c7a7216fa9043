//! Reading one choice's reply for calls, token by token: the same reader serves a stream and,
//! over the collected tokens, a whole reply.
//!
//! A token is read as its decoded text, except a hidden marker token (a control token such as
//! `[TOOL_CALLS]`, which the detokenizer drops), read as its marker.

use super::call::ParsedCall;
use super::family::Markers;
use super::parser::{CallParser, Out};
use super::request::ToolParse;
use crate::run::Outcome;

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
    let mut reader = ChoiceReader::new(parse);
    let mut outs = Vec::new();
    let mut from = 0;
    for t in &o.tokens {
        let text = o.text.get(from..t.text_end).unwrap_or_default();
        outs.extend(reader.token(t.id, text));
        from = t.text_end;
    }
    outs.extend(reader.end(o.text.get(from..).unwrap_or_default()));
    let mut content = String::new();
    let mut calls = Vec::new();
    for out in outs {
        match out {
            Out::Content(t) => content.push_str(&t),
            Out::Call(c) => calls.push(c),
        }
    }
    (content, calls)
}
