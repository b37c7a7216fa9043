//! Token bytes and streaming detokenization.
//!
//! Design: every token's output bytes are computed once at load into one flat buffer (SPM:
//! `▁` becomes a space, `<0xXX>` becomes that byte; byte-level BPE: each char maps back to its
//! byte; special tokens: their text verbatim). Decoding is then concatenation. Because byte
//! fallback splits characters across tokens, a token's bytes need not be valid UTF-8 on their
//! own; [`IncrementalDecoder`] holds back an incomplete trailing character until the token
//! that completes it arrives, so a stream never shows half a character.
//!
//! Invariant: `ends` is non-decreasing, `ends.len()` is the vocabulary size and
//! `*ends.last() == bytes.len()`.

use crate::unicode::char_to_byte;
use crate::vocab::{Attr, Compiled, VocabModel};
use crate::Tokenizer;

/// The output bytes of every token, stored back to back.
#[derive(Debug)]
pub(crate) struct PieceBytes {
    bytes: Vec<u8>,
    ends: Vec<usize>,
}

impl PieceBytes {
    pub fn new(vocab: &Compiled, model: VocabModel) -> Self {
        let mut bytes = Vec::with_capacity(vocab.pieces.iter().map(String::len).sum());
        let mut ends = Vec::with_capacity(vocab.len());
        for (piece, &attr) in vocab.pieces.iter().zip(&vocab.attrs) {
            append_piece(piece, attr, model, &mut bytes);
            ends.push(bytes.len());
        }
        Self { bytes, ends }
    }

    /// The bytes of token `id`; empty for ids outside the vocabulary.
    pub fn get(&self, id: u32) -> &[u8] {
        let id = id as usize;
        let Some(&end) = self.ends.get(id) else {
            return &[];
        };
        let start = if id == 0 { 0 } else { self.ends[id - 1] };
        &self.bytes[start..end]
    }
}

fn append_piece(piece: &str, attr: Attr, model: VocabModel, out: &mut Vec<u8>) {
    let verbatim = [Attr::CONTROL, Attr::UNKNOWN, Attr::USER_DEFINED];
    if verbatim.iter().any(|&a| attr.has(a)) {
        out.extend_from_slice(piece.as_bytes());
    } else if attr.has(Attr::NORMAL) {
        match model {
            VocabModel::Spm | VocabModel::Wpm => {
                out.extend_from_slice(piece.replace('\u{2581}', " ").as_bytes())
            }
            VocabModel::Bpe(pre) if pre.is_spm_style() => {
                out.extend_from_slice(piece.replace('\u{2581}', " ").as_bytes())
            }
            VocabModel::Bpe(_) => append_byte_level(piece, out),
        }
    } else if attr.has(Attr::BYTE) {
        match parse_byte_token(piece) {
            Some(b) => out.push(b),
            None => append_byte_level(piece, out),
        }
    }
    // Unused and undefined tokens render as nothing, as in llama.cpp.
}

/// Maps GPT-2 byte-alphabet chars back to bytes; other chars pass through as UTF-8.
fn append_byte_level(piece: &str, out: &mut Vec<u8>) {
    let mut buf = [0u8; 4];
    for c in piece.chars() {
        match char_to_byte(c) {
            Some(b) => out.push(b),
            None => out.extend_from_slice(c.encode_utf8(&mut buf).as_bytes()),
        }
    }
}

/// `<0xAB>` -> `0xAB`.
pub(crate) fn parse_byte_token(piece: &str) -> Option<u8> {
    let hex = piece.strip_prefix("<0x")?.strip_suffix('>')?;
    if hex.len() != 2 {
        return None;
    }
    u8::from_str_radix(hex, 16).ok()
}

/// Appends to `out` the longest valid UTF-8 prefix of `pending` (invalid sequences become
/// U+FFFD) and leaves in `pending` only an incomplete trailing character, if any.
fn drain_complete(pending: &mut Vec<u8>, out: &mut String) {
    let mut rest: &[u8] = pending;
    loop {
        match std::str::from_utf8(rest) {
            Ok(s) => {
                out.push_str(s);
                rest = &[];
                break;
            }
            Err(e) => {
                let (valid, tail) = rest.split_at(e.valid_up_to());
                out.push_str(
                    std::str::from_utf8(valid).expect("checked by valid_up_to; this is a bug"),
                );
                match e.error_len() {
                    // The tail is the start of a character that may still be completed.
                    None => {
                        rest = tail;
                        break;
                    }
                    Some(bad) => {
                        out.push(char::REPLACEMENT_CHARACTER);
                        rest = &tail[bad..];
                    }
                }
            }
        }
    }
    let keep = rest.len();
    let drop = pending.len() - keep;
    pending.drain(..drop);
}

/// Streams generated tokens as text, emitting only complete UTF-8 characters.
///
/// Created by [`Tokenizer::incremental_decoder`]; holds its own handle to the tokenizer, so it
/// can live in per-request state.
#[derive(Clone, Debug)]
pub struct IncrementalDecoder {
    tokenizer: Tokenizer,
    skip_special: bool,
    pending: Vec<u8>,
}

impl IncrementalDecoder {
    /// A decoder that hides control tokens (BOS, EOS, `<end_of_turn>`, ...).
    pub fn new(tokenizer: &Tokenizer) -> Self {
        Self::with_skip_special(tokenizer, true)
    }

    /// A decoder that hides control tokens only if `skip_special`.
    pub fn with_skip_special(tokenizer: &Tokenizer, skip_special: bool) -> Self {
        Self {
            tokenizer: tokenizer.clone(),
            skip_special,
            pending: Vec::new(),
        }
    }

    /// Adds one token; returns the text it completes (possibly empty).
    pub fn push(&mut self, id: u32) -> String {
        if self.skip_special && self.tokenizer.is_special(id) {
            return String::new();
        }
        self.pending
            .extend_from_slice(self.tokenizer.token_bytes(id));
        let mut out = String::new();
        drain_complete(&mut self.pending, &mut out);
        out
    }

    /// Ends the stream: returns any held-back bytes (an unfinished character becomes U+FFFD).
    pub fn flush(&mut self) -> String {
        let out = String::from_utf8_lossy(&self.pending).into_owned();
        self.pending.clear();
        out
    }

    /// Whether bytes of an unfinished character are being held back.
    pub fn has_pending(&self) -> bool {
        !self.pending.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_tokens_parse_only_exact_hex_form() {
        assert_eq!(parse_byte_token("<0x0A>"), Some(0x0A));
        assert_eq!(parse_byte_token("<0xff>"), Some(0xFF));
        assert_eq!(parse_byte_token("<0x1>"), None);
        assert_eq!(parse_byte_token("0x41"), None);
    }

    #[test]
    fn drain_keeps_incomplete_tail_and_replaces_invalid_bytes() {
        let mut pending = vec![b'a', 0xF0, 0x9F];
        let mut out = String::new();
        drain_complete(&mut pending, &mut out);
        assert_eq!(out, "a");
        assert_eq!(pending, [0xF0, 0x9F]);

        let mut pending = vec![0xFF, b'b', 0xE4];
        let mut out = String::new();
        drain_complete(&mut pending, &mut out);
        assert_eq!(out, "\u{FFFD}b");
        assert_eq!(pending, [0xE4]);
    }
}
