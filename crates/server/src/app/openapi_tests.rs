//! The document against the router it describes, and its structure.

use std::collections::{BTreeMap, BTreeSet, HashSet};

use axum::body::Body;
use axum::http::{header, Method, Request, StatusCode};
use serde_json::Value;
use tower::ServiceExt;

use super::super::build;
use super::*;
use crate::chat::{ChatCompletionBody, ChatRequest};
use crate::completions::{CompletionBody, CompletionRequest};
use crate::messages::protocol::{
    CountTokensBody, CountTokensRequest, MessagesBody, MessagesRequest, MESSAGES,
};
use crate::responses::request::{ResponsesBody, ResponsesRequest};
use crate::routes::protocol::{DetokenizeBody, DetokenizeRequest, TokenizeBody, TokenizeRequest};

/// Every optional route on.
fn full_config() -> ServerConfig {
    ServerConfig {
        debug_kv_index: true,
        ..ServerConfig::default()
    }
}

fn json(cfg: &ServerConfig) -> Value {
    serde_json::to_value(document(cfg)).expect("the document serializes")
}

/// The methods the document gives each path, upper-case.
fn documented(doc: &Value) -> BTreeMap<String, BTreeSet<String>> {
    let paths = doc["paths"].as_object().expect("paths");
    paths
        .iter()
        .map(|(p, item)| {
            let item = item.as_object().expect("a path item");
            let methods = item.keys().map(|m| m.to_uppercase()).collect();
            (p.clone(), methods)
        })
        .collect()
}

/// The methods the router answers `path` with, from the `Allow` header of a 405 to a method
/// no route takes (HEAD left out: axum answers it wherever GET is).
async fn served_methods(app: axum::Router, path: &str) -> BTreeSet<String> {
    let uri = path.replace("{id}", "some-id");
    let req = Request::builder()
        .method(Method::PATCH)
        .uri(&uri)
        .body(Body::empty())
        .expect("request");
    let resp = app.oneshot(req).await.expect("infallible");
    assert_eq!(resp.status(), StatusCode::METHOD_NOT_ALLOWED, "PATCH {uri}");
    let allow = resp
        .headers()
        .get(header::ALLOW)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    allow
        .split(',')
        .map(|m| m.trim().to_string())
        .filter(|m| !m.is_empty() && m != "HEAD")
        .collect()
}

#[tokio::test]
async fn every_route_the_router_serves_is_documented_with_its_methods_and_nothing_else() {
    for cfg in [ServerConfig::default(), full_config()] {
        let (app, paths) = build(AppState::new(cfg.clone()));
        let doc = documented(&json(&cfg));
        let served: BTreeSet<&str> = paths.iter().map(String::as_str).collect();
        let described: BTreeSet<&str> = doc.keys().map(String::as_str).collect();
        assert_eq!(served, described, "served vs documented paths");
        assert_eq!(
            served.len(),
            paths.len(),
            "a path was added twice: {paths:?}"
        );
        for path in &paths {
            let methods = served_methods(app.clone(), path).await;
            assert_eq!(methods, doc[path], "methods of {path}");
        }
    }
}

#[test]
fn the_document_is_openapi_3_1_with_unique_ids_resolving_refs_and_error_bodies() {
    let doc = json(&full_config());
    assert!(
        doc["openapi"]
            .as_str()
            .is_some_and(|v| v.starts_with("3.1.")),
        "{}",
        doc["openapi"]
    );
    assert_eq!(doc["info"]["title"], "Tessera");
    let schemas = doc["components"]["schemas"].as_object().expect("schemas");
    let mut refs = Vec::new();
    collect_refs(&doc, &mut refs);
    assert!(!refs.is_empty());
    for r in &refs {
        let name = r
            .strip_prefix("#/components/schemas/")
            .unwrap_or_else(|| panic!("a $ref outside the schemas: {r}"));
        assert!(schemas.contains_key(name), "unresolved $ref {r}");
    }
    let mut ids = HashSet::new();
    for (path, item) in doc["paths"].as_object().expect("paths") {
        assert!(path.starts_with('/'), "{path}");
        for (method, op) in item.as_object().expect("item") {
            let id = op["operationId"].as_str().expect("an operationId");
            assert!(ids.insert(id.to_string()), "duplicate operationId {id}");
            let responses = op["responses"].as_object().expect("responses");
            assert!(responses.contains_key("200"), "{method} {path}: no 200");
            let body = if path.starts_with("/v1/messages") {
                "#/components/schemas/AnthropicErrorBody"
            } else {
                "#/components/schemas/ErrorBody"
            };
            assert_eq!(
                responses["500"]["content"]["application/json"]["schema"]["$ref"], body,
                "{method} {path}"
            );
            if op.get("requestBody").is_some() {
                for status in ["400", "408", "413"] {
                    assert!(
                        responses.contains_key(status),
                        "{method} {path}: no {status}"
                    );
                }
            }
        }
    }
}

