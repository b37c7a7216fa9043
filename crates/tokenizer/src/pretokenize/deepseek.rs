//! DeepSeek's pre-tokenizers (`deepseek-llm`, `deepseek-coder`), as llama.cpp runs them.
//!
//! Design: llama.cpp applies a list of patterns in turn; each pass splits every piece left by
//! the previous one into its successive leftmost matches and the gaps between them
//! ([`refine`]). DeepSeek's patterns are plain character classes with an optional leading
//! space, so each pass is a small matcher over the chars of one piece. llama.cpp runs these
//! patterns through `std::regex`, where `\s` is ASCII white space plus every non-ASCII
//! white-space char (it rewrites those to a vertical tab first); a white-space char therefore
//! never belongs to one of the literal classes below, even when its code point lies in a
//! range (U+3000 in the symbol class, U+2000..U+200A in the CJK class).

use super::{words, Chars};
use crate::unicode::{is_letter, is_number, is_punctuation, is_whitespace};

/// DeepSeek LLM: `[\r\n]`, `\s?[LETTERS]+`, `\s?[!-/:-~！-／：-～‘-‟　-。]+`, `\s+$`,
/// `[一-龥ࠀ-一가-퟿]+`, `\p{N}+`, where `LETTERS` is [`LLM_LETTERS`].
pub(super) fn split_llm(text: &str) -> Vec<&str> {
    let mut pieces = refine(vec![text], newline);
    pieces = refine(pieces, |t, i| space_then_run(t, i, llm_letter));
    pieces = refine(pieces, |t, i| space_then_run(t, i, llm_symbol));
    pieces = pieces.into_iter().flat_map(trailing_whitespace).collect();
    pieces = refine(pieces, |t, i| run(t, i, cjk));
    refine(pieces, |t, i| run(t, i, is_number))
}

/// DeepSeek Coder: `[\r\n]`, `\s?\p{L}+`, `\s?\p{P}+`, `[一-龥ࠀ-一가-퟿]+`, `\p{N}`.
pub(super) fn split_coder(text: &str) -> Vec<&str> {
    let mut pieces = refine(vec![text], newline);
    pieces = refine(pieces, |t, i| space_then_run(t, i, is_letter));
    pieces = refine(pieces, |t, i| space_then_run(t, i, is_punctuation));
    pieces = refine(pieces, |t, i| run(t, i, cjk));
    refine(pieces, |t, i| t.is(i, is_number).then_some(i + 1))
}

/// One pass: each piece becomes its successive leftmost matches and the gaps between them.
/// `matcher(t, i)` is the end of the match starting at char `i`, if one does (never `i`).
fn refine(pieces: Vec<&str>, matcher: impl Fn(&Chars, usize) -> Option<usize>) -> Vec<&str> {
    let mut out = Vec::with_capacity(pieces.len());
    for piece in pieces {
        let t = Chars::new(piece);
        let mut ends = Vec::new();
        let (mut gap_start, mut i) = (0, 0);
        while i < t.len() {
            match matcher(&t, i) {
                Some(end) => {
                    if gap_start < i {
                        ends.push(i);
                    }
                    ends.push(end);
                    (gap_start, i) = (end, end);
                }
                None => i += 1,
            }
        }
        if gap_start < t.len() {
            ends.push(t.len());
        }
        out.extend(words(piece, &ends));
    }
    out
}

/// `[\r\n]`.
fn newline(t: &Chars, i: usize) -> Option<usize> {
    matches!(t.get(i), Some('\r' | '\n')).then_some(i + 1)
}

/// `X+` at `i`.
fn run(t: &Chars, i: usize, x: impl Fn(char) -> bool) -> Option<usize> {
    t.is(i, &x).then(|| t.run_end(i, &x))
}

/// `\s?X+` at `i`, for a class `X` without white space.
fn space_then_run(t: &Chars, i: usize, x: impl Fn(char) -> bool) -> Option<usize> {
    if t.is(i, is_whitespace) && t.is(i + 1, &x) {
        return Some(t.run_end(i + 1, &x));
    }
    run(t, i, x)
}

/// `\s+$`: the piece's trailing white space split off its start.
fn trailing_whitespace(piece: &str) -> Vec<&str> {
    let body = piece.trim_end_matches(is_whitespace);
    if body.is_empty() || body.len() == piece.len() {
        vec![piece]
    } else {
        vec![body, &piece[body.len()..]]
    }
}

fn in_ranges(ranges: &[(u32, u32)], c: char) -> bool {
    let c = u32::from(c);
    ranges.iter().any(|&(lo, hi)| (lo..=hi).contains(&c))
}

