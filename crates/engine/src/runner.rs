//! The compute seam, from the engine's side. The `Runner` trait and the types it speaks live in
//! the `runner` crate (no kernels); this module builds runners.
//!
//! A runner is built from a *model* (`IntoRunner`) once the engine has validated the KV
//! settings (`KvSpec`), so every runner sizes its storage the same way (`kv_pool`).

use model::{KvLayout, KvPool};
pub use runner::{
    minimal_layout, DrawParams, EmbedBatch, EmbedFacts, KvSpec, RunError, Runner, RunnerFacts,
};

use crate::error::StartError;

/// A model that becomes a `Runner` once told what KV storage to own.
pub trait IntoRunner: Send + 'static {
    type Runner: Runner;
    fn into_runner(self, kv: &KvSpec) -> Result<Self::Runner, StartError>;
}

/// A KV pool of `kv.bytes` for `layout` (with `kv.dtype`), refused when it could not hold one
/// tile per group: every runner that stores K/V in a `KvPool` sizes it here.
pub fn kv_pool(layout: KvLayout, kv: &KvSpec) -> Result<KvPool, StartError> {
    let layout = layout.with_dtype(kv.dtype).map_err(StartError::KvLayout)?;
    let min_bytes = layout.groups.len() * layout.tile_bytes();
    if kv.bytes < min_bytes {
        return Err(StartError::KvTooSmall {
            bytes: kv.bytes,
            min_bytes,
        });
    }
    Ok(KvPool::with_bytes(layout, kv.bytes))
}
