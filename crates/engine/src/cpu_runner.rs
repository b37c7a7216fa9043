//! The CPU runner: the transformer's forward pass over a `KvPool` it owns, and its thread pool
//! for the engine's per-sequence work after a step.

use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};

use model::{Batch, KvLayout, KvPool, ModelError, Threads, TileId, Transformer};

use crate::error::StartError;
use crate::runner::{kv_pool, IntoRunner, KvSpec, Runner, RunnerFacts};

/// KV memory faulted in per idle turn: ~16 ms of the kernel clearing pages here (about 2 ms per
/// 2 MiB), so a request that arrives meanwhile waits no longer than that.
const WARM_BYTES: usize = 8 << 20;

/// `model::Transformer` with its KV storage.
pub struct CpuRunner {
    model: Transformer,
    pool: KvPool,
    facts: RunnerFacts,
    /// Whether idle turns still fault the pool in (`KvSpec::warm`, until done).
    warming: bool,
}

impl CpuRunner {
    pub fn new(model: Transformer, kv: &KvSpec) -> Result<CpuRunner, StartError> {
        let pool = kv_pool(KvLayout::new(model.config(), kv.tile_size), kv)?;
        let facts = RunnerFacts {
            layout: pool.layout().clone(),
            n_tiles: pool.n_tiles(),
            vocab_size: model.config().vocab_size,
            context_length: model.config().context_length,
            embedding: None,
        };
        Ok(CpuRunner {
            model,
            pool,
            facts,
            warming: kv.warm,
        })
    }
}

impl IntoRunner for Transformer {
    type Runner = CpuRunner;
    fn into_runner(self, kv: &KvSpec) -> Result<CpuRunner, StartError> {
        CpuRunner::new(self, kv)
    }
}

impl Runner for CpuRunner {
    fn facts(&self) -> &RunnerFacts {
        &self.facts
    }

    fn execute(&mut self, batch: &Batch, logits: &mut Vec<f32>) -> Result<(), ModelError> {
        self.model.forward(batch, &mut self.pool, logits)
    }

    fn copy_tiles(&mut self, pairs: &[(TileId, TileId)]) {
        for &(src, dst) in pairs {
            self.pool.copy_tile(src, dst);
        }
    }

    fn export_tile(&self, tile: TileId, out: &mut Vec<u8>) {
        self.pool.export_tile(tile, out);
    }

    fn import_tile(&mut self, tile: TileId, bytes: &[u8]) -> Result<(), ModelError> {
        self.pool.import_tile(tile, bytes)
    }

    /// Faults the next `WARM_BYTES` of the pool in (`KvPool::populate`), so that serving does
    /// not pay for the kernel clearing fresh pages.
    fn idle(&mut self) -> bool {
        self.warming = self.warming && self.pool.populate(WARM_BYTES);
        self.warming
    }

    fn parallel(&self, n: usize, job: &(dyn Fn(usize, usize) + Sync)) {
        parallel_on(self.model.threads(), n, job);
    }

    fn workers(&self) -> usize {
        self.model.threads().n()
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
