//! `GET /openapi.json`: the OpenAPI 3.1 description of every route this server serves, built
//! from the types themselves so it cannot drift from them.
//!
//! Each handler carries a `#[utoipa::path]` with its success responses; the request and
//! response shapes are the `ToSchema` derives of the very types the handlers parse and
//! serialize (each endpoint folder's `protocol`, `protocol::{request, response, logprobs}`,
//! `responses::wire`, the worker and render routes); each endpoint declares its request body
//! (`protocol::schema::request_body!`). What every route shares is added here, from the server's
//! configuration: the root aliases of the OpenAI routes, the OpenAI error body (Anthropic's on
//! the Messages API) under each status a route can answer with, the key (bearer or `x-api-key`)
//! where the router asks for it, the route that exists
//! only with `debug_kv_index`, and the configured maxima (`n`, log-probs, the `max_tokens`
//! cap).
//!
//! A request body is one object: the fields of its request types (a chat body is read as
//! `CommonParams` and `ChatRequest`), the fields its `Route` accepts beyond them (ignored, or
//! accepted at a no-op value), and no others (`additionalProperties: false`, as `fields::check`
//! answers any other field with a 400). Operation ids are the method and the path, so they are
//! unique and stable. The test at the bottom holds the document to the router: every path and
//! method the router serves is documented, and nothing else is.

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use serde_json::json;
use utoipa::openapi::extensions::Extensions;
use utoipa::openapi::path::{Operation, PathItem};
use utoipa::openapi::schema::{ObjectBuilder, Schema, SchemaType, Type};
use utoipa::openapi::security::{
    ApiKey, ApiKeyValue, HttpAuthScheme, HttpBuilder, SecurityRequirement, SecurityScheme,
};
use utoipa::openapi::{Content, OpenApi as Document, Ref, RefOr, ResponseBuilder};
use utoipa::{OpenApi, ToSchema};

use crate::base::{AnthropicErrorBody, ErrorBody};
use crate::routes::{debug, misc, playground, worker};
use crate::serving::state::{AppState, ServerConfig};
use crate::{chat, completions, embeddings, lora, messages, responses};

#[derive(OpenApi)]
#[openapi(
    paths(
        completions::handler::handle,
        chat::handler::handle,
        completions::render::render,
        chat::render::render,
        misc::models,
        misc::model,
        responses::handler::create,
        responses::handler::retrieve,
        responses::handler::delete,
        embeddings::handler::embeddings,
        embeddings::handler::rerank,
        messages::handler::create,
        messages::handler::count_tokens,
        misc::tokenize,
        misc::detokenize,
        lora::handler::list,
        lora::handler::set_scales,
        lora::handler::load,
        lora::handler::unload,
        misc::health,
        misc::metrics,
        worker::version,
        worker::loads,
        worker::server_info,
        worker::model_info,
        debug::kv_index,
        playground::page,
        spec,
    ),
    components(schemas(ErrorBody, AnthropicErrorBody))
)]
struct ApiDoc;

/// `GET /openapi.json`: this document, for this server's configuration.
#[utoipa::path(get, path = "/openapi.json", tag = "meta",
    responses((status = 200, description = "The OpenAPI 3.1 description of this server",
        body = Object)))]
pub async fn spec(State(state): State<AppState>) -> Response {
    axum::Json(document(state.config())).into_response()
}

/// The gateway's other names for two worker routes (SGLang's `get_` forms).
const WORKER_ALIASES: &[(&str, &str)] = &[
    ("/server_info", "/get_server_info"),
    ("/model_info", "/get_model_info"),
];

/// The fields that bound how many tokens a request generates (`ServerConfig::max_tokens_limit`).
const MAX_TOKEN_FIELDS: &[&str] = &["max_tokens", "max_completion_tokens", "max_output_tokens"];

