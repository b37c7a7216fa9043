//! `POST /v1/chat/completions`: chat through the model's chat template, streamed or whole.
//!
//! Streaming follows OpenAI's chunk sequence: a `{"role": "assistant"}` delta per choice first,
//! content deltas, then a delta-less chunk carrying `finish_reason`.
//!
//! With tools, each choice's reply goes through a `tools::ChoiceReader`: content comes out as
//! the reader releases it (text that may open a call is held back), and each call as two
//! `tool_calls` deltas, its id, type and name first, then its arguments. A reply that made
//! calls ends with `finish_reason: "tool_calls"`.

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use engine::Event;
use tokenizer::Tokenizer;

use super::protocol::CHAT;
use crate::base::{body_bytes, ApiError};
use crate::protocol::logprobs::{ChatLogprobs, ChatTokenLogprob};
use crate::protocol::request::CommonParams;
use crate::protocol::response::{Body, Head, UsageTotals};
use crate::serving::run::{self, Outcome};
use crate::serving::sse::{self, ChunkWriter};
use crate::serving::state::AppState;
use crate::serving::structured;
use crate::serving::tools::{self, ChoiceReader, Family, Out, ParsedCall, ToolParse};
use crate::serving::{self, openai_body};

use super::protocol::{
    AssistantMessage, ChatChoice, ChatChunkChoice, ChatCompletionBody, ChatFinish, ChatRequest,
    Delta, FunctionCall, FunctionDelta, ToolCall, ToolCallDelta,
};
use super::validate::chat_job;

const OBJECT: &str = "chat.completion";
const CHUNK_OBJECT: &str = "chat.completion.chunk";
const ROLE: &str = "assistant";

/// `POST /v1/chat/completions`.
#[utoipa::path(post, path = "/v1/chat/completions", tag = "openai",
    request_body(content = ChatCompletionBody, content_type = "application/json"),
    responses((status = 200, description = "The reply, whole (JSON) or streamed (`stream: true`: \
        one chunk per `data:` event, then `data: [DONE]`)",
        content((Body<ChatChoice> = "application/json"),
            (Body<ChatChunkChoice> = "text/event-stream")))))]
