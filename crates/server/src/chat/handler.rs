//! `POST /v1/chat/completions`: chat through the model's chat template, streamed (the chunk
//! writer is `stream`) or whole.
//!
//! With tools, each choice's reply goes through the tool-call reader: the whole reply's
//! content and calls, or (streamed) content as the reader releases it and each call as two
//! `tool_calls` deltas. A reply that made calls ends with `finish_reason: "tool_calls"`.
//! With a reasoning parser, the thinking is `message.reasoning_content` (streamed:
//! `delta.reasoning_content`), split off before the tool-call reader sees the content.

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use tokenizer::Tokenizer;

use super::protocol::CHAT;
use crate::base::{body_bytes, ApiError};
use crate::protocol::logprobs::{ChatLogprobs, ChatTokenLogprob};
use crate::protocol::request::CommonParams;
use crate::protocol::response::{Body, Head, UsageTotals};
use crate::serving::lora::served_as;
use crate::serving::reasoning::Reasoning;
use crate::serving::run::{self, Outcome};
use crate::serving::sse::{self};
use crate::serving::state::AppState;
use crate::serving::structured;
use crate::serving::tools::{self, ChoiceReader, Family, ParsedCall, ToolParse};
use crate::serving::{self, openai_body};

use super::protocol::{
    AssistantMessage, ChatChoice, ChatChunkChoice, ChatCompletionBody, ChatFinish, ChatRequest,
    FunctionCall, ToolCall,
};
use super::stream::Chunks;
use super::validate::chat_job;

const OBJECT: &str = "chat.completion";
pub(super) const ROLE: &str = "assistant";

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
    let model = served_as(common.model.as_deref(), m);
    let mut job = chat_job(req, common, m, state.config())?;
    let asked = structured::with_tool_grammar(asked, job.tool_grammar.take())?;
    serving::constrain(&mut job, asked, m).await?;
    let tok = m.engine.tokenizer().clone();
    let head = serving::head("chatcmpl", &model);
    let logprobs = job.request.logprobs.is_some();
    let choices = serving::submit(&job, &m.engine).await?;
    let usage = UsageTotals::new(&job.prompts);
    if job.stream {
        let n = choices.len();
        let readers = (0..n)
            .map(|_| ChoiceReader::new(job.tools.as_ref(), job.reasoning.as_ref()))
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
    let reading = (job.tools.as_ref(), job.reasoning.as_ref());
    Ok(axum::Json(whole(&head, logprobs, &tok, reading, usage, outs)).into_response())
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

/// How a whole reply is read: for calls (with tools) and for reasoning (with a parser).
type Reading<'a> = (Option<&'a ToolParse>, Option<&'a Reasoning>);

/// The message of a whole reply: its text, or with tools its content and calls, and with a
/// reasoning parser its reasoning apart.
fn message(o: &Outcome, (tools, reasoning): Reading) -> (AssistantMessage, ChatFinish) {
    let (thinking, content, calls) = tools::read_outcome(tools, reasoning, o);
    let finish = ChatFinish::of(o.reason, calls.len());
    let content = (calls.is_empty() || !content.is_empty()).then_some(content);
    let message = AssistantMessage {
        role: ROLE,
        content,
        reasoning_content: reasoning.map(|_| Some(thinking).filter(|t| !t.is_empty())),
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
    reading: Reading,
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
        let (message, finish) = message(&o, reading);
        choices.push(ChatChoice {
            index: o.index,
            message,
            logprobs,
            finish_reason: Some(finish),
        });
    }
    head.body(OBJECT, choices, Some(usage.usage()))
}