/// The document for a server configured with `cfg`.
pub fn document(cfg: &ServerConfig) -> Document {
    let mut doc = ApiDoc::openapi();
    doc.info.title = "Tessera".into();
    doc.info.description = Some(
        "An OpenAI-compatible LLM inference server (completions, chat completions, responses), \
         with Anthropic's Messages API, vLLM's tokenizer and render routes and SGLang's worker \
         routes."
            .into(),
    );
    if !cfg.debug_kv_index {
        doc.paths.paths.remove("/debug/kv_index");
    }
    add_aliases(&mut doc);
    let key = cfg.api_key.is_some();
    if key {
        let bearer = HttpBuilder::new().scheme(HttpAuthScheme::Bearer).build();
        let x_api_key = SecurityScheme::ApiKey(ApiKey::Header(ApiKeyValue::new("x-api-key")));
        let components = doc.components.get_or_insert_with(Default::default);
        components.add_security_scheme("bearer", SecurityScheme::Http(bearer));
        components.add_security_scheme("x_api_key", x_api_key);
    }
    for (path, item) in doc.paths.paths.iter_mut() {
        let open = !super::needs_key(path, cfg);
        for (method, op) in operations(item) {
            op.operation_id = Some(operation_id(method, path));
            add_errors(op, path, cfg, key && !open);
            wrap_event_streams(op, path);
            if key {
                op.security = Some(if open {
                    Vec::new()
                } else {
                    // Either header carries the key.
                    vec![
                        SecurityRequirement::new("bearer", Vec::<String>::new()),
                        SecurityRequirement::new("x_api_key", Vec::<String>::new()),
                    ]
                });
            }
        }
    }
    let mut caps = vec![
        ("n", cfg.max_n),
        ("logprobs", cfg.max_logprobs),
        ("top_logprobs", cfg.max_logprobs),
    ];
    if let Some(limit) = cfg.max_tokens_limit {
        caps.extend(MAX_TOKEN_FIELDS.iter().map(|&f| (f, limit)));
    }
    if let Some(c) = doc.components.as_mut() {
        for schema in c.schemas.values_mut() {
            cap_integers(schema, &caps);
        }
    }
    doc
}

/// The root aliases of the OpenAI, render and rerank routes, and the worker routes' `get_` names.
fn add_aliases(doc: &mut Document) {
    let mut extra = Vec::new();
    for (path, item) in &doc.paths.paths {
        let openai = operations_of(item).any(|op| {
            op.tags.as_ref().is_some_and(|t| {
                t.iter()
                    .any(|t| matches!(t.as_str(), "openai" | "render" | "rerank"))
            })
        });
        if let (true, Some(root)) = (openai, path.strip_prefix("/v1")) {
            extra.push((root.to_string(), item.clone()));
        }
    }
    for (from, to) in WORKER_ALIASES {
        if let Some(item) = doc.paths.paths.get(*from) {
            extra.push((to.to_string(), item.clone()));
        }
    }
    doc.paths.paths.extend(extra);
}

/// A unique id from the method and the path: `post_v1_chat_completions`.
fn operation_id(method: &str, path: &str) -> String {
    let mut id = method.to_string();
    for part in path.split(['/', '.', '{', '}']).filter(|p| !p.is_empty()) {
        id.push('_');
        id.push_str(part);
    }
    if path == "/" {
        id.push_str("_root");
    }
    id
}

/// The operations of a path item, with their lower-case methods.
fn operations(item: &mut PathItem) -> impl Iterator<Item = (&'static str, &mut Operation)> {
    [
        ("get", &mut item.get),
        ("post", &mut item.post),
        ("put", &mut item.put),
        ("delete", &mut item.delete),
        ("patch", &mut item.patch),
        ("options", &mut item.options),
        ("head", &mut item.head),
        ("trace", &mut item.trace),
    ]
    .into_iter()
    .filter_map(|(m, op)| op.as_mut().map(|op| (m, op)))
}

fn operations_of(item: &PathItem) -> impl Iterator<Item = &Operation> {
    [
        &item.get,
        &item.post,
        &item.put,
        &item.delete,
        &item.patch,
        &item.options,
        &item.head,
        &item.trace,
    ]
    .into_iter()
    .flatten()
}

