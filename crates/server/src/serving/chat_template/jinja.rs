//! The Jinja environment a chat template runs in: minijinja set up as transformers sets up
//! Python's Jinja2 for `apply_chat_template`.
//!
//! - `trim_blocks` and `lstrip_blocks` on; `{% break %}` and `{% continue %}`;
//! - the globals `raise_exception(message)` and `strftime_now(format)`, and transformers' `tojson`
//!   (`pyjson`);
//! - Python's string, dict and list methods (`.strip()`, `.items()`, …: minijinja-contrib's
//!   `pycompat`), and Python's printing, generators and tests (`python`), also through `~`
//!   (`tilde`);
//! - transformers' `{% generation %}…{% endgeneration %}` (it marks the assistant's tokens and
//!   renders its body unchanged) read as a block that always renders.

use minijinja::{Environment, Error, ErrorKind};

use super::lex::{self, Kind};
use super::strftime::{self, Clock};
use super::{pyjson, python, tilde};

pub const TEMPLATE_NAME: &str = "chat";

/// "line N: what went wrong", from a minijinja error (without its `(in chat:N)` suffix).
pub fn describe(e: &Error) -> String {
    let what = match e.detail() {
        Some(d) => format!("{}: {d}", e.kind()),
        None => e.kind().to_string(),
    };
    match e.line() {
        Some(line) => format!("line {line}: {what}"),
        None => what,
    }
}

/// The environment with `source` compiled as `TEMPLATE_NAME`; a template that does not compile,
/// or that needs what this renderer cannot do (`unsupported`), is an error naming its line.
pub fn environment(source: &str, clock: Clock) -> Result<Environment<'static>, String> {
    if let Some((line, why)) = unsupported(source) {
        return Err(format!("chat template line {line}: {why}"));
    }
    let mut env = Environment::new();
    env.set_trim_blocks(true);
    env.set_lstrip_blocks(true);
    minijinja_contrib::add_to_environment(&mut env);
    env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
    python::install(&mut env);
    env.add_filter("tojson", pyjson::tojson);
    env.add_function("raise_exception", |msg: String| -> Result<String, Error> {
        Err(Error::new(ErrorKind::InvalidOperation, msg))
    });
    env.add_function("strftime_now", move |format: String| {
        strftime::strftime(clock, &format).map_err(|e| Error::new(ErrorKind::InvalidOperation, e))
    });
    env.add_template_owned(
        TEMPLATE_NAME,
        tilde::python_tilde(&generation_as_if(source)),
    )
    .map_err(|e| format!("chat template {}", describe(&e)))?;
    Ok(env)
}

/// Filters whose result is a Python `Markup` string.
const MARKUP_FILTERS: [&str; 4] = ["safe", "e", "escape", "forceescape"];

/// The first construct of `source` this renderer cannot render as Python's Jinja2 does, as its
/// line and the reason: a `Markup` string (`x|safe`) on either side of `+`, which in Python
/// HTML-escapes the other string (`"` becomes `&#34;`) while minijinja joins them as they are.
fn unsupported(source: &str) -> Option<(usize, String)> {
    for tag in lex::tags(source) {
        let t = &tag.tokens;
        for (i, plus) in t.iter().enumerate() {
            if !(plus.kind == Kind::Op && plus.text == "+") || lex::is_sign(t, i) {
                continue;
            }
            let (left, right) = lex::operands(&tag, i);
            let markup = left.chain(right).find(|&k| {
                t[k].depth == plus.depth
                    && t[k].text == "|"
                    && t.get(k + 1)
                        .is_some_and(|f| MARKUP_FILTERS.contains(&f.text))
            });
            if let Some(k) = markup {
                let line = 1 + source[..plus.start].matches('\n').count();
                return Some((
                    line,
                    format!(
                        "`|{}` beside `+`: in Python's Jinja2 a Markup string HTML-escapes the \
                         string added to it (`\"` becomes `&#34;`), which Tessera's renderer \
                         does not reproduce",
                        t[k + 1].text
                    ),
                ));
            }
        }
    }
    None
}

/// `source` with each `{% generation %}` written `{% if true %}` and each `{% endgeneration %}`
/// `{% endif %}`, whitespace control kept: the same text, lines and trimming.
fn generation_as_if(source: &str) -> String {
    let mut out = String::with_capacity(source.len());
    let mut rest = source;
    while let Some(at) = rest.find("{%") {
        out.push_str(&rest[..at]);
        let tag = &rest[at..];
        let body_start = 2 + usize::from(tag[2..].starts_with(['-', '+']));
        let body = &tag[body_start..];
        let word_at = body.len() - body.trim_start().len();
        let word = &body[word_at..];
        let replaced = [("generation", "if true"), ("endgeneration", "endif")]
            .into_iter()
            .find(|(w, _)| {
                word.starts_with(w)
                    && word[w.len()..]
                        .trim_start()
                        .trim_start_matches(['-', '+'])
                        .starts_with("%}")
            });
        match replaced {
            Some((w, with)) => {
                out.push_str(&tag[..body_start + word_at]);
                out.push_str(with);
                rest = &tag[body_start + word_at + w.len()..];
            }
            None => {
                out.push_str("{%");
                rest = &tag[2..];
            }
        }
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generation_blocks_render_their_body() {
        assert_eq!(
            generation_as_if("a{%- generation -%}b{% endgeneration +%}{% if x %}{%generation%}"),
            "a{%- if true -%}b{% endif +%}{% if x %}{%if true%}"
        );
        // Other tags that start alike are left alone.
        assert_eq!(
            generation_as_if("{% set generation_x = 1 %}{% generations %}"),
            "{% set generation_x = 1 %}{% generations %}"
        );
    }

    #[test]
    fn markup_added_with_plus_is_refused_with_its_line() {
        let src = "{{ 'a' ~ x|safe }}\n{{ \"f '\"|safe + name + \"'\"|safe }}";
        let e = environment(src, Clock::System).expect_err("refused");
        assert!(
            e.starts_with("chat template line 2: `|safe` beside `+`"),
            "{e}"
        );
        let e = environment("{% set a = 'x' +\n b|e %}", Clock::System).expect_err("refused");
        assert!(
            e.starts_with("chat template line 1: `|e` beside `+`"),
            "{e}"
        );
        for fine in [
            "{{ x|tojson|safe }}{{ y|e ~ z }}{{ a|length + 1 }}",
            "{{ a + b ~ c|safe }}{{ '|safe + x' }}",
            "text |safe + outside tags",
        ] {
            assert!(environment(fine, Clock::System).is_ok(), "{fine}");
        }
    }

    #[test]
    fn a_template_that_does_not_compile_is_refused_with_its_line() {
        let e = environment("ok\n{% if x %}\n{% frobnicate %}", Clock::System).expect_err("fails");
        assert!(e.starts_with("chat template line 3: syntax error"), "{e}");
    }
}
