//! `tessera serve`: the OpenAI-compatible HTTP server.
//!
//! The socket is bound first and the model loads in the background, so `/health` answers 503
//! while loading and 200 after (a load failure stops the server with an error). SIGINT or
//! SIGTERM starts draining: `/health` answers 503 at once and new API requests get 503
//! `shutting_down` (with `Connection: close`) while the listener stays open; in-flight requests
//! get up to `--shutdown-timeout` seconds to finish, then the engine aborts what is left, the
//! listener closes and the process exits 0.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use clap::Args;
use engine::EngineConfig;
use model::KvDtype;
use server::serving::reasoning::ReasoningParser;
use server::serving::state::ReasoningChoice;
use server::telemetry::LogFormat;
use server::{AppState, ServerConfig};
use tokio::sync::watch;

/// `--max-batch-tokens` by default: short steps, so streams wait little for their next token.
const MAX_BATCH_TOKENS: usize = 128;
/// `--max-batch-tokens` by default with a TPOT target, which then bounds each step: at 128 a
/// prompt of several hundred tokens took several steps while the streams stayed far under the
/// target (docs/GOODPUT.md).
const MAX_BATCH_TOKENS_SLO: usize = 1024;
/// `--max-batch-tokens` by default on an embedding model: no stream waits on its steps, and
/// the more inputs a step holds the fewer times each weight is read.
const MAX_BATCH_TOKENS_EMBED: usize = 2048;

