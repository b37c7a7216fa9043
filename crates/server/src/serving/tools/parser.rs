//! The incremental tool-call parser: model text in, content and whole calls out.
//!
//! One parser serves a streamed choice (fed token by token) and a whole one (fed all at once),
//! so a stream's deltas always reassemble to the non-streamed result. Decisions depend only on
//! the text, never on how it was split:
//! - In text, what could still be the start of an opening marker (`<tool_c…`) is held back, and
//!   so is trailing whitespace; everything before is content, final.
//! - At an opening the parser holds the call region until the family's reader
//!   (`hermes`, `llama3`, `mistral`) says it is complete (then the calls go out whole) or
//!   malformed (then the opening is text after all and goes out as content, with the
//!   whitespace before it, and the search goes on after it). Malformed output is never an
//!   error: at worst it all comes back as content.
//! - Whitespace between content and a call, between calls and after the last call is dropped;
//!   output without calls comes back as content, byte for byte.
//! - With a limit on calls (`parallel_tool_calls: false`), everything after the last allowed
//!   call is dropped.
//!
//! Where a call may stand without a marker (before any other text, and right after a call),
//! the family says what opens a region there (`Family::bare_opening`): a `{` for Llama 3 and
//! Hermes, a `;` after a Llama call, a Markdown ```` ```json ```` fence for Hermes.

use super::call::{ParsedCall, Read};
use super::family::{Bare, Family};
use super::{hermes, llama3, mistral};

/// What the parser gives back, in output order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Out {
    /// Thinking (only from the reasoning splitter, `serving::reasoning`; never from this parser).
    Reasoning(String),
    Content(String),
    Call(ParsedCall),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    /// Looking for an opening.
    Text,
    /// Holding a call region: `buf` starts with its opening (`opening_len` bytes).
    Call,
    /// The call limit was reached: the rest is dropped.
    Done,
}

/// Parses one choice's output.
#[derive(Debug)]
pub struct CallParser {
    family: Family,
    /// Text received and not yet given out.
    buf: String,
    mode: Mode,
    opening_len: usize,
    /// What ends the current region, for the readers that need it.
    close: Option<&'static str>,
    /// Whitespace dropped before the current call region, given back if it is malformed.
    held_ws: String,
    /// Whether content other than whitespace has been given out or is known to come.
    seen_text: bool,
    /// Right after a call: leading whitespace is dropped.
    after_call: bool,
    calls: usize,
    max_calls: usize,
}

impl CallParser {
    /// A parser for `family`'s calls, keeping at most `max_calls` of them.
    pub fn new(family: Family, max_calls: usize) -> CallParser {
        CallParser {
            family,
            buf: String::new(),
            mode: Mode::Text,
            opening_len: 0,
            close: None,
            held_ws: String::new(),
            seen_text: false,
            after_call: false,
            calls: 0,
            max_calls,
        }
    }

    /// Takes the next piece of output; appends what became final to `out`.
    pub fn feed(&mut self, piece: &str, out: &mut Vec<Out>) {
        if self.mode == Mode::Done {
            return;
        }
        self.buf.push_str(piece);
        self.advance(false, out);
    }

    /// The output ended: appends everything still held.
    pub fn finish(&mut self, out: &mut Vec<Out>) {
        self.advance(true, out);
    }

    /// Calls given out so far.
    pub fn calls(&self) -> usize {
        self.calls
    }

    fn advance(&mut self, finished: bool, out: &mut Vec<Out>) {
        loop {
            let again = match self.mode {
                Mode::Text => self.text_step(finished, out),
                Mode::Call => self.call_step(finished, out),
                Mode::Done => {
                    self.buf.clear();
                    false
                }
            };
            if !again {
                return;
            }
        }
    }

