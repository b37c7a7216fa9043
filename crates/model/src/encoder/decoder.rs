//! A decoder read as an embedding model (Qwen3-Embedding: `qwen3` with last-token pooling): the
//! same causal forward pass as generation, whose final-normed hidden states are pooled instead
//! of projected to logits.
//!
//! Each call runs its inputs as one ragged batch on a scratch KV pool that lives here and only
//! grows (to the largest batch seen); every input starts at position 0 on tiles of its own, and
//! the pool is overwritten by the next call, so no KV outlives the call. Only the rows pooling
//! needs are normed: the last one for `last`, all of them for `mean` and `none`, the first for
//! `cls`. Rank pooling needs a classifier head, which a decoder does not have: refused.

use kernels::Threads;

use super::{l2_normalize, mean_rows, Embedder, Pooling};
use crate::forward::Transformer;
use crate::kv::{KvPool, TileId};
use crate::ModelError;
use runner::{Batch, LogitsWanted, SeqChunk};

/// Tokens per tile of the scratch pool.
const TILE: usize = 64;

/// A decoder computing embeddings.
pub struct DecoderEmbedder {
    model: Transformer,
    pooling: Pooling,
    pool: Option<KvPool>,
    hidden: Vec<f32>,
}

impl DecoderEmbedder {
    /// `pooling` is the file's (`<arch>.pooling_type`), or the caller's choice.
    pub fn new(model: Transformer, pooling: Pooling) -> DecoderEmbedder {
        DecoderEmbedder {
            model,
            pooling,
            pool: None,
            hidden: Vec::new(),
        }
    }

    /// Each input's tile tables (one per KV group), the tiles numbered from 0, and how many.
    fn tables(&self, inputs: &[&[u32]]) -> (Vec<Vec<Vec<TileId>>>, usize) {
        let groups = self.model.config().kv_layout(TILE).groups.len();
        let mut next = 0u32;
        let tables = inputs
            .iter()
            .map(|ids| {
                (0..groups)
                    .map(|_| {
                        (0..ids.len().div_ceil(TILE))
                            .map(|_| {
                                next += 1;
                                TileId(next - 1)
                            })
                            .collect()
                    })
                    .collect()
            })
            .collect();
        (tables, next as usize)
    }

    fn check(&self, inputs: &[&[u32]], pooling: Pooling) -> Result<(), ModelError> {
        if pooling == Pooling::Rank {
            return Err(ModelError::BadBatch(
                "rank pooling needs a classifier head, which a decoder does not have".into(),
            ));
        }
        let max = self.model.config().context_length;
        for (i, ids) in inputs.iter().enumerate() {
            if ids.is_empty() {
                return Err(ModelError::BadBatch(format!("input {i} has no tokens")));
            }
            if ids.len() > max {
                return Err(ModelError::BadBatch(format!(
                    "input {i} has {} tokens, more than the model's {max} positions",
                    ids.len()
                )));
            }
        }
        Ok(())
    }
}

impl Embedder for DecoderEmbedder {
    fn embed_batch(
        &mut self,
        inputs: &[&[u32]],
        pooling: Pooling,
        normalize: bool,
    ) -> Result<Vec<Vec<f32>>, ModelError> {
        self.check(inputs, pooling)?;
        if inputs.is_empty() {
            return Ok(Vec::new());
        }
        let (tables, n_tiles) = self.tables(inputs);
        let pool = match self.pool.take() {
            Some(p) if p.n_tiles() >= n_tiles => p,
            _ => KvPool::new(self.model.config().kv_layout(TILE), n_tiles),
        };
        let pool = self.pool.insert(pool);
        let want = match pooling {
            Pooling::Last => LogitsWanted::Last,
            _ => LogitsWanted::All,
        };
        let tokens: Vec<u32> = inputs.iter().flat_map(|ids| ids.iter().copied()).collect();
        let mut first = 0;
        let seqs: Vec<SeqChunk> = inputs
            .iter()
            .zip(&tables)
            .map(|(ids, t)| {
                let c = SeqChunk {
                    start_pos: 0,
                    first_token: first,
                    len: ids.len(),
                    tile_tables: t,
                    loras: &[],
                    logits: want,
                };
                first += ids.len();
                c
            })
            .collect();
        let batch = Batch {
            tokens: &tokens,
            seqs: &seqs,
        };
        self.model.forward_hidden(&batch, pool, &mut self.hidden)?;
        let d = self.model.config().d_model;
        let mut at = 0;
        let mut out = Vec::with_capacity(inputs.len());
        for ids in inputs {
            let rows = want.rows(ids.len());
            let h = &self.hidden[at * d..(at + rows) * d];
            at += rows;
            out.push(match pooling {
                Pooling::Mean => mean_rows(h, d),
                Pooling::Cls => h[..d].to_vec(),
                _ => h.to_vec(), // last (one row), none (every row)
            });
        }
        if normalize {
            for v in &mut out {
                v.chunks_exact_mut(d).for_each(l2_normalize);
            }
        }
        Ok(out)
    }

    fn n_embd(&self) -> usize {
        self.model.config().d_model
    }
    fn n_scores(&self) -> usize {
        0
    }
    fn is_reranker(&self) -> bool {
        false
    }
    fn max_positions(&self) -> usize {
        self.model.config().context_length
    }
    fn vocab_size(&self) -> usize {
        self.model.config().vocab_size
    }
    fn pooling(&self) -> Pooling {
        self.pooling
    }
    fn threads(&self) -> &Threads {
        self.model.threads()
    }
}