#[derive(Args)]
pub struct ServeArgs {
    /// GGUF model file, or a known model's name (`tessera fetch-model --list`; fetched on first
    /// use, as the default model is when this is not given).
    #[arg(long)]
    model: Option<PathBuf>,
    /// Address to listen on (use 0.0.0.0 to accept connections from other machines).
    #[arg(long, default_value = "127.0.0.1")]
    host: String,
    /// Port to listen on (0 picks a free one; the log says which).
    #[arg(long, default_value_t = 8000)]
    port: u16,
    /// Worker threads for the matmuls (default: all cores).
    #[arg(long)]
    threads: Option<usize>,
    /// Memory for the KV cache, e.g. 512MiB, 2GiB, 300MB or a byte count (default: a quarter of
    /// the available memory, between 256 MiB and 1 GiB; printed at start). A pool of at most
    /// half the available memory is made resident while the server is idle.
    #[arg(long, value_parser = parse_size)]
    kv_memory: Option<usize>,
    /// How K and V are stored in the KV cache: f16, f32 (twice f16's bytes) or q8_0 (blocks of 32
    /// int8 values with one f16 scale: 34 bytes per 32 values, about half of f16's).
    #[arg(long, default_value = "f16", value_parser = parse_kv_dtype)]
    kv_dtype: KvDtype,
    /// Tokens per KV tile (the unit of allocation and of prefix sharing).
    #[arg(long, default_value_t = 16)]
    tile_size: usize,
    /// Most sequences in one engine step.
    #[arg(long, default_value_t = 64)]
    max_seqs: usize,
    /// Most tokens (decode tokens plus prefill chunks) in one engine step; with chunked prefill a
    /// longer prompt is prefilled over several steps. A smaller value keeps steps shorter, so
    /// running streams wait less for their next token, and prompts take more steps to prefill.
    /// Default 128, or 1024 with --slo-tpot-ms (the TPOT target then bounds each step).
    #[arg(long, value_name = "N")]
    max_batch_tokens: Option<usize>,
    /// Most prompt tokens in a step that decodes no stream (nobody is waiting for a next
    /// token, as when requests reach an idle server): a long prompt then runs in chunks this
    /// long, whose matmuls multiply more rows per weight read. Values under --max-batch-tokens
    /// leave that as the limit.
    #[arg(long, value_name = "N", default_value_t = 1024)]
    max_prefill_tokens: usize,
    /// How many times as long as a decode-only step a step that carries prefill alongside
    /// running streams may take (a ratio). The prefill tokens of such steps are capped from
    /// measured step times, which bounds the streams' inter-token latency; a lower value evens
    /// out the streams' tokens and makes prompts wait longer for their first. While more
    /// requests wait for their first token than there are streams, the cap is lifted (prefill
    /// then fills --max-batch-tokens), so a burst of prompts does not keep the batch small. 0 =
    /// no cap (only --max-batch-tokens limits prefill).
    #[arg(long, default_value_t = 1.5)]
    max_itl_slowdown: f64,
    /// Time-to-first-token target (ms) the scheduler aims at: prompts that can still meet it
    /// are prefilled first, earliest deadline first; those that cannot go after them.
    #[arg(long, value_name = "MS")]
    slo_ttft_ms: Option<f64>,
    /// Time-per-output-token target (ms) the scheduler aims at: each step that decodes
    /// carries as much prefill as the streams' pace leaves room for under this target (it
    /// replaces --max-itl-slowdown).
    #[arg(long, value_name = "MS")]
    slo_tpot_ms: Option<f64>,
    /// Most requests allowed to wait; beyond it requests get 429 with Retry-After.
    #[arg(long, default_value_t = 256)]
    max_waiting: usize,
    /// Turn off the prefix cache (shared prompt prefixes are then recomputed).
    #[arg(long)]
    no_prefix_cache: bool,
    /// Turn off chunked prefill (a prompt is then prefilled whole in one step).
    #[arg(long)]
    no_chunked_prefill: bool,
    /// Require `Authorization: Bearer KEY` on the API routes (/health and /metrics stay open
    /// unless --protect-health / --protect-metrics).
    #[arg(long, env = "TESSERA_API_KEY", hide_env_values = true)]
    api_key: Option<String>,
    /// Seconds in-flight requests get to finish after SIGINT/SIGTERM.
    #[arg(long, default_value_t = 30)]
    shutdown_timeout: u64,
    /// Jinja chat template file, overriding the model's own (or the built-in Gemma format);
    /// rendered as transformers renders it, and refused at start (naming its line) if it does
    /// not compile or needs what Tessera cannot reproduce.
    #[arg(long)]
    chat_template: Option<PathBuf>,
    /// How an embedding model pools its token states into one vector (or, `rank`, a
    /// reranker's score); default: what the GGUF file says (`<arch>.pooling_type`). On a
    /// generative model (a decoder such as Qwen3) it serves that model as an embedding model:
    /// `/v1/embeddings` instead of the generation routes, as vLLM's `--task embed`.
    #[arg(long, value_parser = ["mean", "cls", "last", "rank"])]
    pooling: Option<String>,
    /// The arithmetic of an embedding encoder's float projections, as vLLM's `--dtype`:
    /// `float32` (the file's weights, f32 activations and sums), `bfloat16` (weights and
    /// activations rounded to BF16, f32 sums: about 1.45x the matmul speed on CPUs with
    /// AVX-512 BF16, about 5x that with AMX-BF16, emulated at no gain elsewhere), `auto`
    /// (bfloat16 where the CPU has AVX-512 BF16, else float32). Generating models compute in their own block formats: any value but
    /// `auto` is refused for them.
    #[arg(long, default_value = "auto", value_parser = ["auto", "float32", "bfloat16"])]
    dtype: String,
    /// How the model's reasoning is split from its answer (`reasoning_content` in chat,
    /// `thinking` blocks in messages, `reasoning` items in responses): `deepseek_r1` (text up
    /// to `</think>`, the prompt having opened the block), `qwen3` (a reply opening with
    /// `<think>`), `gpt-oss` (the analysis channel), `none`. Default: told from the chat
    /// template.
    #[arg(long, value_parser = ["deepseek_r1", "qwen3", "gpt-oss", "none"])]
    reasoning_parser: Option<String>,
    /// Speculative decoding: `ngram` drafts each stream's next tokens from its own prompt and
    /// output (prompt lookup) and verifies them in the same step; the output is the same as
    /// without it. Off by default.
    #[arg(long, value_parser = ["ngram"])]
    speculative: Option<String>,
    /// Most drafted tokens per stream and step with --speculative or --draft-model (fewer,
    /// down to none, when measured step costs — a draft model's own included — and the
    /// stream's acceptance rate say more would not pay).
    #[arg(long, default_value_t = 5)]
    speculative_tokens: usize,
    /// Shortest and longest n-gram matched with --speculative ngram.
    #[arg(long, default_value_t = 2)]
    ngram_min: usize,
    #[arg(long, default_value_t = 4)]
    ngram_max: usize,
    /// Speculative decoding with a draft model (a file, or a known model's name): a smaller
    /// model with the same tokenizer (e.g. qwen2.5-coder-0.5b for qwen2.5-coder-1.5b) drafts
    /// each stream's next tokens. Greedy output is bit-identical to decoding without it;
    /// sampled output keeps its distribution (speculative sampling). Off by default; not with
    /// --speculative ngram.
    #[arg(long, conflicts_with = "speculative")]
    draft_model: Option<PathBuf>,
    /// Memory for the draft model's own KV cache, apart from --kv-memory (default: a quarter
    /// of --kv-memory, at least 64 MiB).
    #[arg(long, value_parser = parse_size, requires = "draft_model")]
    draft_kv_memory: Option<usize>,
    #[command(flatten)]
    lora: crate::lora::LoraArgs,
    /// A KV tier on local disk: full KV tiles evicted from memory are kept in this directory
    /// (one file per tile) and found again by later requests with the same prefix, also after a
    /// restart. Off by default.
    #[arg(long)]
    kv_disk: Option<PathBuf>,
    /// Most bytes the --kv-disk directory may hold (least recently used tiles go first).
    #[arg(long, default_value = "8GiB", value_parser = parse_size)]
    kv_disk_size: usize,
    /// A KV tier in Redis (`redis://HOST:PORT/DB`), asked after --kv-disk: replicas sharing
    /// one Redis share each other's prefixes. Redis being down costs a recompute, not a
    /// failure; the tier reconnects when it returns.
    #[arg(long)]
    kv_redis: Option<String>,
    /// Seconds a tile lives in Redis (0: until Redis's maxmemory-policy evicts it).
    #[arg(long, default_value_t = 0)]
    kv_redis_ttl: u64,
    /// Write full KV tiles to the tiers as soon as they are computed, not only when evicted
    /// (replicas sharing a tier then find each other's prefixes at once).
    #[arg(long)]
    kv_tier_write_through: bool,
    /// Largest request body, e.g. 4MiB.
    #[arg(long, default_value = "4MiB", value_parser = parse_size)]
    max_body: usize,
    /// Names to serve the model under (default: the file name without .gguf). The first is
    /// the one responses and /v1/models report first; every one is accepted as `model`.
    #[arg(long, num_args = 1.., value_name = "NAME")]
    served_model_name: Vec<String>,
    /// Origins whose browser pages may call the API (CORS), e.g. `https://app.example.com`, or
    /// `*` for any. Default: none (no CORS headers). Preflights need no API key.
    #[arg(long, num_args = 1.., value_name = "ORIGIN", value_parser = server::cors::parse_origin)]
    allowed_origins: Vec<String>,
    /// Most /v1/responses results kept in memory for previous_response_id and retrieval (the
    /// least recently used are dropped first; 0 keeps none).
    #[arg(long, default_value_t = 1024)]
    max_stored_responses: usize,
    /// Most tokens one request may generate: a larger max_tokens / max_completion_tokens /
    /// max_output_tokens is refused with a 400, and a request without one stops there (default:
    /// only the context bounds it). /openapi.json publishes it as the fields' maximum.
    #[arg(long, value_name = "TOKENS")]
    max_tokens_limit: Option<usize>,
    /// Log lines as `human` text or as `json` (one object a line; each finished request gets one
    /// with its id, trace id, tokens, timings, finish reason and status).
    #[arg(long, default_value = "human", value_parser = LogFormat::parse)]
    pub log_format: LogFormat,
    /// Export a span per request over OTLP (HTTP/protobuf) to this collector, e.g.
    /// http://localhost:4318 (`/v1/traces` is added to a URL without a path). A request's W3C
    /// `traceparent` header is continued. Off by default.
    #[arg(long)]
    pub otlp_traces_endpoint: Option<String>,
    /// Seconds a request may take from its arrival to its last byte; past it a whole response
    /// is answered 504 and a stream ends with an in-band error, and the generation is aborted.
    /// 0 (the default): no deadline.
    #[arg(long, default_value_t = 0, value_name = "SECS")]
    request_timeout: u64,
    /// Seconds from the first byte of a request head to its last, and from a new connection's
    /// opening to its first byte; a client that sends half a header, or nothing, is disconnected.
    #[arg(long, default_value_t = 10, value_name = "SECS")]
    header_read_timeout: u64,
    /// Seconds a client has to send a request's body once its head arrived (408 past it).
    #[arg(long, default_value_t = 30, value_name = "SECS")]
    body_read_timeout: u64,
    /// Seconds an idle keep-alive connection stays open (above the usual 60 s idle timeout of
    /// load balancers, so they close first).
    #[arg(long, default_value_t = 75, value_name = "SECS")]
    keep_alive_timeout: u64,
    /// Most connections open at once; further ones wait in the listen queue until one closes
    /// (none is refused). Keep it under the open-file limit (ulimit -n).
    #[arg(long, default_value_t = 512)]
    max_connections: usize,
    /// Require the API key on /metrics too (with --api-key).
    #[arg(long)]
    protect_metrics: bool,
    /// Require the API key on /health too (with --api-key; probes must then send it).
    #[arg(long)]
    protect_health: bool,
    /// Publish KV cache events (tiles stored in and evicted from the prefix cache) on a ZeroMQ
    /// PUB socket in vLLM's format, for prefix-aware routers (llm-d, Dynamo). As with vLLM,
    /// `tcp://*:5557` binds and `tcp://HOST:PORT` connects to a subscriber that binds. Off by
    /// default.
    #[arg(long, value_name = "ENDPOINT")]
    kv_events_endpoint: Option<String>,
    /// A ROUTER socket (bound) that replays missed event batches, from the last
    /// --kv-events-buffer-steps, to a subscriber that sends the first sequence number it
    /// missed (8 bytes, big-endian).
    #[arg(long, value_name = "ENDPOINT", requires = "kv_events_endpoint")]
    kv_events_replay_endpoint: Option<String>,
    /// The topic frame of every event message (llm-d's per-pod subscriber expects
    /// `kv@POD@MODEL`).
    #[arg(long, default_value = "", requires = "kv_events_endpoint")]
    kv_events_topic: String,
    /// Event batches kept for replay.
    #[arg(long, default_value_t = 10_000, requires = "kv_events_endpoint")]
    kv_events_buffer_steps: usize,
    /// Serve GET /debug/kv_index: the prefix index (token ids of every cached prefix) as a KV
    /// event subscriber should hold it, behind the API key. For checking subscribers.
    #[arg(long)]
    debug_kv_index: bool,
}

