//! A sequence as the scheduler sees it: its tokens, how many are in the KV cache, its tiles and
//! where it stands in line. Sampling, stop conditions and the client channel live with the
//! engine (`request.rs`), so the scheduler stays pure logic.

use std::time::Instant;

use crate::kv_manager::SeqTiles;

/// Identifies a sequence for its whole life (across preemptions).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SeqId(pub u64);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SeqStatus {
    Waiting,
    Running,
    Finished,
}

/// What the scheduler tracks per sequence.
#[derive(Debug)]
pub struct Sequence {
    pub id: SeqId,
    /// Prompt followed by the generated tokens.
    pub tokens: Vec<u32>,
    /// Proposed next tokens (speculative), fed after `tokens` in the next step and verified
    /// there: the longest agreeing prefix is accepted, the rest dropped (`Scheduler::commit`).
    pub draft: Vec<u32>,
    pub prompt_len: usize,
    /// Tokens whose K/V are in the cache (`num_cached_tokens` in vLLM's words).
    pub num_computed: usize,
    /// Prompt tokens that came from the prefix cache at first admission (for usage).
    pub cached_prompt_tokens: usize,
    pub tiles: SeqTiles,
    pub status: SeqStatus,
    /// Lower runs sooner.
    pub priority: i32,
    /// Arrival order; earlier runs sooner among equals.
    pub arrival: u64,
    /// Steps spent waiting, for aging.
    pub waited_steps: u64,
    /// Times preempted.
    pub preemptions: u32,
    /// Set when resumed after preemption, cleared on its first generated token: such a sequence
    /// is not preempted again before it makes progress (no thrash).
    pub protected: bool,
    /// Whether logits of every prompt position are wanted (prompt log-probabilities): such a
    /// sequence never adopts cached tiles.
    pub wants_prompt_logits: bool,
    /// Generation stops at this many tokens in total (prompt + output).
    pub max_total_len: usize,
    /// Started as a fork of another sequence's computed prompt (`n` > 1): its prompt was
    /// neither looked up in the prefix cache nor computed for it.
    pub forked: bool,
    /// When its first token is due (arrival plus the TTFT target, `slo`), if there is one.
    pub ttft_deadline: Option<Instant>,
    /// The key of the LoRA adapters and scales it computes with (`lora::adapters_key`; none
    /// for the base model): the root of its prefix chain, so that its tiles are never another
    /// adapter's.
    pub lora_key: Option<crate::tiles::PrefixKey>,
}

impl Sequence {
    pub fn new(id: SeqId, prompt: Vec<u32>, max_new: usize, priority: i32, arrival: u64) -> Self {
        let prompt_len = prompt.len();
        Sequence {
            id,
            tokens: prompt,
            draft: Vec::new(),
            prompt_len,
            num_computed: 0,
            cached_prompt_tokens: 0,
            tiles: SeqTiles::default(),
            status: SeqStatus::Waiting,
            priority,
            arrival,
            waited_steps: 0,
            preemptions: 0,
            protected: false,
            wants_prompt_logits: false,
            max_total_len: prompt_len + max_new,
            forked: false,
            ttft_deadline: None,
            lora_key: None,
        }
    }

    /// Generated tokens so far.
    pub fn output(&self) -> &[u32] {
        &self.tokens[self.prompt_len..]
    }

    /// Tokens still to run through the model before the next token can be sampled.
    pub fn uncomputed(&self) -> usize {
        self.tokens.len() - self.num_computed
    }

    /// The `len` tokens a step feeds from position `start`: known tokens, then the draft.
    pub fn fed(&self, start: usize, len: usize) -> impl Iterator<Item = u32> + '_ {
        self.tokens
            .iter()
            .chain(&self.draft)
            .skip(start)
            .take(len)
            .copied()
    }

    /// Whether it is past its prompt (and any recomputation) and decodes one token per step
    /// (plus its draft, if it has one).
    pub fn is_decoding(&self) -> bool {
        self.uncomputed() == 1 && self.num_computed >= self.prompt_len
    }
}
