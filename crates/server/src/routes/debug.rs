//! `GET /debug/kv_index` (only with `ServerConfig::debug_kv_index`, behind the API key): the
//! engine's prefix index as a KV event subscriber should hold it, to check a subscriber
//! against. It lists the token ids of every cached prefix — other users' prompts — so it is
//! off unless asked for.
//!
//! `last_seq` is the sequence number of the last KV event batch sent before the index was
//! read: a subscriber that applied every batch up to it holds exactly `blocks`, each keyed by
//! `(group_idx, block_hash)` with the hashes as they go on the wire.

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use engine::kv_events::external_hash;
use serde::Serialize;
use utoipa::ToSchema;

use crate::base::ApiError;
use crate::serving::state::AppState;

/// The prefix index as a subscriber of the KV events should hold it.
#[derive(Serialize, ToSchema)]
struct KvIndex {
    /// The last KV event batch sent before the index was read (`null`: none yet).
    last_seq: Option<u64>,
    /// Tokens per tile.
    block_size: usize,
    blocks: Vec<KvBlock>,
}

/// One cached tile, keyed as on the wire.
#[derive(Serialize, ToSchema)]
struct KvBlock {
    group_idx: usize,
    block_hash: u64,
    parent_block_hash: Option<u64>,
    token_ids: Vec<u32>,
    /// The sliding window of the tile's layer group (`null`: full attention).
    kv_cache_spec_sliding_window: Option<usize>,
    /// The LoRA adapters the tile was computed with, as its `BlockStored` named them (`null`:
    /// the base model, or several adapters for the id).
    lora_id: Option<u64>,
    lora_name: Option<String>,
}

/// `GET /debug/kv_index`.
#[utoipa::path(get, path = "/debug/kv_index", tag = "debug",
    responses((status = 200, description = "The prefix index", body = KvIndex)))]
pub async fn kv_index(State(state): State<AppState>) -> Result<Response, ApiError> {
    let m = state.model()?;
    let snapshot = m
        .engine
        .kv_index()?
        .await
        .map_err(|_| ApiError::ShuttingDown)?;
    let blocks = snapshot
        .tiles
        .iter()
        .map(|t| KvBlock {
            group_idx: t.group,
            block_hash: external_hash(t.key),
            parent_block_hash: t.parent.map(external_hash),
            token_ids: t.tokens.clone(),
            kv_cache_spec_sliding_window: t.window,
            lora_id: t.lora.as_ref().and_then(|l| l.id),
            lora_name: t.lora.as_ref().map(|l| l.name.clone()),
        })
        .collect();
    let body = KvIndex {
        last_seq: snapshot.last_seq,
        block_size: snapshot.tile_size,
        blocks,
    };
    Ok(axum::Json(body).into_response())
}
