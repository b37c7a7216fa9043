//! Metadata values and the ordered key -> value map.
//!
//! Arrays are typed (`Array::U32(Vec<u32>)`, ...) rather than `Vec<Value>` because the
//! tokenizer arrays hold ~262k entries: a typed vector is one allocation and needs no
//! per-element tag. [`Metadata`] keeps file order (for dumps and round trips) plus a hash
//! index for lookups. It remembers the file it came from so getter errors can name it.

use std::collections::HashMap;
use std::fmt;
use std::path::PathBuf;

use crate::GgufError;

/// One metadata value.
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    U8(u8),
    I8(i8),
    U16(u16),
    I16(i16),
    U32(u32),
    I32(i32),
    U64(u64),
    I64(i64),
    F32(f32),
    F64(f64),
    Bool(bool),
    String(String),
    Array(Array),
}

/// A homogeneous metadata array. Nested arrays may differ in element type from each other.
#[derive(Clone, Debug, PartialEq)]
pub enum Array {
    U8(Vec<u8>),
    I8(Vec<i8>),
    U16(Vec<u16>),
    I16(Vec<i16>),
    U32(Vec<u32>),
    I32(Vec<i32>),
    U64(Vec<u64>),
    I64(Vec<i64>),
    F32(Vec<f32>),
    F64(Vec<f64>),
    Bool(Vec<bool>),
    String(Vec<String>),
    Array(Vec<Array>),
}

/// Calls `$m!(variant)` style dispatch over every array variant, binding the vector to `$v`.
macro_rules! each_array {
    ($a:expr, $v:ident => $e:expr) => {
        match $a {
            Array::U8($v) => $e,
            Array::I8($v) => $e,
            Array::U16($v) => $e,
            Array::I16($v) => $e,
            Array::U32($v) => $e,
            Array::I32($v) => $e,
            Array::U64($v) => $e,
            Array::I64($v) => $e,
            Array::F32($v) => $e,
            Array::F64($v) => $e,
            Array::Bool($v) => $e,
            Array::String($v) => $e,
            Array::Array($v) => $e,
        }
    };
}

impl Array {
    pub fn len(&self) -> usize {
        each_array!(self, v => v.len())
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Name of the element type, e.g. `"string"`.
    pub fn elem_type_name(&self) -> &'static str {
        match self {
            Array::U8(_) => "u8",
            Array::I8(_) => "i8",
            Array::U16(_) => "u16",
            Array::I16(_) => "i16",
            Array::U32(_) => "u32",
            Array::I32(_) => "i32",
            Array::U64(_) => "u64",
            Array::I64(_) => "i64",
            Array::F32(_) => "f32",
            Array::F64(_) => "f64",
            Array::Bool(_) => "bool",
            Array::String(_) => "string",
            Array::Array(_) => "array",
        }
    }
}

impl Value {
    /// Name of the value type, e.g. `"u32"` or `"array"`.
    pub fn type_name(&self) -> &'static str {
        match self {
            Value::U8(_) => "u8",
            Value::I8(_) => "i8",
            Value::U16(_) => "u16",
            Value::I16(_) => "i16",
            Value::U32(_) => "u32",
            Value::I32(_) => "i32",
            Value::U64(_) => "u64",
            Value::I64(_) => "i64",
            Value::F32(_) => "f32",
            Value::F64(_) => "f64",
            Value::Bool(_) => "bool",
            Value::String(_) => "string",
            Value::Array(_) => "array",
        }
    }

    /// The value as a wide integer, if it is of any integer type.
    pub fn as_integer(&self) -> Option<i128> {
        Some(match *self {
            Value::U8(v) => v.into(),
            Value::I8(v) => v.into(),
            Value::U16(v) => v.into(),
            Value::I16(v) => v.into(),
            Value::U32(v) => v.into(),
            Value::I32(v) => v.into(),
            Value::U64(v) => v.into(),
            Value::I64(v) => v.into(),
            _ => return None,
        })
    }

    /// A short description for error messages: type plus the value for scalars.
    fn describe(&self) -> String {
        match self {
            Value::String(_) => "string".to_owned(),
            Value::Array(a) => format!("array<{}> of {}", a.elem_type_name(), a.len()),
            v => format!("{} ({v})", v.type_name()),
        }
    }
}

