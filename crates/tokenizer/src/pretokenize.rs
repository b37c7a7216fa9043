//! BPE pre-tokenizers: split text into words that BPE merges never cross.
//!
//! Design: the HF patterns are written as regexes with a lookahead (`\s+(?!\S)`), which the
//! `regex` crate cannot express. Instead each pattern is a hand-written scanner over the
//! characters of the text that tries the regex alternatives in order at the current position
//! and takes the first that matches, exactly as a backtracking regex engine would (this is also
//! how llama.cpp implements them). The `default` pre-tokenizer is llama.cpp's sequence of four
//! passes, each splitting every piece from the previous pass into matches and the gaps between;
//! DeepSeek's are such passes too ([`deepseek`]).
//!
//! Invariant: the words returned by [`split`] are non-empty and concatenate to the input.

mod deepseek;

use crate::unicode::{is_letter, is_mark, is_number, is_punctuation, is_whitespace};
use crate::vocab::PreTokenizer;

/// Splits `text` into pre-tokenized words.
pub(crate) fn split(pre: PreTokenizer, text: &str) -> Vec<&str> {
    match pre {
        PreTokenizer::Gpt2 => words(text, &scan_gpt2(&Chars::new(text))),
        PreTokenizer::SmolLm => split_smollm(text),
        PreTokenizer::Llama3 | PreTokenizer::Dbrx => {
            words(text, &scan_llama3(&Chars::new(text), 3, false))
        }
        PreTokenizer::Qwen2 => words(text, &scan_llama3(&Chars::new(text), 1, false)),
        PreTokenizer::Qwen35 => words(text, &scan_llama3(&Chars::new(text), 1, true)),
        PreTokenizer::Gpt4o => words(text, &scan_gpt4o(&Chars::new(text))),
        PreTokenizer::Default => split_default(text),
        PreTokenizer::Falcon => split_falcon(text),
        PreTokenizer::DeepSeekLlm => deepseek::split_llm(text),
        PreTokenizer::DeepSeekCoder => deepseek::split_coder(text),
        // Runs of newlines and runs of other chars (the text's spaces already `▁`).
        PreTokenizer::Gemma4 => split_runs(vec![text], |c| c == '\n'),
    }
}

/// The characters of one piece with their byte offsets; `get` past the end yields `None`,
/// which plays the role of "no character" in lookaheads.
struct Chars {
    chars: Vec<char>,
}

impl Chars {
    fn new(text: &str) -> Self {
        Self {
            chars: text.chars().collect(),
        }
    }

    fn len(&self) -> usize {
        self.chars.len()
    }

    fn get(&self, i: usize) -> Option<char> {
        self.chars.get(i).copied()
    }

    fn is(&self, i: usize, pred: impl Fn(char) -> bool) -> bool {
        self.get(i).is_some_and(pred)
    }

    /// The first index at or after `i` whose char does not satisfy `pred`.
    fn run_end(&self, mut i: usize, pred: impl Fn(char) -> bool) -> usize {
        while self.is(i, &pred) {
            i += 1;
        }
        i
    }
}

/// Turns character-index word ends into string slices.
fn words<'t>(text: &'t str, ends: &[usize]) -> Vec<&'t str> {
    let offsets: Vec<usize> = text.char_indices().map(|(o, _)| o).collect();
    let byte_at = |i: usize| offsets.get(i).copied().unwrap_or(text.len());
    let mut out = Vec::with_capacity(ends.len());
    let mut start = 0;
    for &end in ends {
        out.push(&text[byte_at(start)..byte_at(end)]);
        start = end;
    }
    out
}

fn is_other(c: char) -> bool {
    !(is_whitespace(c) || is_letter(c) || is_number(c))
}

/// `'s|'t|'re|'ve|'m|'ll|'d` (optionally case-insensitive): the length of the match at `i`.
fn contraction(t: &Chars, i: usize, ignore_case: bool) -> Option<usize> {
    if t.get(i) != Some('\'') {
        return None;
    }
    let lower = |c: Option<char>| {
        c.map(|c| {
            if ignore_case {
                c.to_ascii_lowercase()
            } else {
                c
            }
        })
    };
    match (lower(t.get(i + 1)), lower(t.get(i + 2))) {
        (Some('s' | 't' | 'm' | 'd'), _) => Some(2),
        (Some('r'), Some('e')) | (Some('v'), Some('e')) | (Some('l'), Some('l')) => Some(3),
        _ => None,
    }
}

