//! WordPiece segmentation (`tokenizer.ggml.model = bert`), token for token as llama.cpp does it.
//!
//! Design, in llama.cpp's order:
//! 1. Normalise each code point (BERT's normaliser, as the file's
//!    `tokenizer.ggml.normalizer.*` flags say; both on by default): stripping accents, it
//!    becomes the first code point of its canonical decomposition (`é` → `e`, a Hangul
//!    syllable → its leading jamo) and combining marks are dropped; lowercasing takes the
//!    simple lowercase mapping.
//! 2. Split into words: white space ends a word; NUL, U+FFFD and control / format /
//!    private-use characters are dropped; punctuation, the ASCII symbols and CJK ideographs
//!    are words of one character.
//! 3. Each word, prefixed with U+2581 (how GGUF stores word-initial pieces; continuation pieces
//!    lose BERT's `##`), is cut greedily into the longest vocabulary pieces from the left. If
//!    some position matches no piece, the whole word becomes `[UNK]`.
//!
//! Words are never truncated (BERT's 100-character limit does not exist in llama.cpp either).

use unicode_normalization::char::decompose_canonical;

use crate::unicode::{is_control, is_mark, is_punctuation};
use crate::vocab::Compiled;

/// The word-start marker GGUF puts in front of word-initial pieces.
const WORD_START: char = '\u{2581}';

/// Appends the WordPiece ids of `text` (no [CLS]/[SEP]) to `out`.
pub(crate) fn encode(v: &Compiled, text: &str, out: &mut Vec<u32>) {
    let mut word = String::new();
    let flush = |word: &mut String, out: &mut Vec<u32>| {
        if !word.is_empty() {
            segment_word(v, word, out);
            word.clear();
        }
    };
    for c in text.chars() {
        let c = if v.strip_accents { nfd_first(c) } else { c };
        if c.is_whitespace() {
            flush(&mut word, out);
            continue;
        }
        if c == '\0' || c == '\u{FFFD}' || is_control(c) || (v.strip_accents && is_mark(c)) {
            continue;
        }
        let lower = if v.lowercase {
            c.to_lowercase().next().unwrap_or(c)
        } else {
            c
        };
        if is_punctuation(c) || is_ascii_symbol(c) || is_cjk(c) {
            flush(&mut word, out);
            word.push(lower);
            flush(&mut word, out);
        } else {
            word.push(lower);
        }
    }
    flush(&mut word, out);
}

/// The greedy longest-match pieces of one word (given without its marker).
fn segment_word(v: &Compiled, word: &str, out: &mut Vec<u32>) {
    let mut marked = String::with_capacity(word.len() + 3);
    marked.push(WORD_START);
    marked.push_str(word);
    let start = out.len();
    let mut i = 0;
    while i < marked.len() {
        let longest = (marked.len() - i).min(v.max_piece_len);
        let found = (1..=longest).rev().find_map(|len| {
            let end = i + len;
            if !marked.is_char_boundary(end) {
                return None;
            }
            v.piece_to_id.get(&marked[i..end]).map(|&id| (id, end))
        });
        match found {
            Some((id, end)) => {
                out.push(id);
                i = end;
            }
            None => {
                out.truncate(start);
                out.extend(v.special.unk);
                return;
            }
        }
    }
}

/// The first code point of `c`'s canonical decomposition (`c` itself if it has none).
fn nfd_first(c: char) -> char {
    let mut first = None;
    decompose_canonical(c, |d| {
        first.get_or_insert(d);
    });
    first.unwrap_or(c)
}

/// The ASCII characters of Unicode category S (symbols): BERT splits them like punctuation.
fn is_ascii_symbol(c: char) -> bool {
    "$+<=>^`|~".contains(c)
}

/// The CJK ideograph blocks BERT splits into single characters (llama.cpp's list, which starts
/// Extension E at U+2B920 as Hugging Face's Rust tokenizer does).
fn is_cjk(c: char) -> bool {
    matches!(c as u32,
        0x4E00..=0x9FFF
        | 0x3400..=0x4DBF
        | 0x20000..=0x2A6DF
        | 0x2A700..=0x2B73F
        | 0x2B740..=0x2B81F
        | 0x2B920..=0x2CEAF
        | 0xF900..=0xFAFF
        | 0x2F800..=0x2FA1F)
}

#[cfg(test)]
mod tests {
    use crate::{Tokenizer, Vocab, VocabModel};

    /// A toy BERT vocabulary: ids 0-4 are the specials of a real one, moved.
    fn toy() -> Tokenizer {
        let pieces = [
            "[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "▁hello", "▁hell", "o", "▁,", "▁world",
            "▁un", "aff", "able", "▁cafe", "▁你", "▁好", "▁$", "▁1", "2", "▁a", "▁!",
        ];
        let mut v = Vocab::new(
            VocabModel::Wpm,
            pieces.iter().map(|s| s.to_string()).collect(),
        );
        v.token_types = vec![3, 2, 3, 3, 3];
        v.token_types.resize(pieces.len(), 1);
        v.special.bos = Some(2);
        v.special.sep = Some(3);
        v.special.unk = Some(1);
        v.special.pad = Some(0);
        Tokenizer::from_vocab(&v).expect("toy vocab")
    }

    #[test]
    fn words_are_cut_into_longest_pieces_between_cls_and_sep() {
        let t = toy();
        assert_eq!(t.encode("Hello, World", true, false), [2, 5, 8, 9, 3]);
        assert_eq!(t.encode("unaffable", false, false), [10, 11, 12]);
        // "hello" wins over "hell" + "o".
        assert_eq!(t.encode("HELLO", false, false), [5]);
        assert_eq!(t.encode("hellooo", false, false), [5, 7, 7]);
    }

    #[test]
    fn accents_fall_away_cjk_and_symbols_split_and_unknown_words_are_one_unk() {
        let t = toy();
        assert_eq!(t.encode("Café", false, false), [13]);
        // A combining mark is dropped with the accents.
        assert_eq!(t.encode("Cafe\u{301}", false, false), [13]);
        assert_eq!(t.encode("你好", false, false), [14, 15]);
        assert_eq!(t.encode("$12!", false, false), [16, 17, 18, 20]);
        // "helloz": no piece starts at "z", so the whole word is [UNK].
        assert_eq!(t.encode("a helloz a", false, false), [19, 1, 19]);
        assert_eq!(t.encode("", true, false), [2, 3]);
        assert_eq!(
            t.encode(" \t\u{7}\u{200b} ", false, false),
            Vec::<u32>::new()
        );
    }

    #[test]
    fn a_word_of_many_pieces_is_not_truncated() {
        let t = toy();
        let long = format!("hello{}", "o".repeat(300));
        let ids = t.encode(&long, false, false);
        assert_eq!(ids.len(), 301);
        assert_eq!(t.sep_id(), Some(3));
    }
}
