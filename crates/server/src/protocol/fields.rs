//! Which top-level request fields a route accepts.
//!
//! A field Tessera does not honour must not be dropped silently when it changes what the output
//! means (`tools`, vLLM's `guided_whitespace_pattern`, a misspelled `max_token`…): the
//! client would get an answer that looks right and is not what it asked for. So every top-level
//! field of a request body is one of:
//! - honoured: a field of the route's request types (read from the types
//!   themselves, so this list cannot drift from what is parsed);
//! - accepted and ignored, because it does not change the output: `IGNORED`;
//! - accepted only at the value that means "nothing" (the deprecated `functions: []`, …):
//!   the route's `NoOp` list (each endpoint declares its `Route` next to its request types),
//!   refused with a message saying what is unsupported otherwise;
//! - anything else: a 400 naming it (`param`).
//!
//! A `null` value counts as absent (several SDKs send unset fields as `null`).

use serde::de::{self, Deserialize, Deserializer, Visitor};
use serde_json::{Map, Value};

use crate::base::parse_body;
use crate::base::ApiError;

/// Fields accepted and ignored on every route: they do not change the output. `user` and
/// `safety_identifier` identify end users for abuse monitoring; `metadata` tags a request;
/// `store` (chat, completions) asks OpenAI to keep the result for its dashboards;
/// `service_tier` picks a price class; `prompt_cache_key` / `prompt_cache_retention` are
/// caching hints (Tessera caches prefixes by itself).
pub const IGNORED: &[&str] = &[
    "user",
    "safety_identifier",
    "metadata",
    "store",
    "service_tier",
    "prompt_cache_key",
    "prompt_cache_retention",
];

/// A field accepted only at a value that leaves the output as it is.
#[derive(Debug)]
pub struct NoOp {
    pub key: &'static str,
    pub accepts: fn(&Value) -> bool,
    /// Why another value is refused (empty: no value is refused).
    pub why: &'static str,
}

/// Accepts an empty list.
pub fn empty_list(v: &Value) -> bool {
    v.as_array().is_some_and(Vec::is_empty)
}

/// Accepts `"none"` or `"auto"`.
pub fn none_or_auto(v: &Value) -> bool {
    matches!(v.as_str(), Some("none" | "auto"))
}

/// Accepts any value.
pub fn any(_: &Value) -> bool {
    true
}

/// What a route accepts beyond the fields of its request types: the no-op fields (the ignored
/// ones, `IGNORED`, are the same for every route). Each endpoint declares its own next to its
/// request types.
#[derive(Clone, Copy, Debug)]
pub struct Route {
    no_op: &'static [NoOp],
}

impl Route {
    /// A route accepting `no_op` at their no-op values.
    pub const fn new(no_op: &'static [NoOp]) -> Route {
        Route { no_op }
    }

    fn no_op(self) -> &'static [NoOp] {
        self.no_op
    }
}

/// The fields `route` accepts beyond its typed ones, with what it does with each: the
/// ignored ones, then its no-op ones (accepted only at the value that changes nothing; the text
/// says what else is refused). The OpenAPI document lists them from here.
pub fn untyped_fields(route: Route) -> impl Iterator<Item = (&'static str, &'static str)> {
    let ignored = IGNORED
        .iter()
        .map(|&k| (k, "Accepted and ignored: it does not change the output."));
    let no_op = route.no_op().iter().map(|n| {
        let why = if n.why.is_empty() {
            "Accepted and ignored: it changes nothing on this route."
        } else {
            n.why
        };
        (n.key, why)
    });
    ignored.chain(no_op)
}

/// Refuses a top-level field of `body` that `route` neither honours (`honoured`, the fields of
/// its request types), nor ignores harmlessly, nor gets at a no-op value.
pub fn check(body: &[u8], route: Route, honoured: &[&[&str]]) -> Result<(), ApiError> {
    let map: Map<String, Value> = parse_body(body)?;
    for (key, value) in &map {
        if value.is_null()
            || honoured.iter().any(|h| h.contains(&key.as_str()))
            || IGNORED.contains(&key.as_str())
        {
            continue;
        }
        match route.no_op().iter().find(|n| n.key == key) {
            Some(n) if (n.accepts)(value) => {}
            Some(n) => return Err(ApiError::invalid(key, format!("`{key}`: {}", n.why))),
            None => {
                return Err(ApiError::invalid(
                    key,
                    format!(
                        "unsupported field `{key}`: this server does not honour it, and \
                         ignoring it could change what the output means"
                    ),
                ))
            }
        }
    }
    Ok(())
}

/// The field names of a `#[derive(Deserialize)]` struct, as serde's derive lists them.
pub fn struct_fields<'de, T: Deserialize<'de>>() -> &'static [&'static str] {
    let mut fields: &'static [&'static str] = &[];
    // The introspector always fails after noting the fields: the error is expected.
    let _ = T::deserialize(Introspect {
        fields: &mut fields,
    });
    fields
}

/// A deserializer that only records the field list a struct asks for.
struct Introspect<'a> {
    fields: &'a mut &'static [&'static str],
}

impl<'de> Deserializer<'de> for Introspect<'_> {
    type Error = de::value::Error;

    fn deserialize_any<V: Visitor<'de>>(self, _: V) -> Result<V::Value, Self::Error> {
        Err(de::Error::custom("not a struct"))
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        fields: &'static [&'static str],
        _visitor: V,
    ) -> Result<V::Value, Self::Error> {
        *self.fields = fields;
        Err(de::Error::custom("fields recorded"))
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf
        option unit unit_struct newtype_struct seq tuple tuple_struct map enum identifier
        ignored_any
    }
}