/// Parses sizes like `512MiB`, `2GiB`, `300MB`, `64k` or a plain byte count.
fn parse_size(s: &str) -> Result<usize, String> {
    let t = s.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let value: f64 = num
        .parse()
        .map_err(|_| format!("{s:?} is not a size (e.g. 512MiB)"))?;
    let mult: f64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1.0,
        "k" | "kb" => 1e3,
        "kib" => 1024.0,
        "m" | "mb" => 1e6,
        "mib" => 1024.0 * 1024.0,
        "g" | "gb" => 1e9,
        "gib" => 1024.0 * 1024.0 * 1024.0,
        other => {
            return Err(format!(
                "unknown size unit {other:?} (use B, KiB, MiB, GiB, KB, MB, GB)"
            ))
        }
    };
    let bytes = value * mult;
    if !bytes.is_finite() || bytes < 1.0 || bytes > usize::MAX as f64 {
        return Err(format!("{s:?} is out of range"));
    }
    Ok(bytes as usize)
}

/// The HTTP-layer settings from the flags.
fn server_config(args: &ServeArgs) -> Result<ServerConfig> {
    if args.served_model_name.iter().any(|n| n.trim().is_empty()) {
        bail!("--served-model-name: a name must not be empty");
    }
    if (args.protect_metrics || args.protect_health)
        && args.api_key.as_deref().is_none_or(str::is_empty)
    {
        bail!("--protect-metrics and --protect-health need --api-key");
    }
    Ok(ServerConfig {
        api_key: args.api_key.clone().filter(|k| !k.is_empty()),
        body_limit: args.max_body,
        served_model_names: args.served_model_name.clone(),
        allowed_origins: args.allowed_origins.clone(),
        max_stored_responses: args.max_stored_responses,
        request_timeout: (args.request_timeout > 0)
            .then(|| Duration::from_secs(args.request_timeout)),
        header_read_timeout: positive_secs("--header-read-timeout", args.header_read_timeout)?,
        body_read_timeout: positive_secs("--body-read-timeout", args.body_read_timeout)?,
        keep_alive_timeout: positive_secs("--keep-alive-timeout", args.keep_alive_timeout)?,
        max_connections: match args.max_connections {
            0 => bail!("--max-connections must be at least 1"),
            n => n,
        },
        protect_metrics: args.protect_metrics,
        protect_health: args.protect_health,
        debug_kv_index: args.debug_kv_index,
        max_tokens_limit: args.max_tokens_limit,
        ..ServerConfig::default()
    })
}

