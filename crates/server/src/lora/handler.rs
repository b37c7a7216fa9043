//! The LoRA routes' handlers (see the folder's docs).

use std::path::PathBuf;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use engine::EngineError;

use super::protocol::{
    LoadLoraBody, LoadLoraRequest, LoraAdapter, UnloadLoraBody, UnloadLoraRequest, LOAD_LORA,
    UNLOAD_LORA,
};
use crate::base::{body_bytes, parse_body, ApiError};
use crate::protocol::fields::{self, struct_fields};
use crate::protocol::request::LoraChoice;
use crate::serving::state::{AppState, Loaded};

fn adapters(m: &Loaded) -> Vec<LoraAdapter> {
    m.loras
        .list()
        .into_iter()
        .map(|e| LoraAdapter {
            id: e.id,
            name: e.name,
            path: e.path.display().to_string(),
            scale: e.scale,
        })
        .collect()
}

/// `GET /lora-adapters`: every adapter with its id, file and global scale (llama-server's).
#[utoipa::path(get, path = "/lora-adapters", tag = "lora",
    responses((status = 200, description = "The LoRA adapters, in id order",
        body = Vec<LoraAdapter>)))]
pub async fn list(State(state): State<AppState>) -> Result<Response, ApiError> {
    let m = state.model()?;
    Ok(axum::Json(adapters(m)).into_response())
}

/// `POST /lora-adapters` `[{"id": 0, "scale": 0.5}, ...]`: the global scales, what requests
/// naming no adapter compute with (llama-server's). Adapters not listed get 0.
#[utoipa::path(post, path = "/lora-adapters", tag = "lora",
    request_body(content = Vec<LoraChoice>, content_type = "application/json"),
    responses((status = 200, description = "The scales are set", body = Object)))]
pub async fn set_scales(
    State(state): State<AppState>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let m = state.model()?;
    let bytes = body_bytes(body, state.config().body_limit)?;
    let scales: Vec<LoraChoice> = parse_body(&bytes)?;
    m.loras.set_scales(&scales)?;
    Ok(axum::Json(serde_json::json!({"success": true})).into_response())
}

/// The text vLLM answers a load or unload with.
fn success(text: String) -> Response {
    text.into_response()
}

/// An engine's refusal of a load, blamed on `param` when it is the request's fault.
fn refused(e: EngineError, param: &str) -> ApiError {
    match e {
        EngineError::InvalidRequest(m) => ApiError::invalid(param, m),
        e => e.into(),
    }
}

/// `POST /v1/load_lora_adapter` `{"lora_name", "lora_path"}` (vLLM's): loads a GGUF LoRA
/// adapter, checked against the model, for requests to name.
#[utoipa::path(post, path = "/v1/load_lora_adapter", tag = "lora",
    request_body(content = LoadLoraBody, content_type = "application/json"),
    responses((status = 200, description = "Loaded", body = String, content_type = "text/plain")))]
pub async fn load(
    State(state): State<AppState>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let m = state.model()?;
    let bytes = body_bytes(body, state.config().body_limit)?;
    let req: LoadLoraRequest = parse_body(&bytes)?;
    fields::check(&bytes, LOAD_LORA, &[struct_fields::<LoadLoraRequest>()])?;
    let name = req.lora_name.trim();
    if name.is_empty() {
        return Err(ApiError::invalid(
            "lora_name",
            "lora_name must not be empty",
        ));
    }
    if m.names().any(|n| n == name) {
        return Err(ApiError::invalid(
            "lora_name",
            format!("`{name}` is the base model's name; an adapter needs a name of its own"),
        ));
    }
    if m.loras.by_name(name).is_some() {
        return Err(ApiError::invalid(
            "lora_name",
            format!("a LoRA adapter named '{name}' is already loaded"),
        ));
    }
    if req.lora_path.is_empty() {
        return Err(ApiError::invalid(
            "lora_path",
            "lora_path must not be empty",
        ));
    }
    let path = PathBuf::from(&req.lora_path);
    m.engine
        .load_lora(name.to_string(), path.clone())
        .await
        .map_err(|e| refused(e, "lora_path"))?;
    m.loras.add(name, path);
    tracing::info!("loaded LoRA adapter '{name}' from {}", req.lora_path);
    Ok(success(format!(
        "Success: LoRA adapter '{name}' added successfully."
    )))
}

/// `POST /v1/unload_lora_adapter` `{"lora_name"}` (vLLM's): new requests can no longer name
/// it; the requests using it finish with it.
#[utoipa::path(post, path = "/v1/unload_lora_adapter", tag = "lora",
    request_body(content = UnloadLoraBody, content_type = "application/json"),
    responses((status = 200, description = "Unloaded", body = String,
        content_type = "text/plain")))]
pub async fn unload(
    State(state): State<AppState>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let m = state.model()?;
    let bytes = body_bytes(body, state.config().body_limit)?;
    let req: UnloadLoraRequest = parse_body(&bytes)?;
    fields::check(&bytes, UNLOAD_LORA, &[struct_fields::<UnloadLoraRequest>()])?;
    let name = req.lora_name.as_str();
    if m.loras.by_name(name).is_none() {
        return Err(ApiError::Missing {
            message: format!("no LoRA adapter named '{name}' is loaded"),
            param: Some("lora_name".into()),
            code: Some("lora_not_found"),
        });
    }
    // Out of the table first: no new request names it while the engine lets it go.
    m.loras.remove(name);
    m.engine
        .unload_lora(name.to_string())
        .await
        .map_err(|e| refused(e, "lora_name"))?;
    tracing::info!("unloaded LoRA adapter '{name}'");
    Ok(success(format!(
        "Success: LoRA adapter '{name}' removed successfully."
    )))
}
