//! Python's semantics where minijinja's differ from Jinja2's in Python, for the constructs chat
//! templates use:
//!
//! - values print as Python's `str()` prints them (`None`, `True`, `['a', 1]`, `{'k': 'v'}`,
//!   `1e-05`), in `{{ … }}`, through `~` (`tilde`) and the filters `string`, `join`, `upper`,
//!   `lower`, `capitalize`, `title`, `trim` and `replace`;
//! - an absent `tools` or `documents` is Python's `None`, which is not iterable (a template
//!   that loops over tools it was not given fails, as in transformers); `is none` holds for it
//!   (`== none` does not: no official template compares so);
//! - `map`, `select`, `reject`, `selectattr` and `rejectattr` return generators: iterable once,
//!   no length, not JSON-serializable, always true; given a false value (`None`) they yield
//!   nothing;
//! - the tests `iterable`, `sequence` (strings and mappings are sequences), `number` (a bool is a
//!   number) and `none` answer as Python's, and `length` of an undefined value is 0.

use std::fmt::Write as _;
use std::sync::{Arc, Mutex};

use minijinja::value::{Enumerator, Object, ObjectRepr, Rest, Value, ValueKind};
use minijinja::{Environment, Error, ErrorKind, State};

/// Python's `None` where minijinja's `none` would behave otherwise: not iterable.
#[derive(Debug)]
struct PyNone;

impl Object for PyNone {
    fn repr(self: &Arc<Self>) -> ObjectRepr {
        ObjectRepr::Plain
    }

    fn is_true(self: &Arc<Self>) -> bool {
        false
    }

    fn render(self: &Arc<Self>, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("None")
    }
}

/// Python's `None` for a variable the caller did not give (`tools`, `documents`).
pub fn none() -> Value {
    Value::from_object(PyNone)
}

/// Whether `v` is `None` (minijinja's or ours).
pub fn is_none(v: &Value) -> bool {
    v.is_none() || v.downcast_object_ref::<PyNone>().is_some()
}

/// A Python generator: what Jinja2's `map`, `select` and friends return.
#[derive(Debug)]
struct Generator(Mutex<Vec<Value>>);

impl Object for Generator {
    fn repr(self: &Arc<Self>) -> ObjectRepr {
        ObjectRepr::Iterable
    }

    /// The items, once: a second pass finds the generator exhausted.
    fn enumerate(self: &Arc<Self>) -> Enumerator {
        let items = match self.0.lock() {
            Ok(mut items) => std::mem::take(&mut *items),
            Err(_) => Vec::new(),
        };
        Enumerator::Values(items)
    }

    fn enumerator_len(self: &Arc<Self>) -> Option<usize> {
        None
    }

    fn is_true(self: &Arc<Self>) -> bool {
        true
    }

    fn render(self: &Arc<Self>, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("<generator object>")
    }
}

/// Whether `v` is one of our generators.
pub fn is_generator(v: &Value) -> bool {
    v.downcast_object_ref::<Generator>().is_some()
}

fn generator(items: Vec<Value>) -> Value {
    Value::from_object(Generator(Mutex::new(items)))
}

/// One of Jinja2's `map` / `select` family over `v`: its items in a generator; nothing for a
/// false value (`None`, undefined, empty), which Jinja2 does not iterate.
fn lazily(
    v: Value,
    filter: impl FnOnce(Value) -> Result<Vec<Value>, Error>,
) -> Result<Value, Error> {
    if !v.is_true() {
        return Ok(generator(Vec::new()));
    }
    filter(v).map(generator)
}

