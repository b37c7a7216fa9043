//! `POST /v1/chat/completions`: chat through the model's chat template, streamed or whole.
//!
//! Streaming follows OpenAI's chunk sequence: a `{"role": "assistant"}` delta per choice first,
//! content deltas, then a delta-less chunk carrying `finish_reason`.

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use engine::{Event, FinishReason};
use serde_json::{json, Value};
use tokenizer::Tokenizer;

use crate::error::ApiError;
use crate::logprobs::chat_entry;
use crate::openai::{ChatRequest, CommonParams};
use crate::run::{self, UsageTotals};
use crate::sse::{self, ChunkWriter};
use crate::state::{unix_now, AppState};
use crate::validate::{chat_job, parse_body};

use super::{body_bytes, new_id};

pub async fn handle(
    State(state): State<AppState>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let m = state.model()?;
    let bytes = body_bytes(body, state.config().body_limit)?;
    let req: ChatRequest = parse_body(&bytes)?;
    let common: CommonParams = parse_body(&bytes)?;
    let job = chat_job(req, common, m, state.config())?;
    let tok = m.engine.tokenizer().clone();
    let head = Head {
        id: new_id("chatcmpl"),
        created: unix_now(),
        model: m.model_id.clone(),
        logprobs: job.request.logprobs.is_some(),
    };
    let choices = run::start(&job, &m.engine).await?;
    let mut usage = UsageTotals::new(&job.prompts);
    if job.stream {
        let n = choices.len();
        let initial = (0..n)
            .map(|i| head.chunk(i, json!({"role": "assistant", "content": ""}), None, None))
            .collect();
        let writer = Chunks {
            head,
            tok,
            n_per_prompt: job.n,
            usage,
        };
        return Ok(sse::respond(
            run::merge(choices),
            writer,
            n,
            job.include_usage,
            initial,
        ));
    }
    let outs = run::collect_all(choices).await?;
    let mut out_choices = Vec::with_capacity(outs.len());
    for o in outs {
        usage.add(o.prompt_index, &o.usage);
        let logprobs = head.logprobs.then(|| {
            let content: Vec<Value> = o
                .tokens
                .iter()
                .filter_map(|t| t.logprob.as_ref().map(|lp| chat_entry(&tok, lp)))
                .collect();
            json!({ "content": content })
        });
        out_choices.push(json!({
            "index": o.index,
            "message": {"role": "assistant", "content": o.text},
            "logprobs": logprobs,
            "finish_reason": o.reason.as_str(),
        }));
    }
    Ok(axum::Json(json!({
        "id": head.id,
        "object": "chat.completion",
        "created": head.created,
        "model": head.model,
        "choices": out_choices,
        "usage": usage.json(),
    }))
    .into_response())
}

struct Head {
    id: String,
    created: u64,
    model: String,
    logprobs: bool,
}

impl Head {
    fn chunk(
        &self,
        index: usize,
        delta: Value,
        logprobs: Option<Value>,
        reason: Option<FinishReason>,
    ) -> Value {
        json!({
            "id": self.id,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.model,
            "choices": [{
                "index": index,
                "delta": delta,
                "logprobs": logprobs,
                "finish_reason": reason.map(FinishReason::as_str),
            }],
        })
    }
}

struct Chunks {
    head: Head,
    tok: Tokenizer,
    n_per_prompt: usize,
    usage: UsageTotals,
}

impl ChunkWriter for Chunks {
    fn on_event(&mut self, index: usize, ev: Event, out: &mut Vec<Value>) -> bool {
        match ev {
            Event::Accepted | Event::PromptLogprobs(_) => false,
            Event::Token { text, logprob, .. } => {
                let lp = match (&logprob, self.head.logprobs) {
                    (Some(lp), true) => Some(json!({"content": [chat_entry(&self.tok, lp)]})),
                    _ => None,
                };
                if !text.is_empty() || lp.is_some() {
                    out.push(self.head.chunk(index, json!({"content": text}), lp, None));
                }
                false
            }
            Event::Finished {
                reason,
                text,
                usage,
            } => {
                self.usage.add(index / self.n_per_prompt, &usage);
                if !text.is_empty() {
                    out.push(self.head.chunk(index, json!({"content": text}), None, None));
                }
                out.push(self.head.chunk(index, json!({}), None, Some(reason)));
                true
            }
            Event::Error(_) => true,
        }
    }

    fn usage_chunk(&self) -> Value {
        json!({
            "id": self.head.id,
            "object": "chat.completion.chunk",
            "created": self.head.created,
            "model": self.head.model,
            "choices": [],
            "usage": self.usage.json(),
        })
    }
}
