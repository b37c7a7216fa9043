//! Jinja2's `~` joins Python's `str()` of its operands (`None`, `True`, `1e-05`, `['a']`);
//! minijinja's joins its own printing of them (`none`, `true`, `0.00001`, `["a"]`). minijinja
//! has no hook for the operator, so before compiling, each operand of `~` is rewritten
//! `(operand)|string` — `string` being Python's `str()` here (`python`) — which leaves strings as
//! they are and prints everything else as Python does.
//!
//! The rewrite lexes the expressions of `{{ … }}` and `{% … %}` tags (string literals, numbers,
//! names, operators, brackets; comments and raw blocks are left alone) and finds each operand by
//! Jinja2's precedence: `~` binds more loosely than `*`, `/`, `%`, `**`, unary signs, filters,
//! tests, attribute access, subscripts and calls, and more tightly than binary `+` and `-`,
//! comparisons, `in`, `not`, `and`, `or`, the conditional expression, `,`, `:` and `=`. Only
//! brackets and spaces are added, never a line, so errors keep their line numbers.

use super::lex::{self, Kind};

/// `source` with every operand of `~` printed as Python prints it.
pub fn python_tilde(source: &str) -> String {
    let mut inserts: Vec<(usize, bool)> = Vec::new(); // (offset, is_closing)
    for tag in lex::tags(source) {
        for (i, t) in tag.tokens.iter().enumerate() {
            if !(t.kind == Kind::Op && t.text == "~") {
                continue;
            }
            let (left, right) = lex::operands(&tag, i);
            for r in [left, right] {
                if !r.is_empty() {
                    inserts.push((tag.tokens[r.start].start, false));
                    inserts.push((tag.tokens[r.end - 1].end, true));
                }
            }
        }
    }
    if inserts.is_empty() {
        return source.to_string();
    }
    inserts.sort_unstable();
    inserts.dedup();
    let mut out = String::with_capacity(source.len() + inserts.len() * 5);
    let mut from = 0;
    for (offset, closing) in inserts {
        out.push_str(&source[from..offset]);
        out.push_str(if closing { ")|string" } else { "(" });
        from = offset;
    }
    out.push_str(&source[from..]);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_operand_of_tilde_is_printed_by_python_str() {
        let cases = [
            ("{{ a ~ b }}", "{{ (a)|string ~ (b)|string }}"),
            (
                "{{- ' ' + name ~ '=' ~ p[f] -}}",
                "{{- ' ' + (name)|string ~ ('=')|string ~ (p[f])|string -}}",
            ),
            (
                "{% set x = a.b(1, c ~ d)|join(', ') ~ -n * 2 if y else z %}",
                "{% set x = (a.b(1, (c)|string ~ (d)|string)|join(', '))|string ~ (-n * 2)|string if y else z %}",
            ),
            (
                "{% for c in call['n'] ~ set if do ~ 'a' %}",
                "{% for c in (call['n'])|string ~ (set)|string if (do)|string ~ ('a')|string %}",
            ),
            (
                "{% if x is not none ~ 'k' in y %}",
                "{% if (x is not none)|string ~ ('k')|string in y %}",
            ),
            ("{{ '~}}' ~ {'a': {'b': 1}} }}", "{{ ('~}}')|string ~ ({'a': {'b': 1}})|string }}"),
            ("{# a ~ b #}{% raw %}{{ a ~ b }}{% endraw %}", "{# a ~ b #}{% raw %}{{ a ~ b }}{% endraw %}"),
            ("{{ 1e-5 ~ x - 1 }}", "{{ (1e-5)|string ~ (x)|string - 1 }}"),
            ("no tags ~ here", "no tags ~ here"),
        ];
        for (src, want) in cases {
            assert_eq!(python_tilde(src), want, "{src}");
        }
    }
}