/// DeepSeek LLM's letter class, the letters of the cased scripts (Latin, Greek, Cyrillic,
/// Armenian, Georgian, Cherokee, full-width Latin, Deseret, Adlam, ...; no combining marks), as
/// code point ranges: the class of its tokenizer's split pattern, merged where adjacent.
const LLM_LETTERS: &[(u32, u32)] = &[
    (0x0041, 0x005A),
    (0x0061, 0x007A),
    (0x00B5, 0x00B5),
    (0x00C0, 0x00D6),
    (0x00D8, 0x00F6),
    (0x00F8, 0x01BA),
    (0x01BC, 0x01BF),
    (0x01C4, 0x0293),
    (0x0295, 0x02AF),
    (0x0370, 0x0373),
    (0x0376, 0x0377),
    (0x037B, 0x037D),
    (0x037F, 0x037F),
    (0x0386, 0x0386),
    (0x0388, 0x038A),
    (0x038C, 0x038C),
    (0x038E, 0x03A1),
    (0x03A3, 0x03F5),
    (0x03F7, 0x0481),
    (0x048A, 0x052F),
    (0x0531, 0x0556),
    (0x10A0, 0x10C5),
    (0x13A0, 0x13F5),
    (0x13F8, 0x13FD),
    (0x1C90, 0x1CBA),
    (0x1CBD, 0x1CBF),
    (0x1D00, 0x1D2B),
    (0x1D6B, 0x1D77),
    (0x1D79, 0x1D9A),
    (0x1E00, 0x1F15),
    (0x1F18, 0x1F1D),
    (0x1F20, 0x1F45),
    (0x1F48, 0x1F4D),
    (0x1F50, 0x1F57),
    (0x1F59, 0x1F59),
    (0x1F5B, 0x1F5B),
    (0x1F5D, 0x1F5D),
    (0x1F5F, 0x1F7D),
    (0x1F80, 0x1FB4),
    (0x1FB6, 0x1FBC),
    (0x1FBE, 0x1FBE),
    (0x1FC2, 0x1FC4),
    (0x1FC6, 0x1FCC),
    (0x1FD0, 0x1FD3),
    (0x1FD6, 0x1FDB),
    (0x1FE0, 0x1FEC),
    (0x1FF2, 0x1FF4),
    (0x1FF6, 0x1FFC),
    (0x2102, 0x2102),
    (0x2107, 0x2107),
    (0x210A, 0x2113),
    (0x2115, 0x2115),
    (0x2119, 0x211D),
    (0x2124, 0x2124),
    (0x2126, 0x2126),
    (0x2128, 0x2128),
    (0x212A, 0x212D),
    (0x212F, 0x2134),
    (0x2139, 0x2139),
    (0x213C, 0x213F),
    (0x2145, 0x2149),
    (0x214E, 0x214E),
    (0x2183, 0x2184),
    (0x2C00, 0x2C7B),
    (0x2C7E, 0x2CE4),
    (0x2CEB, 0x2CEE),
    (0x2CF2, 0x2CF3),
    (0xA640, 0xA66D),
    (0xA680, 0xA69B),
    (0xA722, 0xA76F),
    (0xA771, 0xA787),
    (0xA78B, 0xA78E),
    (0xAB70, 0xABBF),
    (0xFB00, 0xFB06),
    (0xFB13, 0xFB17),
    (0xFF21, 0xFF3A),
    (0xFF41, 0xFF5A),
    (0x10400, 0x1044F),
    (0x104B0, 0x104D3),
    (0x104D8, 0x104FB),
    (0x10C80, 0x10CB2),
    (0x10CC0, 0x10CF2),
    (0x118A0, 0x118DF),
    (0x1E900, 0x1E943),
];

fn llm_letter(c: char) -> bool {
    if c.is_ascii() {
        return c.is_ascii_alphabetic();
    }
    in_ranges(LLM_LETTERS, c)
}

/// `[!-/:-~！-／：-～‘-‟　-。]`: ASCII symbols, punctuation and letters (`:-~`), their
/// full-width forms, curly quotes, the ideographic comma and full stop.
fn llm_symbol(c: char) -> bool {
    const RANGES: &[(u32, u32)] = &[
        (0x21, 0x2F),
        (0x3A, 0x7E),
        (0x2018, 0x201F),
        (0x3000, 0x3002),
        (0xFF01, 0xFF0F),
        (0xFF1A, 0xFF5E),
    ];
    !is_whitespace(c) && in_ranges(RANGES, c)
}

/// `[一-龥ࠀ-一가-퟿]`: U+0800..U+9FA5 (CJK ideographs and, through the middle range, every
/// script from Samaritan to CJK Extension A) and U+AC00..U+D7FF (Hangul).
fn cjk(c: char) -> bool {
    let c32 = u32::from(c);
    ((0x0800..=0x9FA5).contains(&c32) || (0xAC00..=0xD7FF).contains(&c32)) && !is_whitespace(c)
}

