//! The CPU runner: the transformer's forward pass over a `KvPool` it owns — or an embedding model's
//! pooled rows of whole inputs, keeping no KV —, and its thread pool for the engine's
//! per-sequence work after a step.

use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};

use model::{Batch, Embedder, KvPool, LoraId, Pooling, RunError, Threads, TileId, Transformer};

use crate::error::{ConfigError, StartError};
use crate::runner::{
    kv_pool, minimal_layout, EmbedBatch, EmbedFacts, IntoRunner, KvSpec, Runner, RunnerFacts,
};

/// KV memory faulted in per idle turn: ~16 ms of the kernel clearing pages here (about 2 ms per
/// 2 MiB), so a request that arrives meanwhile waits no longer than that.
const WARM_BYTES: usize = 8 << 20;

/// A model the CPU runner computes: a decoder that generates, or an embedding model (an
/// encoder, or a decoder read as one) with the pooling its rows get.
pub enum CpuModel {
    Decoder(Box<Transformer>),
    Embedder {
        embedder: Box<dyn Embedder>,
        pooling: Pooling,
    },
}

/// What the CPU runner computes with: a decoder with its KV storage, or an embedding model, which
/// keeps no KV (each input is computed whole).
enum Net {
    Decoder {
        model: Box<Transformer>,
        pool: Box<KvPool>,
    },
    Embedder {
        embedder: Box<dyn Embedder>,
        pooling: Pooling,
    },
}

/// `model::Transformer` with its KV storage, or a `model::Embedder`.
pub struct CpuRunner {
    net: Net,
    facts: RunnerFacts,
    /// Whether idle turns still fault the pool in (`KvSpec::warm`, until done).
    warming: bool,
}

impl CpuRunner {
    pub fn new(model: Transformer, kv: &KvSpec) -> Result<CpuRunner, StartError> {
        let pool = kv_pool(model.config().kv_layout(kv.tile_size), kv)?;
        let facts = RunnerFacts {
            layout: pool.layout().clone(),
            n_tiles: pool.n_tiles(),
            vocab_size: model.config().vocab_size,
            context_length: model.config().context_length,
            embedding: None,
        };
        Ok(CpuRunner {
            net: Net::Decoder {
                model: Box::new(model),
                pool: Box::new(pool),
            },
            facts,
            warming: kv.warm,
        })
    }

    /// An embedding model's runner: its rows pooled with `pooling` (mean, cls, last; rank on a
    /// reranker, one score per input). Per-token output (`none`) is refused: an input's row is
    /// one vector.
    pub fn embedder(
        encoder: Box<dyn Embedder>,
        pooling: Pooling,
        kv: &KvSpec,
    ) -> Result<CpuRunner, StartError> {
        let dim = match pooling {
            Pooling::None => {
                return Err(StartError::Config(ConfigError::Pooling(
                    "pooling `none` (a vector per token) is not served: choose mean, cls, last or \
                     rank with --pooling",
                )))
            }
            Pooling::Rank if !encoder.is_reranker() => {
                return Err(StartError::Config(ConfigError::Pooling(
                    "pooling `rank` needs a reranker's classifier head, which this model does not \
                     have",
                )))
            }
            Pooling::Rank => encoder.n_scores(),
            _ => encoder.n_embd(),
        };
        // No KV: a one-tile layout satisfies the engine's planning, which embeddings bypass.
        let layout = minimal_layout(kv.tile_size, kv.dtype);
        let facts = RunnerFacts {
            layout,
            n_tiles: 1,
            vocab_size: encoder.vocab_size(),
            context_length: encoder.max_positions(),
            embedding: Some(EmbedFacts {
                dim,
                scores: pooling == Pooling::Rank,
            }),
        };
        Ok(CpuRunner {
            net: Net::Embedder {
                embedder: encoder,
                pooling,
            },
            facts,
            warming: false,
        })
    }

    fn threads(&self) -> &Threads {
        match &self.net {
            Net::Decoder { model, .. } => model.threads(),
            Net::Embedder { embedder, .. } => embedder.threads(),
        }
    }
}

impl IntoRunner for Transformer {
    type Runner = CpuRunner;
    fn into_runner(self, kv: &KvSpec) -> Result<CpuRunner, StartError> {
        CpuRunner::new(self, kv)
    }
}

