//! `POST /v1/completions`: text completion, streamed or whole, with echo and legacy log-probs.
//!
//! Echo prepends the prompt (decoded from its tokens) to each choice's text; with `logprobs`
//! it also reports the prompt's log-probs, so `echo` + `max_tokens: 0` scores a prompt, as in
//! vLLM. Streaming (the chunk writer is `stream`) sends the echo as each choice's first chunk.

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use engine::TokenLogprob;
use tokenizer::Tokenizer;

use super::protocol::COMPLETIONS;
use crate::base::{body_bytes, ApiError};
use crate::protocol::logprobs::Legacy;
use crate::protocol::request::CommonParams;
use crate::protocol::response::{Body, Head, UsageTotals};
use crate::serving::lora::served_as;
use crate::serving::run::{self, Outcome};
use crate::serving::sse::{self};
use crate::serving::state::AppState;
use crate::serving::structured;
use crate::serving::validate::Job;

use crate::serving::{self, openai_body};

use super::protocol::{CompletionBody, CompletionChoice, CompletionRequest};
use super::stream::Chunks;
use super::validate::completion_job;

/// `object` of the whole response and of its chunks alike.
pub(super) const OBJECT: &str = "text_completion";

/// `POST /v1/completions`.
#[utoipa::path(post, path = "/v1/completions", tag = "openai",
    request_body(content = CompletionBody, content_type = "application/json"),
    responses((status = 200, description = "The completion, whole (JSON) or streamed \
        (`stream: true`: one chunk per `data:` event, then `data: [DONE]`)",
        content((Body<CompletionChoice> = "application/json"),
            (Body<CompletionChoice> = "text/event-stream")))))]
pub async fn handle(
    State(state): State<AppState>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let m = state.model()?;
    let bytes = body_bytes(body, state.config().body_limit)?;
    let (req, common): (CompletionRequest, CommonParams) = openai_body(&bytes, COMPLETIONS)?;
    let asked = structured::constraint(&common)?;
    let model = served_as(common.model.as_deref(), m);
    let mut job = completion_job(req, common, m, state.config())?;
    serving::constrain(&mut job, asked, m).await?;
    let tok = m.engine.tokenizer().clone();
    let head = serving::head("cmpl", &model);
    let choices = serving::submit(&job, &m.engine).await?;
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

/// The non-streamed response.
fn whole(head: &Head, job: &Job, tok: &Tokenizer, outs: Vec<Outcome>) -> Body<CompletionChoice> {
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
        choices.push(CompletionChoice {
            index: o.index,
            text,
            logprobs: wants_lp.then_some(lp),
            finish_reason: Some(o.reason),
        });
    }
    head.body(OBJECT, choices, Some(usage.usage()))
}

/// Adds the prompt's tokens and log-probs (the first token has none).
pub(super) fn push_prompt(
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