/// Arrays longer than this are shown as their head plus a count.
const DISPLAY_ARRAY_ITEMS: usize = 8;

impl fmt::Display for Value {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Value::U8(v) => write!(f, "{v}"),
            Value::I8(v) => write!(f, "{v}"),
            Value::U16(v) => write!(f, "{v}"),
            Value::I16(v) => write!(f, "{v}"),
            Value::U32(v) => write!(f, "{v}"),
            Value::I32(v) => write!(f, "{v}"),
            Value::U64(v) => write!(f, "{v}"),
            Value::I64(v) => write!(f, "{v}"),
            Value::F32(v) => write!(f, "{v}"),
            Value::F64(v) => write!(f, "{v}"),
            Value::Bool(v) => write!(f, "{v}"),
            Value::String(v) => write!(f, "{v:?}"),
            Value::Array(a) => write!(f, "{a}"),
        }
    }
}

/// Shows at most `DISPLAY_ARRAY_ITEMS` elements, so a 262k-entry vocabulary prints as one line.
impl fmt::Display for Array {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fn list<T: fmt::Debug>(f: &mut fmt::Formatter<'_>, v: &[T]) -> fmt::Result {
            write!(f, "[")?;
            for (i, x) in v.iter().take(DISPLAY_ARRAY_ITEMS).enumerate() {
                let sep = if i == 0 { "" } else { ", " };
                write!(f, "{sep}{x:?}")?;
            }
            if v.len() > DISPLAY_ARRAY_ITEMS {
                write!(f, ", ... ({} items)", v.len())?;
            }
            write!(f, "]")
        }
        each_array!(self, v => list(f, v))
    }
}

macro_rules! impl_from {
    ($($t:ty => $var:ident),*) => {$(
        impl From<$t> for Value {
            fn from(v: $t) -> Self { Value::$var(v) }
        }
        impl From<Vec<$t>> for Array {
            fn from(v: Vec<$t>) -> Self { Array::$var(v) }
        }
        impl From<Vec<$t>> for Value {
            fn from(v: Vec<$t>) -> Self { Value::Array(Array::$var(v)) }
        }
    )*};
}
impl_from!(u8 => U8, i8 => I8, u16 => U16, i16 => I16, u32 => U32, i32 => I32, u64 => U64,
    i64 => I64, f32 => F32, f64 => F64, bool => Bool, String => String);

impl From<&str> for Value {
    fn from(v: &str) -> Self {
        Value::String(v.to_owned())
    }
}

impl From<Array> for Value {
    fn from(v: Array) -> Self {
        Value::Array(v)
    }
}

/// Ordered metadata map. Keys are unique.
#[derive(Clone, Debug, Default)]
pub struct Metadata {
    entries: Vec<(String, Value)>,
    index: HashMap<String, usize>,
    /// The file the metadata was read from, named in getter errors.
    path: Option<PathBuf>,
}

impl PartialEq for Metadata {
    fn eq(&self, other: &Self) -> bool {
        self.entries == other.entries
    }
}

impl Metadata {
    pub fn new() -> Self {
        Self::default()
    }

    /// Inserts or replaces `key`; a replaced key keeps its position. Returns the old value.
    pub fn insert(&mut self, key: impl Into<String>, value: Value) -> Option<Value> {
        let key = key.into();
        if let Some(&i) = self.index.get(&key) {
            return Some(std::mem::replace(&mut self.entries[i].1, value));
        }
        self.index.insert(key.clone(), self.entries.len());
        self.entries.push((key, value));
        None
    }