impl IntoRunner for CpuModel {
    type Runner = CpuRunner;
    fn into_runner(self, kv: &KvSpec) -> Result<CpuRunner, StartError> {
        match self {
            CpuModel::Decoder(model) => CpuRunner::new(*model, kv),
            CpuModel::Embedder { embedder, pooling } => CpuRunner::embedder(embedder, pooling, kv),
        }
    }
}

/// The error of a KV operation on an embedding model, which keeps no KV.
fn no_kv() -> RunError {
    RunError::BadBatch("an embedding model keeps no KV".into())
}

impl Runner for CpuRunner {
    fn facts(&self) -> &RunnerFacts {
        &self.facts
    }

    fn execute(&mut self, batch: &Batch, logits: &mut Vec<f32>) -> Result<(), RunError> {
        match &mut self.net {
            Net::Decoder { model, pool } => Ok(model.forward(batch, pool, logits)?),
            Net::Embedder { .. } => Err(RunError::BadBatch(
                "an embedding model generates nothing".into(),
            )),
        }
    }

    fn embed(&mut self, batch: &EmbedBatch, out: &mut Vec<f32>) -> Result<(), RunError> {
        let Net::Embedder { embedder, pooling } = &mut self.net else {
            return Err(RunError::BadBatch(
                "this model generates text and computes no embeddings".into(),
            ));
        };
        for row in embedder.embed_batch(batch.inputs, *pooling, false)? {
            out.extend_from_slice(&row);
        }
        Ok(())
    }

    fn copy_tiles(&mut self, pairs: &[(TileId, TileId)]) {
        if let Net::Decoder { pool, .. } = &mut self.net {
            for &(src, dst) in pairs {
                pool.copy_tile(src, dst);
            }
        }
    }

    fn export_tile(&self, tile: TileId, out: &mut Vec<u8>) {
        if let Net::Decoder { pool, .. } = &self.net {
            pool.export_tile(tile, out);
        }
    }

    fn import_tile(&mut self, tile: TileId, bytes: &[u8]) -> Result<(), RunError> {
        match &mut self.net {
            Net::Decoder { pool, .. } => pool
                .import_tile(tile, bytes)
                .map_err(|e| RunError::BadTile(e.to_string())),
            Net::Embedder { .. } => Err(no_kv()),
        }
    }

    /// Faults the next `WARM_BYTES` of the pool in (`KvPool::populate`), so that serving does
    /// not pay for the kernel clearing fresh pages.
    fn idle(&mut self) -> bool {
        let Net::Decoder { pool, .. } = &mut self.net else {
            return false;
        };
        self.warming = self.warming && pool.populate(WARM_BYTES);
        self.warming
    }

    fn parallel(&self, n: usize, job: &(dyn Fn(usize, usize) + Sync)) {
        parallel_on(self.threads(), n, job);
    }

    fn workers(&self) -> usize {
        self.threads().n()
    }

    fn load_lora(&mut self, path: &std::path::Path) -> Result<LoraId, RunError> {
        match &mut self.net {
            Net::Decoder { model, .. } => Ok(model.load_lora(path)?),
            Net::Embedder { .. } => Err(RunError::BadBatch(
                "LoRA adapters are not supported on an embedding model".into(),
            )),
        }
    }

    fn unload_lora(&mut self, id: LoraId) -> Result<(), RunError> {
        match &mut self.net {
            Net::Decoder { model, .. } => Ok(model.unload_lora(id)?),
            Net::Embedder { .. } => Err(RunError::BadBatch(format!(
                "no LoRA adapter with id {} is loaded",
                id.0
            ))),
        }
    }
}

/// Runs `job(worker, i)` for `i` in `0..n` on `threads`, each index claimed once: on the caller
/// alone when there is one job or one thread (a hand-off would cost more than it saves).
pub fn parallel_on(threads: &Threads, n: usize, job: &(dyn Fn(usize, usize) + Sync)) {
    if n < 2 || threads.n() < 2 {
        (0..n).for_each(|i| job(0, i));
        return;
    }
    let next = AtomicUsize::new(0);
    threads.run(&|t| loop {
        let i = next.fetch_add(1, Relaxed);
        if i >= n {
            break;
        }
        job(t, i);
    });
}
