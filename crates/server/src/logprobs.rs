//! Log-probabilities in the two shapes OpenAI uses.
//!
//! Completions use the legacy parallel arrays (`tokens`, `token_logprobs`, `top_logprobs` as
//! text → log-prob maps, `text_offset`); chat uses a list of `{token, logprob, bytes,
//! top_logprobs}` entries. A token's text is its raw bytes decoded lossily, so a token holding
//! half a UTF-8 character shows U+FFFD here while `bytes` keeps the exact value.

use engine::TokenLogprob;
use serde_json::{json, Map, Value};
use tokenizer::Tokenizer;

pub fn token_text(tok: &Tokenizer, id: u32) -> String {
    String::from_utf8_lossy(tok.token_bytes(id)).into_owned()
}

/// A finite log-prob, or the most negative finite value (JSON has no -inf).
fn finite(lp: f32) -> f32 {
    if lp.is_finite() {
        lp
    } else {
        -9999.0
    }
}

/// One entry of chat's `logprobs.content`.
pub fn chat_entry(tok: &Tokenizer, lp: &TokenLogprob) -> Value {
    let one = |id: u32, v: f32| json!({"token": token_text(tok, id), "logprob": finite(v), "bytes": tok.token_bytes(id)});
    let mut entry = one(lp.token, lp.logprob);
    entry["top_logprobs"] = lp.top.iter().map(|&(id, v)| one(id, v)).collect();
    entry
}

/// The legacy completions log-prob arrays, built token by token.
#[derive(Default)]
pub struct Legacy {
    tokens: Vec<Value>,
    token_logprobs: Vec<Value>,
    top_logprobs: Vec<Value>,
    text_offset: Vec<usize>,
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
        self.tokens.push(Value::String(text));
        match lp {
            None => {
                self.token_logprobs.push(Value::Null);
                self.top_logprobs.push(Value::Null);
            }
            Some(lp) => {
                self.token_logprobs.push(json!(finite(lp.logprob)));
                let mut top = Map::new();
                for &(alt, v) in &lp.top {
                    top.entry(token_text(tok, alt))
                        .or_insert_with(|| json!(finite(v)));
                }
                self.top_logprobs.push(Value::Object(top));
            }
        }
    }

    pub fn is_empty(&self) -> bool {
        self.tokens.is_empty()
    }

    /// The characters covered so far (the next token's offset).
    pub fn offset(&self) -> usize {
        self.offset
    }

    pub fn json(&self) -> Value {
        json!({
            "tokens": self.tokens,
            "token_logprobs": self.token_logprobs,
            "top_logprobs": self.top_logprobs,
            "text_offset": self.text_offset,
        })
    }
}