/// Python's `repr(float)`: the shortest text that reads back as the same float, in fixed
/// notation for exponents from -4 to 15 and in scientific notation (`1e-05`, `1e+16`) otherwise.
pub fn float_repr(f: f64) -> String {
    if f.is_nan() {
        return "nan".into();
    }
    if f.is_infinite() {
        return if f > 0.0 { "inf" } else { "-inf" }.into();
    }
    if f == 0.0 {
        return if f.is_sign_negative() { "-0.0" } else { "0.0" }.into();
    }
    // Rust's `{:e}` is the shortest round-tripping form: `-1.2345e-7`.
    let sci = format!("{:e}", f.abs());
    let (mantissa, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let digits: String = mantissa.chars().filter(char::is_ascii_digit).collect();
    let sign = if f < 0.0 { "-" } else { "" };
    if (-4..16).contains(&exp) {
        let point = exp + 1;
        if point <= 0 {
            let zeros = "0".repeat((-point) as usize);
            format!("{sign}0.{zeros}{digits}")
        } else {
            let point = point as usize;
            let int: String = if digits.len() > point {
                digits[..point].to_string()
            } else {
                format!("{digits:0<point$}")
            };
            let frac = digits.get(point..).filter(|s| !s.is_empty()).unwrap_or("0");
            format!("{sign}{int}.{frac}")
        }
    } else {
        let exp_sign = if exp < 0 { '-' } else { '+' };
        format!("{sign}{mantissa}e{exp_sign}{:02}", exp.abs())
    }
}

/// Whether Python's `str.isprintable` holds for `c` (control, format and separator characters
/// other than the space are not printable; unassigned code points are not told apart).
fn printable(c: char) -> bool {
    let u = c as u32;
    !(u < 0x20
        || (0x7f..=0xa0).contains(&u)
        || u == 0xad
        || (0x2000..=0x200f).contains(&u)
        || (0x2028..=0x202f).contains(&u)
        || (0x205f..=0x206f).contains(&u)
        || u == 0x3000
        || u == 0xfeff
        || (0xd800..=0xf8ff).contains(&u)
        || (0xfff9..=0xfffb).contains(&u)
        || u >= 0xf0000)
}

/// Python's `repr(str)`.
fn str_repr(s: &str, out: &mut String) {
    let quote = if s.contains('\'') && !s.contains('"') {
        '"'
    } else {
        '\''
    };
    out.push(quote);
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c == quote => {
                out.push('\\');
                out.push(c);
            }
            c if printable(c) => out.push(c),
            c if (c as u32) < 0x100 => {
                let _ = write!(out, "\\x{:02x}", c as u32);
            }
            c if (c as u32) < 0x10000 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => {
                let _ = write!(out, "\\U{:08x}", c as u32);
            }
        }
    }
    out.push(quote);
}

/// Python's `repr()` of a value.
fn repr(v: &Value, out: &mut String) -> Result<(), Error> {
    match v.kind() {
        ValueKind::String => str_repr(v.as_str().unwrap_or_default(), out),
        ValueKind::Seq => {
            out.push('[');
            for (i, item) in v.try_iter()?.enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                repr(&item, out)?;
            }
            out.push(']');
        }
        ValueKind::Map => {
            out.push('{');
            for (i, key) in v.try_iter()?.enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                repr(&key, out)?;
                out.push_str(": ");
                repr(&v.get_item(&key)?, out)?;
            }
            out.push('}');
        }
        _ => out.push_str(&str_of(v)?),
    }
    Ok(())
}

/// Python's `str()` of a value, as Jinja2 prints it.
pub fn str_of(v: &Value) -> Result<String, Error> {
    Ok(match v.kind() {
        ValueKind::Undefined => String::new(),
        ValueKind::None => "None".into(),
        ValueKind::Bool => if v.is_true() { "True" } else { "False" }.into(),
        ValueKind::Number if !v.is_integer() => float_repr(f64::try_from(v.clone())?),
        ValueKind::String => v.as_str().unwrap_or_default().to_string(),
        ValueKind::Seq | ValueKind::Map => {
            let mut out = String::new();
            repr(v, &mut out)?;
            out
        }
        _ => v.to_string(),
    })
}