/// A timeout flag's value, which must not be 0.
fn positive_secs(flag: &str, secs: u64) -> Result<Duration> {
    if secs == 0 {
        bail!("{flag} must be at least 1 second");
    }
    Ok(Duration::from_secs(secs))
}

fn parse_kv_dtype(s: &str) -> Result<KvDtype, String> {
    KvDtype::parse(s).ok_or_else(|| format!("expected f32, f16 or q8_0, not {s:?}"))
}

/// The default KV memory: a quarter of MemAvailable, clamped to 256 MiB ..= 1 GiB (1 GiB holds
/// 58k tokens of Gemma 3 270M at f16; the engine makes it resident while idle).
fn default_kv_memory(available: Option<usize>) -> usize {
    (available.unwrap_or(2 << 30) / 4).clamp(256 << 20, 1 << 30)
}

/// The speculative decoding the flags ask for: prompt lookup, a draft model (whose vocabulary
/// must be the served model's), or none.
fn speculative(
    args: &ServeArgs,
    path: &std::path::Path,
    kv_bytes: usize,
    threads: usize,
) -> Result<Option<engine::SpeculativeConfig>> {
    let draft_model = match &args.draft_model {
        Some(d) => {
            let draft = crate::resolve_model(Some(d.clone()))?;
            model::draft_vocab::check_vocab_files(path, &draft).map_err(anyhow::Error::msg)?;
            let kv_bytes = args
                .draft_kv_memory
                .unwrap_or_else(|| (kv_bytes / 4).max(64 << 20));
            tracing::info!(
                "draft model {} with {} MiB of KV cache",
                draft.display(),
                kv_bytes >> 20
            );
            Some(engine::DraftModelConfig {
                load: crate::runners::cpu_draft(draft, threads),
                kv_bytes,
            })
        }
        None if args.speculative.is_none() => return Ok(None),
        None => None,
    };
    Ok(Some(engine::SpeculativeConfig {
        tokens: args.speculative_tokens,
        min_n: args.ngram_min,
        max_n: args.ngram_max,
        draft_model,
    }))
}