pub async fn handle(
    State(state): State<AppState>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let m = state.model()?;
    let bytes = body_bytes(body, state.config().body_limit)?;
    let (req, common): (ChatRequest, CommonParams) = openai_body(&bytes, CHAT)?;
    let asked = structured::constraint(&common)?;
    let mut job = chat_job(req, common, m, state.config())?;
    let asked = structured::with_tool_grammar(asked, job.tool_grammar.take())?;
    serving::constrain(&mut job, asked, m).await?;
    let tok = m.engine.tokenizer().clone();
    let head = serving::head("chatcmpl", &m.model_id);
    let logprobs = job.request.logprobs.is_some();
    let choices = serving::submit(&job, &m.engine).await?;
    let usage = UsageTotals::new(&job.prompts);
    if job.stream {
        let n = choices.len();
        let readers = (0..n)
            .map(|_| job.tools.as_ref().map(ChoiceReader::new))
            .collect();
        let writer = Chunks {
            head,
            tok,
            logprobs,
            n_per_prompt: job.n,
            usage,
            readers,
            family: job.tools.as_ref().map(|t| t.family),
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
    let tools = job.tools.as_ref();
    Ok(axum::Json(whole(&head, logprobs, &tok, tools, usage, outs)).into_response())
}

/// A call as the response carries it, with a fresh id of the family's shape.
fn tool_call(c: ParsedCall, family: Family) -> ToolCall {
    ToolCall {
        id: family.call_id(),
        kind: "function",
        function: FunctionCall {
            name: c.name,
            arguments: c.arguments,
        },
    }
}

/// The message of a whole reply: its text, or with tools its content and calls.
fn message(o: &Outcome, tools: Option<&ToolParse>) -> (AssistantMessage, ChatFinish) {
    let (content, calls) = match tools {
        Some(parse) => tools::read_outcome(parse, o),
        None => (o.text.clone(), Vec::new()),
    };
    let finish = ChatFinish::of(o.reason, calls.len());
    let content = (calls.is_empty() || !content.is_empty()).then_some(content);
    let message = AssistantMessage {
        role: ROLE,
        content,
        tool_calls: calls
            .into_iter()
            .filter_map(|c| Some(tool_call(c, tools?.family)))
            .collect(),
    };
    (message, finish)
}

/// The non-streamed response.
fn whole(
    head: &Head,
    logprobs: bool,
    tok: &Tokenizer,
    tools: Option<&ToolParse>,
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
        let (message, finish) = message(&o, tools);
        choices.push(ChatChoice {
            index: o.index,
            message,
            logprobs,
            finish_reason: Some(finish),
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
    /// Per choice, with tools: the reader of its reply.
    readers: Vec<Option<ChoiceReader>>,
    /// With tools: the template's family (the shape of call ids).
    family: Option<Family>,
}

impl Chunks {
    fn chunk(
        &self,
        index: usize,
        delta: Delta,
        logprobs: Option<ChatLogprobs>,
        finish_reason: Option<ChatFinish>,
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
            tool_calls: None,
        };
        self.chunk(index, delta, None, None)
    }

    fn content(text: String) -> Delta {
        Delta {
            content: Some(text),
            ..Delta::default()
        }
    }

    fn call_delta(call: ToolCallDelta) -> Delta {
        Delta {
            tool_calls: Some(vec![call]),
            ..Delta::default()
        }
    }

    /// Chunks for what choice `index`'s reader released (the token's log-probs on the first),
    /// its calls numbered from `first_call`.
    fn push_outs(
        &self,
        index: usize,
        outs: Vec<Out>,
        first_call: usize,
        mut lp: Option<ChatLogprobs>,
        out: &mut Vec<Body<ChatChunkChoice>>,
    ) {
        let mut k = first_call;
        for o in outs {
            match o {
                Out::Content(t) => out.push(self.chunk(index, Chunks::content(t), lp.take(), None)),
                Out::Call(c) => {
                    let head = ToolCallDelta {
                        index: k,
                        id: self.family.map(Family::call_id),
                        kind: Some("function"),
                        function: FunctionDelta {
                            name: Some(c.name),
                            arguments: Some(String::new()),
                        },
                    };
                    let args = ToolCallDelta {
                        index: k,
                        id: None,
                        kind: None,
                        function: FunctionDelta {
                            name: None,
                            arguments: Some(c.arguments),
                        },
                    };
                    out.push(self.chunk(index, Chunks::call_delta(head), lp.take(), None));
                    out.push(self.chunk(index, Chunks::call_delta(args), None, None));
                    k += 1;
                }
            }
        }
        if lp.is_some() {
            out.push(self.chunk(index, Chunks::content(String::new()), lp, None));
        }
    }

    /// Feeds a token (`Some(id)`) or the end of the reply to choice `index`'s reader: what it
    /// released, and the calls it had read before.
    fn read(&mut self, index: usize, id: Option<u32>, text: &str) -> Option<(Vec<Out>, usize)> {
        let reader = self.readers.get_mut(index)?.as_mut()?;
        let before = reader.calls();
        let outs = match id {
            Some(id) => reader.token(id, text),
            None => reader.end(text),
        };
        Some((outs, before))
    }
}

impl ChunkWriter for Chunks {
    type Chunk = Body<ChatChunkChoice>;

    fn on_event(&mut self, index: usize, ev: Event, out: &mut Vec<Self::Chunk>) -> bool {
        match ev {
            Event::Accepted | Event::PromptLogprobs(_) => false,
            Event::Token { id, text, logprob } => {
                let lp = match (&logprob, self.logprobs) {
                    (Some(lp), true) => Some(ChatLogprobs {
                        content: vec![ChatTokenLogprob::new(&self.tok, lp)],
                    }),
                    _ => None,
                };
                if let Some((outs, first_call)) = self.read(index, Some(id), &text) {
                    self.push_outs(index, outs, first_call, lp, out);
                } else if !text.is_empty() || lp.is_some() {
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
                let mut calls = 0;
                if let Some((outs, first_call)) = self.read(index, None, &text) {
                    calls = first_call + outs.iter().filter(|o| matches!(o, Out::Call(_))).count();
                    self.push_outs(index, outs, first_call, None, out);
                } else if !text.is_empty() {
                    out.push(self.chunk(index, Chunks::content(text), None, None));
                }
                let finish = ChatFinish::of(reason, calls);
                out.push(self.chunk(index, Delta::default(), None, Some(finish)));
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