    /// Gives out the content that is final; returns true when a call region opened.
    fn text_step(&mut self, finished: bool, out: &mut Vec<Out>) -> bool {
        if self.after_call {
            let lead = self.buf.len() - self.buf.trim_start().len();
            self.buf.drain(..lead);
            if self.buf.is_empty() {
                return false;
            }
        }
        if self.after_call || !self.seen_text {
            let lead = self.buf.len() - self.buf.trim_start().len();
            match self.family.bare_opening(&self.buf[lead..], self.after_call) {
                Bare::Yes { len, close } => {
                    self.held_ws = self.buf[..lead].to_string();
                    self.open_call(lead, len, close);
                    return true;
                }
                Bare::Maybe if !finished => return false,
                Bare::Maybe | Bare::No => {}
            }
        }
        self.after_call = false;
        if let Some((at, marker)) = self.find_opening() {
            let text_end = self.buf[..at].trim_end().len();
            let text = self.buf[..text_end].to_string();
            self.held_ws = self.buf[text_end..at].to_string();
            self.emit(out, text);
            self.open_call(at, marker.len(), self.family.closing(marker));
            return true;
        }
        let keep_from = if finished {
            if self.calls > 0 {
                self.buf.trim_end().len()
            } else {
                self.buf.len()
            }
        } else {
            self.hold_from()
        };
        let text: String = self.buf.drain(..keep_from).collect();
        self.emit(out, text);
        if finished {
            self.buf.clear();
        }
        false
    }

    /// Asks the family's reader about the held region; returns true when it was decided.
    fn call_step(&mut self, finished: bool, out: &mut Vec<Out>) -> bool {
        let region = &self.buf[self.opening_len..];
        let read = match self.family {
            Family::Hermes => hermes::read(region, finished, self.close),
            Family::Llama3Json => llama3::read(region, finished),
            Family::Mistral => mistral::read(region, finished),
        };
        match read {
            Read::Incomplete => false,
            Read::Malformed => {
                let opening: String = self.buf.drain(..self.opening_len).collect();
                let text = std::mem::take(&mut self.held_ws) + &opening;
                // A bare `{` has an empty opening: it must not open a region again.
                self.seen_text = true;
                self.after_call = false;
                self.emit(out, text);
                self.mode = Mode::Text;
                true
            }
            Read::Calls { calls, used } => {
                self.buf.drain(..self.opening_len + used);
                self.held_ws.clear();
                for call in calls {
                    if self.calls < self.max_calls {
                        out.push(Out::Call(call));
                        self.calls += 1;
                    }
                }
                self.after_call = true;
                self.mode = if self.calls >= self.max_calls {
                    Mode::Done
                } else {
                    Mode::Text
                };
                true
            }
        }
    }

    fn open_call(&mut self, at: usize, opening_len: usize, close: Option<&'static str>) {
        self.buf.drain(..at);
        self.opening_len = opening_len;
        self.close = close;
        self.mode = Mode::Call;
    }

    /// The earliest opening marker in `buf`, and where it is.
    fn find_opening(&self) -> Option<(usize, &'static str)> {
        self.family
            .openings()
            .iter()
            .filter_map(|&o| self.buf.find(o).map(|at| (at, o)))
            .min()
    }

    /// Where the text that must still be held starts: a possible partial opening at the end,
    /// and the trailing whitespace before it (so text that is all whitespace is held whole,
    /// which is what Llama's bare `{` needs before any text).
    fn hold_from(&self) -> usize {
        let mut end = self.buf.len();
        for o in self.family.openings() {
            // Openings are ASCII, so a matching suffix starts on a character boundary.
            if let Some(l) = (1..o.len()).rev().find(|&l| self.buf.ends_with(&o[..l])) {
                end = end.min(self.buf.len() - l);
            }
        }
        self.buf[..end].trim_end().len()
    }

    fn emit(&mut self, out: &mut Vec<Out>, text: String) {
        if text.is_empty() {
            return;
        }
        if !text.trim().is_empty() {
            self.seen_text = true;
        }
        match out.last_mut() {
            Some(Out::Content(prev)) => prev.push_str(&text),
            _ => out.push(Out::Content(text)),
        }
    }
}

/// Parses a whole output: its content (`None` when empty and there are calls) and its calls.
pub fn parse_whole<'a>(
    family: Family,
    max_calls: usize,
    pieces: impl IntoIterator<Item = &'a str>,
) -> (String, Vec<ParsedCall>) {
    let mut p = CallParser::new(family, max_calls);
    let mut out = Vec::new();
    for piece in pieces {
        p.feed(piece, &mut out);
    }
    p.finish(&mut out);
    let mut content = String::new();
    let mut calls = Vec::new();
    for o in out {
        match o {
            Out::Content(t) => content.push_str(&t),
            Out::Call(c) => calls.push(c),
            Out::Reasoning(_) => {}
        }
    }
    (content, calls)
}

#[cfg(test)]
#[path = "parser_tests.rs"]
mod tests;
