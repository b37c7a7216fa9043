//! `tojson` as transformers defines it for chat templates: Python's `json.dumps(value,
//! ensure_ascii=False, indent=None, separators=None, sort_keys=False)` with those four options
//! open to the template, and no HTML escaping.
//!
//! As `json.dumps` writes: `", "` and `": "` between items (`","` and `": "` with an indent),
//! keys in the order given, floats as Python's `repr`, `NaN` and `Infinity`, only `"`, `\` and
//! control characters escaped (every non-ASCII character too with `ensure_ascii`). What Python
//! cannot serialize (an undefined value, a generator from `map`, a macro) is an error.

use minijinja::value::{Kwargs, Value, ValueKind};
use minijinja::{Error, ErrorKind};

use super::python;

struct Options {
    ensure_ascii: bool,
    /// The text of one level of indentation; `None`: everything on one line.
    indent: Option<String>,
    item_sep: String,
    key_sep: String,
    sort_keys: bool,
}

fn not_serializable(what: &str) -> Error {
    Error::new(
        ErrorKind::InvalidOperation,
        format!("Object of type {what} is not JSON serializable"),
    )
}

/// The `tojson` filter.
pub fn tojson(value: &Value, kwargs: Kwargs) -> Result<String, Error> {
    let ensure_ascii = kwargs.get::<Option<bool>>("ensure_ascii")?.unwrap_or(false);
    let sort_keys = kwargs.get::<Option<bool>>("sort_keys")?.unwrap_or(false);
    let indent = match kwargs.get::<Option<Value>>("indent")? {
        None => None,
        Some(v) if python::is_none(&v) => None,
        Some(v) if v.kind() == ValueKind::String => Some(v.as_str().unwrap_or_default().into()),
        // Python: an int n is n spaces (none below 1).
        Some(v) => Some(" ".repeat(usize::try_from(i64::try_from(v)?.max(0)).unwrap_or(0))),
    };
    let (item_sep, key_sep) = match kwargs.get::<Option<Value>>("separators")? {
        Some(v) if !python::is_none(&v) => {
            let parts: Vec<String> = v
                .try_iter()?
                .map(|p| p.as_str().map(str::to_string))
                .collect::<Option<_>>()
                .ok_or_else(|| {
                    Error::new(
                        ErrorKind::InvalidOperation,
                        "separators must be two strings",
                    )
                })?;
            match <[String; 2]>::try_from(parts) {
                Ok([item, key]) => (item, key),
                Err(_) => {
                    return Err(Error::new(
                        ErrorKind::InvalidOperation,
                        "separators must be two strings",
                    ))
                }
            }
        }
        _ if indent.is_some() => (",".into(), ": ".into()),
        _ => (", ".into(), ": ".into()),
    };
    kwargs.assert_all_used()?;
    let opts = Options {
        ensure_ascii,
        indent,
        item_sep,
        key_sep,
        sort_keys,
    };
    let mut out = String::new();
    write_value(value, &opts, 0, &mut out)?;
    Ok(out)
}

fn write_value(v: &Value, o: &Options, level: usize, out: &mut String) -> Result<(), Error> {
    match v.kind() {
        _ if python::is_none(v) => out.push_str("null"),
        ValueKind::Bool => out.push_str(if v.is_true() { "true" } else { "false" }),
        ValueKind::Number if v.is_integer() => out.push_str(&v.to_string()),
        ValueKind::Number => {
            let f = f64::try_from(v.clone())?;
            out.push_str(&if f.is_nan() {
                "NaN".into()
            } else if f.is_infinite() {
                if f > 0.0 { "Infinity" } else { "-Infinity" }.into()
            } else {
                python::float_repr(f)
            });
        }
        ValueKind::String => write_str(v.as_str().unwrap_or_default(), o.ensure_ascii, out),
        ValueKind::Seq => {
            let items: Vec<Value> = v.try_iter()?.collect();
            write_items(items.len(), o, level, out, '[', ']', |i, out| {
                write_value(&items[i], o, level + 1, out)
            })?;
        }
        ValueKind::Map => {
            let mut entries: Vec<(String, Value)> = Vec::new();
            for key in v.try_iter()? {
                let item = v.get_item(&key)?;
                entries.push((key_text(&key)?, item));
            }
            if o.sort_keys {
                entries.sort_by(|a, b| a.0.cmp(&b.0));
            }
            write_items(entries.len(), o, level, out, '{', '}', |i, out| {
                write_str(&entries[i].0, o.ensure_ascii, out);
                out.push_str(&o.key_sep);
                write_value(&entries[i].1, o, level + 1, out)
            })?;
        }
        ValueKind::Undefined => return Err(not_serializable("Undefined")),
        _ if python::is_generator(v) => return Err(not_serializable("generator")),
        other => return Err(not_serializable(&other.to_string())),
    }
    Ok(())
}

