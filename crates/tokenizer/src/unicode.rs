//! Unicode character classes used by the BPE pre-tokenizers, and the GPT-2 byte <-> char map.
//!
//! Design: the pre-tokenizer patterns only need four classes: letters (`\p{L}`), numbers
//! (`\p{N}`), punctuation (`\p{P}`) and white space (`\s`). Numbers and white space come from
//! `std` (`char::is_numeric` is exactly general category N, `char::is_whitespace` is the
//! White_Space property, the same set llama.cpp uses). Letters and punctuation are not exposed
//! by `std`, so their range tables are taken once from `regex-syntax`'s Unicode general
//! category data and searched with a binary search; ASCII takes a fast path.
//!
//! Invariant: range tables are sorted and non-overlapping (guaranteed by `regex-syntax`'s
//! canonical class representation), which the binary search relies on.

use std::sync::OnceLock;

/// A sorted list of inclusive `(start, end)` code point ranges.
type Ranges = Vec<(u32, u32)>;

fn class_ranges(pattern: &str) -> Ranges {
    let hir = regex_syntax::Parser::new()
        .parse(pattern)
        .expect("built-in Unicode class pattern must parse; this is a bug");
    match hir.kind() {
        regex_syntax::hir::HirKind::Class(regex_syntax::hir::Class::Unicode(class)) => class
            .ranges()
            .iter()
            .map(|r| (r.start() as u32, r.end() as u32))
            .collect(),
        other => {
            panic!("pattern {pattern} did not yield a Unicode class ({other:?}); this is a bug")
        }
    }
}

fn letters() -> &'static Ranges {
    static TABLE: OnceLock<Ranges> = OnceLock::new();
    TABLE.get_or_init(|| class_ranges(r"\p{L}"))
}

fn punctuation() -> &'static Ranges {
    static TABLE: OnceLock<Ranges> = OnceLock::new();
    TABLE.get_or_init(|| class_ranges(r"\p{P}"))
}

fn controls() -> &'static Ranges {
    static TABLE: OnceLock<Ranges> = OnceLock::new();
    TABLE.get_or_init(|| class_ranges(r"[\p{Cc}\p{Cf}\p{Co}]"))
}

fn marks() -> &'static Ranges {
    static TABLE: OnceLock<Ranges> = OnceLock::new();
    TABLE.get_or_init(|| class_ranges(r"\p{M}"))
}

fn in_ranges(ranges: &Ranges, c: char) -> bool {
    let c = c as u32;
    ranges
        .binary_search_by(|&(lo, hi)| {
            if hi < c {
                std::cmp::Ordering::Less
            } else if lo > c {
                std::cmp::Ordering::Greater
            } else {
                std::cmp::Ordering::Equal
            }
        })
        .is_ok()
}

/// `\p{L}`: any letter.
pub fn is_letter(c: char) -> bool {
    if c.is_ascii() {
        return c.is_ascii_alphabetic();
    }
    in_ranges(letters(), c)
}

/// `\p{N}`: any number (Nd, Nl, No).
pub fn is_number(c: char) -> bool {
    if c.is_ascii() {
        return c.is_ascii_digit();
    }
    c.is_numeric()
}

/// `\p{P}`: any punctuation.
pub fn is_punctuation(c: char) -> bool {
    if c.is_ascii() {
        // ASCII punctuation in the Unicode sense excludes the symbols $ + < = > ^ ` | ~.
        return c.is_ascii_punctuation() && !"$+<=>^`|~".contains(c);
    }
    in_ranges(punctuation(), c)
}

/// Control, format and private-use characters (`\p{Cc}`, `\p{Cf}`, `\p{Co}`; surrogates are
/// no `char`s): what llama.cpp's code point flags call control.
pub fn is_control(c: char) -> bool {
    if c.is_ascii() {
        return c.is_ascii_control();
    }
    in_ranges(controls(), c)
}

/// `\p{M}`: combining marks (Mn, Mc, Me).
pub fn is_mark(c: char) -> bool {
    !c.is_ascii() && in_ranges(marks(), c)
}

/// `\s`: Unicode white space.
pub fn is_whitespace(c: char) -> bool {
    c.is_whitespace()
}

/// The GPT-2 byte-level alphabet: every byte maps to a printable char so that BPE vocabularies
/// can be stored as text. Printable Latin-1 bytes map to themselves; the remaining 68 bytes map,
/// in byte order, to U+0100 onwards.
pub fn byte_to_char(b: u8) -> char {
    byte_char_table().0[b as usize]
}

/// Inverse of [`byte_to_char`]; `None` for chars outside the byte-level alphabet.
pub fn char_to_byte(c: char) -> Option<u8> {
    let c = c as u32;
    if c < 0x100 {
        let b = c as u8;
        return is_self_mapped(b).then_some(b);
    }
    byte_char_table().1.get((c - 0x100) as usize).copied()
}

fn is_self_mapped(b: u8) -> bool {
    matches!(b, 0x21..=0x7E | 0xA1..=0xAC | 0xAE..=0xFF)
}

/// `(byte -> char, shifted bytes in order)`: the second table lists the bytes that were moved to
/// U+0100 + index.
fn byte_char_table() -> &'static ([char; 256], Vec<u8>) {
    static TABLE: OnceLock<([char; 256], Vec<u8>)> = OnceLock::new();
    TABLE.get_or_init(|| {
        let mut forward = ['\0'; 256];
        let mut shifted = Vec::new();
        for b in 0..=255u8 {
            forward[b as usize] = if is_self_mapped(b) {
                char::from(b)
            } else {
                let c = char::from_u32(0x100 + shifted.len() as u32)
                    .expect("U+0100..U+0144 are valid chars; this is a bug");
                shifted.push(b);
                c
            };
        }
        (forward, shifted)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn letters_cover_scripts_beyond_ascii() {
        for c in ['a', 'Z', 'é', 'ß', 'Ж', '中', 'ا', 'ひ'] {
            assert!(is_letter(c), "{c}");
        }
        for c in ['1', ' ', '!', '😀', '\u{0301}', '٣'] {
            assert!(!is_letter(c), "{c:?}");
        }
    }

    #[test]
    fn numbers_include_non_decimal_digits() {
        for c in ['0', '٣', 'Ⅻ', '½', '²'] {
            assert!(is_number(c), "{c}");
        }
        assert!(!is_number('a'));
    }

    #[test]
    fn punctuation_excludes_ascii_symbols() {
        for c in ['!', '.', ',', '_', '{', '«', '。', '¿'] {
            assert!(is_punctuation(c), "{c}");
        }
        for c in ['$', '+', '<', '=', '>', '^', '`', '|', '~', '€', 'a'] {
            assert!(!is_punctuation(c), "{c}");
        }
    }

    #[test]
    fn byte_alphabet_round_trips_every_byte() {
        let mut seen = std::collections::HashSet::new();
        for b in 0..=255u8 {
            let c = byte_to_char(b);
            assert!(seen.insert(c), "duplicate char for byte {b}");
            assert_eq!(char_to_byte(c), Some(b));
        }
        assert_eq!(byte_to_char(b' '), 'Ġ');
        assert_eq!(byte_to_char(b'\n'), 'Ċ');
        assert_eq!(char_to_byte('中'), None);
    }
}
