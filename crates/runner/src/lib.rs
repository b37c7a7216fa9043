//! The compute seam: the one trait Tessera's engine computes through, and the types a runner
//! speaks.
//!
//! A `Runner` owns its KV storage. The engine deals only in tile ids (which tile holds which
//! positions is the scheduler's business), token ids and logit rows; how K and V are laid out,
//! where they live and what computes them is the runner's. The CPU transformer is one runner
//! (`engine::CpuRunner`); the engine's tests drive the scheduler and the step loop with a fake
//! one; a draft model drafts through a second one.
//!
//! This crate depends on no kernel and no model, so a runner for other hardware can be written
//! against it alone.
//!
//! Tile export and import give a tile's contents as bytes in a stable, versioned layout: what a
//! KV tier stores and loads.

pub mod batch;
pub mod kv;

use std::path::Path;

pub use batch::{Batch, LogitsWanted, LoraId, LoraUse, SeqChunk};
pub use kv::{KvDtype, KvGroup, KvLayout, TileId, Q8_0_BLOCK_BYTES, Q8_0_BLOCK_VALUES};

/// What can go wrong in a runner.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RunError {
    /// The batch asks for something the runner cannot do (a tile out of range, a position past
    /// the context, a kind of work the runner does not do).
    #[error("bad batch: {0}")]
    BadBatch(String),
    /// A tile's bytes of another layout, version or size.
    #[error("bad tile bytes: {0}")]
    BadTile(String),
    /// A KV layout the storage cannot hold.
    #[error("invalid KV layout: {0}")]
    Layout(String),
    /// The computation failed.
    #[error("{0}")]
    Failed(String),
}

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

/// What the engine asks of a runner's KV storage.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KvSpec {
    pub tile_size: usize,
    /// Bytes of K and V storage.
    pub bytes: usize,
    pub dtype: KvDtype,
    /// Fault the storage in during idle turns (`Runner::idle`).
    pub warm: bool,
}

/// What a runner that draws tokens itself (`Runner::draws`) needs to draw one sequence's next
/// token from its last logit row: the request's sampling settings, with no state of the
/// engine's (requests whose draws need that state — penalties, grammars, log-probabilities,
/// drafts — are drawn by the engine from logit rows, as on the CPU).
#[derive(Clone, Debug, PartialEq)]
pub struct DrawParams {
    /// 0 means greedy (the argmax, lowest id on ties).
    pub temperature: f32,
    /// 0 means off.
    pub top_k: usize,
    /// 1 means off.
    pub top_p: f32,
    /// 0 means off.
    pub min_p: f32,
    /// Added to the logits of these tokens first.
    pub logit_bias: Vec<(u32, f32)>,
    /// The request's seed, and how many tokens it drew before this one: a generator seeded
    /// from both draws the same token however steps are batched.
    pub seed: u64,
    pub drawn: u64,
}

/// The engine's one way to compute. About six verbs; everything else is the runner's own.
pub trait Runner: Send + 'static {
    fn facts(&self) -> &RunnerFacts;

    /// Runs one ragged batch: writes the K/V of its tokens into the tiles its tables name and
    /// puts the logit rows its chunks ask for into `logits` (`[rows][vocab]`, in batch order).
    fn execute(&mut self, batch: &Batch, logits: &mut Vec<f32>) -> Result<(), RunError>;

    /// Copies the contents of each `(source, destination)` tile (all layers of the tile).
    fn copy_tiles(&mut self, pairs: &[(TileId, TileId)]);

    /// Appends tile `tile`'s contents to `out` in the storage's versioned byte layout.
    fn export_tile(&self, tile: TileId, out: &mut Vec<u8>);

    /// Overwrites tile `tile` with bytes `export_tile` produced; bytes of another layout,
    /// version or size are refused and leave the tile as it was.
    fn import_tile(&mut self, tile: TileId, bytes: &[u8]) -> Result<(), RunError>;

    /// Appends the pooled row of each input of `batch` to `out` (`facts().embedding.dim`
    /// floats each, in order): raw, neither truncated nor normalised. Only runners whose facts
    /// say they embed implement it.
    fn embed(&mut self, batch: &EmbedBatch, out: &mut Vec<f32>) -> Result<(), RunError> {
        let _ = (batch, out);
        Err(RunError::BadBatch(
            "this runner computes no embeddings".into(),
        ))
    }

    /// Whether the runner draws tokens where its logits are (`execute_drawing`): a GPU runner
    /// samples on the device and hands back token ids instead of vocabulary-sized rows. The CPU
    /// runner does not: the engine draws from the rows `execute` gives.
    fn draws(&self) -> bool {
        false
    }

    /// Runs `batch` as `execute` does, and for every chunk `i` with `draws[i]` set (such a
    /// chunk asks for no logit row) draws its next token from its last position's logits with
    /// those settings, appending the tokens to `tokens` in chunk order. Only runners whose
    /// `draws` is true implement it.
    fn execute_drawing(
        &mut self,
        batch: &Batch,
        draws: &[Option<DrawParams>],
        logits: &mut Vec<f32>,
        tokens: &mut Vec<u32>,
    ) -> Result<(), RunError> {
        let _ = (batch, draws, logits, tokens);
        Err(RunError::BadBatch("this runner draws no tokens".into()))
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

    /// Loads the LoRA adapter at `path` (a GGUF adapter in llama.cpp's format), checked against
    /// the runner's model, for chunks to name in `SeqChunk::loras`. Runners without LoRA support
    /// refuse.
    fn load_lora(&mut self, path: &Path) -> Result<LoraId, RunError> {
        let _ = path;
        Err(no_lora())
    }

    /// Drops adapter `id`; a batch naming it afterwards is refused. The engine unloads only
    /// adapters no running sequence uses.
    fn unload_lora(&mut self, id: LoraId) -> Result<(), RunError> {
        let _ = id;
        Err(no_lora())
    }
}