    pub(crate) fn set_path(&mut self, path: PathBuf) {
        self.path = Some(path);
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    pub fn contains_key(&self, key: &str) -> bool {
        self.index.contains_key(key)
    }

    pub fn get(&self, key: &str) -> Option<&Value> {
        self.index.get(key).map(|&i| &self.entries[i].1)
    }

    /// Entries in file order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &Value)> {
        self.entries.iter().map(|(k, v)| (k.as_str(), v))
    }

    /// Looks `key` up and converts it with `conv`; `None` from `conv` is a type error.
    fn typed<'a, T>(
        &'a self,
        key: &str,
        expected: &'static str,
        conv: impl FnOnce(&'a Value) -> Option<T>,
    ) -> Result<Option<T>, GgufError> {
        let Some(v) = self.get(key) else {
            return Ok(None);
        };
        match conv(v) {
            Some(t) => Ok(Some(t)),
            None => Err(GgufError::WrongType {
                path: self.path.clone(),
                key: key.to_owned(),
                expected,
                found: v.describe(),
            }),
        }
    }

    fn required<T>(&self, key: &str, got: Result<Option<T>, GgufError>) -> Result<T, GgufError> {
        got?.ok_or_else(|| GgufError::MissingKey {
            path: self.path.clone(),
            key: key.to_owned(),
        })
    }

    /// Any integer value that fits in a `u32`.
    pub fn get_u32(&self, key: &str) -> Result<Option<u32>, GgufError> {
        self.typed(key, "u32", |v| {
            v.as_integer().and_then(|i| u32::try_from(i).ok())
        })
    }

    /// Any integer value that fits in a `u64`.
    pub fn get_u64(&self, key: &str) -> Result<Option<u64>, GgufError> {
        self.typed(key, "u64", |v| {
            v.as_integer().and_then(|i| u64::try_from(i).ok())
        })
    }

    /// Any integer value that fits in an `i64`.
    pub fn get_i64(&self, key: &str) -> Result<Option<i64>, GgufError> {
        self.typed(key, "i64", |v| {
            v.as_integer().and_then(|i| i64::try_from(i).ok())
        })
    }

    /// An `f32`, an `f64` (rounded) or any integer (converted).
    pub fn get_f32(&self, key: &str) -> Result<Option<f32>, GgufError> {
        self.typed(key, "f32", |v| match *v {
            Value::F32(x) => Some(x),
            Value::F64(x) => Some(x as f32),
            _ => v.as_integer().map(|i| i as f32),
        })
    }

    pub fn get_bool(&self, key: &str) -> Result<Option<bool>, GgufError> {
        self.typed(key, "bool", |v| match v {
            Value::Bool(b) => Some(*b),
            _ => None,
        })
    }

    pub fn get_str(&self, key: &str) -> Result<Option<&str>, GgufError> {
        self.typed(key, "string", |v| match v {
            Value::String(s) => Some(s.as_str()),
            _ => None,
        })
    }

    pub fn get_array(&self, key: &str) -> Result<Option<&Array>, GgufError> {
        self.typed(key, "array", |v| match v {
            Value::Array(a) => Some(a),
            _ => None,
        })
    }

    pub fn require_u32(&self, key: &str) -> Result<u32, GgufError> {
        self.required(key, self.get_u32(key))
    }

    pub fn require_u64(&self, key: &str) -> Result<u64, GgufError> {
        self.required(key, self.get_u64(key))
    }

    pub fn require_f32(&self, key: &str) -> Result<f32, GgufError> {
        self.required(key, self.get_f32(key))
    }

    pub fn require_bool(&self, key: &str) -> Result<bool, GgufError> {
        self.required(key, self.get_bool(key))
    }

    pub fn require_str(&self, key: &str) -> Result<&str, GgufError> {
        self.required(key, self.get_str(key))
    }

    pub fn require_array(&self, key: &str) -> Result<&Array, GgufError> {
        self.required(key, self.get_array(key))
    }
}
