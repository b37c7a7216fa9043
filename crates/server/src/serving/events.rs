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

use std::collections::VecDeque;
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

/// What every driver keeps: the request's engine events, the API events queued to send, and
/// whether the last one is queued.
pub struct Queue<T> {
    pub events: Pin<Box<dyn Stream<Item = Tagged> + Send>>,
    pub pending: VecDeque<T>,
    pub done: bool,
}

impl<T> Queue<T> {
    /// A queue that sends `first` before anything the engine's events make.
    pub fn new(events: Pin<Box<dyn Stream<Item = Tagged> + Send>>, first: Vec<T>) -> Self {
        Self {
            events,
            pending: first.into(),
            done: false,
        }
    }
}

/// One route's translation of engine events into its API's events.
pub trait EventDriver: Send + 'static {
    /// The API's event.
    type Out: Send;
    /// What the stream is, for a panic's message ("a messages stream").
    const WHAT: &'static str;
    /// The driver's queue.
    fn queue(&mut self) -> &mut Queue<Self::Out>;
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
        let q = d.queue();
        if let Some(ev) = q.pending.pop_front() {
            return Some(ev);
        }
        if q.done {
            return None;
        }
        let next = match crate::serving::run::next_before(&mut q.events).await {
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
                    d.queue().pending.clear();
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
