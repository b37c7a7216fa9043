//! Shared state of the HTTP layer: settings, the loaded model (absent while it loads), the
//! server-side counters and the state endpoint families keep (the stored `/v1/responses`
//! results).
//!
//! The server binds before the model is loaded, so `/health` can honestly answer 503 while
//! loading; `AppState::set_loaded` flips it once. Everything else about the model (tokenizer,
//! context length, chat template) is read from the `Loaded` value, which never changes after.

use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use axum::http::Extensions;
use engine::{EngineConfig, EngineHandle};

use crate::base::{unix_now, ApiError, ERROR_LABELS};
use crate::serving::chat_template::ChatTemplate;
use crate::serving::reasoning::{Reasoning, ReasoningParser};

/// HTTP-layer settings.
#[derive(Clone, Debug)]
pub struct ServerConfig {
    /// Bearer token required on the API routes (None = open).
    pub api_key: Option<String>,
    /// Whether `/metrics` needs the API key too (it is open by default, for scrapers).
    pub protect_metrics: bool,
    /// Whether `/health` needs the API key too (it is open by default, for probes).
    pub protect_health: bool,
    /// Largest request body, in bytes.
    pub body_limit: usize,
    /// Time a client has to send a request's whole body once its head arrived.
    pub body_read_timeout: Duration,
    /// Deadline of a request from its arrival to its last byte (None: no deadline).
    pub request_timeout: Option<Duration>,
    /// Most connections open at once (more wait in the accept queue).
    pub max_connections: usize,
    /// Time from the first byte of a request head to its last (and from a connection's opening
    /// to its first byte).
    pub header_read_timeout: Duration,
    /// Time an idle keep-alive connection stays open.
    pub keep_alive_timeout: Duration,
    /// Largest `n` (choices per prompt) a request may ask for.
    pub max_n: usize,
    /// Largest number of prompts in one completions request.
    pub max_prompts: usize,
    /// Largest `logprobs` / `top_logprobs`.
    pub max_logprobs: usize,
    /// Names the model is served under (`--served-model-name`): the first is reported in
    /// responses, every one is accepted as `model`. Empty: the file name without `.gguf`.
    pub served_model_names: Vec<String>,
    /// Origins allowed to call the API from a browser (`--allowed-origins`; `*` for any).
    /// Empty: no CORS headers at all.
    pub allowed_origins: Vec<String>,
    /// Most `/v1/responses` results kept for `previous_response_id` and retrieval (the least
    /// recently used go first).
    pub max_stored_responses: usize,
    /// Serve `GET /debug/kv_index` (the prefix index with its token ids; behind the API key).
    pub debug_kv_index: bool,
    /// Most tokens one request may ask to generate (`max_tokens`, `max_completion_tokens`,
    /// `max_output_tokens`; more is a 400), and the most it generates without asking. None:
    /// only the context bounds it.
    pub max_tokens_limit: Option<usize>,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            api_key: None,
            protect_metrics: false,
            protect_health: false,
            body_limit: 4 << 20,
            body_read_timeout: Duration::from_secs(30),
            request_timeout: None,
            max_connections: 512,
            header_read_timeout: Duration::from_secs(10),
            keep_alive_timeout: Duration::from_secs(75),
            max_n: 16,
            max_prompts: 64,
            max_logprobs: 20,
            served_model_names: Vec::new(),
            allowed_origins: Vec::new(),
            max_stored_responses: 1024,
            debug_kv_index: false,
            max_tokens_limit: None,
        }
    }
}

/// A model ready to serve.
pub struct Loaded {
    pub engine: EngineHandle,
    /// The name responses report in `model`: the first served name, else the file name
    /// without `.gguf`.
    pub model_id: String,
    /// The other names accepted in `model` (the rest of the served names).
    pub aliases: Vec<String>,
    /// The file name without `.gguf` (`root` in `/v1/models`, as vLLM's model path).
    pub root: String,
    /// The GGUF `general.architecture` (`gemma3`, `llama`, ...), reported to gateways.
    pub architecture: String,
    pub chat_template: ChatTemplate,
    /// The reasoning parser (`--reasoning-parser`, else told from the chat template).
    pub reasoning: Option<Reasoning>,
    /// Unix seconds when loading finished (`created` in `/v1/models`).
    pub created: u64,
    /// The LoRA adapters requests may name (`serving::lora`).
    pub loras: crate::serving::lora::LoraTable,
}