fn collect_refs(v: &Value, out: &mut Vec<String>) {
    match v {
        Value::Object(o) => {
            if let Some(Value::String(r)) = o.get("$ref") {
                out.push(r.clone());
            }
            o.values().for_each(|v| collect_refs(v, out));
        }
        Value::Array(a) => a.iter().for_each(|v| collect_refs(v, out)),
        _ => {}
    }
}

#[test]
fn streaming_routes_document_their_event_stream_chunks() {
    let doc = json(&ServerConfig::default());
    for path in ["/v1/chat/completions", "/v1/completions", "/v1/responses"] {
        let content = &doc["paths"][path]["post"]["responses"]["200"]["content"];
        assert!(content["application/json"]["schema"].is_object(), "{path}");
        assert!(content["text/event-stream"]["schema"].is_object(), "{path}");
    }
}

#[test]
fn request_bodies_list_the_typed_and_untyped_fields_and_refuse_others() {
    let doc = json(&ServerConfig::default());
    let chat = &doc["components"]["schemas"]["ChatCompletionRequest"];
    assert_eq!(chat["additionalProperties"], false);
    let props = chat["properties"].as_object().expect("properties");
    for field in [
        "messages",
        "max_tokens",
        "tools",
        "user",
        "functions",
        "metadata",
    ] {
        assert!(props.contains_key(field), "chat request lacks {field}");
    }
    assert!(chat["properties"]["max_tokens"].get("maximum").is_none());
    let completion = &doc["components"]["schemas"]["CompletionRequest"]["properties"];
    assert!(completion.get("prompt").is_some() && completion.get("best_of").is_some());
}

#[test]
fn the_max_tokens_limit_is_published_as_the_fields_maximum() {
    let cfg = ServerConfig {
        max_tokens_limit: Some(8),
        ..ServerConfig::default()
    };
    let doc = json(&cfg);
    let schemas = &doc["components"]["schemas"];
    assert_eq!(
        schemas["ChatCompletionRequest"]["properties"]["max_tokens"]["maximum"],
        8
    );
    assert_eq!(
        schemas["ChatCompletionRequest"]["properties"]["max_completion_tokens"]["maximum"],
        8
    );
    assert_eq!(
        schemas["CompletionRequest"]["properties"]["max_tokens"]["maximum"],
        8
    );
    assert_eq!(
        schemas["ResponsesRequest"]["properties"]["max_output_tokens"]["maximum"],
        8
    );
    let chat = &schemas["ChatCompletionRequest"]["properties"];
    assert_eq!(chat["n"]["maximum"], cfg.max_n);
    assert_eq!(chat["top_logprobs"]["maximum"], cfg.max_logprobs);
    assert!(
        chat["logprobs"].get("maximum").is_none(),
        "a boolean: {}",
        chat["logprobs"]
    );
    let completion = &schemas["CompletionRequest"]["properties"];
    assert_eq!(completion["logprobs"]["maximum"], cfg.max_logprobs);
}

