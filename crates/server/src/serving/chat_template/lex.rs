//! A lexer of the expressions in a Jinja template's tags, enough to find the operands of an
//! operator by Jinja2's precedence (`tilde` rewrites `~`; `jinja` refuses `Markup + str`).
//!
//! Each `{{ … }}` and `{% … %}` tag is split into string literals, numbers, names, operators and
//! brackets, each with its byte offsets and the number of brackets open around it; comments and
//! `{% raw %}` blocks are skipped. Jinja2's precedence, loosest first: the conditional
//! expression, `or`, `and`, `not`, comparisons and `in`, binary `+` and `-`, `~`, `*` `/` `//`
//! `%`, `**`, signs, then filters, tests, attributes, subscripts and calls.

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Str,
    Num,
    Name,
    Op,
    Open,
    Close,
}

#[derive(Clone, Copy, Debug)]
pub struct Token<'a> {
    pub kind: Kind,
    pub text: &'a str,
    pub start: usize,
    pub end: usize,
    /// Brackets open around the token (an opening or closing bracket counts as outside).
    pub depth: usize,
}

/// Words that end an operand of `~` inside an expression (lower precedence, or the `for`
/// loop's own). Statement names (`set`, `for`, `call`, …) only open a tag, and anywhere else are
/// variables.
const KEYWORDS: [&str; 7] = ["and", "or", "not", "in", "if", "else", "recursive"];

/// Operators that end an operand of `~` (binary `+` and `-` are told apart from signs).
const LOOSER_OPS: [&str; 11] = ["~", "==", "!=", "<", ">", "<=", ">=", ",", ":", "=", "+"];

/// The tokens of one tag; `block`: a `{% … %}` statement, whose first word is its name.
pub struct Tag<'a> {
    pub block: bool,
    pub tokens: Vec<Token<'a>>,
}

/// The tags of `source` in order, without comments and raw blocks.
pub fn tags(source: &str) -> Vec<Tag<'_>> {
    let mut out = Vec::new();
    let mut at = 0;
    while let Some(open) = next_tag(source, at) {
        let body = open + 2;
        let opener = &source[open..body];
        if opener == "{#" {
            at = source[body..]
                .find("#}")
                .map_or(source.len(), |i| body + i + 2);
            continue;
        }
        let (tokens, end) = lex_tag(source, body, opener == "{{");
        at = end;
        if opener == "{%" && tokens.first().is_some_and(|t| t.text == "raw") {
            at = end_of_raw(source, end);
            continue;
        }
        out.push(Tag {
            block: opener == "{%",
            tokens,
        });
    }
    out
}

fn next_tag(source: &str, from: usize) -> Option<usize> {
    let bytes = source.as_bytes();
    (from..bytes.len().saturating_sub(1))
        .find(|&i| bytes[i] == b'{' && matches!(bytes[i + 1], b'{' | b'%' | b'#'))
}

/// Past the `{% endraw %}` that closes a raw block.
fn end_of_raw(source: &str, mut at: usize) -> usize {
    while let Some(open) = next_tag(source, at) {
        let (tokens, end) = lex_tag(source, open + 2, &source[open..open + 2] == "{{");
        if source[open..].starts_with("{%") && tokens.first().is_some_and(|t| t.text == "endraw") {
            return end;
        }
        at = open + 2;
    }
    source.len()
}

