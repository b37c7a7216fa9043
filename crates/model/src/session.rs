//! A simple store for a fixed set of sequences, for `tessera generate` and the model's tests.
//!
//! Each sequence gets a fixed, contiguous range of tiles in every KV group up front: no sharing,
//! no eviction, no release. The engine's tile manager does all of that; this is the minimal
//! owner of tile tables that lets the model be run and tested on its own.

use crate::forward::Transformer;
use crate::kv::{KvLayout, KvPool, TileId};
use crate::ModelError;
use runner::{Batch, LogitsWanted, LoraUse, SeqChunk};

/// KV storage and positions for `n_seqs` sequences of up to `max_len` tokens each.
pub struct Session {
    pool: KvPool,
    tables: Vec<Vec<Vec<TileId>>>,
    /// Tokens already in the cache, per sequence.
    pub lens: Vec<usize>,
    /// The LoRA adapters each sequence computes with (none: the base model).
    loras: Vec<Vec<LoraUse>>,
    max_len: usize,
}

impl Session {
    pub fn new(model: &Transformer, n_seqs: usize, max_len: usize, tile_size: usize) -> Session {
        Self::with_layout(model.config().kv_layout(tile_size), n_seqs, max_len)
    }

    /// Faults the whole KV pool in (see `KvPool::populate`), as a server's pool is after its
    /// first minutes.
    pub fn populate(&mut self) {
        while self.pool.populate(usize::MAX) {}
    }

    /// A session over a given KV layout (e.g. another `KvDtype`).
    pub fn with_layout(layout: KvLayout, n_seqs: usize, max_len: usize) -> Session {
        let per_seq = max_len.div_ceil(layout.tile_size);
        let n_groups = layout.groups.len();
        let mut next = 0u32;
        let tables = (0..n_seqs)
            .map(|_| {
                (0..n_groups)
                    .map(|_| {
                        (0..per_seq)
                            .map(|_| {
                                next += 1;
                                TileId(next - 1)
                            })
                            .collect()
                    })
                    .collect()
            })
            .collect();
        Session {
            pool: KvPool::new(layout, next as usize),
            tables,
            lens: vec![0; n_seqs],
            loras: vec![Vec::new(); n_seqs],
            max_len,
        }
    }

    /// Sets the LoRA adapters sequence `seq` computes with from its next chunk on.
    pub fn set_loras(&mut self, seq: usize, loras: &[LoraUse]) {
        if let Some(l) = self.loras.get_mut(seq) {
            *l = loras.to_vec();
        }
    }

    /// Runs one batch with a chunk of tokens for each listed sequence, appending them.
    /// Returns logits rows in the order of `work`.
    pub fn run(
        &mut self,
        model: &mut Transformer,
        work: &[(usize, &[u32], LogitsWanted)],
        logits: &mut Vec<f32>,
    ) -> Result<(), ModelError> {
        let mut tokens = Vec::new();
        let mut chunks = Vec::with_capacity(work.len());
        for &(seq, toks, want) in work {
            let start = *self
                .lens
                .get(seq)
                .ok_or_else(|| ModelError::BadBatch(format!("no sequence {seq}")))?;
            if start + toks.len() > self.max_len {
                return Err(ModelError::BadBatch(format!(
                    "sequence {seq} would exceed {} tokens",
                    self.max_len
                )));
            }
            chunks.push(SeqChunk {
                start_pos: start,
                first_token: tokens.len(),
                len: toks.len(),
                tile_tables: &self.tables[seq],
                loras: &self.loras[seq],
                logits: want,
            });
            tokens.extend_from_slice(toks);
        }
        let batch = Batch {
            tokens: &tokens,
            seqs: &chunks,
        };
        model.forward(&batch, &mut self.pool, logits)?;
        for &(seq, toks, _) in work {
            self.lens[seq] += toks.len();
        }
        Ok(())
    }

    /// Prefills `tokens` for one sequence in chunks of at most `chunk` tokens and returns the
    /// logits of the last one.
    pub fn prefill(
        &mut self,
        model: &mut Transformer,
        seq: usize,
        tokens: &[u32],
        chunk: usize,
    ) -> Result<Vec<f32>, ModelError> {
        let mut logits = Vec::new();
        let pieces: Vec<&[u32]> = tokens.chunks(chunk.max(1)).collect();
        for (i, piece) in pieces.iter().enumerate() {
            let want = if i + 1 == pieces.len() {
                LogitsWanted::Last
            } else {
                LogitsWanted::None
            };
            self.run(model, &[(seq, piece, want)], &mut logits)?;
        }
        Ok(logits)
    }

    /// Forgets a sequence's tokens so it can be reused.
    pub fn reset(&mut self, seq: usize) {
        if let Some(l) = self.lens.get_mut(seq) {
            *l = 0;
        }
    }
}
