//! Running a validated `Job` on the engine: submit one engine request per choice, then either
//! collect each choice whole or merge their event streams for SSE.
//!
//! `n > 1` is one engine group per prompt: the prompt is computed once and the choices fork
//! from it, sharing its tiles (`EngineHandle::submit_group`). Before any response header is
//! sent, `start` waits for the first event of every choice: `Accepted` as soon as the engine has
//! queued it (so headers go out at once, not at the first token), or the refusal of a request
//! that can never run (e.g. one that can never fit the KV pool), which must become a 400, not a
//! 200 stream that fails. Dropping what
//! `start` returns (a client gone, a handler future cancelled) drops the receivers, and the
//! engine aborts those requests within a step.
//!
//! Each choice carries the request's trace (`observe`), if one is current when `start` runs,
//! and reports its end there; the trace closes when the last choice is dropped.

use std::pin::Pin;

use engine::{EngineHandle, Event, FinishReason, TokenLogprob, Usage};
use futures_util::stream::{self, Stream, StreamExt};
use tokio::sync::mpsc::UnboundedReceiver;

use crate::base::ApiError;
use crate::serving::observe::{self, RequestTrace};
use crate::serving::validate::Job;

/// One choice in flight.
pub struct Choice {
    pub index: usize,
    pub prompt_index: usize,
    /// An event received by `start` after `Accepted`, if any (not expected: the engine sends
    /// nothing else in the same step).
    first: Option<Event>,
    events: UnboundedReceiver<Event>,
    trace: Option<RequestTrace>,
}

/// Tells the trace how a choice of prompt `prompt_index` ended, if `ev` ends it.
fn note(trace: Option<&RequestTrace>, prompt_index: usize, ev: &Event) {
    let Some(t) = trace else { return };
    match ev {
        Event::Finished { reason, usage, .. } => t.finished(prompt_index, *reason, usage),
        Event::Error(e) => t.failed(&e.to_string()),
        _ => {}
    }
}

/// A generated token as the routes report it.
#[derive(Clone, Debug)]
pub struct TokenOut {
    pub id: u32,
    pub logprob: Option<TokenLogprob>,
    /// The length of `Outcome::text` once this token's text was added (the text of token `i`
    /// is what lies between the previous token's `text_end` and its own).
    pub text_end: usize,
}

/// A finished choice.
#[derive(Debug)]
pub struct Outcome {
    pub index: usize,
    pub prompt_index: usize,
    pub text: String,
    pub tokens: Vec<TokenOut>,
    pub prompt_logprobs: Option<Vec<Option<TokenLogprob>>>,
    pub reason: FinishReason,
    pub usage: Usage,
}

/// Submits every choice of `job` and waits until each has produced its first event.
pub async fn start(job: &Job, engine: &EngineHandle) -> Result<Vec<Choice>, ApiError> {
    let mut choices = Vec::with_capacity(job.prompts.len() * job.n);
    let trace = observe::current();
    if let Some(t) = &trace {
        t.begin(job);
    }
    for p in 0..job.prompts.len() {
        // On refusal, `choices` is dropped and the ones already queued are aborted.
        let streams = engine.submit_group((0..job.n).map(|j| job.request_for(p, j)).collect())?;
        for (j, s) in streams.into_iter().enumerate() {
            choices.push(Choice {
                index: p * job.n + j,
                prompt_index: p,
                first: None,
                events: s.events,
                trace: trace.clone(),
            });
        }
    }
    for c in &mut choices {
        match c.events.recv().await {
            Some(Event::Error(e)) => return Err(e.into()),
            Some(Event::Accepted) => {}
            Some(ev) => c.first = Some(ev),
            None => return Err(ApiError::Internal("engine dropped a request".into())),
        }
    }
    Ok(choices)
}

/// Waits for a choice to finish and gathers its output.
pub async fn collect(mut c: Choice) -> Result<Outcome, ApiError> {
    let mut out = Outcome {
        index: c.index,
        prompt_index: c.prompt_index,
        text: String::new(),
        tokens: Vec::new(),
        prompt_logprobs: None,
        reason: FinishReason::Abort,
        usage: Usage::default(),
    };
    let mut next = c.first.take();
    loop {
        let ev = match next.take() {
            Some(ev) => ev,
            None => c
                .events
                .recv()
                .await
                .ok_or_else(|| ApiError::Internal("engine dropped a request".into()))?,
        };
        note(c.trace.as_ref(), c.prompt_index, &ev);
        match ev {
            Event::Accepted => {}
            Event::PromptLogprobs(lp) => out.prompt_logprobs = Some(lp),
            Event::Token { id, text, logprob } => {
                out.text.push_str(&text);
                out.tokens.push(TokenOut {
                    id,
                    logprob,
                    text_end: out.text.len(),
                });
            }
            Event::Finished {
                reason,
                text,
                usage,
            } => {
                out.text.push_str(&text);
                out.reason = reason;
                out.usage = usage;
                return Ok(out);
            }
            Event::Error(e) => return Err(e.into()),
        }
    }
}

/// Collects every choice (they run concurrently in the engine), in choice order.
pub async fn collect_all(choices: Vec<Choice>) -> Result<Vec<Outcome>, ApiError> {
    let mut outs = Vec::with_capacity(choices.len());
    for c in choices {
        outs.push(collect(c).await?);
    }
    Ok(outs)
}

/// One event of one choice, as merged for streaming.
pub type Tagged = (usize, Event);

/// The next merged event, `None` when every choice's stream has ended, or the `Timeout` error
/// once the current request's deadline (`guard::deadline`) has passed.
pub async fn next_before(
    events: &mut Pin<Box<dyn Stream<Item = Tagged> + Send>>,
) -> Result<Option<Tagged>, ApiError> {
    match crate::base::context::deadline() {
        Some((at, timeout)) => tokio::time::timeout_at(at, events.next())
            .await
            .map_err(|_| ApiError::Timeout {
                secs: timeout.as_secs(),
            }),
        None => Ok(events.next().await),
    }
}

/// All choices' events in arrival order, each tagged with its choice index.
pub fn merge(choices: Vec<Choice>) -> Pin<Box<dyn Stream<Item = Tagged> + Send>> {
    let streams = choices.into_iter().map(|c| {
        let Choice {
            index,
            prompt_index,
            first,
            events,
            trace,
        } = c;
        let rest = stream::unfold(events, |mut rx| async move {
            rx.recv().await.map(|ev| (ev, rx))
        });
        stream::iter(first)
            .chain(rest)
            .map(move |ev| {
                note(trace.as_ref(), prompt_index, &ev);
                (index, ev)
            })
            .boxed()
    });
    stream::select_all(streams).boxed()
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use crate::base::context::{within, Context};
    use crate::base::ApiError;

    #[tokio::test]
    async fn a_stream_past_its_deadline_ends_with_the_timeout_error() {
        let ctx = Context::new("req-test".into(), Some(Duration::from_millis(100)));
        let mut events: std::pin::Pin<Box<dyn futures_util::Stream<Item = super::Tagged> + Send>> =
            Box::pin(futures_util::stream::pending());
        let got = within(Some(ctx), super::next_before(&mut events)).await;
        assert!(matches!(got, Err(ApiError::Timeout { .. })), "{got:?}");
        // Without a deadline the wait is not cut short.
        let waited =
            tokio::time::timeout(Duration::from_millis(300), super::next_before(&mut events)).await;
        assert!(waited.is_err());
    }
}