/// MemAvailable from /proc/meminfo, in bytes (None elsewhere).
fn mem_available() -> Option<usize> {
    std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| {
            m.lines()
                .find(|l| l.starts_with("MemAvailable:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|kb| kb.parse::<usize>().ok())
        })
        .map(|kb| kb * 1024)
}

pub fn run(args: ServeArgs) -> Result<()> {
    let path = crate::resolve_model(args.model.clone())?;
    let threads = args
        .threads
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    let template = match &args.chat_template {
        Some(p) => Some(
            std::fs::read_to_string(p)
                .with_context(|| format!("reading the chat template {}", p.display()))?,
        ),
        None => None,
    };
    let names = if args.served_model_name.is_empty() {
        vec![server::serving::state::model_id_for(&path)]
    } else {
        args.served_model_name.clone()
    };
    let loras = args.lora.plan(&names)?;
    let load = LoadOptions {
        merged: loras.merged,
        template,
        // The parser accepts only the names `Pooling::from_name` knows.
        pooling: args.pooling.as_deref().and_then(model::Pooling::from_name),
        // The parser accepts only the names `Dtype::from_name` knows.
        dtype: model::Dtype::from_name(&args.dtype).unwrap_or(model::Dtype::Auto),
        reasoning: reasoning_choice(args.reasoning_parser.as_deref()),
    };
    let available = mem_available();
    let kv_bytes = args
        .kv_memory
        .unwrap_or_else(|| default_kv_memory(available));
    tracing::info!(
        "KV cache: {} MiB of {:?}{}",
        kv_bytes >> 20,
        args.kv_dtype,
        if args.kv_memory.is_none() {
            " (default: a quarter of the available memory)"
        } else {
            ""
        }
    );
    // The engine faults the pool in while idle; a pool over half the available memory is left
    // to fault in as it is used, as the OS may have promised more than it can back.
    let warm_kv = available.is_none_or(|m| kv_bytes <= m / 2);
    if !warm_kv {
        tracing::info!("KV cache over half the available memory: its pages are faulted in as used");
    }
    let engine_cfg = EngineConfig {
        warm_kv,
        tile_size: args.tile_size,
        kv_bytes,
        kv_dtype: args.kv_dtype,
        max_batch_tokens: args.max_batch_tokens.unwrap_or(
            if args.pooling.is_some() || crate::runners::is_embedding_model(&path) {
                MAX_BATCH_TOKENS_EMBED
            } else if args.slo_tpot_ms.is_some() {
                MAX_BATCH_TOKENS_SLO
            } else {
                MAX_BATCH_TOKENS
            },
        ),
        max_prefill_tokens: args.max_prefill_tokens,
        max_seqs: args.max_seqs,
        chunked_prefill: !args.no_chunked_prefill,
        prefix_caching: !args.no_prefix_cache,
        max_waiting: args.max_waiting,
        itl_slowdown: args.max_itl_slowdown,
        slo: slo_targets(&args)?,
        kv_tiers: kv_tiers(&args, &path)?,
        kv_events: kv_events(&args)?,
        speculative: speculative(&args, &path, kv_bytes, threads)?,
        loras: loras.served,
        max_loras: args.lora.max_loras,
        ..EngineConfig::default()
    };
    if let Err(e) = engine_cfg.validate() {
        bail!("{e}");
    }
    let server_cfg = server_config(&args)?;
    // The HTTP side needs little CPU; the cores belong to the engine's matmul workers.
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    let grace = Duration::from_secs(args.shutdown_timeout);
    rt.block_on(serve(
        args, path, threads, engine_cfg, server_cfg, load, grace,
    ))
}

/// Whether `path` holds an embedding model (an unreadable file is left for the loader to
/// report).
/// How the model is loaded beyond its file: `--lora-merge`'s adapters, `--chat-template`'s
/// text, `--pooling`, `--dtype` and `--reasoning-parser`.
struct LoadOptions {
    /// `--lora-merge`'s adapter files, merged into the weights at load.
    merged: Vec<PathBuf>,
    template: Option<String>,
    pooling: Option<model::Pooling>,
    dtype: model::Dtype,
    reasoning: ReasoningChoice,
}

/// Why the server stops: None = still running, Some(Ok) = a signal, Some(Err) = a fault (the
/// model failed to load, or the engine thread died).
type StopReason = Option<Result<(), String>>;

/// Binds the listener at once (so probes get answers while the model loads), loads the model
/// in the background, and serves until a signal or a fault; then drains within `grace`.
async fn serve(
    args: ServeArgs,
    path: PathBuf,
    threads: usize,
    engine_cfg: EngineConfig,
    server_cfg: ServerConfig,
    load: LoadOptions,
    grace: Duration,
) -> Result<()> {
    let listener = tokio::net::TcpListener::bind((args.host.as_str(), args.port))
        .await
        .with_context(|| format!("binding {}:{}", args.host, args.port))?;
    let addr: SocketAddr = listener.local_addr()?;
    tracing::info!(
        "listening on http://{addr} (loading {} ...)",
        path.display()
    );
    let state = AppState::new(server_cfg);

    let (stop_tx, stop_rx) = watch::channel::<StopReason>(None);
    spawn_loader(
        &state,
        stop_tx.clone(),
        addr,
        path,
        threads,
        engine_cfg,
        load,
    );
    spawn_watchdog(&state, stop_tx.clone());
    spawn_signal_handler(&state, stop_tx, grace);
    serve_until_stopped(listener, state, stop_rx, grace).await
}

/// `--reasoning-parser`'s value (absent: told from the chat template).
fn reasoning_choice(name: Option<&str>) -> ReasoningChoice {
    match name {
        None => ReasoningChoice::Auto,
        Some("none") => ReasoningChoice::Off,
        // clap allows only the parsers' names and `none`.
        Some(n) => {
            ReasoningParser::from_name(n).map_or(ReasoningChoice::Off, ReasoningChoice::Parser)
        }
    }
}

/// Loads the model on a blocking thread, with a spinner; a failure stops the server. `chat`:
/// the `--chat-template` text and the reasoning parser.
fn spawn_loader(
    state: &AppState,
    stop_tx: watch::Sender<StopReason>,
    addr: SocketAddr,
    path: PathBuf,
    threads: usize,
    engine_cfg: EngineConfig,
    load: LoadOptions,
) {
    let loader_state = state.clone();
    tokio::task::spawn_blocking(move || {
        // A spinner with the elapsed time while the weights are mapped, the tokenizer built and
        // the KV pool allocated (hidden when stderr is not a terminal).
        let spinner = indicatif::ProgressBar::new_spinner().with_message(format!(
            "loading {} (weights, tokenizer, {} MiB KV pool)",
            path.display(),
            engine_cfg.kv_bytes >> 20
        ));
        spinner.enable_steady_tick(Duration::from_millis(100));
        let t0 = std::time::Instant::now();
        let model =
            crate::runners::cpu_model(path.clone(), threads, load.pooling, load.dtype, load.merged);
        let loaded = server::load_model(&path, engine_cfg, load.template, model)
            .map(|m| m.with_reasoning(load.reasoning));
        spinner.finish_and_clear();
        match loaded {
            Ok(m) => {
                loader_state.set_loaded(m);
                tracing::info!(
                    "model loaded in {:.2}s; ready on http://{addr}",
                    t0.elapsed().as_secs_f64()
                );
            }
            Err(e) => {
                let _ = stop_tx.send(Some(Err(format!("loading {}: {e}", path.display()))));
            }
        }
    });
}

/// An engine thread that died of a fault it could not contain serves nothing more: stop, and
/// exit non-zero so that a supervisor restarts the process.
fn spawn_watchdog(state: &AppState, stop_tx: watch::Sender<StopReason>) {
    let watched = state.clone();
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(Duration::from_millis(500)).await;
            let dead = watched.loaded().is_some_and(|m| !m.engine.is_alive());
            if dead && stop_tx.borrow().is_none() {
                tracing::error!("the engine thread has died; stopping");
                let _ = stop_tx.send(Some(Err("the engine thread died".into())));
                return;
            }
        }
    });
}