/// Jinja2's `join(d='', attribute=None)`: the items' `str()` joined by `d`.
fn join(value: &Value, d: Option<&str>, kwargs: minijinja::value::Kwargs) -> Result<String, Error> {
    let attribute: Option<String> = kwargs.get("attribute")?;
    kwargs.assert_all_used()?;
    if is_none(value) {
        return Err(Error::new(
            ErrorKind::InvalidOperation,
            "'NoneType' object is not iterable",
        ));
    }
    let mut out = String::new();
    for (i, item) in value.try_iter()?.enumerate() {
        if i > 0 {
            out.push_str(d.unwrap_or_default());
        }
        let item = match &attribute {
            Some(path) => path
                .split('.')
                .try_fold(item, |v, part| match part.parse::<i64>() {
                    Ok(i) => v.get_item(&Value::from(i)),
                    Err(_) => v.get_attr(part),
                })?,
            None => item,
        };
        out.push_str(&str_of(&item)?);
    }
    Ok(out)
}

/// Python's `str.isspace`, which `strip()` strips (Rust's whitespace and `\x1c`–`\x1f`).
fn py_space(c: char) -> bool {
    c.is_whitespace() || ('\u{1c}'..='\u{1f}').contains(&c)
}

/// Jinja2's `trim(chars=None)`: `str(value).strip(chars)`.
fn trim(v: &Value, chars: Option<&str>) -> Result<String, Error> {
    let s = str_of(v)?;
    Ok(match chars {
        Some(chars) => s.trim_matches(|c| chars.contains(c)).to_string(),
        None => s.trim_matches(py_space).to_string(),
    })
}

/// Jinja2's `capitalize`: the first character upper case, the rest lower case.
fn capitalize(v: &Value) -> Result<String, Error> {
    let s = str_of(v)?;
    let mut chars = s.chars();
    Ok(match chars.next() {
        Some(first) => first
            .to_uppercase()
            .chain(chars.as_str().to_lowercase().chars())
            .collect(),
        None => String::new(),
    })
}

/// Jinja2's `title`: each word (split at `-`, whitespace and opening brackets) capitalized.
fn title(v: &Value) -> Result<String, Error> {
    let s = str_of(v)?;
    let mut out = String::with_capacity(s.len());
    let mut word_start = true;
    for c in s.chars() {
        let sep = c == '-' || py_space(c) || matches!(c, '(' | '{' | '[' | '<');
        if word_start && !sep {
            out.extend(c.to_uppercase());
        } else {
            out.extend(c.to_lowercase());
        }
        word_start = sep;
    }
    Ok(out)
}

/// Jinja2's `replace(old, new, count=None)` on `str(value)`.
fn replace(v: &Value, old: &Value, new: &Value, count: Option<usize>) -> Result<String, Error> {
    let (s, old, new) = (str_of(v)?, str_of(old)?, str_of(new)?);
    Ok(match count {
        Some(n) => s.replacen(&old, &new, n),
        None => s.replace(&old, &new),
    })
}

/// Jinja2's `length`: `len(value)`, 0 for an undefined value.
fn length(v: &Value) -> Result<usize, Error> {
    if v.is_undefined() {
        return Ok(0);
    }
    v.len().ok_or_else(|| {
        Error::new(
            ErrorKind::InvalidOperation,
            format!("object of type {} has no len()", v.kind()),
        )
    })
}

/// Python's `iter(value)` succeeds: strings, sequences, mappings, generators, undefined.
fn is_iterable(v: &Value) -> bool {
    !is_none(v) && v.try_iter().is_ok()
}

