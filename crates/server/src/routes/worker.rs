//! What a gateway asks of a worker: load, version, server and model facts.
//!
//! Gateways that route across replicas (the Shepherd Model Gateway `smg`, SGLang's router)
//! register a worker by reading `/v1/models`, `/server_info` (or `/get_server_info`) and
//! `/model_info` (or `/get_model_info`), and keep polling `GET /v1/loads` for the load-aware
//! policies. The shapes are SGLang's (the ones `smg`'s own mock worker answers); every number
//! is read from the engine's atomics when asked, so a poll never waits on a step.
//!
//! `/v1/loads` reports one data-parallel rank (Tessera runs one engine per process). Fields
//! Tessera does not measure — generation throughput, queued uncached tokens — are left out
//! rather than reported as zero, so a gateway falls back to its defaults instead of reading a
//! replica as idle. KV capacity is counted in token slots: tiles times tokens per tile. A model
//! whose layers form several KV groups (Gemma 3: one global, five sliding-window) stores a
//! token in one tile of each group, so the pool holds fewer distinct tokens than slots; the
//! ratio `token_usage` is exact either way.

use std::sync::atomic::Ordering::Relaxed;

use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use crate::base::unix_now;
use crate::base::ApiError;
use crate::serving::state::{AppState, Loaded};
use crate::serving::validate::max_model_len;

/// The version every worker endpoint reports (the workspace's).
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// `GET /version`, as vLLM answers it.
#[derive(Serialize, ToSchema)]
struct Version {
    version: &'static str,
}

#[utoipa::path(get, path = "/version", tag = "worker",
    responses((status = 200, description = "The server's version", body = Version)))]
pub async fn version() -> Response {
    axum::Json(Version { version: VERSION }).into_response()
}

/// `GET /v1/loads`: the load of each data-parallel rank (one here).
#[derive(Serialize, ToSchema)]
struct Loads {
    /// When the snapshot was taken (RFC 3339, UTC).
    timestamp: String,
    dp_rank_count: u32,
    loads: Vec<RankLoad>,
}

/// One rank's scheduler load, in SGLang's field names.
#[derive(Serialize, ToSchema)]
struct RankLoad {
    dp_rank: u32,
    num_running_reqs: u64,
    num_waiting_reqs: u64,
    num_total_reqs: u64,
    /// Token slots of the KV tiles held by requests.
    num_used_tokens: u64,
    /// Token slots of the whole KV pool.
    max_total_num_tokens: u64,
    /// `num_used_tokens / max_total_num_tokens` (0-1), as `tessera_kv_cache_usage_perc`.
    token_usage: f64,
    /// Prompt tokens found in the prefix cache / prompt tokens looked up, since start.
    cache_hit_rate: f64,
    /// The same ratio as `token_usage`: the KV pool is what bounds the batch.
    utilization: f64,
    max_running_requests: u64,
}

/// `?include=core,disagg,...`: the sections asked for. Only `core` exists here; the others
/// are PD-disaggregation and queue details a single engine has none of, so they are answered
/// by their absence, as SGLang does for the sections it does not run.
#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct LoadsQuery {
    /// Comma-separated sections: `core`, `disagg`, `queues`, `memory`, `all`.
    #[serde(default)]
    #[param(
        pattern = r"^ *((core|disagg|queues|memory|all) *)?(, *((core|disagg|queues|memory|all) *)?)*$"
    )]
    include: Option<String>,
}

#[utoipa::path(get, path = "/v1/loads", tag = "worker", params(LoadsQuery),
    responses((status = 200, description = "The scheduler load", body = Loads)))]
pub async fn loads(
    State(state): State<AppState>,
    q: Result<Query<LoadsQuery>, QueryRejection>,
) -> Result<Response, ApiError> {
    let Query(q) = crate::base::param(q, "include")?;
    const SECTIONS: [&str; 5] = ["core", "disagg", "queues", "memory", "all"];
    if let Some(include) = &q.include {
        if let Some(bad) = include
            .split(',')
            .map(str::trim)
            .find(|s| !s.is_empty() && !SECTIONS.contains(s))
        {
            return Err(ApiError::invalid(
                "include",
                format!(
                    "unknown load section {bad:?} (known: {})",
                    SECTIONS.join(", ")
                ),
            ));
        }
    }
    let m = state.model()?;
    let body = Loads {
        timestamp: rfc3339(unix_now()),
        dp_rank_count: 1,
        loads: vec![rank_load(m)],
    };
    Ok(axum::Json(body).into_response())
}

