//! Byte-level BPE segmentation (GGUF `tokenizer.ggml.model = "gpt2"`).
//!
//! Design: text is split into words by the pre-tokenizer; each word's UTF-8 bytes are mapped to
//! the GPT-2 byte alphabet (so every byte is a printable char, as the vocabulary stores them);
//! then, within each word, the adjacent pair with the lowest merge rank is merged repeatedly
//! (ties: leftmost), using a heap with lazy invalidation as in the SPM encoder. Merge ranks are
//! keyed by the token ids of the two halves, so a lookup needs no allocation. With LLaMA 3's
//! pre-tokenizer a word that is itself a token is emitted whole, without merging (llama.cpp's
//! `ignore_merges`). Gemma 4's SentencePiece-style BPE skips the byte alphabet: spaces become
//! `▁`, merges run on the UTF-8 text itself, and byte fallback goes through `<0xXX>` tokens.
//!
//! Invariant: symbols of a word cover it contiguously in list order; a merged-away symbol has
//! `len == 0`; a symbol's `id` is the token id of its current text, if any.

use std::cmp::Ordering;
use std::collections::BinaryHeap;

use crate::hash::FastMap;

use crate::pretokenize;
use crate::unicode::byte_to_char;
use crate::vocab::{Compiled, PreTokenizer};

/// Merge ranks by the ids of the left and right halves.
#[derive(Debug)]
pub(crate) struct Merges {
    ranks: FastMap<(u32, u32), u32>,
}

impl Merges {
    /// Parses `"left right"` merge lines. Lines whose halves are not both tokens can never
    /// apply (every symbol is a token or a single char) and are dropped.
    pub fn new(vocab: &Compiled, merges: &[String]) -> Self {
        let mut ranks = FastMap::with_capacity_and_hasher(merges.len(), Default::default());
        for (rank, line) in merges.iter().enumerate() {
            // Split at the first space after the first byte, so a left half may itself be " ".
            let space = line.bytes().skip(1).position(|b| b == b' ');
            let Some(pos) = space.map(|p| p + 1) else {
                continue;
            };
            let (left, right) = (&line[..pos], &line[pos + 1..]);
            if let (Some(&l), Some(&r)) =
                (vocab.piece_to_id.get(left), vocab.piece_to_id.get(right))
            {
                ranks.entry((l, r)).or_insert(rank as u32);
            }
        }
        Self { ranks }
    }
}

#[derive(Clone, Copy, Debug)]
struct Symbol {
    start: usize,
    len: usize,
    id: Option<u32>,
    prev: Option<usize>,
    next: Option<usize>,
}

#[derive(Debug, PartialEq, Eq)]
struct Pair {
    rank: u32,
    left: usize,
    right: usize,
    size: usize,
}

impl Ord for Pair {
    fn cmp(&self, other: &Self) -> Ordering {
        // BinaryHeap pops the greatest: lowest rank first, then the lowest left index.
        other
            .rank
            .cmp(&self.rank)
            .then_with(|| other.left.cmp(&self.left))
    }
}

impl PartialOrd for Pair {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

/// Segments `text` and appends the ids to `out`.
pub(crate) fn encode(
    vocab: &Compiled,
    merges: &Merges,
    pre: PreTokenizer,
    text: &str,
    out: &mut Vec<u32>,
) {
    if pre.is_spm_style() {
        return encode_spm_style(vocab, merges, pre, text, out);
    }
    let mut encoded = String::new();
    for word in pretokenize::split(pre, text) {
        encoded.clear();
        encoded.extend(word.bytes().map(byte_to_char));
        if pre.ignores_merges() {
            if let Some(&id) = vocab.piece_to_id.get(encoded.as_str()) {
                out.push(id);
                continue;
            }
        }
        encode_word(vocab, merges, &encoded, Fallback::Chars, out);
    }
}

/// Gemma 4's SentencePiece-style BPE: spaces become `▁`, words are merged as raw UTF-8, a word
/// of newlines that is a token is taken whole, and pieces no token covers become byte tokens.
fn encode_spm_style(
    vocab: &Compiled,
    merges: &Merges,
    pre: PreTokenizer,
    text: &str,
    out: &mut Vec<u32>,
) {
    let escaped = text.replace(' ', "\u{2581}");
    for word in pretokenize::split(pre, &escaped) {
        if word.bytes().all(|b| b == b'\n') {
            if let Some(&id) = vocab.piece_to_id.get(word) {
                out.push(id);
                continue;
            }
        }
        encode_word(vocab, merges, word, Fallback::Bytes, out);
    }
}

/// What a final symbol that is no token becomes.
#[derive(Clone, Copy)]
enum Fallback {
    /// Those of its chars that are tokens (byte-level BPE, whose chars are bytes).
    Chars,
    /// The `<0xXX>` token of each of its UTF-8 bytes that has one.
    Bytes,
}

fn encode_word(
    vocab: &Compiled,
    merges: &Merges,
    word: &str,
    fallback: Fallback,
    out: &mut Vec<u32>,
) {
    let mut symbols: Vec<Symbol> = word
        .char_indices()
        .enumerate()
        .map(|(i, (start, c))| Symbol {
            start,
            len: c.len_utf8(),
            id: vocab
                .piece_to_id
                .get(&word[start..start + c.len_utf8()])
                .copied(),
            prev: i.checked_sub(1),
            next: Some(i + 1),
        })
        .collect();
    if let Some(last) = symbols.last_mut() {
        last.next = None;
    }
    let mut heap = BinaryHeap::new();
    for right in 1..symbols.len() {
        push_pair(merges, &symbols, &mut heap, right - 1, right);
    }
    while let Some(pair) = heap.pop() {
        let (l, r) = (symbols[pair.left], symbols[pair.right]);
        if l.len == 0 || r.len == 0 || l.len + r.len != pair.size {
            continue;
        }
        let merged = &word[l.start..l.start + pair.size];
        symbols[pair.left].len = pair.size;
        symbols[pair.left].id = vocab.piece_to_id.get(merged).copied();
        symbols[pair.left].next = r.next;
        symbols[pair.right].len = 0;
        if let Some(after) = r.next {
            symbols[after].prev = Some(pair.left);
            push_pair(merges, &symbols, &mut heap, pair.left, after);
        }
        if let Some(before) = l.prev {
            push_pair(merges, &symbols, &mut heap, before, pair.left);
        }
    }
    let mut at = if symbols.is_empty() { None } else { Some(0) };
    while let Some(i) = at {
        let s = symbols[i];
        match s.id {
            Some(id) => out.push(id),
            // Not a token (a char missing from the vocabulary): emit what tokens exist for
            // its chars or bytes.
            None => {
                let piece = &word[s.start..s.start + s.len];
                match fallback {
                    Fallback::Chars => out.extend(
                        piece
                            .char_indices()
                            .filter_map(|(o, c)| vocab.piece_to_id.get(&piece[o..o + c.len_utf8()]))
                            .copied(),
                    ),
                    Fallback::Bytes => {
                        out.extend(piece.bytes().filter_map(|b| vocab.byte_ids[b as usize]))
                    }
                }
            }
        }
        at = s.next;
    }
}

fn push_pair(
    merges: &Merges,
    symbols: &[Symbol],
    heap: &mut BinaryHeap<Pair>,
    left: usize,
    right: usize,
) {
    let (l, r) = (symbols[left], symbols[right]);
    let (Some(lid), Some(rid)) = (l.id, r.id) else {
        return;
    };
    if let Some(&rank) = merges.ranks.get(&(lid, rid)) {
        heap.push(Pair {
            rank,
            left,
            right,
            size: l.len + r.len,
        });
    }
}