/// Installs the printing, filters and tests above into `env`.
pub fn install(env: &mut Environment<'static>) {
    env.set_formatter(|out, _state, value| {
        let written = match value.as_str() {
            Some(s) => out.write_str(s),
            None => out.write_str(&str_of(value)?),
        };
        written.map_err(|e| Error::new(ErrorKind::WriteFailure, e.to_string()))
    });
    env.add_filter("string", |v: &Value| str_of(v));
    env.add_filter("join", join);
    env.add_filter("length", length);
    env.add_filter("upper", |v: &Value| str_of(v).map(|s| s.to_uppercase()));
    env.add_filter("lower", |v: &Value| str_of(v).map(|s| s.to_lowercase()));
    env.add_filter("capitalize", capitalize);
    env.add_filter("title", title);
    env.add_filter("trim", trim);
    env.add_filter("replace", replace);
    env.add_filter("count", length);
    env.add_filter("map", |state: &State, v: Value, args: Rest<Value>| {
        lazily(v, |v| minijinja::filters::map(state, v, args))
    });
    env.add_filter(
        "select",
        |state: &State, v: Value, test: Option<String>, args: Rest<Value>| {
            lazily(v, |v| {
                minijinja::filters::select(state, v, test.map(Into::into), args)
            })
        },
    );
    env.add_filter(
        "reject",
        |state: &State, v: Value, test: Option<String>, args: Rest<Value>| {
            lazily(v, |v| {
                minijinja::filters::reject(state, v, test.map(Into::into), args)
            })
        },
    );
    env.add_filter(
        "selectattr",
        |state: &State, v: Value, attr: String, test: Option<String>, args: Rest<Value>| {
            lazily(v, |v| {
                minijinja::filters::selectattr(state, v, attr.into(), test.map(Into::into), args)
            })
        },
    );
    env.add_filter(
        "rejectattr",
        |state: &State, v: Value, attr: String, test: Option<String>, args: Rest<Value>| {
            lazily(v, |v| {
                minijinja::filters::rejectattr(state, v, attr.into(), test.map(Into::into), args)
            })
        },
    );
    env.add_test("none", |v: &Value| is_none(v));
    env.add_test("iterable", |v: &Value| is_iterable(v));
    env.add_test("sequence", |v: &Value| {
        matches!(
            v.kind(),
            ValueKind::String | ValueKind::Seq | ValueKind::Map
        )
    });
    env.add_test("number", |v: &Value| {
        matches!(v.kind(), ValueKind::Number | ValueKind::Bool)
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn floats_print_as_python_prints_them() {
        for (f, py) in [
            (1.0, "1.0"),
            (-2.5, "-2.5"),
            (0.1, "0.1"),
            (1e-4, "0.0001"),
            (1e-5, "1e-05"),
            (1.5e-7, "1.5e-07"),
            (123456.789, "123456.789"),
            (1e15, "1000000000000000.0"),
            (1e16, "1e+16"),
            (1.2345678901234568e17, "1.2345678901234568e+17"),
            (-0.0, "-0.0"),
        ] {
            assert_eq!(float_repr(f), py, "{f}");
        }
    }

    #[test]
    fn values_print_as_python_str_prints_them() {
        let v = Value::from_serialize(serde_json::json!(
            {"a": [1, 2.0, true, null, "it's"], "b\n": {"c": "say \"hi\""}}
        ));
        assert_eq!(
            str_of(&v).expect("prints"),
            "{'a': [1, 2.0, True, None, \"it's\"], 'b\\n': {'c': 'say \"hi\"'}}"
        );
        assert_eq!(str_of(&none()).expect("prints"), "None");
        assert_eq!(
            title(&Value::from("it's a-b (c)")).expect("titles"),
            "It's A-B (C)"
        );
        assert_eq!(
            capitalize(&Value::from("hELLO")).expect("capitalizes"),
            "Hello"
        );
        assert_eq!(str_of(&Value::UNDEFINED).expect("prints"), "");
        let mut out = String::new();
        str_repr("a\u{7}\u{a0}é\u{200b}", &mut out);
        assert_eq!(out, "'a\\x07\\xa0é\\u200b'");
    }
}
