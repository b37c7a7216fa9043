//! SentencePiece-style segmentation (GGUF `tokenizer.ggml.model = "llama"`).
//!
//! Design: the text (spaces already escaped to U+2581) starts as one symbol per UTF-8
//! character, linked in a list. Every adjacent pair whose concatenation is a vocabulary token
//! goes into a max-heap keyed by that token's score; ties go to the leftmost pair. Popping a
//! pair merges it (if both halves are still as they were when it was pushed) and offers the new
//! symbol's pairs with its neighbours. Finally each symbol becomes its token, or, when it is a
//! single character with no token, one byte-fallback token per UTF-8 byte.
//!
//! Speed: one heap over a whole paragraph is slow (it outgrows the cache), so the text is first
//! cut before every `▁` whose preceding character can never be merged with a following `▁`
//! (no vocabulary token contains that character followed by `▁`). No token can span such a
//! cut, merges on the two sides are independent, and the result is unchanged; the heaps stay
//! word-sized.
//!
//! Invariants: symbols always cover the text contiguously in list order, so a pair's text is
//! the byte range `left.start .. right.start + right.len`; a merged-away symbol has `len == 0`.
//! A heap entry is stale exactly when one side is gone or its recorded size differs from the
//! current sizes (a symbol only ever grows), which is how stale entries are skipped.

use std::cmp::Ordering;
use std::collections::{BinaryHeap, HashSet};

use crate::vocab::Compiled;

/// One symbol of the linked list: a byte range of the text.
#[derive(Clone, Copy, Debug)]
struct Symbol {
    start: usize,
    len: usize,
    prev: Option<usize>,
    next: Option<usize>,
}

/// A candidate merge of `left` with its right neighbour `right`.
#[derive(Debug)]
struct Bigram {
    score: f32,
    left: usize,
    right: usize,
    /// Byte length of the merged text when the candidate was made.
    size: usize,
}

impl Ord for Bigram {
    fn cmp(&self, other: &Self) -> Ordering {
        // BinaryHeap pops the greatest: higher score first, then the lower left index.
        self.score
            .total_cmp(&other.score)
            .then_with(|| other.left.cmp(&self.left))
    }
}

impl PartialOrd for Bigram {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl PartialEq for Bigram {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for Bigram {}

const SPACE: char = '\u{2581}';

/// Where whitespace-escaped text may be cut into independently segmented words.
#[derive(Debug)]
pub(crate) struct WordCuts {
    /// Characters that some token contains directly before a `▁` (other than `▁` itself).
    joiners: HashSet<char>,
}

impl WordCuts {
    pub fn new(vocab: &Compiled) -> Self {
        let mut joiners = HashSet::new();
        for piece in &vocab.pieces {
            let mut prev = None;
            for c in piece.chars() {
                if c == SPACE {
                    joiners.extend(prev.filter(|&p| p != SPACE));
                }
                prev = Some(c);
            }
        }
        Self { joiners }
    }
}

/// Segments `text` (already whitespace-escaped) and appends the ids to `out`.
pub(crate) fn encode(vocab: &Compiled, cuts: &WordCuts, text: &str, out: &mut Vec<u32>) {
    // Buffers reused across words: most words are a few characters long.
    let mut symbols = Vec::new();
    let mut heap = BinaryHeap::new();
    let mut start = 0;
    let mut prev: Option<char> = None;
    for (at, c) in text.char_indices() {
        let cut = c == SPACE && prev.is_some_and(|p| p != SPACE && !cuts.joiners.contains(&p));
        if cut {
            encode_word(vocab, &text[start..at], &mut symbols, &mut heap, out);
            start = at;
        }
        prev = Some(c);
    }
    encode_word(vocab, &text[start..], &mut symbols, &mut heap, out);
}

/// Segments one word (a text no token spans beyond) with the score-ordered merge.
fn encode_word(
    vocab: &Compiled,
    text: &str,
    symbols: &mut Vec<Symbol>,
    heap: &mut BinaryHeap<Bigram>,
    out: &mut Vec<u32>,
) {
    if text.is_empty() {
        return;
    }
    symbols.clear();
    heap.clear();
    for (start, c) in text.char_indices() {
        let index = symbols.len();
        symbols.push(Symbol {
            start,
            len: c.len_utf8(),
            prev: index.checked_sub(1),
            next: Some(index + 1),
        });
    }
    if let Some(last) = symbols.last_mut() {
        last.next = None;
    }

    for left in 1..symbols.len() {
        push_bigram(vocab, text, symbols, heap, left - 1, left);
    }

    while let Some(bigram) = heap.pop() {
        let (l, r) = (symbols[bigram.left], symbols[bigram.right]);
        if l.len == 0 || r.len == 0 || l.len + r.len != bigram.size {
            continue;
        }
        symbols[bigram.left].len += r.len;
        symbols[bigram.left].next = r.next;
        symbols[bigram.right].len = 0;
        if let Some(after) = r.next {
            symbols[after].prev = Some(bigram.left);
        }
        if let Some(before) = l.prev {
            push_bigram(vocab, text, symbols, heap, before, bigram.left);
        }
        if let Some(after) = r.next {
            push_bigram(vocab, text, symbols, heap, bigram.left, after);
        }
    }

    let mut at = Some(0);
    while let Some(i) = at {
        let s = symbols[i];
        emit_symbol(vocab, &text[s.start..s.start + s.len], out);
        at = s.next;
    }
}

fn push_bigram(
    vocab: &Compiled,
    text: &str,
    symbols: &[Symbol],
    heap: &mut BinaryHeap<Bigram>,
    left: usize,
    right: usize,
) {
    let start = symbols[left].start;
    let size = symbols[left].len + symbols[right].len;
    if let Some(&id) = vocab.piece_to_id.get(&text[start..start + size]) {
        heap.push(Bigram {
            score: vocab.scores[id as usize],
            left,
            right,
            size,
        });
    }
}

/// A final symbol is a token, or else (a character missing from the vocabulary) its bytes.
fn emit_symbol(vocab: &Compiled, piece: &str, out: &mut Vec<u32>) {
    if let Some(&id) = vocab.piece_to_id.get(piece) {
        out.push(id);
        return;
    }
    for &b in piece.as_bytes() {
        if let Some(id) = vocab.byte_ids[b as usize].or(vocab.special.unk) {
            out.push(id);
        }
    }
}