/// The error of a runner with no LoRA support.
fn no_lora() -> RunError {
    RunError::BadBatch("this runner has no LoRA support".into())
}

/// A boxed runner is a runner (a draft model's, chosen by the binary).
impl Runner for Box<dyn Runner> {
    fn facts(&self) -> &RunnerFacts {
        (**self).facts()
    }
    fn execute(&mut self, batch: &Batch, logits: &mut Vec<f32>) -> Result<(), RunError> {
        (**self).execute(batch, logits)
    }
    fn copy_tiles(&mut self, pairs: &[(TileId, TileId)]) {
        (**self).copy_tiles(pairs)
    }
    fn export_tile(&self, tile: TileId, out: &mut Vec<u8>) {
        (**self).export_tile(tile, out)
    }
    fn import_tile(&mut self, tile: TileId, bytes: &[u8]) -> Result<(), RunError> {
        (**self).import_tile(tile, bytes)
    }
    fn embed(&mut self, batch: &EmbedBatch, out: &mut Vec<f32>) -> Result<(), RunError> {
        (**self).embed(batch, out)
    }
    fn draws(&self) -> bool {
        (**self).draws()
    }
    fn execute_drawing(
        &mut self,
        batch: &Batch,
        draws: &[Option<DrawParams>],
        logits: &mut Vec<f32>,
        tokens: &mut Vec<u32>,
    ) -> Result<(), RunError> {
        (**self).execute_drawing(batch, draws, logits, tokens)
    }
    fn idle(&mut self) -> bool {
        (**self).idle()
    }
    fn parallel(&self, n: usize, job: &(dyn Fn(usize, usize) + Sync)) {
        (**self).parallel(n, job)
    }
    fn workers(&self) -> usize {
        (**self).workers()
    }
    fn load_lora(&mut self, path: &Path) -> Result<LoraId, RunError> {
        (**self).load_lora(path)
    }
    fn unload_lora(&mut self, id: LoraId) -> Result<(), RunError> {
        (**self).unload_lora(id)
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A runner that implements only what it must.
    struct Bare(RunnerFacts);

    impl Runner for Bare {
        fn facts(&self) -> &RunnerFacts {
            &self.0
        }
        fn execute(&mut self, _: &Batch, _: &mut Vec<f32>) -> Result<(), RunError> {
            Ok(())
        }
        fn copy_tiles(&mut self, _: &[(TileId, TileId)]) {}
        fn export_tile(&self, _: TileId, _: &mut Vec<u8>) {}
        fn import_tile(&mut self, _: TileId, _: &[u8]) -> Result<(), RunError> {
            Ok(())
        }
    }

    #[test]
    fn a_runner_without_lora_support_says_so() {
        let mut r: Box<dyn Runner> = Box::new(Bare(RunnerFacts {
            layout: minimal_layout(4, KvDtype::F16),
            n_tiles: 1,
            vocab_size: 1,
            context_length: 1,
            embedding: None,
        }));
        let load = r.load_lora(Path::new("adapter.gguf")).map(|_| ());
        for err in [load, r.unload_lora(LoraId(0))] {
            let msg = err.expect_err("refused").to_string();
            assert!(msg.contains("no LoRA support"), "{msg}");
        }
    }
}
