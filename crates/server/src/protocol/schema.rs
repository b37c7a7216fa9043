//! The OpenAPI schema of a request body: one object made of the fields of the request types
//! its route parses the same bytes as, and of the fields the route accepts untyped
//! (`fields::untyped_fields`), and no other (`additionalProperties: false`, as `fields::check`
//! answers any other field with a 400). Each endpoint declares its body with `request_body!`
//! next to its request types; `app::openapi` assembles the document.

use utoipa::openapi::schema::{AdditionalProperties, ObjectBuilder, Schema, SchemaType};
use utoipa::openapi::RefOr;

use super::fields::{untyped_fields, Route};

/// One request body: the properties of `parts` (the request types the route parses the same
/// bytes as) and of the fields `route` accepts untyped, and nothing else; `examples` (JSON
/// text) are requests the route serves (a test sends each through the route's parsing).
pub fn body_schema(
    parts: &[RefOr<Schema>],
    route: Route,
    description: &str,
    examples: &[&str],
) -> RefOr<Schema> {
    let mut body = ObjectBuilder::new().description(Some(description)).build();
    body.examples = examples
        .iter()
        .filter_map(|e| serde_json::from_str(e).ok())
        .collect();
    for part in parts {
        if let RefOr::T(Schema::Object(o)) = part {
            body.properties.extend(o.properties.clone());
            body.required.extend(o.required.iter().cloned());
        }
    }
    for (key, why) in untyped_fields(route) {
        if !body.properties.contains_key(key) {
            let any = ObjectBuilder::new()
                .schema_type(SchemaType::AnyValue)
                .description(Some(why))
                .build();
            body.properties.insert(key.to_string(), any.into());
        }
    }
    body.additional_properties = Some(Box::new(AdditionalProperties::FreeForm(false)));
    RefOr::T(Schema::Object(body))
}

/// Declares a request body type for the document: `$name` in it, made of `$part`s.
macro_rules! request_body {
    (
        $ty:ident, $name:literal, $route:expr, $doc:literal, [$($part:ty),+],
        examples: [$($example:literal),+]
    ) => {
        #[doc = $doc]
        pub struct $ty;

        impl $ty {
            /// Requests the route serves, as JSON text.
            pub const EXAMPLES: &[&str] = &[$($example),+];
        }

        impl ::utoipa::PartialSchema for $ty {
            fn schema() -> ::utoipa::openapi::RefOr<::utoipa::openapi::schema::Schema> {
                let parts = [$(<$part as ::utoipa::PartialSchema>::schema()),+];
                $crate::protocol::schema::body_schema(&parts, $route, $doc, Self::EXAMPLES)
            }
        }

        impl ::utoipa::ToSchema for $ty {
            fn name() -> ::std::borrow::Cow<'static, str> {
                ::std::borrow::Cow::Borrowed($name)
            }

            fn schemas(
                schemas: &mut Vec<(
                    String,
                    ::utoipa::openapi::RefOr<::utoipa::openapi::schema::Schema>,
                )>,
            ) {
                $(<$part as ::utoipa::ToSchema>::schemas(schemas);)+
            }
        }
    };
}

pub(crate) use request_body;
