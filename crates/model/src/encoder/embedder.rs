//! What the engine needs of an embedding model, whichever network computes it: an [`Encoder`]
//! (BERT family) or a [`DecoderEmbedder`](super::DecoderEmbedder) (a decoder such as Qwen3 read
//! as an embedder, Qwen3-Embedding's way).

use kernels::Threads;

use super::{Encoder, Pooling};
use crate::ModelError;

/// An embedding model: whole inputs in, one vector (or score) per input out.
pub trait Embedder: Send {
    /// Runs whole inputs (token ids, special tokens included) and returns one result per input:
    /// `n_embd()` floats for mean / cls / last pooling, `n_embd()` per token for `None`,
    /// `n_scores()` raw scores for `Rank`; `normalize` L2-normalises each embedding.
    fn embed_batch(
        &mut self,
        inputs: &[&[u32]],
        pooling: Pooling,
        normalize: bool,
    ) -> Result<Vec<Vec<f32>>, ModelError>;
    /// Width of an embedding.
    fn n_embd(&self) -> usize;
    /// Scores per input under rank pooling (0 when the model has no classifier head).
    fn n_scores(&self) -> usize;
    /// Whether rank pooling is what the file asks for and the model can score.
    fn is_reranker(&self) -> bool;
    /// The longest input, in tokens.
    fn max_positions(&self) -> usize;
    fn vocab_size(&self) -> usize;
    /// The pooling the file asks for.
    fn pooling(&self) -> Pooling;
    /// The pool the model runs on.
    fn threads(&self) -> &Threads;
}

impl Embedder for Encoder {
    fn embed_batch(
        &mut self,
        inputs: &[&[u32]],
        pooling: Pooling,
        normalize: bool,
    ) -> Result<Vec<Vec<f32>>, ModelError> {
        Encoder::embed_batch(self, inputs, pooling, normalize)
    }
    fn n_embd(&self) -> usize {
        Encoder::n_embd(self)
    }
    fn n_scores(&self) -> usize {
        Encoder::n_scores(self)
    }
    fn is_reranker(&self) -> bool {
        Encoder::is_reranker(self)
    }
    fn max_positions(&self) -> usize {
        Encoder::max_positions(self)
    }
    fn vocab_size(&self) -> usize {
        self.config().vocab_size
    }
    fn pooling(&self) -> Pooling {
        Encoder::pooling(self)
    }
    fn threads(&self) -> &Threads {
        Encoder::threads(self)
    }
}