/// On SIGINT or SIGTERM: drain (/health answers 503, new requests are refused) and stop.
fn spawn_signal_handler(state: &AppState, stop_tx: watch::Sender<StopReason>, grace: Duration) {
    let signal_state = state.clone();
    tokio::spawn(async move {
        wait_for_signal().await;
        signal_state.drain();
        tracing::info!(
            "draining: /health answers 503, new requests are refused, in-flight requests get \
             {grace:?}"
        );
        let _ = stop_tx.send(Some(Ok(())));
    });
}

/// Serves until a stop reason arrives, stops the engine within `grace` (a backstop exits 5 s
/// later whatever connections remain), and returns the stop reason as the outcome.
async fn serve_until_stopped(
    listener: tokio::net::TcpListener,
    state: AppState,
    stop_rx: watch::Receiver<StopReason>,
    grace: Duration,
) -> Result<()> {
    let engine_state = state.clone();
    let mut graceful_rx = stop_rx.clone();
    // The listener stays open while the engine drains, so probes see the 503 and a gateway's
    // new requests get a clean 503 to retry elsewhere instead of a refused connection; once
    // the engine has stopped, the listener closes and the finished connections with it.
    let on_stop = async move {
        let _ = graceful_rx.wait_for(Option::is_some).await;
        if let Some(m) = engine_state.loaded() {
            let engine = m.engine.clone();
            // Stopping the engine ends in-flight streams by the deadline.
            let _ = tokio::task::spawn_blocking(move || engine.shutdown(grace)).await;
        }
    };
    let mut deadline_rx = stop_rx.clone();
    let backstop = async move {
        let _ = deadline_rx.wait_for(Option::is_some).await;
        tokio::time::sleep(grace + Duration::from_secs(5)).await;
    };
    tokio::select! {
        r = server::serve(listener, state, on_stop) => r.context("serving")?,
        _ = backstop => tracing::warn!("connections still open after the grace period; exiting"),
    }
    let outcome = stop_rx.borrow().clone();
    match outcome {
        Some(Err(e)) => bail!("{e}"),
        _ => {
            tracing::info!("stopped");
            Ok(())
        }
    }
}