#[test]
fn with_a_key_the_api_needs_it_and_the_probes_follow_their_flags() {
    let mut cfg = ServerConfig {
        api_key: Some("k".into()),
        ..ServerConfig::default()
    };
    let doc = json(&cfg);
    assert_eq!(
        doc["components"]["securitySchemes"]["bearer"]["scheme"],
        "bearer"
    );
    let chat = &doc["paths"]["/v1/chat/completions"]["post"];
    assert_eq!(chat["security"][0]["bearer"], serde_json::json!([]));
    assert!(chat["responses"].get("401").is_some());
    for open in ["/health", "/metrics", "/openapi.json", "/"] {
        let op = &doc["paths"][open]["get"];
        assert_eq!(op["security"], serde_json::json!([]), "{open}");
        assert!(op["responses"].get("401").is_none(), "{open}");
    }
    cfg.protect_health = true;
    let doc = json(&cfg);
    for closed in ["/health", "/openapi.json"] {
        assert!(
            doc["paths"][closed]["get"]["responses"]
                .get("401")
                .is_some(),
            "{closed}"
        );
    }
    assert!(doc["paths"]["/metrics"]["get"]["responses"]
        .get("401")
        .is_none());
}

#[test]
fn every_request_example_parses_and_passes_the_field_check_of_its_route() {
    use crate::protocol::fields::{check, struct_fields};
    use crate::serving::openai_body;
    for e in CompletionBody::EXAMPLES {
        openai_body::<CompletionRequest>(e.as_bytes(), crate::completions::protocol::COMPLETIONS)
            .expect(e);
    }
    for e in ChatCompletionBody::EXAMPLES {
        openai_body::<ChatRequest>(e.as_bytes(), crate::chat::protocol::CHAT).expect(e);
    }
    let one = |examples: &[&str], route, fields: &[&str]| {
        for e in examples {
            check(e.as_bytes(), route, &[fields]).expect(e);
        }
    };
    one(
        ResponsesBody::EXAMPLES,
        crate::responses::request::RESPONSES,
        struct_fields::<ResponsesRequest>(),
    );
    for e in MessagesBody::EXAMPLES {
        crate::base::parse_body::<MessagesRequest>(e.as_bytes()).expect(e);
    }
    one(
        MessagesBody::EXAMPLES,
        MESSAGES,
        struct_fields::<MessagesRequest>(),
    );
    for e in CountTokensBody::EXAMPLES {
        crate::base::parse_body::<CountTokensRequest>(e.as_bytes()).expect(e);
    }
    one(
        CountTokensBody::EXAMPLES,
        MESSAGES,
        struct_fields::<CountTokensRequest>(),
    );
    one(
        TokenizeBody::EXAMPLES,
        crate::routes::protocol::TOKENIZE,
        struct_fields::<TokenizeRequest>(),
    );
    one(
        DetokenizeBody::EXAMPLES,
        crate::routes::protocol::DETOKENIZE,
        struct_fields::<DetokenizeRequest>(),
    );
    use crate::lora::protocol as lora;
    for e in lora::LoadLoraBody::EXAMPLES {
        crate::base::parse_body::<lora::LoadLoraRequest>(e.as_bytes()).expect(e);
    }
    one(
        lora::LoadLoraBody::EXAMPLES,
        lora::LOAD_LORA,
        struct_fields::<lora::LoadLoraRequest>(),
    );
    for e in lora::UnloadLoraBody::EXAMPLES {
        crate::base::parse_body::<lora::UnloadLoraRequest>(e.as_bytes()).expect(e);
    }
    one(
        lora::UnloadLoraBody::EXAMPLES,
        lora::UNLOAD_LORA,
        struct_fields::<lora::UnloadLoraRequest>(),
    );
    let doc = json(&ServerConfig::default());
    let chat = &doc["components"]["schemas"]["ChatCompletionRequest"]["examples"];
    assert_eq!(
        chat.as_array().map(Vec::len),
        Some(ChatCompletionBody::EXAMPLES.len())
    );
}

