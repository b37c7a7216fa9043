//! The bodies of the LoRA routes and their OpenAPI schemas.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::protocol::fields::{self, NoOp, Route};
use crate::protocol::schema::request_body;

/// vLLM's `POST /v1/load_lora_adapter` body.
#[derive(Debug, Deserialize, ToSchema)]
pub struct LoadLoraRequest {
    /// The name requests use (`"model": NAME`); not one of the served model names.
    pub lora_name: String,
    /// A GGUF LoRA adapter file (llama.cpp's format) on the server's file system.
    pub lora_path: String,
}

/// vLLM's `POST /v1/unload_lora_adapter` body.
#[derive(Debug, Deserialize, ToSchema)]
pub struct UnloadLoraRequest {
    pub lora_name: String,
}

/// One adapter as llama-server's `GET /lora-adapters` lists it (plus its name).
#[derive(Debug, Serialize, ToSchema)]
pub struct LoraAdapter {
    /// What a request's `lora` field names it by: its place in the order adapters were added.
    pub id: u64,
    /// What a request's `model` names it by.
    pub name: String,
    pub path: String,
    /// The global scale: what requests naming no adapter compute with (0: not applied).
    pub scale: f32,
}

/// vLLM's `load_inplace` only at `false`: a name is loaded once, never replaced in place
/// (unload it first).
pub const LOAD_LORA: Route = Route::new(&[NoOp {
    key: "load_inplace",
    accepts: is_false,
    why: "adapters are not replaced in place: unload the name first, then load it again",
}]);
/// vLLM's `lora_int_id` is accepted and ignored: the name alone names the adapter.
pub const UNLOAD_LORA: Route = Route::new(&[NoOp {
    key: "lora_int_id",
    accepts: fields::any,
    why: "",
}]);

fn is_false(v: &serde_json::Value) -> bool {
    v.as_bool() == Some(false)
}

request_body!(
    LoadLoraBody,
    "LoadLoraAdapterRequest",
    LOAD_LORA,
    "The body of `/v1/load_lora_adapter`.",
    [LoadLoraRequest],
    examples: [r#"{"lora_name": "sql", "lora_path": "/models/sql-lora.gguf"}"#]
);
request_body!(
    UnloadLoraBody,
    "UnloadLoraAdapterRequest",
    UNLOAD_LORA,
    "The body of `/v1/unload_lora_adapter`.",
    [UnloadLoraRequest],
    examples: [r#"{"lora_name": "sql"}"#]
);