/// The KV tier settings, with the model file's fingerprint (SHA-256 of its bytes) when a tier
/// is asked for.
fn kv_tiers(args: &ServeArgs, model: &std::path::Path) -> Result<Option<engine::TierConfig>> {
    if args.kv_disk.is_none() && args.kv_redis.is_none() {
        return Ok(None);
    }
    let t0 = std::time::Instant::now();
    let model_fingerprint = crate::fetch::sha256_file(model)
        .with_context(|| format!("fingerprinting {}", model.display()))?;
    tracing::info!(
        "model fingerprint for the KV tiers in {:.2}s",
        t0.elapsed().as_secs_f64()
    );
    Ok(Some(engine::TierConfig {
        model_fingerprint,
        disk: args
            .kv_disk
            .as_ref()
            .map(|d| (d.clone(), args.kv_disk_size as u64)),
        redis: args.kv_redis.as_ref().map(|url| {
            let ttl = (args.kv_redis_ttl > 0).then(|| Duration::from_secs(args.kv_redis_ttl));
            (url.clone(), ttl)
        }),
        write_through: args.kv_tier_write_through,
    }))
}

/// Starts the KV event publisher when --kv-events-endpoint asks for one.
fn kv_events(args: &ServeArgs) -> Result<Option<engine::kv_events::KvEventSink>> {
    let Some(endpoint) = &args.kv_events_endpoint else {
        return Ok(None);
    };
    if args.no_prefix_cache {
        bail!(
            "--kv-events-endpoint describes the prefix cache: it cannot go with --no-prefix-cache"
        );
    }
    let cfg = kv_events::PublisherConfig {
        replay_endpoint: args.kv_events_replay_endpoint.clone(),
        topic: args.kv_events_topic.clone(),
        buffer_steps: args.kv_events_buffer_steps.max(1),
        ..kv_events::PublisherConfig::new(endpoint.clone(), args.tile_size)
    };
    let sink = kv_events::start(cfg)?;
    tracing::info!(
        "KV events on {endpoint}{}",
        args.kv_events_replay_endpoint
            .as_ref()
            .map_or(String::new(), |r| format!(", replay on {r}"))
    );
    Ok(Some(sink))
}