/// `--reasoning-parser`: told from the chat template, none, or a named parser.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReasoningChoice {
    Auto,
    Off,
    Parser(ReasoningParser),
}

impl Loaded {
    /// Sets the reasoning parser: `Auto` tells it from the chat template.
    pub fn with_reasoning(mut self, choice: ReasoningChoice) -> Loaded {
        let parser = match choice {
            ReasoningChoice::Auto => self.chat_template.reasoning_parser(),
            ReasoningChoice::Off => None,
            ReasoningChoice::Parser(p) => Some(p),
        };
        self.reasoning = parser.map(|p| Reasoning::new(p, self.engine.tokenizer()));
        if let Some(p) = parser {
            tracing::info!("reasoning parser: {}", p.name());
        }
        self
    }

    /// Every name `model` may hold, the reported one first.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        std::iter::once(self.model_id.as_str()).chain(self.aliases.iter().map(String::as_str))
    }
}

/// Starts an engine thread on the model `load` gives (blocking; call it off the async runtime).
/// The caller chooses the runner: `load` returns a model that becomes one (`IntoRunner`).
/// `path` is the GGUF file, read here for its architecture and chat template.
///
/// `chat_template_override` is the text of a `--chat-template` file.
pub fn load_model<M, F>(
    path: &Path,
    cfg: EngineConfig,
    chat_template_override: Option<String>,
    load: F,
) -> Result<Loaded, String>
where
    M: engine::IntoRunner,
    F: FnOnce() -> Result<(M, model::Tokenizer), engine::LoadError> + Send + 'static,
{
    let (arch, gguf_template) = read_chat_metadata(path)?;
    let chat_template = ChatTemplate::choose(chat_template_override, gguf_template, &arch)?;
    let loras = crate::serving::lora::LoraTable::new(&cfg.loras);
    let engine = EngineHandle::spawn(cfg, load).map_err(|e| e.to_string())?;
    let what = match engine.info().embedding {
        Some(e) if e.scores => "a reranker".to_string(),
        Some(e) => format!("embeddings of {} floats", e.dim),
        None => format!(
            "max_model_len {} with this KV pool, {} KV tiles of {}, chat template: {}",
            engine.info().max_seq_len.min(engine.info().context_length),
            engine.info().kv_tiles,
            engine.info().tile_size,
            chat_template.describe()
        ),
    };
    tracing::info!(
        "loaded {} ({arch}, context {}, {what})",
        path.display(),
        engine.info().context_length,
    );
    Ok(Loaded {
        engine,
        model_id: model_id_for(path),
        aliases: Vec::new(),
        root: model_id_for(path),
        architecture: arch,
        reasoning: None,
        chat_template,
        created: unix_now(),
        loras,
    }
    .with_reasoning(ReasoningChoice::Auto))
}

/// The architecture name and the chat template (if any) from the GGUF metadata.
fn read_chat_metadata(path: &Path) -> Result<(String, Option<String>), String> {
    let file = gguf::GgufFile::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let md = file.metadata();
    let text = |key: &str| match md.get(key) {
        Some(gguf::Value::String(s)) => Some(s.clone()),
        _ => None,
    };
    Ok((
        text("general.architecture").unwrap_or_default(),
        text("tokenizer.chat_template"),
    ))
}

/// The model id for a file: its name without the `.gguf` extension.
pub fn model_id_for(path: &Path) -> String {
    path.file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| "model".into())
}

/// Counters kept by the HTTP layer (the engine keeps its own in `EngineStats`).
pub struct ServerCounters {
    errors: HashMap<&'static str, AtomicU64>,
    /// Requests accepted by the completion routes (any outcome).
    pub requests: AtomicU64,
}