/// A mapping key as `json.dumps` writes it: strings as they are, numbers, booleans and `None`
/// as their JSON text.
fn key_text(key: &Value) -> Result<String, Error> {
    match key.kind() {
        ValueKind::String => Ok(key.as_str().unwrap_or_default().to_string()),
        ValueKind::Number | ValueKind::Bool | ValueKind::None => {
            let mut s = String::new();
            write_value(key, &Options::compact(), 0, &mut s)?;
            Ok(s)
        }
        other => Err(Error::new(
            ErrorKind::InvalidOperation,
            format!("keys must be str, int, float, bool or None, not {other}"),
        )),
    }
}

impl Options {
    fn compact() -> Options {
        Options {
            ensure_ascii: false,
            indent: None,
            item_sep: ", ".into(),
            key_sep: ": ".into(),
            sort_keys: false,
        }
    }
}

/// `open item sep item … close`, one item a line when indenting; empty: `[]` / `{}`.
fn write_items(
    n: usize,
    o: &Options,
    level: usize,
    out: &mut String,
    open: char,
    close: char,
    mut item: impl FnMut(usize, &mut String) -> Result<(), Error>,
) -> Result<(), Error> {
    out.push(open);
    if n > 0 {
        for i in 0..n {
            if i > 0 {
                out.push_str(&o.item_sep);
            }
            if let Some(ind) = &o.indent {
                out.push('\n');
                out.push_str(&ind.repeat(level + 1));
            }
            item(i, out)?;
        }
        if let Some(ind) = &o.indent {
            out.push('\n');
            out.push_str(&ind.repeat(level));
        }
    }
    out.push(close);
    Ok(())
}

/// A JSON string as Python writes it.
fn write_str(s: &str, ensure_ascii: bool, out: &mut String) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            c if (c as u32) < 0x20 || (ensure_ascii && !(' '..='~').contains(&c)) => {
                let mut units = [0u16; 2];
                for u in c.encode_utf16(&mut units) {
                    out.push_str(&format!("\\u{u:04x}"));
                }
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

#[cfg(test)]
mod tests {
    use super::*;
    use minijinja::Environment;

    fn render(src: &str, ctx: serde_json::Value) -> Result<String, Error> {
        let mut env = Environment::new();
        env.add_filter("tojson", tojson);
        python::install(&mut env);
        env.render_str(src, ctx)
    }

    #[test]
    fn options_follow_json_dumps() {
        let ctx = serde_json::json!({"v": {"b": [1, 2.5, null, true], "a": "é\"\u{1}", "e": {}, "l": []}});
        let out = |src: &str| render(src, ctx.clone()).expect("renders");
        assert_eq!(
            out("{{ v | tojson }}"),
            r#"{"b": [1, 2.5, null, true], "a": "é\"\u0001", "e": {}, "l": []}"#
        );
        assert_eq!(
            out("{{ v | tojson(ensure_ascii=true, sort_keys=true, separators=(',', ':')) }}"),
            r#"{"a":"\u00e9\"\u0001","b":[1,2.5,null,true],"e":{},"l":[]}"#
        );
        assert_eq!(
            out("{{ v.b | tojson(indent=2) }}|{{ v.e | tojson(indent='\t') }}"),
            "[\n  1,\n  2.5,\n  null,\n  true\n]|{}"
        );
        assert_eq!(
            out("{{ '😀' | tojson(ensure_ascii=true) }}"),
            r#""\ud83d\ude00""#
        );
        assert_eq!(out("{{ 1e-7 | tojson }}"), "1e-07");
    }

    #[test]
    fn what_python_cannot_serialize_is_an_error() {
        let ctx = serde_json::json!({"v": [{"a": 1}]});
        let e = render("{{ v | map(attribute='a') | tojson }}", ctx.clone()).expect_err("fails");
        assert!(e.to_string().contains("generator"), "{e}");
        assert!(render("{{ nothing | tojson }}", ctx.clone()).is_err());
        assert_eq!(
            render("{{ v | map(attribute='a') | list | tojson }}", ctx).expect("renders"),
            "[1]"
        );
    }
}
