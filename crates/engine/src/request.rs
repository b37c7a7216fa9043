//! What a client asks of the engine and what it gets back. (The state the engine keeps per
//! request beside the scheduler's `Sequence` is `emit::RequestState`.)

use std::time::{Duration, Instant};

use model::SamplingParams;

use crate::constraint::CompiledConstraint;
use crate::lora::LoraRequest;

/// A generation request in token space (the server tokenizes).
#[derive(Clone, Debug, Default)]
pub struct GenerateRequest {
    pub prompt: Vec<u32>,
    pub sampling: SamplingParams,
    /// Tokens to generate at most (0 with `prompt_logprobs` scores the prompt only).
    pub max_tokens: usize,
    pub stop_token_ids: Vec<u32>,
    /// Generation ends before any of these strings; the string itself is not emitted.
    pub stop_strings: Vec<String>,
    /// Keep going past end-of-generation tokens.
    pub ignore_eos: bool,
    /// Log-probability of each generated token plus this many alternatives.
    pub logprobs: Option<usize>,
    /// Log-probabilities of the prompt tokens (plus this many alternatives each).
    pub prompt_logprobs: Option<usize>,
    /// Lower runs sooner.
    pub priority: i32,
    /// Never feed drafts for this request, even when the server speculates.
    pub no_speculation: bool,
    /// The grammar the output must match (`EngineHandle::compile` makes one from a
    /// `constraint::Constraint`); its token mask runs last in the sampler's processor chain.
    pub constraint: Option<CompiledConstraint>,
    /// The LoRA adapters to compute with, by registered name, each with its scale (empty: the
    /// base model; see `lora`).
    pub loras: Vec<LoraRequest>,
}

/// A token's log-probability and the top alternatives at its position.
#[derive(Clone, Debug, PartialEq)]
pub struct TokenLogprob {
    pub token: u32,
    pub logprob: f32,
    pub top: Vec<(u32, f32)>,
}

impl TokenLogprob {
    /// `token`'s log-probability in the logit row `row` and the `n` most likely tokens there.
    pub fn of(row: &[f32], token: u32, n: usize) -> TokenLogprob {
        let (logprob, top) = model::sampler::logprobs(row, token, n);
        TokenLogprob {
            token,
            logprob,
            top,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FinishReason {
    /// End-of-generation token, stop token or stop string.
    Stop,
    /// max_tokens or the context limit.
    Length,
    /// Aborted (by the client or shutdown).
    Abort,
}

impl FinishReason {
    pub fn as_str(self) -> &'static str {
        match self {
            FinishReason::Stop => "stop",
            FinishReason::Length => "length",
            FinishReason::Abort => "abort",
        }
    }
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Usage {
    pub prompt_tokens: usize,
    pub completion_tokens: usize,
    /// Prompt tokens whose KV came from the prefix cache.
    pub cached_tokens: usize,
    /// Times the request was preempted (its KV given up and recomputed later).
    pub preemptions: u32,
    pub timings: Timings,
}

/// Where a request's time went, measured on the engine thread from its arrival there.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Timings {
    /// Arrival to first scheduled (None if it never was).
    pub queue: Option<Duration>,
    /// Arrival to first generated token (None if it produced none).
    pub first_token: Option<Duration>,
    /// Arrival to finish.
    pub total: Duration,
}

impl Timings {
    /// The timings of a request that arrived at `arrived` and finishes at `now`.
    pub fn until_now(
        now: Instant,
        arrived: Instant,
        scheduled: Option<Instant>,
        first_token: Option<Instant>,
    ) -> Timings {
        Timings {
            queue: scheduled.map(|t| t.saturating_duration_since(arrived)),
            first_token: first_token.map(|t| t.saturating_duration_since(arrived)),
            total: now.saturating_duration_since(arrived),
        }
    }

    /// First scheduled to first token: computing the prompt (and the first draw).
    pub fn prefill(&self) -> Option<Duration> {
        Some(self.first_token?.saturating_sub(self.queue?))
    }

    /// First token to finish: generating the rest.
    pub fn decode(&self) -> Option<Duration> {
        Some(self.total.saturating_sub(self.first_token?))
    }
}

/// Why the engine refused a request.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum EngineError {
    #[error("{0}")]
    InvalidRequest(String),
    #[error("the server is overloaded: {0}")]
    Overloaded(String),
    #[error("the engine has stopped")]
    Stopped,
    #[error("internal error: {0}")]
    Internal(String),
}

/// What the engine streams back for a request.
#[derive(Clone, Debug, PartialEq)]
pub enum Event {
    /// The request passed validation and is queued: the first event of every accepted request
    /// (a refused one gets only `Error`), so a server can answer with its headers at once instead
    /// of at the first token.
    Accepted,
    /// Prompt log-probabilities (entry 0, the first prompt token, has none).
    PromptLogprobs(Vec<Option<TokenLogprob>>),
    /// One generated token and the text it completes (possibly empty, held back while it could
    /// start a stop string or finish a UTF-8 character).
    Token {
        id: u32,
        text: String,
        logprob: Option<TokenLogprob>,
    },
    /// The last event of a request.
    Finished {
        reason: FinishReason,
        /// Text held back until the end (a partial character or a partial stop-string match).
        text: String,
        usage: Usage,
    },
    /// The request failed; also the last event.
    Error(EngineError),
}
