//! `POST /v1/chat/completions`: chat through the model's chat template, streamed or whole.
//!
//! Streaming follows OpenAI's chunk sequence: a `{"role": "assistant"}` delta per choice first,
//! content deltas, then a delta-less chunk carrying `finish_reason`.

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use engine::{Event, FinishReason};
use tokenizer::Tokenizer;

use crate::error::ApiError;
use crate::fields::{self, struct_fields, Route};
use crate::logprobs::{ChatLogprobs, ChatTokenLogprob};
use crate::openai::{ChatRequest, CommonParams};
use crate::response::{
    AssistantMessage, Body, ChatChoice, ChatChunkChoice, Delta, Head, UsageTotals,
};
use crate::run::{self, Outcome};
use crate::sse::{self, ChunkWriter};
use crate::state::AppState;
use crate::structured;
use crate::validate::{chat_job, parse_body};

use super::body_bytes;

const OBJECT: &str = "chat.completion";
const CHUNK_OBJECT: &str = "chat.completion.chunk";
const ROLE: &str = "assistant";

pub async fn handle(
    State(state): State<AppState>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let m = state.model()?;
    let bytes = body_bytes(body, state.config().body_limit)?;
    let req: ChatRequest = parse_body(&bytes)?;
    let common: CommonParams = parse_body(&bytes)?;
    let honoured = [
        struct_fields::<CommonParams>(),
        struct_fields::<ChatRequest>(),
    ];
    fields::check(&bytes, Route::Chat, &honoured)?;
    let asked = structured::constraint(&common)?;
    let mut job = chat_job(req, common, m, state.config())?;
    structured::attach(&mut job, asked, m).await?;
    let tok = m.engine.tokenizer().clone();
    let head = Head::new("chatcmpl", &m.model_id);
    let logprobs = job.request.logprobs.is_some();
    let choices = run::start(&job, &m.engine).await?;
    let usage = UsageTotals::new(&job.prompts);
    if job.stream {
        let n = choices.len();
        let writer = Chunks {
            head,
            tok,
            logprobs,
            n_per_prompt: job.n,
            usage,
        };
        let initial = (0..n).map(|i| writer.role_chunk(i)).collect();
        return Ok(sse::respond(
            run::merge(choices),
            writer,
            n,
            job.include_usage,
            initial,
        ));
    }
    let outs = run::collect_all(choices).await?;
    Ok(axum::Json(whole(&head, logprobs, &tok, usage, outs)).into_response())
}

/// The non-streamed response.
fn whole(
    head: &Head,
    logprobs: bool,
    tok: &Tokenizer,
    mut usage: UsageTotals,
    outs: Vec<Outcome>,
) -> Body<ChatChoice> {
    let mut choices = Vec::with_capacity(outs.len());
    for o in outs {
        usage.add(o.prompt_index, &o.usage);
        let logprobs = logprobs.then(|| ChatLogprobs {
            content: o
                .tokens
                .iter()
                .filter_map(|t| t.logprob.as_ref().map(|lp| ChatTokenLogprob::new(tok, lp)))
                .collect(),
        });
        choices.push(ChatChoice {
            index: o.index,
            message: AssistantMessage {
                role: ROLE,
                content: o.text,
            },
            logprobs,
            finish_reason: Some(o.reason),
        });
    }
    head.body(OBJECT, choices, Some(usage.usage()))
}

/// Streaming state: the head every chunk repeats and the usage so far.
struct Chunks {
    head: Head,
    tok: Tokenizer,
    /// Whether the request asked for log-probs.
    logprobs: bool,
    n_per_prompt: usize,
    usage: UsageTotals,
}

impl Chunks {
    fn chunk(
        &self,
        index: usize,
        delta: Delta,
        logprobs: Option<ChatLogprobs>,
        finish_reason: Option<FinishReason>,
    ) -> Body<ChatChunkChoice> {
        let choice = ChatChunkChoice {
            index,
            delta,
            logprobs,
            finish_reason,
        };
        self.head.body(CHUNK_OBJECT, vec![choice], None)
    }

    /// The first chunk of a choice: the role, and empty content.
    fn role_chunk(&self, index: usize) -> Body<ChatChunkChoice> {
        let delta = Delta {
            role: Some(ROLE),
            content: Some(String::new()),
        };
        self.chunk(index, delta, None, None)
    }

    fn content(text: String) -> Delta {
        Delta {
            role: None,
            content: Some(text),
        }
    }
}

impl ChunkWriter for Chunks {
    type Chunk = Body<ChatChunkChoice>;

    fn on_event(&mut self, index: usize, ev: Event, out: &mut Vec<Self::Chunk>) -> bool {
        match ev {
            Event::Accepted | Event::PromptLogprobs(_) => false,
            Event::Token { text, logprob, .. } => {
                let lp = match (&logprob, self.logprobs) {
                    (Some(lp), true) => Some(ChatLogprobs {
                        content: vec![ChatTokenLogprob::new(&self.tok, lp)],
                    }),
                    _ => None,
                };
                if !text.is_empty() || lp.is_some() {
                    out.push(self.chunk(index, Chunks::content(text), lp, None));
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
                    out.push(self.chunk(index, Chunks::content(text), None, None));
                }
                out.push(self.chunk(index, Delta::default(), None, Some(reason)));
                true
            }
            Event::Error(_) => true,
        }
    }

    fn usage_chunk(&self) -> Self::Chunk {
        self.head
            .body(CHUNK_OBJECT, Vec::new(), Some(self.usage.usage()))
    }
}
