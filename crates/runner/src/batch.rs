//! The ragged batch the forward pass runs: several sequences, each contributing a run of
//! consecutive tokens (one for decode, a chunk for prefill), plus where their KV lives.

use crate::kv::TileId;

/// Which logits a sequence wants back from a forward pass.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogitsWanted {
    /// None (a prefill chunk that is not the last).
    None,
    /// The last token's only (decode, or the last prefill chunk).
    Last,
    /// Every token's (prompt log-probabilities).
    All,
}

impl LogitsWanted {
    /// Logit rows this gives back for a chunk of `len` tokens.
    pub fn rows(self, len: usize) -> usize {
        match self {
            LogitsWanted::None => 0,
            LogitsWanted::Last => 1,
            LogitsWanted::All => len,
        }
    }
}

/// One sequence's part of a batch.
#[derive(Clone, Debug)]
pub struct SeqChunk<'a> {
    /// Positions `0..start_pos` are already in the KV cache; this chunk's tokens take the
    /// positions `start_pos..start_pos + len`.
    pub start_pos: usize,
    /// Where the chunk's tokens start in `Batch::tokens`.
    pub first_token: usize,
    /// Number of tokens in the chunk (at least 1).
    pub len: usize,
    /// One tile table per KV group (see `KvLayout`): entry `i` holds positions
    /// `i*tile_size..(i+1)*tile_size`. It must cover every position up to `start_pos + len`;
    /// entries wholly outside a windowed group's window may be `TileId::RELEASED`.
    pub tile_tables: &'a [Vec<TileId>],
    pub logits: LogitsWanted,
    /// The LoRA adapters this chunk computes with, each with its scale (llama-server's form:
    /// several per request; vLLM's one adapter per request is a list of one). Empty: the base
    /// model. Each adapter at most once; a scale of 0 is the base for that adapter.
    pub loras: &'a [LoraUse],
}

/// A LoRA adapter loaded into a runner (`Runner::load_lora`). Ids are never reused within a
/// runner's life: an id unloaded and a later load never alias.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LoraId(pub u32);

/// One adapter a chunk computes with: every weight the adapter touches adds
/// `scale * (alpha / rank) * B·A·x` to its output (llama.cpp's scale: `scale` alone when the
/// adapter's alpha is 0).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LoraUse {
    pub id: LoraId,
    pub scale: f32,
}

/// A ragged batch: the tokens of every sequence, concatenated.
#[derive(Clone, Debug)]
pub struct Batch<'a> {
    pub tokens: &'a [u32],
    pub seqs: &'a [SeqChunk<'a>],
}

impl Batch<'_> {
    /// Number of logit rows the forward pass will produce.
    pub fn n_logit_rows(&self) -> usize {
        self.seqs.iter().map(|s| s.logits.rows(s.len)).sum()
    }
}