fn rank_load(m: &Loaded) -> RankLoad {
    let st = m.engine.stats();
    let info = m.engine.info();
    let tile = info.tile_size as u64;
    let running = st.running.load(Relaxed);
    let waiting = st.waiting.load(Relaxed);
    let total_tiles = st.tiles_total.load(Relaxed);
    let used_tiles = st.tiles_in_use.load(Relaxed);
    let usage = used_tiles as f64 / total_tiles.max(1) as f64;
    let queried = st.prefix_queried_tokens.load(Relaxed);
    let hits = st.prefix_hit_tokens.load(Relaxed);
    RankLoad {
        dp_rank: 0,
        num_running_reqs: running,
        num_waiting_reqs: waiting,
        num_total_reqs: running + waiting,
        num_used_tokens: used_tiles * tile,
        max_total_num_tokens: total_tiles * tile,
        token_usage: usage,
        cache_hit_rate: hits as f64 / queried.max(1) as f64,
        utilization: usage,
        max_running_requests: info.max_seqs as u64,
    }
}

/// `GET /server_info` (and `/get_server_info`): SGLang's server facts, the subset a gateway
/// reads.
#[derive(Serialize, ToSchema)]
struct ServerInfo {
    model_path: String,
    served_model_name: String,
    tp_size: u32,
    dp_size: u32,
    pp_size: u32,
    version: &'static str,
    is_embedding: bool,
    /// The model's trained context.
    context_length: usize,
    /// Most tokens one sequence can hold here (the context, or less with a small KV pool).
    max_model_len: usize,
    /// Token slots of the whole KV pool (see the module header).
    max_total_tokens: usize,
    max_running_requests: usize,
    /// Tokens per KV tile (a gateway's prefix block size).
    page_size: usize,
}

#[utoipa::path(get, path = "/server_info", tag = "worker",
    responses((status = 200, description = "Server facts", body = ServerInfo)))]
pub async fn server_info(State(state): State<AppState>) -> Result<Response, ApiError> {
    let m = state.model()?;
    let info = m.engine.info();
    let body = ServerInfo {
        model_path: m.root.clone(),
        served_model_name: m.model_id.clone(),
        tp_size: 1,
        dp_size: 1,
        pp_size: 1,
        version: VERSION,
        is_embedding: false,
        context_length: info.context_length,
        max_model_len: max_model_len(m),
        max_total_tokens: info.kv_tiles * info.tile_size,
        max_running_requests: info.max_seqs,
        page_size: info.tile_size,
    };
    Ok(axum::Json(body).into_response())
}

/// `GET /model_info` (and `/get_model_info`): SGLang's model facts. There is no
/// `tokenizer_path`: the tokenizer lives inside the GGUF file, which a gateway cannot load;
/// `/tokenize` and the render routes tokenize for it.
#[derive(Serialize, ToSchema)]
struct ModelInfo {
    model_path: String,
    is_generation: bool,
    has_image_understanding: bool,
    has_audio_understanding: bool,
    model_type: String,
    architectures: Vec<String>,
}

#[utoipa::path(get, path = "/model_info", tag = "worker",
    responses((status = 200, description = "Model facts", body = ModelInfo)))]
pub async fn model_info(State(state): State<AppState>) -> Result<Response, ApiError> {
    let m = state.model()?;
    let body = ModelInfo {
        model_path: m.root.clone(),
        is_generation: true,
        has_image_understanding: false,
        has_audio_understanding: false,
        model_type: m.architecture.clone(),
        architectures: vec![m.architecture.clone()],
    };
    Ok(axum::Json(body).into_response())
}

/// Unix seconds as an RFC 3339 UTC timestamp (`2026-12-01T16:47:55Z`).
fn rfc3339(secs: u64) -> String {
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    let (y, mo, d) = civil_from_days(days);
    format!(
        "{y:04}-{mo:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem / 60 % 60,
        rem % 60
    )
}

/// Days since 1970-01-01 → (year, month, day) in the proleptic Gregorian calendar (Howard
/// Hinnant's `civil_from_days`).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

#[cfg(test)]
mod tests {
    use super::rfc3339;

    #[test]
    fn timestamps_are_rfc3339_utc() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(rfc3339(1_796_147_275), "2026-12-01T17:47:55Z");
    }
}