/// White space at `i`: `\s+(?!\S)` (all but the last space when a non-space follows) else `\s+`.
fn whitespace_run(t: &Chars, i: usize) -> Option<usize> {
    let end = t.run_end(i, is_whitespace);
    match end - i {
        0 => None,
        n if n > 1 && end < t.len() => Some(end - 1),
        _ => Some(end),
    }
}

/// GPT-2: `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`.
/// Returns the end (char index) of each word.
fn scan_gpt2(t: &Chars) -> Vec<usize> {
    let mut ends = Vec::new();
    let mut i = 0;
    while i < t.len() {
        let end = if let Some(n) = contraction(t, i, false) {
            i + n
        } else {
            let body = i + usize::from(t.get(i) == Some(' '));
            let class: Option<fn(char) -> bool> = match t.get(body) {
                Some(c) if is_letter(c) => Some(is_letter),
                Some(c) if is_number(c) => Some(is_number),
                Some(c) if is_other(c) => Some(is_other),
                _ => None,
            };
            match class {
                Some(pred) => t.run_end(body, pred),
                None => whitespace_run(t, i).unwrap_or(i + 1),
            }
        };
        ends.push(end);
        i = end;
    }
    ends
}

/// LLaMA 3 (`max_digits = 3`), Qwen2 (`max_digits = 1`) and Qwen3.5 (`max_digits = 1`,
/// `marks`): `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|`
/// ` ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`. With `marks`, combining marks
/// join letters in words (`[\p{L}\p{M}]+`) and are no symbols (`[^\s\p{L}\p{M}\p{N}]`).
/// Returns the end (char index) of each word.
fn scan_llama3(t: &Chars, max_digits: usize, marks: bool) -> Vec<usize> {
    let is_newline = |c: char| c == '\r' || c == '\n';
    let letter = |c: char| is_letter(c) || (marks && is_mark(c));
    let other = |c: char| is_other(c) && !(marks && is_mark(c));
    let mut ends = Vec::new();
    let mut i = 0;
    while i < t.len() {
        let c = t.chars[i];
        if let Some(n) = contraction(t, i, true) {
            ends.push(i + n);
            i += n;
            continue;
        }
        if !(is_newline(c) || is_number(c)) && (letter(c) || t.is(i + 1, letter)) {
            i = t.run_end(i + 1, letter);
            ends.push(i);
            continue;
        }
        if is_number(c) {
            let end = t.run_end(i, is_number);
            while i < end {
                i = end.min(i + max_digits);
                ends.push(i);
            }
            continue;
        }
        let body = i + usize::from(c == ' ');
        if t.is(body, other) || (c == ' ' && body == t.len()) {
            let end = t.run_end(body, other);
            i = t.run_end(end, is_newline);
            ends.push(i);
            continue;
        }
        let ws_end = t.run_end(i, is_whitespace);
        if let Some(last_newline) = (i..ws_end).rev().find(|&k| t.is(k, is_newline)) {
            i = last_newline + 1;
        } else {
            i = whitespace_run(t, i).unwrap_or(i + 1);
        }
        ends.push(i);
    }
    ends
}

/// GPT-4o (o200k; gpt-oss, Llama 4), as llama.cpp runs it: the pattern
/// `[^\r\n\p{L}\p{N}]?U*W+C?|[^\r\n\p{L}\p{N}]?U+W*C?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|`
/// `\s*[\r\n]+|\s+(?!\S)|\s+`, where `C` is a contraction in either case, `U` a letter other
/// than `a-z` and `W` a letter other than `A-Z`. The tokenizer's own pattern has case classes
/// (`[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]`); llama.cpp rewrites them with lookaheads and runs them
/// through `std::regex` on text where each non-ASCII char stands for its category, so a
/// non-ASCII letter is both `U` and `W` and combining marks are not letters. Those are the
/// semantics here. Returns the end (char index) of each word.
fn scan_gpt4o(t: &Chars) -> Vec<usize> {
    let is_newline = |c: char| c == '\r' || c == '\n';
    let mut ends = Vec::new();
    let mut i = 0;
    while i < t.len() {
        let c = t.chars[i];
        let start = i + usize::from(!(is_newline(c) || is_letter(c) || is_number(c)));
        i = if let Some(end) = gpt4o_letters(t, start) {
            end + contraction(t, end, true).unwrap_or(0)
        } else if is_number(c) {
            t.run_end(i, is_number).min(i + 3)
        } else if t.is(i + usize::from(c == ' '), is_other) {
            let end = t.run_end(i + usize::from(c == ' '), is_other);
            t.run_end(end, |c| is_newline(c) || c == '/')
        } else {
            let ws_end = t.run_end(i, is_whitespace);
            match (i..ws_end).rev().find(|&k| t.is(k, is_newline)) {
                Some(last_newline) => last_newline + 1,
                None => whitespace_run(t, i).unwrap_or(i + 1),
            }
        };
        ends.push(i);
    }
    ends
}