/// SIGINT (Ctrl-C) or SIGTERM.
async fn wait_for_signal() {
    let ctrl_c = async {
        if let Err(e) = tokio::signal::ctrl_c().await {
            tracing::error!("cannot listen for Ctrl-C: {e}");
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(e) => {
                tracing::error!("cannot listen for SIGTERM: {e}");
                std::future::pending::<()>().await;
            }
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => {},
        _ = term => {},
    }
}

/// `--slo-ttft-ms` / `--slo-tpot-ms` as the engine's latency targets.
fn slo_targets(args: &ServeArgs) -> Result<engine::SloTargets> {
    let ms = |flag: &str, v: Option<f64>| -> Result<Option<Duration>> {
        v.map(|ms| {
            Duration::try_from_secs_f64(ms / 1e3)
                .ok()
                .filter(|d| !d.is_zero())
                .ok_or_else(|| anyhow::anyhow!("--{flag} must be a positive number, not {ms}"))
        })
        .transpose()
    };
    Ok(engine::SloTargets {
        ttft: ms("slo-ttft-ms", args.slo_ttft_ms)?,
        tpot: ms("slo-tpot-ms", args.slo_tpot_ms)?,
    })
}

#[cfg(test)]
mod tests {
    use super::parse_size;

    #[test]
    fn sizes_parse_with_binary_and_decimal_units() {
        assert_eq!(parse_size("512MiB"), Ok(512 << 20));
        assert_eq!(parse_size("2GiB"), Ok(2 << 30));
        assert_eq!(parse_size("300MB"), Ok(300_000_000));
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size("1.5KiB"), Ok(1536));
        assert!(parse_size("12 parsecs").is_err());
        assert!(parse_size("0").is_err());
        assert!(parse_size("").is_err());
    }
}