/// The OpenAI error body under each status `op` can answer with (`error.rs` decides them):
/// 400 for a body or parameter it rejects, 401 without the key, 404 for an unknown model or
/// stored response, 408 / 413 for a body too slow or too large, 429 when the waiting line is
/// full, 500 for a contained fault, 503 while the model loads or the server drains, 504 past
/// the request deadline. Anthropic's routes answer with Anthropic's error body, and with 529
/// (its `overloaded_error`) where the others answer 429.
fn add_errors(op: &mut Operation, path: &str, cfg: &ServerConfig, keyed: bool) {
    let body = op.request_body.is_some();
    let params = op.parameters.as_ref().is_some_and(|p| !p.is_empty());
    let generates = body
        && op
            .tags
            .as_ref()
            .is_some_and(|t| t.iter().any(|t| t == "openai"));
    let needs_model = !matches!(path, "/" | "/openapi.json" | "/version" | "/metrics");
    let anthropic = is_anthropic(op);
    let generates = generates || (anthropic && path == "/v1/messages");
    let (full, body_name) = if anthropic {
        ("529", AnthropicErrorBody::name())
    } else {
        ("429", ErrorBody::name())
    };
    let statuses: [(bool, &str, &str); 9] = [
        (
            body || params,
            "400",
            "The request is malformed or out of range",
        ),
        (keyed, "401", "Missing or wrong API key"),
        (
            body || path.contains('{'),
            "404",
            "No such model or stored response",
        ),
        (body, "408", "The body did not arrive in time"),
        (body, "413", "The body exceeds the server's limit"),
        (
            generates,
            full,
            "The waiting line is full (see `Retry-After`)",
        ),
        (
            true,
            "500",
            "An internal error (its cause is logged, not sent)",
        ),
        (
            needs_model,
            "503",
            "The model is loading or the server is shutting down",
        ),
        (
            cfg.request_timeout.is_some(),
            "504",
            "The request did not finish in time",
        ),
    ];
    for (applies, status, description) in statuses {
        if !applies || op.responses.responses.contains_key(status) {
            continue;
        }
        let content = Content::new(Some(Ref::from_schema_name(body_name.clone())));
        let response = ResponseBuilder::new()
            .description(description)
            .content("application/json", content)
            .build();
        op.responses
            .responses
            .insert(status.to_string(), RefOr::T(response));
    }
}

/// Whether `op` is one of Anthropic's routes (its errors are in Anthropic's shape).
fn is_anthropic(op: &Operation) -> bool {
    op.tags
        .as_ref()
        .is_some_and(|t| t.iter().any(|t| t == "anthropic"))
}

/// The `text/event-stream` content of a 200: the handlers name the type of one chunk (or
/// event); each SSE event is described here as the stream carries it, an object whose `data`
/// is that chunk's JSON text (`contentMediaType` / `contentSchema`); completions and chat
/// streams also carry the error body of a failure after the 200 went out and end with `[DONE]`
/// (the Responses API tells both with its own events).
fn wrap_event_streams(op: &mut Operation, path: &str) {
    let Some(RefOr::T(ok)) = op.responses.responses.get_mut("200") else {
        return;
    };
    let Some(content) = ok.content.get_mut("text/event-stream") else {
        return;
    };
    let Some(chunk) = content.schema.take() else {
        return;
    };
    // Completions and chat tell a failure after the 200 with an error body; the Responses API
    // and the Messages API with their own events (`response.failed`, `error`).
    let responses = path.ends_with("/responses") || path == "/v1/messages";
    let frames = if responses {
        json!([chunk])
    } else {
        json!([chunk, Ref::from_schema_name(ErrorBody::name())])
    };
    let json_text = json!({
        "contentMediaType": "application/json",
        "contentSchema": {"oneOf": frames},
    });
    let data: Extensions = if responses {
        let keywords = json_text.as_object().into_iter().flatten();
        keywords.map(|(k, v)| (k.clone(), v.clone())).collect()
    } else {
        // `[DONE]` is not JSON: only the other frames are read as chunks.
        [("if", json!({"const": "[DONE]"})), ("else", json_text)]
            .into_iter()
            .collect()
    };
    let data = ObjectBuilder::new()
        .schema_type(Type::String)
        .description(Some(
            "The chunk's JSON text (or `[DONE]`, or an error body)",
        ))
        .extensions(Some(data));
    let event = ObjectBuilder::new()
        .schema_type(Type::String)
        .description(Some(
            "The event name: `message`, or the Responses or Messages event's `type`",
        ));
    let event = ObjectBuilder::new()
        .property("data", data)
        .required("data")
        .property("event", event)
        .property("id", ObjectBuilder::new().schema_type(Type::String))
        .property("retry", ObjectBuilder::new().schema_type(Type::Integer))
        .build();
    content.schema = Some(RefOr::T(Schema::Object(event)));
}

/// Sets the configured `maximum` of each integer field of a request body schema named in
/// `caps` (chat's boolean `logprobs` is left alone).
fn cap_integers(schema: &mut RefOr<Schema>, caps: &[(&str, usize)]) {
    let RefOr::T(Schema::Object(obj)) = schema else {
        return;
    };
    for &(field, limit) in caps {
        if let Some(RefOr::T(Schema::Object(f))) = obj.properties.get_mut(field) {
            let integer = match &f.schema_type {
                SchemaType::Type(t) => *t == Type::Integer,
                SchemaType::Array(ts) => ts.contains(&Type::Integer),
                SchemaType::AnyValue => false,
            };
            if integer {
                f.maximum = Some(utoipa::Number::UInt(limit));
            }
        }
    }
}

#[cfg(test)]
#[path = "openapi_tests.rs"]
mod tests;