#[test]
fn the_messages_routes_document_anthropic_s_errors_and_both_key_headers() {
    let cfg = ServerConfig {
        api_key: Some("k".into()),
        ..ServerConfig::default()
    };
    let doc = json(&cfg);
    let schemes = &doc["components"]["securitySchemes"];
    assert_eq!(schemes["x_api_key"]["in"], "header");
    assert_eq!(schemes["x_api_key"]["name"], "x-api-key");
    let create = &doc["paths"]["/v1/messages"]["post"];
    assert_eq!(create["security"][1]["x_api_key"], serde_json::json!([]));
    let error = |op: &Value, status: &str| {
        op["responses"][status]["content"]["application/json"]["schema"]["$ref"].clone()
    };
    let anthropic = "#/components/schemas/AnthropicErrorBody";
    for status in ["400", "401", "404", "529"] {
        assert_eq!(error(create, status), anthropic, "{status}");
    }
    assert!(create["responses"].get("429").is_none());
    let count = &doc["paths"]["/v1/messages/count_tokens"]["post"];
    assert_eq!(error(count, "400"), anthropic);
    assert!(count["responses"].get("529").is_none(), "it does not queue");
    let chat = &doc["paths"]["/v1/chat/completions"]["post"];
    assert_eq!(error(chat, "400"), "#/components/schemas/ErrorBody");
    assert!(doc["paths"].get("/messages").is_none(), "under /v1 only");
    let events = &create["responses"]["200"]["content"]["text/event-stream"]["schema"];
    assert!(
        events["properties"]["data"]["contentSchema"].is_object(),
        "{events}"
    );
}

#[tokio::test]
async fn errors_on_the_messages_routes_have_anthropic_s_shape() {
    let cfg = ServerConfig {
        api_key: Some("k".into()),
        ..ServerConfig::default()
    };
    let app = build(AppState::new(cfg)).0;
    let call = |path: &str, key: Option<(&'static str, &'static str)>| {
        let mut req = Request::builder()
            .method(Method::POST)
            .uri(path)
            .header(header::CONTENT_TYPE, "application/json");
        if let Some((name, value)) = key {
            req = req.header(name, value);
        }
        let req = req.body(Body::from("{}")).expect("a request");
        let app = app.clone();
        async move {
            let resp = app.oneshot(req).await.expect("a response");
            let status = resp.status();
            let bytes = axum::body::to_bytes(resp.into_body(), usize::MAX)
                .await
                .expect("a body");
            let body: Value = serde_json::from_slice(&bytes).expect("JSON");
            (status, body)
        }
    };
    let (status, body) = call("/v1/messages", None).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    assert_eq!(body["type"], "error");
    assert_eq!(body["error"]["type"], "authentication_error");
    assert!(body["request_id"].is_string(), "{body}");
    let (status, body) = call("/v1/messages/count_tokens", Some(("x-api-key", "k"))).await;
    // The key passed; no model is loaded in this state.
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(body["error"]["type"], "overloaded_error");
    let (status, body) = call("/v1/chat/completions", Some(("x-api-key", "wrong"))).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    assert_eq!(body["error"]["type"], "authentication_error");
    assert!(
        body.get("type").is_none(),
        "OpenAI's shape elsewhere: {body}"
    );
}

#[test]
fn request_and_rendered_stream_options_are_separate_components() {
    let doc = json(&ServerConfig::default());
    let schemas = &doc["components"]["schemas"];
    assert!(
        schemas["StreamOptions"]["required"].is_null(),
        "{}",
        schemas["StreamOptions"]
    );
    assert_eq!(
        schemas["RenderedStreamOptions"]["required"],
        serde_json::json!(["include_usage"])
    );
}

/// utoipa names a component after its Rust type: two types of one name (OpenAI's and
/// Anthropic's usage, the Responses and Messages stream events) would leave one schema for
/// both, and responses off the document.
#[test]
fn each_usage_shape_has_its_own_component() {
    let doc = json(&full_config());
    let props = |name: &str| -> BTreeSet<String> {
        doc["components"]["schemas"][name]["properties"]
            .as_object()
            .unwrap_or_else(|| panic!("component {name}"))
            .keys()
            .cloned()
            .collect()
    };
    assert!(props("Usage").is_superset(&BTreeSet::from([
        "prompt_tokens".to_string(),
        "completion_tokens".to_string(),
        "total_tokens".to_string(),
    ])));
    assert!(props("MessageUsage").contains("input_tokens"));
    assert!(props("EmbeddingUsage").contains("prompt_tokens"));
    // And the two streams' events.
    let schemas = doc["components"]["schemas"].as_object().expect("schemas");
    assert!(schemas.contains_key("StreamEvent") && schemas.contains_key("MessageStreamEvent"));
}
