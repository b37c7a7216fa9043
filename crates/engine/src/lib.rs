//! Tessera's engine: continuous batching over a runner, decided token by token.
//!
//! - `runner` / `cpu_runner`: building runners for the compute seam (`Runner`, in the `runner`
//!   crate: execute a ragged batch, copy, export and import tiles, idle work) and the CPU
//!   transformer behind it.
//! - `tiles` / `kv_manager`: the tile allocator (counts, prefix index, LRU eviction) and the
//!   per-sequence tile tables (prefix adoption, growth, sliding-window release, truncation).
//! - `scheduler`: which sequences run each step, chunked prefill, drafts, preemption, priorities.
//! - `engine` / `step`: one step = plan → execute → draw → emit; the request lifecycle.
//! - `speculate` / `ngram` / `draft_model`: speculative decoding — the `Drafter` seam and the
//!   drafting phase of a step, prompt-lookup drafts, a draft model's drafts.
//! - `draw` / `emit` / `forks`: the draws (drafts verified), token → events (stop conditions),
//!   the choices of `n` > 1 requests waiting to fork.
//! - `tier`: KV tiers (disk, Redis) beside the pool, and the I/O thread that reads and writes them.
//! - `sim`: open-loop traffic through the real engine on a modelled clock (`SimRunner`), for
//!   comparing scheduling policies.
//! - `clock`: where the engine reads the time (the system's, or a simulation's).
//! - `step_cost`: measured step costs, from which the prefill cap of decoding steps follows.
//! - `slo`: latency targets (TTFT, TPOT): the prefill budget of a step from the streams' pace,
//!   and first-token deadlines that order the prompts.
//! - `embed`: embedding requests (whole inputs pooled into vectors or scores, no KV kept) on a
//!   runner that embeds.
//! - `lora`: the LoRA adapters requests name, which the runner holds (at most `max_loras`,
//!   least recently used dropped first, never one in use), and the key that keeps their KV apart.
//! - `admission` / `handle`: the waiting-line limit, the engine thread and the cloneable
//!   `EngineHandle` the server talks to.

pub mod admission;
pub mod clock;
pub mod config;
pub mod constraint;
pub mod cpu_runner;
mod device_draw;
pub mod draft_model;
mod draw;
pub mod embed;
mod emit;
pub mod engine;
pub mod error;
mod forks;
pub mod handle;
pub mod kv_events;
pub mod kv_manager;
pub mod lora;
pub mod ngram;
pub mod request;
pub mod runner;
pub mod scheduler;
pub mod sequence;
pub mod sim;
pub mod slo;
pub mod speculate;
pub mod stats;
mod step;
pub mod step_cost;
pub mod tier;
mod tiering;
pub mod tiles;

pub use config::{DraftLoader, DraftModelConfig, EngineConfig, SpeculativeConfig};
pub use cpu_runner::{CpuModel, CpuRunner};
pub use draft_model::DraftModel;
pub use embed::EmbedEvent;
pub use engine::{Engine, Member};
pub use error::{ConfigError, StartError};
pub use handle::{EmbedStream, EngineHandle, LoadError, ModelInfo, RequestStream};
pub use lora::{LoraInfo, LoraRequest};
pub use request::{
    EngineError, Event, FinishReason, GenerateRequest, Timings, TokenLogprob, Usage,
};
pub use runner::{
    kv_pool, DrawParams, EmbedBatch, EmbedFacts, IntoRunner, KvSpec, Runner, RunnerFacts,
};
pub use sequence::SeqId;
pub use slo::SloTargets;
pub use speculate::{draft_len, Dist, Draft, DraftAsk, Drafter, Speculation};
pub use stats::EngineStats;
pub use tiering::TierConfig;
