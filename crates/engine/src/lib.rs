//! Tessera's engine: continuous batching over a model, decided token by token.
//!
//! - `tiles` / `kv_manager`: the tile allocator (counts, prefix index, LRU eviction) and the
//!   per-sequence tile tables (prefix adoption, growth, sliding-window release).
//! - `scheduler`: which sequences run each step, chunked prefill, preemption, priorities.
//! - `engine`: one step = plan → forward → sample → emit; stop conditions; metrics.
//! - `step_cost`: measured step costs, from which the prefill cap of decoding steps follows.
//! - `handle`: the engine thread and the cloneable `EngineHandle` the server talks to.

pub mod engine;
pub mod handle;
pub mod kv_manager;
pub mod request;
pub mod scheduler;
pub mod sequence;
pub mod stats;
pub mod step_cost;
pub mod tiles;

pub use engine::{Engine, EngineConfig, Model};
pub use handle::{EngineHandle, ModelInfo, RequestStream};
pub use request::{EngineError, Event, FinishReason, GenerateRequest, TokenLogprob, Usage};
pub use sequence::SeqId;
pub use stats::EngineStats;
