//! Streaming a response as OpenAI's Responses events.
//!
//! Each SSE frame is `event: <type>` and `data: <event JSON>`, numbered by `sequence_number`
//! from 0, with no `[DONE]` (the Responses API ends with its terminal event). The order:
//! `response.created`, `response.in_progress`, `response.output_item.added`,
//! `response.content_part.added`, one `response.output_text.delta` per piece of text, then
//! `response.output_text.done`, `response.content_part.done`, `response.output_item.done` and
//! the terminal `response.completed` (or `response.incomplete` when the token limit cut it, or
//! `response.failed` when the engine failed). The deltas concatenate to the final text. The
//! finished response is stored before its terminal event is sent, so a client that chains on
//! it as soon as it sees the id finds it. Dropping the body (a client gone) drops the engine
//! receiver, which aborts the request; nothing is stored then. The stream is polled with the
//! request's `guard` context: a request deadline that passes mid-stream fails the response
//! (`response.failed` with the timeout error), and so does a panic while making an event
//! (with an internal error naming the request id).

use std::collections::VecDeque;
use std::convert::Infallible;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;

use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use engine::Event;
use futures_util::stream::{self, Stream};
use futures_util::FutureExt;

use crate::error::ApiError;
use crate::run::Tagged;
use crate::state::AppState;

use super::wire::{OutputMessage, OutputText, Status, StreamEvent};
use super::Prepared;

struct Driver {
    events: Pin<Box<dyn Stream<Item = Tagged> + Send>>,
    prep: Prepared,
    state: AppState,
    text: String,
    seq: u64,
    pending: VecDeque<StreamEvent>,
    done: bool,
}

/// The SSE response for a started request whose (single choice's) events are `events`.
pub fn respond(
    events: Pin<Box<dyn Stream<Item = Tagged> + Send>>,
    prep: Prepared,
    state: AppState,
) -> Response {
    let mut d = Driver {
        events,
        prep,
        state,
        text: String::new(),
        seq: 0,
        pending: VecDeque::new(),
        done: false,
    };
    d.opening();
    let ctx = crate::guard::current();
    let body = stream::unfold(d, move |mut d| {
        let ctx = ctx.clone();
        async move {
            let step = AssertUnwindSafe(d.next_event()).catch_unwind();
            let ev = match crate::guard::within(ctx.clone(), step).await {
                Ok(ev) => ev?,
                Err(panic) => {
                    let what = crate::guard::panic_message(panic.as_ref()).to_string();
                    let e = ApiError::Internal(format!("a response stream panicked: {what}"));
                    d.pending.clear();
                    crate::guard::within(ctx.clone(), async { d.fail(&e) }).await;
                    crate::guard::within(ctx, d.next_event()).await?
                }
            };
            Some((Ok::<_, Infallible>(frame(&ev)), d))
        }
    });
    Sse::new(body)
        .keep_alive(KeepAlive::default())
        .into_response()
}

/// One event as an SSE frame. The event types always serialize; should one ever fail, the
/// frame carries an `error` event instead and the cause is logged.
fn frame(ev: &StreamEvent) -> SseEvent {
    match serde_json::to_string(ev) {
        Ok(data) => SseEvent::default().event(ev.name()).data(data),
        Err(e) => {
            tracing::error!("cannot serialize a response event: {e}");
            let body = serde_json::json!({"type": "error", "code": "server_error",
                "message": "internal error", "param": null, "sequence_number": 0});
            SseEvent::default().event("error").data(body.to_string())
        }
    }
}

impl Driver {
    fn seq(&mut self) -> u64 {
        let n = self.seq;
        self.seq += 1;
        n
    }

    fn push(&mut self, make: impl FnOnce(u64) -> StreamEvent) {
        let n = self.seq();
        self.pending.push_back(make(n));
    }

    fn item_id(&self) -> String {
        self.prep.message_id.clone()
    }

    /// The events before the first token.
    fn opening(&mut self) {
        let head = self.prep.head.clone();
        self.push(|sequence_number| StreamEvent::Created {
            sequence_number,
            response: head.clone(),
        });
        self.push(|sequence_number| StreamEvent::InProgress {
            sequence_number,
            response: head,
        });
        let item = OutputMessage::new(self.item_id(), Status::InProgress, Vec::new());
        self.push(|sequence_number| StreamEvent::OutputItemAdded {
            sequence_number,
            output_index: 0,
            item,
        });
        let item_id = self.item_id();
        self.push(|sequence_number| StreamEvent::ContentPartAdded {
            sequence_number,
            item_id,
            output_index: 0,
            content_index: 0,
            part: OutputText::new(String::new()),
        });
    }

    fn delta(&mut self, text: String) {
        if text.is_empty() {
            return;
        }
        self.text.push_str(&text);
        let item_id = self.item_id();
        self.push(|sequence_number| StreamEvent::OutputTextDelta {
            sequence_number,
            item_id,
            output_index: 0,
            content_index: 0,
            delta: text,
            logprobs: [],
        });
    }

    /// The closing events of a finished generation; stores the response first.
    fn closing(&mut self, reason: engine::FinishReason, usage: &engine::Usage) {
        let obj = self.prep.finish(self.text.clone(), reason, usage);
        self.prep.keep(&obj, self.state.responses());
        let (item_id, text) = (self.item_id(), self.text.clone());
        self.push(|sequence_number| StreamEvent::OutputTextDone {
            sequence_number,
            item_id: item_id.clone(),
            output_index: 0,
            content_index: 0,
            text: text.clone(),
            logprobs: [],
        });
        self.push(|sequence_number| StreamEvent::ContentPartDone {
            sequence_number,
            item_id,
            output_index: 0,
            content_index: 0,
            part: OutputText::new(text),
        });
        if let Some(item) = obj.output.first().cloned() {
            self.push(|sequence_number| StreamEvent::OutputItemDone {
                sequence_number,
                output_index: 0,
                item,
            });
        }
        self.push(|n| StreamEvent::terminal(n, obj));
        self.done = true;
    }

    fn fail(&mut self, e: &ApiError) {
        if let ApiError::Internal(cause) = e {
            let id = crate::guard::request_id();
            tracing::error!(request_id = id.as_deref(), "internal error: {cause}");
        }
        let obj = self.prep.failed(e);
        self.push(|sequence_number| StreamEvent::Failed {
            sequence_number,
            response: obj,
        });
        self.done = true;
    }

    async fn next_event(&mut self) -> Option<StreamEvent> {
        loop {
            if let Some(ev) = self.pending.pop_front() {
                return Some(ev);
            }
            if self.done {
                return None;
            }
            let next = match crate::run::next_before(&mut self.events).await {
                Ok(next) => next,
                Err(e) => {
                    self.fail(&e);
                    continue;
                }
            };
            match next.map(|(_, ev)| ev) {
                None => self.fail(&ApiError::Internal("the engine stopped mid-stream".into())),
                Some(Event::Accepted | Event::PromptLogprobs(_)) => {}
                Some(Event::Token { text, .. }) => self.delta(text),
                Some(Event::Finished {
                    reason,
                    text,
                    usage,
                }) => {
                    self.delta(text);
                    self.closing(reason, &usage);
                }
                Some(Event::Error(e)) => self.fail(&e.into()),
            }
        }
    }
}
