//! The compute seam: the one trait the engine computes through.
//!
//! A `Runner` owns its KV storage. The engine deals only in tile ids (which tile holds which
//! positions is the scheduler's business), token ids and logit rows; how K and V are laid out,
//! where they live and what computes them is the runner's. The CPU transformer is one runner
//! (`CpuRunner`); the engine's tests drive the scheduler and the step loop with a fake one.
//!
//! A runner is built from a *model* (`IntoRunner`) once the engine has validated the KV
//! settings (`KvSpec`), so every runner sizes its storage the same way (`kv_pool`).
//!
//! Tile export and import give a tile's contents as bytes in a stable, versioned layout
//! (`model::KvPool::export_tile`): what a KV tier stores and loads.

use model::kv::KvGroup;
use model::{Batch, KvDtype, KvLayout, KvPool, ModelError, TileId};

use crate::error::StartError;

/// What the engine plans with: the runner's KV geometry and the model's limits.
#[derive(Clone, Debug)]
pub struct RunnerFacts {
    /// KV groups, tile size and storage type of the runner's tiles.
    pub layout: KvLayout,
    /// Tiles of the KV storage (ids `0..n_tiles`).
    pub n_tiles: usize,
    pub vocab_size: usize,
    pub context_length: usize,
    /// Set when the runner computes embeddings (`Runner::embed`) instead of generating.
    pub embedding: Option<EmbedFacts>,
}

/// What an embedding runner returns per input.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EmbedFacts {
    /// Floats per input: the pooled vector's size, or 1 on a reranker.
    pub dim: usize,
    /// A reranker: the one float is a relevance score (rank pooling), not a vector.
    pub scores: bool,
}

/// Whole inputs to embed in one call (each computed apart from the others, keeping no KV).
#[derive(Clone, Copy, Debug)]
pub struct EmbedBatch<'a> {
    pub inputs: &'a [&'a [u32]],
}

/// What the engine asks of a runner's KV storage (from `EngineConfig`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KvSpec {
    pub tile_size: usize,
    /// Bytes of K and V storage.
    pub bytes: usize,
    pub dtype: KvDtype,
    /// Fault the storage in during idle turns (`Runner::idle`).
    pub warm: bool,
}

/// The engine's one way to compute. About six verbs; everything else is the runner's own.
pub trait Runner: Send + 'static {
    fn facts(&self) -> &RunnerFacts;

    /// Runs one ragged batch: writes the K/V of its tokens into the tiles its tables name and
    /// puts the logit rows its chunks ask for into `logits` (`[rows][vocab]`, in batch order).
    fn execute(&mut self, batch: &Batch, logits: &mut Vec<f32>) -> Result<(), ModelError>;

    /// Copies the contents of each `(source, destination)` tile (all layers of the tile).
    fn copy_tiles(&mut self, pairs: &[(TileId, TileId)]);

    /// Appends tile `tile`'s contents to `out` in the storage's versioned byte layout.
    fn export_tile(&self, tile: TileId, out: &mut Vec<u8>);

    /// Overwrites tile `tile` with bytes `export_tile` produced; bytes of another layout,
    /// version or size are refused and leave the tile as it was.
    fn import_tile(&mut self, tile: TileId, bytes: &[u8]) -> Result<(), ModelError>;

    /// Appends the pooled row of each input of `batch` to `out` (`facts().embedding.dim`
    /// floats each, in order): raw, neither truncated nor normalised. Only runners whose facts
    /// say they embed implement it.
    fn embed(&mut self, batch: &EmbedBatch, out: &mut Vec<f32>) -> Result<(), ModelError> {
        let _ = (batch, out);
        Err(ModelError::BadBatch(
            "this runner computes no embeddings".into(),
        ))
    }

    /// One slice of idle-time work (faulting KV storage in); true while some is left.
    fn idle(&mut self) -> bool {
        false
    }

    /// Runs `job(worker, i)` for every `i` in `0..n`, each once, possibly in parallel; `worker`
    /// is below `workers()` and no two concurrent calls share it. The engine's per-sequence
    /// work after a step (the draws) runs here.
    fn parallel(&self, n: usize, job: &(dyn Fn(usize, usize) + Sync)) {
        (0..n).for_each(|i| job(0, i));
    }

    /// Workers `parallel` may use at once (at least 1).
    fn workers(&self) -> usize {
        1
    }
}

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

/// The smallest KV layout: one global group of one layer, one float of K and V per token. What
/// a runner that keeps no real KV (an encoder, a simulation) reports for the engine to plan with.
pub fn minimal_layout(tile_size: usize, dtype: KvDtype) -> KvLayout {
    KvLayout {
        tile_size,
        kv_dim: 1,
        layer_slot: vec![(0, 0)],
        groups: vec![KvGroup {
            layers: vec![0],
            window: None,
        }],
        dtype,
    }
}
