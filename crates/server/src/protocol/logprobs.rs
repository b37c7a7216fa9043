//! Log-probabilities in the two shapes OpenAI uses, as typed response parts.
//!
//! Completions use the legacy parallel arrays (`tokens`, `token_logprobs`, `top_logprobs` as
//! text → log-prob maps, `text_offset`); chat uses a list of `{token, logprob, bytes,
//! top_logprobs}` entries. A token's text is its raw bytes decoded lossily, so a token holding
//! half a UTF-8 character shows U+FFFD here while `bytes` keeps the exact value. Log-probs go
//! out as the `f64` of the engine's `f32` (its shortest `f64` digits, not the `f32`'s).

use std::collections::BTreeMap;

use engine::TokenLogprob;
use serde::Serialize;
use tokenizer::Tokenizer;
use utoipa::ToSchema;

pub fn token_text(tok: &Tokenizer, id: u32) -> String {
    String::from_utf8_lossy(tok.token_bytes(id)).into_owned()
}

/// A finite log-prob, or the most negative finite value (JSON has no -inf).
fn finite(lp: f32) -> f64 {
    if lp.is_finite() {
        f64::from(lp)
    } else {
        -9999.0
    }
}

/// Chat's `logprobs`: one entry per generated token.
#[derive(Debug, Default, Serialize, ToSchema)]
pub struct ChatLogprobs {
    pub content: Vec<ChatTokenLogprob>,
}

/// One entry of chat's `logprobs.content`: the chosen token and its alternatives.
#[derive(Debug, Serialize, ToSchema)]
pub struct ChatTokenLogprob {
    pub token: String,
    pub logprob: f64,
    pub bytes: Vec<u8>,
    pub top_logprobs: Vec<TopLogprob>,
}

/// One alternative in `top_logprobs`.
#[derive(Debug, Serialize, ToSchema)]
pub struct TopLogprob {
    pub token: String,
    pub logprob: f64,
    pub bytes: Vec<u8>,
}

impl TopLogprob {
    fn new(tok: &Tokenizer, id: u32, lp: f32) -> TopLogprob {
        TopLogprob {
            token: token_text(tok, id),
            logprob: finite(lp),
            bytes: tok.token_bytes(id).to_vec(),
        }
    }
}

impl ChatTokenLogprob {
    /// The entry for one generated token.
    pub fn new(tok: &Tokenizer, lp: &TokenLogprob) -> ChatTokenLogprob {
        let chosen = TopLogprob::new(tok, lp.token, lp.logprob);
        ChatTokenLogprob {
            token: chosen.token,
            logprob: chosen.logprob,
            bytes: chosen.bytes,
            top_logprobs: lp
                .top
                .iter()
                .map(|&(id, v)| TopLogprob::new(tok, id, v))
                .collect(),
        }
    }
}

/// The legacy completions log-prob arrays, built token by token and serialized as they are.
///
/// `top_logprobs` maps are ordered by token text; two alternatives with the same text keep the
/// first (likelier) one's log-prob.
#[derive(Debug, Default, Serialize, ToSchema)]
pub struct Legacy {
    tokens: Vec<String>,
    token_logprobs: Vec<Option<f64>>,
    top_logprobs: Vec<Option<BTreeMap<String, f64>>>,
    text_offset: Vec<usize>,
    #[serde(skip)]
    offset: usize,
}

impl Legacy {
    /// Starts offsets at `offset` characters (e.g. after text already streamed).
    pub fn starting_at(offset: usize) -> Legacy {
        Legacy {
            offset,
            ..Default::default()
        }
    }

    /// Adds token `id`; `lp` is None for the first prompt token, which has no log-prob.
    pub fn push(&mut self, tok: &Tokenizer, id: u32, lp: Option<&TokenLogprob>) {
        let text = token_text(tok, id);
        self.text_offset.push(self.offset);
        self.offset += text.chars().count();
        self.tokens.push(text);
        self.token_logprobs.push(lp.map(|lp| finite(lp.logprob)));
        self.top_logprobs.push(lp.map(|lp| {
            let mut top = BTreeMap::new();
            for &(alt, v) in &lp.top {
                top.entry(token_text(tok, alt)).or_insert_with(|| finite(v));
            }
            top
        }));
    }

    /// The characters covered so far (the next token's offset).
    pub fn offset(&self) -> usize {
        self.offset
    }
}