impl Default for ServerCounters {
    fn default() -> Self {
        ServerCounters {
            errors: ERROR_LABELS
                .iter()
                .map(|&l| (l, AtomicU64::new(0)))
                .collect(),
            requests: AtomicU64::new(0),
        }
    }
}

impl ServerCounters {
    pub fn count_error(&self, label: &str) {
        if let Some(c) = self.errors.get(label) {
            c.fetch_add(1, Relaxed);
        }
    }

    /// (label, count) for every error label, in a fixed order.
    pub fn errors(&self) -> Vec<(&'static str, u64)> {
        ERROR_LABELS
            .iter()
            .map(|&l| (l, self.errors.get(l).map_or(0, |c| c.load(Relaxed))))
            .collect()
    }
}

/// What every handler gets: cheap to clone.
#[derive(Clone)]
pub struct AppState {
    inner: Arc<Inner>,
}

struct Inner {
    config: ServerConfig,
    loaded: OnceLock<Loaded>,
    counters: ServerCounters,
    /// Per-endpoint state, one value per type (`endpoint_state`).
    endpoints: Mutex<Extensions>,
    /// Set once at SIGTERM: probes answer 503 and new API requests are refused.
    draining: AtomicBool,
}

impl AppState {
    /// A state with no model yet (`/health` answers 503 until `set_loaded`).
    pub fn new(config: ServerConfig) -> AppState {
        AppState {
            inner: Arc::new(Inner {
                endpoints: Mutex::new(Extensions::new()),
                config,
                loaded: OnceLock::new(),
                counters: ServerCounters::default(),
                draining: AtomicBool::new(false),
            }),
        }
    }

    /// A state serving `loaded` from the start.
    pub fn with_model(config: ServerConfig, loaded: Loaded) -> AppState {
        let s = AppState::new(config);
        s.set_loaded(loaded);
        s
    }

    /// Publishes the model under the configured names; a second call is ignored (the first
    /// model stays).
    pub fn set_loaded(&self, mut loaded: Loaded) {
        if let Some((first, rest)) = self.inner.config.served_model_names.split_first() {
            loaded.model_id = first.clone();
            loaded.aliases = rest.to_vec();
        }
        let names: Vec<&str> = loaded.names().collect();
        tracing::info!(
            "serving the model as {} (max_model_len {})",
            names.join(", "),
            crate::serving::validate::max_model_len(&loaded)
        );
        if self.inner.loaded.set(loaded).is_err() {
            tracing::warn!("a model is already loaded; ignoring the second one");
        }
    }

    pub fn config(&self) -> &ServerConfig {
        &self.inner.config
    }

    pub fn counters(&self) -> &ServerCounters {
        &self.inner.counters
    }

    /// The state an endpoint family keeps across requests (the Responses API's store, ...):
    /// one value per type, made by `init` from the settings on first use and shared from then
    /// on. The serving layer need not know the endpoints' types for them to keep state.
    pub fn endpoint_state<T: Send + Sync + 'static>(
        &self,
        init: impl FnOnce(&ServerConfig) -> T,
    ) -> Arc<T> {
        // A panic while holding the lock leaves the map itself consistent: keep using it.
        let mut map = self
            .inner
            .endpoints
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some(v) = map.get::<Arc<T>>() {
            return v.clone();
        }
        let v = Arc::new(init(&self.inner.config));
        map.insert(v.clone());
        v
    }

    /// Starts draining: from now on `/health` answers 503 (so gateways and Kubernetes stop
    /// routing here) and new API requests get 503 `shutting_down`; requests already running
    /// are not touched. There is no way back: draining ends with the process.
    pub fn drain(&self) {
        self.inner.draining.store(true, Relaxed);
    }

    /// Whether `drain` was called.
    pub fn is_draining(&self) -> bool {
        self.inner.draining.load(Relaxed)
    }

    /// The model, if loaded.
    pub fn loaded(&self) -> Option<&Loaded> {
        self.inner.loaded.get()
    }

    /// The model, or 503 while it loads.
    pub fn model(&self) -> Result<&Loaded, ApiError> {
        self.loaded().ok_or(ApiError::NotReady)
    }
}
