//! Server-sent events of the APIs whose streams are typed events (Anthropic's Messages, OpenAI's
//! Responses), as opposed to the chat / completion chunks of `sse`.
//!
//! A route's [`EventDriver`] turns engine events into its API's events and queues them; this
//! file pulls the engine's stream into it and frames what it queued. The stream is polled with
//! the request's `guard` context, so a request deadline that passes mid-stream ends it as the
//! driver's `fail` says, and a panic while making an event is failed the same way (an internal
//! error naming the request id) instead of cutting the connection. The body is a pull-driven
//! stream with no task behind it: a client that disconnects drops it, which drops the engine
//! receiver, which aborts the request.

use std::convert::Infallible;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;

use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use engine::{Event, FinishReason, Usage};
use futures_util::stream::{self, Stream};
use futures_util::FutureExt;

use crate::base::ApiError;
use crate::serving::run::Tagged;

/// One route's translation of engine events into its API's events.
pub trait EventDriver: Send + 'static {
    /// The API's event.
    type Out: Send;
    /// What the stream is, for a panic's message ("a messages stream").
    const WHAT: &'static str;
    /// The engine's events for this request.
    fn events(&mut self) -> &mut Pin<Box<dyn Stream<Item = Tagged> + Send>>;
    /// The next queued event, if any.
    fn pop(&mut self) -> Option<Self::Out>;
    /// Drops every queued event (before a panic's failure is queued).
    fn clear(&mut self);
    /// Whether the stream has queued its last event.
    fn done(&self) -> bool;
    /// A token (`id`, none for the final text) and its text.
    fn read(&mut self, id: Option<u32>, text: String);
    /// The request finished: queue the closing events.
    fn closing(&mut self, reason: FinishReason, usage: &Usage);
    /// The request failed after the 200 went out: queue the API's failure, the last event.
    fn fail(&mut self, e: &ApiError);
    /// One event as an SSE frame.
    fn frame(ev: &Self::Out) -> SseEvent;
}

/// Logs an internal error with the request's id (the `fail`s call it before they queue it).
pub fn log_internal(e: &ApiError) {
    if let ApiError::Internal(cause) = e {
        let id = crate::base::context::request_id();
        tracing::error!(request_id = id.as_deref(), "internal error: {cause}");
    }
}

/// The next event to send: a queued one, else what the engine's next event makes; `None` once
/// the last was sent.
async fn next_event<D: EventDriver>(d: &mut D) -> Option<D::Out> {
    loop {
        if let Some(ev) = d.pop() {
            return Some(ev);
        }
        if d.done() {
            return None;
        }
        let next = match crate::serving::run::next_before(d.events()).await {
            Ok(next) => next,
            Err(e) => {
                d.fail(&e);
                continue;
            }
        };
        match next.map(|(_, ev)| ev) {
            None => d.fail(&ApiError::Internal("the engine stopped mid-stream".into())),
            Some(Event::Accepted | Event::PromptLogprobs(_)) => {}
            Some(Event::Token { id, text, .. }) => d.read(Some(id), text),
            Some(Event::Finished {
                reason,
                text,
                usage,
            }) => {
                d.read(None, text);
                d.closing(reason, &usage);
            }
            Some(Event::Error(e)) => d.fail(&e.into()),
        }
    }
}

/// The SSE response that drives `d` to its last event.
pub fn respond<D: EventDriver>(d: D) -> Response {
    let ctx = crate::base::context::current();
    let body = stream::unfold(d, move |mut d| {
        let ctx = ctx.clone();
        async move {
            let step = AssertUnwindSafe(next_event(&mut d)).catch_unwind();
            let ev = match crate::base::context::within(ctx.clone(), step).await {
                Ok(ev) => ev?,
                Err(panic) => {
                    let what = crate::base::context::panic_message(panic.as_ref()).to_string();
                    let e = ApiError::Internal(format!("{} panicked: {what}", D::WHAT));
                    d.clear();
                    crate::base::context::within(ctx.clone(), async { d.fail(&e) }).await;
                    crate::base::context::within(ctx, next_event(&mut d)).await?
                }
            };
            Some((Ok::<_, Infallible>(D::frame(&ev)), d))
        }
    });
    Sse::new(body)
        .keep_alive(KeepAlive::default())
        .into_response()
}