/// The end of GPT-4o's letter run at `s` (`U*W+`, else `U+W*`, matched as a backtracking
/// engine does), or `None` when neither matches.
fn gpt4o_letters(t: &Chars, s: usize) -> Option<usize> {
    let upper = |c: char| is_letter(c) && !c.is_ascii_lowercase();
    let lower = |c: char| is_letter(c) && !c.is_ascii_uppercase();
    let u_end = t.run_end(s, upper);
    // `U*` gives back chars until `W+` can start: the last position in the run whose char is
    // also `W` (a non-ASCII letter), unless the run is followed by `a-z`.
    let w_start = if t.is(u_end, lower) {
        Some(u_end)
    } else {
        (s..u_end).rev().find(|&k| t.is(k, lower))
    };
    match w_start {
        Some(k) => Some(t.run_end(k, lower)),
        None if u_end > s => Some(u_end),
        None => None,
    }
}

/// llama.cpp's `default` BPE pre-tokenizer: four passes, each refining the previous pieces.
fn split_default(text: &str) -> Vec<&str> {
    let punct = |c: char| is_punctuation(c) || "$+<=>^~|".contains(c);
    let mut pieces = split_runs(vec![text], punct);
    pieces = pieces
        .into_iter()
        .flat_map(|p| words(p, &scan_gpt2(&Chars::new(p))))
        .collect();
    pieces = split_runs(pieces, is_number);
    pieces.into_iter().flat_map(split_digit_triples).collect()
}

/// llama.cpp's Falcon pre-tokenizer: `[\p{P}\$\+<=>\^~\|`]+`, then GPT-2's pattern (without
/// its last `\s+`, which changes nothing: what no alternative takes stays a piece anyway), then
/// `[0-9][0-9][0-9]`.
fn split_falcon(text: &str) -> Vec<&str> {
    let punct = |c: char| is_punctuation(c) || "$+<=>^~|`".contains(c);
    split_runs(vec![text], punct)
        .into_iter()
        .flat_map(|p| words(p, &scan_gpt2(&Chars::new(p))))
        .flat_map(split_digit_triples)
        .collect()
}

/// llama.cpp's SmolLM pre-tokenizer: `\p{N}` (every digit a piece of its own, the text between
/// digits kept as pieces), then the GPT-2 pattern over each piece.
fn split_smollm(text: &str) -> Vec<&str> {
    let mut pieces = Vec::new();
    let mut start = 0;
    for (o, c) in text.char_indices() {
        if is_number(c) {
            if start < o {
                pieces.push(&text[start..o]);
            }
            pieces.push(&text[o..o + c.len_utf8()]);
            start = o + c.len_utf8();
        }
    }
    if start < text.len() {
        pieces.push(&text[start..]);
    }
    pieces
        .into_iter()
        .flat_map(|p| words(p, &scan_gpt2(&Chars::new(p))))
        .collect()
}

/// Splits each piece into maximal runs of chars satisfying `pred` and the gaps between them.
fn split_runs(pieces: Vec<&str>, pred: impl Fn(char) -> bool) -> Vec<&str> {
    let mut out = Vec::with_capacity(pieces.len());
    for piece in pieces {
        let mut start = 0;
        let mut current: Option<bool> = None;
        for (o, c) in piece.char_indices() {
            let m = pred(c);
            if current.is_some_and(|prev| prev != m) {
                out.push(&piece[start..o]);
                start = o;
            }
            current = Some(m);
        }
        if start < piece.len() {
            out.push(&piece[start..]);
        }
    }
    out
}

