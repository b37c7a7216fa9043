//! The engine's settings: what its runner's KV storage holds and how the scheduler plans.

use model::KvDtype;

use crate::error::ConfigError;
use crate::runner::KvSpec;
use crate::scheduler::SchedulerConfig;

/// Engine settings (validated by `EngineConfig::validate`).
#[derive(Clone, Debug)]
pub struct EngineConfig {
    pub tile_size: usize,
    /// Bytes of KV memory for the runner's storage.
    pub kv_bytes: usize,
    pub max_batch_tokens: usize,
    /// Tokens of a step that decodes no sequence (`SchedulerConfig::max_prefill_tokens`); 0
    /// (the default) or any value under `max_batch_tokens` leaves that as the limit.
    pub max_prefill_tokens: usize,
    pub max_seqs: usize,
    pub chunked_prefill: bool,
    pub prefix_caching: bool,
    /// Requests allowed to wait; beyond it submissions are refused as overloaded.
    pub max_waiting: usize,
    pub aging_steps: u64,
    /// Release sliding-window tiles no future query can see (default). Off keeps every tile,
    /// to compare against and to measure what release saves.
    pub release_window_tiles: bool,
    /// How K and V are stored.
    pub kv_dtype: KvDtype,
    /// A step that carries prefill alongside decode tokens may take about this many times a
    /// decode-only step (the prefill cap follows from measured step times, see `step_cost`);
    /// 0 turns the cap off, leaving `max_batch_tokens` as the only limit.
    pub itl_slowdown: f64,
    /// Latency targets the scheduler aims at (`slo`): with a TPOT target it sizes each
    /// decoding step's prefill from the streams' pace instead of `itl_slowdown`; with a TTFT
    /// target prompts that can still make their deadline go first. None by default.
    pub slo: crate::slo::SloTargets,
    /// Fault the KV storage in while idle (`Runner::idle`). Off leaves its pages to be faulted
    /// in as tiles are first written: for a pool larger than the memory there is to back it.
    pub warm_kv: bool,
    /// Speculative decoding (prompt lookup, `ngram::NgramDrafter`, or a draft model,
    /// `draft_model::DraftModel`), off by default.
    pub speculative: Option<SpeculativeConfig>,
    /// KV tiers beside the pool (disk, Redis), off by default.
    pub kv_tiers: Option<crate::tiering::TierConfig>,
    /// Where each step's prefix index changes go (`kv_events`), when something publishes
    /// them; needs the prefix cache. Off by default.
    pub kv_events: Option<crate::kv_events::KvEventSink>,
    /// LoRA adapters requests may name (`lora`): name and GGUF adapter file, loaded and
    /// checked against the model when the engine starts.
    pub loras: Vec<(String, std::path::PathBuf)>,
    /// Most LoRA adapters loaded at once; the least recently used one no request uses is
    /// dropped when another must load (and loaded again from its file when named).
    pub max_loras: usize,
}

/// Drafts for decoding sequences: prompt lookup (n-grams), or a draft model when one is set.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SpeculativeConfig {
    /// Drafted tokens per sequence and step at most (fewer when the measured step costs and
    /// the sequence's acceptance rate say more would not pay, down to none).
    pub tokens: usize,
    /// Shortest and longest n-gram matched against the sequence's own tokens.
    pub min_n: usize,
    pub max_n: usize,
    /// A draft model drafts instead of prompt lookup.
    pub draft_model: Option<DraftModelConfig>,
}

/// A draft model (same vocabulary as the served model) and the memory of its own KV pool.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DraftModelConfig {
    /// Builds the draft's runner (on the engine thread, when it starts).
    pub load: DraftLoader,
    /// Bytes of the draft's KV pool (apart from the runner's `kv_bytes`).
    pub kv_bytes: usize,
}

/// What builds a draft model's runner, given the KV storage it is to own: chosen by the
/// binary, as the served model's runner is, so the engine loads no model itself.
#[derive(Clone)]
pub struct DraftLoader {
    /// Names the draft in logs and errors (its file).
    pub name: String,
    build: DraftBuild,
}

type DraftBuild = std::sync::Arc<
    dyn Fn(&crate::runner::KvSpec) -> Result<Box<dyn crate::runner::Runner>, crate::StartError>
        + Send
        + Sync,