/// The tokens of one tag from `at` (after its opener) to its closer, and the offset past the
/// closer. Whitespace control (`-`, `+`) next to the delimiters is not a token.
fn lex_tag(source: &str, mut at: usize, variable: bool) -> (Vec<Token<'_>>, usize) {
    let bytes = source.as_bytes();
    let closer = if variable { "}}" } else { "%}" };
    if matches!(bytes.get(at), Some(b'-' | b'+')) {
        at += 1;
    }
    let mut tokens = Vec::new();
    let mut depth = 0usize;
    while at < bytes.len() {
        let rest = &source[at..];
        let c = bytes[at];
        if c.is_ascii_whitespace() {
            at += 1;
            continue;
        }
        if depth == 0 {
            let trimmed = rest.strip_prefix(['-', '+']).unwrap_or(rest);
            if trimmed.starts_with(closer) {
                return (tokens, at + (rest.len() - trimmed.len()) + 2);
            }
        }
        let (kind, len) = match c {
            b'\'' | b'"' => (Kind::Str, string_len(rest)),
            b'0'..=b'9' => (Kind::Num, number_len(rest)),
            c if c.is_ascii_alphabetic() || c == b'_' => (
                Kind::Name,
                rest.find(|ch: char| !(ch.is_ascii_alphanumeric() || ch == '_'))
                    .unwrap_or(rest.len()),
            ),
            b'(' | b'[' | b'{' => (Kind::Open, 1),
            b')' | b']' | b'}' => (Kind::Close, 1),
            _ => {
                let two = ["**", "//", "==", "!=", "<=", ">="];
                let len = if two.iter().any(|op| rest.starts_with(op)) {
                    2
                } else {
                    rest.chars().next().map_or(1, char::len_utf8)
                };
                (Kind::Op, len)
            }
        };
        if kind == Kind::Close {
            depth = depth.saturating_sub(1);
        }
        tokens.push(Token {
            kind,
            text: &rest[..len],
            start: at,
            end: at + len,
            depth,
        });
        if kind == Kind::Open {
            depth += 1;
        }
        at += len;
    }
    (tokens, at)
}

fn string_len(rest: &str) -> usize {
    let quote = rest.as_bytes()[0];
    let mut i = 1;
    let bytes = rest.as_bytes();
    while i < bytes.len() {
        match bytes[i] {
            b'\\' => i += 2,
            b if b == quote => return i + 1,
            _ => i += 1,
        }
    }
    bytes.len()
}

fn number_len(rest: &str) -> usize {
    let bytes = rest.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        let exp_sign = matches!(b, b'+' | b'-') && i > 0 && matches!(bytes[i - 1], b'e' | b'E');
        if b.is_ascii_digit() || matches!(b, b'.' | b'_' | b'e' | b'E') || exp_sign {
            i += 1;
        } else {
            break;
        }
    }
    i
}

/// Whether a `+` or `-` at `i` is a sign (nothing, an operator, an opening bracket or a keyword
/// before it) rather than a binary operator.
pub fn is_sign(tokens: &[Token], i: usize) -> bool {
    match i.checked_sub(1).map(|j| tokens[j]) {
        None => true,
        Some(p) => match p.kind {
            Kind::Op | Kind::Open => true,
            Kind::Name => KEYWORDS.contains(&p.text) || p.text == "is",
            Kind::Str | Kind::Num | Kind::Close => false,
        },
    }
}

/// Whether token `i` ends an operand of `~` at its own depth (`block`: the tag is a
/// statement, whose first word is its name).
fn ends_operand(tokens: &[Token], i: usize, block: bool) -> bool {
    let t = tokens[i];
    match t.kind {
        _ if block && i == 0 => true,
        Kind::Op if t.text == "-" || t.text == "+" => !is_sign(tokens, i),
        Kind::Op => LOOSER_OPS.contains(&t.text),
        // `is not none` is a test, part of the operand.
        Kind::Name if t.text == "not" => i == 0 || tokens[i - 1].text != "is",
        Kind::Name => KEYWORDS.contains(&t.text),
        _ => false,
    }
}

/// The operands of the binary operator at `i` (`~` or `+`), as token ranges: the left one
/// back to the nearest looser operator, opening bracket or statement name, the right one on to
/// the next.
pub fn operands(tag: &Tag, i: usize) -> (std::ops::Range<usize>, std::ops::Range<usize>) {
    let tokens = &tag.tokens;
    let d = tokens[i].depth;
    let mut first = i;
    while first > 0 {
        let p = &tokens[first - 1];
        if p.depth < d || (p.depth == d && ends_operand(tokens, first - 1, tag.block)) {
            break;
        }
        first -= 1;
    }
    let mut last = i + 1;
    while last < tokens.len() {
        let n = &tokens[last];
        let operand_start = last == i + 1;
        if n.depth < d || (n.depth == d && !operand_start && ends_operand(tokens, last, tag.block))
        {
            break;
        }
        last += 1;
    }
    (first..i, i + 1..last)
}