/// `[0-9][0-9][0-9]` matched left to right without overlap; gaps stay as pieces.
fn split_digit_triples(piece: &str) -> Vec<&str> {
    let b = piece.as_bytes();
    let mut out = Vec::new();
    let (mut gap_start, mut i) = (0, 0);
    while i + 3 <= b.len() {
        if b[i..i + 3].iter().all(u8::is_ascii_digit) {
            if gap_start < i {
                out.push(&piece[gap_start..i]);
            }
            out.push(&piece[i..i + 3]);
            i += 3;
            gap_start = i;
        } else {
            i += 1;
        }
    }
    if gap_start < b.len() {
        out.push(&piece[gap_start..]);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gpt2(t: &str) -> Vec<&str> {
        split(PreTokenizer::Gpt2, t)
    }

    fn llama3(t: &str) -> Vec<&str> {
        split(PreTokenizer::Llama3, t)
    }

    #[test]
    fn gpt2_keeps_one_space_with_the_next_word() {
        assert_eq!(gpt2("Hello world"), ["Hello", " world"]);
        assert_eq!(gpt2("a   b"), ["a", "  ", " b"]);
        assert_eq!(gpt2("trailing  "), ["trailing", "  "]);
    }

    #[test]
    fn gpt2_splits_contractions_case_sensitively() {
        assert_eq!(gpt2("I'm don't"), ["I", "'m", " don", "'t"]);
        assert_eq!(gpt2("I'M"), ["I", "'", "M"]);
    }

    #[test]
    fn gpt2_separates_letters_numbers_and_symbols() {
        assert_eq!(gpt2("abc123!!x"), ["abc", "123", "!!", "x"]);
        assert_eq!(gpt2(" 42 ?!"), [" 42", " ?!"]);
    }

    #[test]
    fn llama3_groups_digits_by_three() {
        assert_eq!(llama3("1234567"), ["123", "456", "7"]);
        assert_eq!(split(PreTokenizer::Qwen2, "123"), ["1", "2", "3"]);
    }

    #[test]
    fn llama3_attaches_one_leading_non_letter_to_words() {
        assert_eq!(llama3("Hello, world"), ["Hello", ",", " world"]);
        assert_eq!(llama3("\tfoo"), ["\tfoo"]);
        assert_eq!(llama3("(x)"), ["(x", ")"]);
    }

    #[test]
    fn llama3_contractions_ignore_case() {
        assert_eq!(llama3("I'M"), ["I", "'M"]);
    }

    #[test]
    fn llama3_newlines_end_whitespace_runs() {
        assert_eq!(llama3("a  \n\n  b"), ["a", "  \n\n", " ", " b"]);
        assert_eq!(llama3("x.\n\ny"), ["x", ".\n\n", "y"]);
        assert_eq!(llama3("a   b"), ["a", "  ", " b"]);
        assert_eq!(llama3("end "), ["end", " "]);
    }

    #[test]
    fn default_splits_punctuation_and_digit_triples() {
        assert_eq!(
            split(PreTokenizer::Default, "x+=12345"),
            ["x", "+=", "123", "45"]
        );
        assert_eq!(split(PreTokenizer::Default, "hi, you"), ["hi", ",", " you"]);
    }

    #[test]
    fn smollm_splits_every_digit_and_keeps_spaces_off_numbers() {
        let smollm = |t| split(PreTokenizer::SmolLm, t);
        assert_eq!(
            smollm("Hello world! 123"),
            ["Hello", " world", "!", " ", "1", "2", "3"]
        );
        assert_eq!(smollm("x42y"), ["x", "4", "2", "y"]);
        assert_eq!(smollm("I'm  ok"), ["I", "'m", " ", " ok"]);
        assert_eq!(smollm("a٣b"), ["a", "٣", "b"]);
    }

    #[test]
    fn dbrx_splits_like_llama3() {
        let text = "I'M 12345 (x)\n\n  y";
        assert_eq!(split(PreTokenizer::Dbrx, text), llama3(text));
    }

    // The GPT-4o cases below are llama.cpp's own splits (its unicode_regex_split with the
    // GPT4O pattern, built from the llama-cpp-python 0.3.36 sources).
    fn gpt4o(t: &str) -> Vec<&str> {
        split(PreTokenizer::Gpt4o, t)
    }

    #[test]
    fn gpt4o_splits_words_at_case_changes() {
        assert_eq!(gpt4o("Hello world"), ["Hello", " world"]);
        assert_eq!(gpt4o("HELLOworld"), ["HELLOworld"]);
        assert_eq!(gpt4o("helloWorld"), ["hello", "World"]);
        assert_eq!(gpt4o("CamelCaseXMLParser"), ["Camel", "Case", "XMLParser"]);
    }

    #[test]
    fn gpt4o_takes_non_ascii_letters_as_either_case() {
        assert_eq!(gpt4o("日本語ABC"), ["日本語", "ABC"]);
        assert_eq!(gpt4o("ŁódźKRAKÓW"), ["Łódź", "KRAKÓ", "W"]);
        assert_eq!(gpt4o("éA"), ["é", "A"]);
        // A combining mark is no letter: it ends a word and may lead the next.
        assert_eq!(gpt4o("e\u{301}t\u{301}"), ["e", "\u{301}t", "\u{301}"]);
    }

    #[test]
    fn gpt4o_keeps_contractions_on_their_word() {
        assert_eq!(gpt4o("don't DON'T it'S"), ["don't", " DON'T", " it'S"]);
        assert_eq!(gpt4o("x's'"), ["x's", "'"]);
        assert_eq!(gpt4o("'hello"), ["'hello"]);
    }

    #[test]
    fn gpt4o_groups_digits_by_three() {
        assert_eq!(gpt4o("1234567"), ["123", "456", "7"]);
        assert_eq!(gpt4o("x=12345;"), ["x", "=", "123", "45", ";"]);
    }

    #[test]
    fn gpt4o_symbols_take_following_newlines_and_slashes() {
        assert_eq!(gpt4o("(x)"), ["(x", ")"]);
        assert_eq!(gpt4o(" (x"), [" (", "x"]);
        assert_eq!(gpt4o("a-/\n/x"), ["a", "-/\n/", "x"]);
        assert_eq!(gpt4o("path/to/file.rs"), ["path", "/to", "/file", ".rs"]);
    }

    #[test]
    fn gpt4o_whitespace_runs() {
        assert_eq!(gpt4o("a  \n\n  b"), ["a", "  \n\n", " ", " b"]);
        assert_eq!(gpt4o("a   b"), ["a", "  ", " b"]);
        assert_eq!(gpt4o("end "), ["end", " "]);
        assert_eq!(gpt4o("abc\r\n\r\ndef"), ["abc", "\r\n\r\n", "def"]);
        assert_eq!(gpt4o("\u{3000}foo"), ["\u{3000}foo"]);
    }

    // The Qwen3.5 cases are llama.cpp's own splits (its QWEN35 pattern).
    fn qwen35(t: &str) -> Vec<&str> {
        split(PreTokenizer::Qwen35, t)
    }

    #[test]
    fn qwen35_keeps_combining_marks_in_words() {
        assert_eq!(qwen35("e\u{301}t\u{301} "), ["e\u{301}t\u{301}", " "]);
        assert_eq!(qwen35("e\u{301} x\u{301}"), ["e\u{301}", " x\u{301}"]);
        assert_eq!(qwen35("naïve\u{308}s 12"), ["naïve\u{308}s", " ", "1", "2"]);
        assert_eq!(qwen35("पढ़ाई हिन्दी"), ["पढ़ाई", " हिन्दी"]);
        // Qwen2 splits the same texts at every mark.
        let qwen2 = |t| split(PreTokenizer::Qwen2, t);
        assert_eq!(
            qwen2("e\u{301}t\u{301} "),
            ["e", "\u{301}t", "\u{301}", " "]
        );
    }

    #[test]
    fn qwen35_otherwise_splits_as_qwen2() {
        assert_eq!(
            qwen35("a  b 123 4567!! ,x"),
            ["a", " ", " b", " ", "1", "2", "3", " ", "4", "5", "6", "7", "!!", " ,", "x"]
        );
        assert_eq!(
            qwen35("I'm (x) -> {y};"),
            ["I", "'m", " (", "x", ")", " ->", " {", "y", "};"]
        );
        assert_eq!(
            qwen35("x\n\n  y\r\nz"),
            ["x", "\n\n", " ", " y", "\r\n", "z"]
        );
        assert_eq!(qwen35("中文 한국어"), ["中文", " 한국어"]);
    }

    #[test]
    fn gemma4_splits_only_newline_runs() {
        let gemma4 = |t| split(PreTokenizer::Gemma4, t);
        assert_eq!(gemma4("a▁b,\n\nc▁\n"), ["a▁b,", "\n\n", "c▁", "\n"]);
        assert_eq!(gemma4("\r\t x"), ["\r\t x"]);
    }

    #[test]
    fn splits_always_cover_the_input() {
        let text = "Ünïcödé 中文 😀\t\r\n  x'LL 1,000.5 ...  ";
        for pre in [
            PreTokenizer::Default,
            PreTokenizer::Gpt2,
            PreTokenizer::SmolLm,
            PreTokenizer::Llama3,
            PreTokenizer::Dbrx,
            PreTokenizer::Qwen2,
            PreTokenizer::Falcon,
            PreTokenizer::Gpt4o,
            PreTokenizer::Qwen35,
            PreTokenizer::DeepSeekLlm,
            PreTokenizer::DeepSeekCoder,
            PreTokenizer::Gemma4,
        ] {
            let w = split(pre, text);
            assert!(w.iter().all(|w| !w.is_empty()), "{pre:?}: {w:?}");
            assert_eq!(w.concat(), text, "{pre:?}");
        }
    }
}
