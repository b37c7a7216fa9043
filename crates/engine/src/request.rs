//! What a client asks of the engine and what it gets back. (The state the engine keeps per
//! request beside the scheduler's `Sequence` is `emit::RequestState`.)

use model::SamplingParams;

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
}

/// A token's log-probability and the top alternatives at its position.
#[derive(Clone, Debug, PartialEq)]
pub struct TokenLogprob {
    pub token: u32,
    pub logprob: f32,
    pub top: Vec<(u32, f32)>,
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
