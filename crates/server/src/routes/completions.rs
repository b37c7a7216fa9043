//! `POST /v1/completions`: text completion, streamed or whole, with echo and legacy log-probs.
//!
//! Echo prepends the prompt (decoded from its tokens) to each choice's text; with `logprobs`
//! it also reports the prompt's log-probs, so `echo` + `max_tokens: 0` scores a prompt, as in
//! vLLM. Streaming sends the echo as each choice's first chunk.

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use engine::{Event, FinishReason, TokenLogprob};
use serde_json::{json, Value};
use tokenizer::Tokenizer;

use crate::error::ApiError;
use crate::logprobs::Legacy;
use crate::openai::{CommonParams, CompletionRequest};
use crate::run::{self, Outcome, UsageTotals};
use crate::sse::{self, ChunkWriter};
use crate::state::{unix_now, AppState};
use crate::validate::{completion_job, parse_body, Job};

use super::{body_bytes, new_id};

pub async fn handle(
    State(state): State<AppState>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let m = state.model()?;
    let bytes = body_bytes(body, state.config().body_limit)?;
    let req: CompletionRequest = parse_body(&bytes)?;
    let common: CommonParams = parse_body(&bytes)?;
    let job = completion_job(req, common, m, state.config())?;
    let tok = m.engine.tokenizer().clone();
    let head = Head {
        id: new_id("cmpl"),
        created: unix_now(),
        model: m.model_id.clone(),
    };
    let choices = run::start(&job, &m.engine).await?;
    if job.stream {
        let n = choices.len();
        let writer = Chunks::new(head, job, tok, n);
        let include_usage = writer.job.include_usage;
        return Ok(sse::respond(
            run::merge(choices),
            writer,
            n,
            include_usage,
            Vec::new(),
        ));
    }
    let outs = run::collect_all(choices).await?;
    Ok(axum::Json(whole(&head, &job, &tok, outs)).into_response())
}

/// The fields every response object starts with.
struct Head {
    id: String,
    created: u64,
    model: String,
}

/// The non-streamed response.
fn whole(head: &Head, job: &Job, tok: &Tokenizer, outs: Vec<Outcome>) -> Value {
    let mut usage = UsageTotals::new(&job.prompts);
    let wants_lp = job.request.logprobs.is_some();
    let mut choices = Vec::with_capacity(outs.len());
    for o in outs {
        usage.add(o.prompt_index, &o.usage);
        let prompt = &job.prompts[o.prompt_index];
        let mut text = String::new();
        let mut lp = Legacy::default();
        if job.echo {
            text = tok.decode(prompt, true);
            if wants_lp {
                push_prompt(&mut lp, tok, prompt, o.prompt_logprobs.as_deref());
            }
        }
        text.push_str(&o.text);
        if wants_lp {
            for t in &o.tokens {
                lp.push(tok, t.id, t.logprob.as_ref());
            }
        }
        choices.push(json!({
            "index": o.index,
            "text": text,
            "logprobs": if wants_lp { lp.json() } else { Value::Null },
            "finish_reason": o.reason.as_str(),
        }));
    }
    json!({
        "id": head.id,
        "object": "text_completion",
        "created": head.created,
        "model": head.model,
        "choices": choices,
        "usage": usage.json(),
    })
}

/// Adds the prompt's tokens and log-probs (the first token has none).
fn push_prompt(
    lp: &mut Legacy,
    tok: &Tokenizer,
    prompt: &[u32],
    plp: Option<&[Option<TokenLogprob>]>,
) {
    for (i, &id) in prompt.iter().enumerate() {
        let entry = plp.and_then(|v| v.get(i)).and_then(Option::as_ref);
        lp.push(tok, id, entry);
    }
}

/// Streaming state: per choice, whether the echo was sent and the text offset so far.
struct Chunks {
    head: Head,
    job: Job,
    tok: Tokenizer,
    echoed: Vec<bool>,
    offsets: Vec<usize>,
    usage: UsageTotals,
}

impl Chunks {
    fn new(head: Head, job: Job, tok: Tokenizer, n: usize) -> Chunks {
        let usage = UsageTotals::new(&job.prompts);
        Chunks {
            head,
            job,
            tok,
            echoed: vec![false; n],
            offsets: vec![0; n],
            usage,
        }
    }

    fn chunk(
        &self,
        index: usize,
        text: String,
        logprobs: Value,
        reason: Option<FinishReason>,
    ) -> Value {
        json!({
            "id": self.head.id,
            "object": "text_completion",
            "created": self.head.created,
            "model": self.head.model,
            "choices": [{
                "index": index,
                "text": text,
                "logprobs": logprobs,
                "finish_reason": reason.map(FinishReason::as_str),
            }],
        })
    }

    /// The echo chunk of a choice, with the prompt's log-probs when they were asked for.
    fn echo(&mut self, index: usize, plp: Option<&[Option<TokenLogprob>]>, out: &mut Vec<Value>) {
        if !self.job.echo || self.echoed[index] {
            return;
        }
        self.echoed[index] = true;
        let prompt = &self.job.prompts[index / self.job.n];
        let text = self.tok.decode(prompt, true);
        let lp = if self.job.request.logprobs.is_some() {
            let mut lp = Legacy::default();
            push_prompt(&mut lp, &self.tok, prompt, plp);
            self.offsets[index] = lp.offset();
            lp.json()
        } else {
            self.offsets[index] = text.chars().count();
            Value::Null
        };
        out.push(self.chunk(index, text, lp, None));
    }
}

impl ChunkWriter for Chunks {
    fn on_event(&mut self, index: usize, ev: Event, out: &mut Vec<Value>) -> bool {
        match ev {
            Event::Accepted => false,
            Event::PromptLogprobs(plp) => {
                self.echo(index, Some(&plp), out);
                false
            }
            Event::Token { id, text, logprob } => {
                self.echo(index, None, out);
                let lp = match &self.job.request.logprobs {
                    Some(_) => {
                        let mut lp = Legacy::starting_at(self.offsets[index]);
                        lp.push(&self.tok, id, logprob.as_ref());
                        self.offsets[index] = lp.offset();
                        lp.json()
                    }
                    None => Value::Null,
                };
                if !text.is_empty() || !lp.is_null() {
                    out.push(self.chunk(index, text, lp, None));
                }
                false
            }
            Event::Finished {
                reason,
                text,
                usage,
            } => {
                self.echo(index, None, out);
                self.usage.add(index / self.job.n, &usage);
                out.push(self.chunk(index, text, Value::Null, Some(reason)));
                true
            }
            Event::Error(_) => true,
        }
    }

    fn usage_chunk(&self) -> Value {
        json!({
            "id": self.head.id,
            "object": "text_completion",
            "created": self.head.created,
            "model": self.head.model,
            "choices": [],
            "usage": self.usage.json(),
        })
    }
}