>;

impl DraftLoader {
    pub fn new(
        name: impl Into<String>,
        build: impl Fn(&crate::runner::KvSpec) -> Result<Box<dyn crate::runner::Runner>, crate::StartError>
            + Send
            + Sync
            + 'static,
    ) -> DraftLoader {
        DraftLoader {
            name: name.into(),
            build: std::sync::Arc::new(build),
        }
    }

    /// The draft's runner, owning KV storage as `kv` describes.
    pub fn build(
        &self,
        kv: &crate::runner::KvSpec,
    ) -> Result<Box<dyn crate::runner::Runner>, crate::StartError> {
        (self.build)(kv)
    }
}

impl std::fmt::Debug for DraftLoader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DraftLoader")
            .field("name", &self.name)
            .finish()
    }
}

/// Two loaders are equal when they are the same loader.
impl PartialEq for DraftLoader {
    fn eq(&self, other: &DraftLoader) -> bool {
        std::sync::Arc::ptr_eq(&self.build, &other.build)
    }
}

impl Eq for DraftLoader {}

impl Default for SpeculativeConfig {
    fn default() -> Self {
        SpeculativeConfig {
            tokens: 5,
            min_n: 2,
            max_n: 4,
            draft_model: None,
        }
    }
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            tile_size: 16,
            kv_bytes: 512 << 20,
            max_batch_tokens: 512,
            max_prefill_tokens: 0,
            max_seqs: 64,
            chunked_prefill: true,
            prefix_caching: true,
            max_waiting: 1024,
            aging_steps: 200,
            release_window_tiles: true,
            kv_dtype: KvDtype::F16,
            itl_slowdown: 1.5,
            slo: crate::slo::SloTargets::default(),
            warm_kv: true,
            speculative: None,
            kv_tiers: None,
            kv_events: None,
            loras: Vec::new(),
            max_loras: 4,
        }
    }
}

impl EngineConfig {
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.tile_size == 0 || self.tile_size > 1024 {
            return Err(ConfigError::TileSize(self.tile_size));
        }
        if self.max_seqs == 0 {
            return Err(ConfigError::MaxSeqs);
        }
        if !(self.itl_slowdown == 0.0 || self.itl_slowdown >= 1.0) || !self.itl_slowdown.is_finite()
        {
            return Err(ConfigError::ItlSlowdown(self.itl_slowdown));
        }
        for (name, target) in [("ttft", self.slo.ttft), ("tpot", self.slo.tpot)] {
            if target.is_some_and(|t| t.is_zero()) {
                return Err(ConfigError::SloTarget(name));
            }
        }
        if self.max_batch_tokens < self.max_seqs {
            return Err(ConfigError::BatchTokens {
                max_batch_tokens: self.max_batch_tokens,
                max_seqs: self.max_seqs,
            });
        }
        if self.max_loras == 0 {
            return Err(ConfigError::MaxLoras);
        }
        if self.kv_events.is_some() && !self.prefix_caching {
            return Err(ConfigError::KvEventsWithoutPrefixCache);
        }
        if let Some(sp) = &self.speculative {
            if !(1..=64).contains(&sp.tokens) {
                return Err(ConfigError::SpeculativeTokens(sp.tokens));
            }
            if sp.min_n == 0 || sp.max_n < sp.min_n || sp.max_n > 64 {
                return Err(ConfigError::NgramRange(sp.min_n, sp.max_n));
            }
        }
        Ok(())
    }

    /// What the runner's KV storage must be.
    pub fn kv_spec(&self) -> KvSpec {
        KvSpec {
            tile_size: self.tile_size,
            bytes: self.kv_bytes,
            dtype: self.kv_dtype,
            warm: self.warm_kv,
        }
    }

    pub(crate) fn scheduler(&self) -> SchedulerConfig {
        SchedulerConfig {
            max_batch_tokens: self.max_batch_tokens,
            max_prefill_tokens: self.max_prefill_tokens,
            max_seqs: self.max_seqs,
            chunked_prefill: self.chunked_prefill,
            aging_steps: self.aging_steps,
            release_window_tiles: self.release_window_tiles,
        }
    }
}