// The expected splits are llama.cpp's own (its unicode_regex_split with the DEEPSEEK_LLM and
// DEEPSEEK_CODER patterns, built from the llama-cpp-python 0.3.36 sources).
#[cfg(test)]
mod tests {
    use crate::pretokenize::split;
    use crate::vocab::PreTokenizer;

    fn llm(t: &str) -> Vec<&str> {
        split(PreTokenizer::DeepSeekLlm, t)
    }

    fn coder(t: &str) -> Vec<&str> {
        split(PreTokenizer::DeepSeekCoder, t)
    }

    #[test]
    fn llm_words_take_one_leading_space_and_only_their_class_of_letters() {
        assert_eq!(llm("Hello world"), ["Hello", " world"]);
        assert_eq!(llm("\tfoo\t\tbar"), ["\tfoo", "\t", "\tbar"]);
        assert_eq!(llm("Ωµ∑ Жук αβγ"), ["Ωµ", "∑", " Жук", " αβγ"]);
        // The symbol pass (`:-~` holds the ASCII letters) splits accented letters off words.
        assert_eq!(llm("café naïve"), ["caf", "é", " na", "ï", "ve"]);
        assert_eq!(
            llm("e\u{301}t\u{301} "),
            ["e", "\u{301}", "t", "\u{301}", " "]
        );
    }

    #[test]
    fn llm_newlines_stand_alone_and_trailing_space_splits_off() {
        assert_eq!(
            llm("x\n\n  y\r\nz"),
            ["x", "\n", "\n", " ", " y", "\r", "\n", "z"]
        );
        assert_eq!(llm("a  \n\n  b"), ["a", "  ", "\n", "\n", " ", " b"]);
        assert_eq!(llm("end  "), ["end", "  "]);
    }

    #[test]
    fn llm_symbols_cjk_and_digit_runs() {
        assert_eq!(
            llm("a  b 123 4567!! ,x"),
            ["a", " ", " b", " ", "123", " ", "4567", "!!", " ,", "x"]
        );
        assert_eq!(
            llm("I'm (x) -> {y};"),
            ["I", "'", "m", " (", "x", ")", " ->", " {", "y", "};"]
        );
        assert_eq!(
            llm("ＡＢＣ！？ “quoted” 、。"),
            ["ＡＢＣ", "！？", " ", "“", "quoted", "”", " ", "、。"]
        );
        assert_eq!(
            llm("中文 한국어 日本語テスト"),
            ["中文", " ", "한국어", " ", "日本語テスト"]
        );
        assert_eq!(llm("x٣٤Ⅻ½y 2024"), ["x", "٣٤", "Ⅻ", "½", "y", " ", "2024"]);
        // Non-ASCII white space is white space, never a member of a class.
        assert_eq!(llm("a\u{3000}b\u{a0}c"), ["a", "\u{3000}b", "\u{a0}c"]);
    }

    #[test]
    fn coder_splits_letters_punctuation_and_single_digits() {
        assert_eq!(coder("café naïve"), ["café", " naïve"]);
        assert_eq!(
            coder("a  b 123 4567!! ,x"),
            ["a", " ", " b", " ", "1", "2", "3", " ", "4", "5", "6", "7", "!!", " ,", "x"]
        );
        // `>` is a symbol, not punctuation: it stays in the gap.
        assert_eq!(
            coder("I'm (x) -> {y};"),
            ["I", "'", "m", " (", "x", ")", " -", ">", " {", "y", "};"]
        );
        assert_eq!(
            coder("x\n\n  y\r\nz"),
            ["x", "\n", "\n", " ", " y", "\r", "\n", "z"]
        );
        assert_eq!(coder("x٣٤Ⅻ½y"), ["x", "٣", "٤", "Ⅻ", "½", "y"]);
    }

    #[test]
    fn coder_marks_end_words_and_the_cjk_pass_splits_other_scripts() {
        assert_eq!(
            coder("e\u{301}t\u{301} "),
            ["e", "\u{301}", "t", "\u{301} "]
        );
        assert_eq!(
            coder("中文 한국어 日本語テスト"),
            ["中文", " ", "한국어", " ", "日本語テスト"]
        );
        // Devanagari lies in the CJK pass's U+0800.. range, so a leading space stays apart.
        assert_eq!(
            coder("पढ़ाई हिन्दी"),
            [
                "पढ",
                "\u{93c}\u{93e}",
                "\u{908}",
                " ",
                "\u{939}",
                "\u{93f}",
                "\u{928}",
                "\u{94d}",
                "\u{926}",
                "\u{940}"
            ]
        );
    }
}
