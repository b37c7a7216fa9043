//! Streaming a response as OpenAI's Responses events.
//!
//! Each SSE frame is `event: <type>` and `data: <event JSON>`, numbered by `sequence_number`
//! from 0, with no `[DONE]` (the Responses API ends with its terminal event). The order:
//! `response.created`, `response.in_progress`, then per output item (`items::Items` says when
//! one opens and closes): for a message `response.output_item.added`,
//! `response.content_part.added`, one `response.output_text.delta` per piece of text, then
//! `response.output_text.done`, `response.content_part.done`, `response.output_item.done`;
//! for a call (sent once it is whole) `response.output_item.added`,
//! `response.function_call_arguments.delta`, `response.function_call_arguments.done`,
//! `response.output_item.done`; then the terminal `response.completed` (or
//! `response.incomplete` when the token limit cut it, or `response.failed` when the engine
//! failed). Each message's deltas concatenate to its final text. With tools the reply goes
//! through the same `tools::ChoiceReader` as chat (text that may open a call is held back). The
//! finished response is stored before its terminal event is sent, so a client that chains on
//! it as soon as it sees the id finds it. Dropping the body (a client gone) drops the engine
//! receiver, which aborts the request; nothing is stored then. The stream is polled with the
//! request's `guard` context: a request deadline that passes mid-stream fails the response
//! (`response.failed` with the timeout error), and so does a panic while making an event
//! (with an internal error naming the request id).

use std::pin::Pin;

use axum::response::sse::Event as SseEvent;
use axum::response::Response;
use futures_util::stream::Stream;

use crate::base::ApiError;
use crate::serving::events::{EventDriver, Queue};
use crate::serving::run::Tagged;
use crate::serving::state::AppState;
use crate::serving::tools::{self, ChoiceReader};

use super::items::{Change, Items};
use super::wire::{OutputItem, OutputMessage, OutputText, ReasoningText, Status, StreamEvent};
use super::{store, Prepared};

struct Driver {
    q: Queue<StreamEvent>,
    prep: Prepared,
    state: AppState,
    items: Items,
    /// With tools: the reader that splits the reply into content and calls.
    reader: Option<ChoiceReader>,
    seq: u64,
}

/// The SSE response for a started request whose (single choice's) events are `events`.
pub fn respond(
    events: Pin<Box<dyn Stream<Item = Tagged> + Send>>,
    prep: Prepared,
    state: AppState,
) -> Response {
    let items = prep.items();
    let reader = ChoiceReader::new(prep.job.tools.as_ref(), prep.job.reasoning.as_ref());
    let mut d = Driver {
        q: Queue::new(events, Vec::new()),
        prep,
        state,
        items,
        reader,
        seq: 0,
    };
    d.opening();
    crate::serving::events::respond(d)
}

/// One event as an SSE frame. The event types always serialize; should one ever fail, the
/// frame carries an `error` event instead and the cause is logged.
fn frame_of(ev: &StreamEvent) -> SseEvent {
    match serde_json::to_string(ev) {
        Ok(data) => SseEvent::default().event(ev.name()).data(data),
        Err(e) => {
            tracing::error!("cannot serialize a response event: {e}");
            let err = StreamEvent::Error {
                sequence_number: 0,
                code: "server_error",
                message: "internal error",
                param: None,
            };
            // A struct of strings and a number: it serializes.
            let body = serde_json::to_string(&err).unwrap_or_default();
            SseEvent::default().event(err.name()).data(body)
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
        self.q.pending.push_back(make(n));
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
    }

    /// The events announcing `changes` to the output.
    fn events_for(&mut self, changes: Vec<Change>) {
        for ch in changes {
            match ch {
                Change::ReasoningAdded(at) => self.reasoning_added(at),
                Change::ReasoningDelta(at, delta) => {
                    let item_id = self.item_id(at);
                    self.push(|sequence_number| StreamEvent::ReasoningTextDelta {
                        sequence_number,
                        item_id,
                        output_index: at,
                        content_index: 0,
                        delta,
                    });
                }
                Change::ReasoningDone(at) => self.reasoning_done(at),
                Change::MessageAdded(at) => self.message_added(at),
                Change::TextDelta(at, delta) => {
                    let item_id = self.item_id(at);
                    self.push(|sequence_number| StreamEvent::OutputTextDelta {
                        sequence_number,
                        item_id,
                        output_index: at,
                        content_index: 0,
                        delta,
                        logprobs: [],
                    });
                }
                Change::MessageDone(at) => self.message_done(at),
                Change::CallDone(at) => self.call_done(at),
            }
        }
    }

    fn item_id(&self, at: usize) -> String {
        match self.items.items.get(at) {
            Some(OutputItem::Message(m)) => m.id.clone(),
            Some(OutputItem::FunctionCall(c)) => c.id.clone(),
            Some(OutputItem::Reasoning(r)) => r.id.clone(),
            None => String::new(),
        }
    }

    fn reasoning_added(&mut self, at: usize) {
        let Some(OutputItem::Reasoning(r)) = self.items.items.get(at).cloned() else {
            return;
        };
        let mut added = r;
        added.content = vec![ReasoningText::new(String::new())];
        self.push(|sequence_number| StreamEvent::OutputItemAdded {
            sequence_number,
            output_index: at,
            item: OutputItem::Reasoning(added),
        });
    }

    fn reasoning_done(&mut self, at: usize) {
        let Some(OutputItem::Reasoning(r)) = self.items.items.get(at).cloned() else {
            return;
        };
        let text: String = r.content.iter().map(|c| c.text.as_str()).collect();
        let item_id = r.id.clone();
        self.push(|sequence_number| StreamEvent::ReasoningTextDone {
            sequence_number,
            item_id,
            output_index: at,
            content_index: 0,
            text,
        });
        self.push(|sequence_number| StreamEvent::OutputItemDone {
            sequence_number,
            output_index: at,
            item: OutputItem::Reasoning(r),
        });
    }

    fn message_added(&mut self, at: usize) {
        let item_id = self.item_id(at);
        let item = OutputMessage::new(item_id.clone(), Status::InProgress, Vec::new());
        self.push(|sequence_number| StreamEvent::OutputItemAdded {
            sequence_number,
            output_index: at,
            item: OutputItem::Message(item),
        });
        self.push(|sequence_number| StreamEvent::ContentPartAdded {
            sequence_number,
            item_id,
            output_index: at,
            content_index: 0,
            part: OutputText::new(String::new()),
        });
    }

    fn message_done(&mut self, at: usize) {
        let Some(OutputItem::Message(m)) = self.items.items.get(at).cloned() else {
            return;
        };
        let text: String = m.content.iter().map(|c| c.text.as_str()).collect();
        let item_id = m.id.clone();
        self.push(|sequence_number| StreamEvent::OutputTextDone {
            sequence_number,
            item_id: item_id.clone(),
            output_index: at,
            content_index: 0,
            text: text.clone(),
            logprobs: [],
        });
        self.push(|sequence_number| StreamEvent::ContentPartDone {
            sequence_number,
            item_id,
            output_index: at,
            content_index: 0,
            part: OutputText::new(text),
        });
        self.push(|sequence_number| StreamEvent::OutputItemDone {
            sequence_number,
            output_index: at,
            item: OutputItem::Message(m),
        });
    }

    fn call_done(&mut self, at: usize) {
        let Some(OutputItem::FunctionCall(c)) = self.items.items.get(at).cloned() else {
            return;
        };
        let mut added = c.clone();
        added.status = Status::InProgress;
        added.arguments = String::new();
        self.push(|sequence_number| StreamEvent::OutputItemAdded {
            sequence_number,
            output_index: at,
            item: OutputItem::FunctionCall(added),
        });
        let (item_id, args) = (c.id.clone(), c.arguments.clone());
        self.push(|sequence_number| StreamEvent::FunctionCallArgumentsDelta {
            sequence_number,
            item_id: item_id.clone(),
            output_index: at,
            delta: args.clone(),
        });
        let name = c.name.clone();
        self.push(|sequence_number| StreamEvent::FunctionCallArgumentsDone {
            sequence_number,
            item_id,
            output_index: at,
            name,
            arguments: args,
        });
        self.push(|sequence_number| StreamEvent::OutputItemDone {
            sequence_number,
            output_index: at,
            item: OutputItem::FunctionCall(c),
        });
    }
}

impl EventDriver for Driver {
    type Out = StreamEvent;
    const WHAT: &'static str = "a response stream";
    fn queue(&mut self) -> &mut Queue<StreamEvent> {
        &mut self.q
    }
    /// Reads a token's text (`Some(id)`) or the last text of the reply into the output.
    fn read(&mut self, id: Option<u32>, text: String) {
        let outs = tools::read_next(self.reader.as_mut(), id, text);
        let mut changes = Vec::new();
        for o in outs {
            self.items.push(o, &mut changes);
        }
        self.events_for(changes);
    }
    /// The closing events of a finished generation; stores the response first.
    fn closing(&mut self, reason: engine::FinishReason, usage: &engine::Usage) {
        let mut changes = Vec::new();
        self.items
            .finish(Status::of(reason).finished_item(), &mut changes);
        let obj = self.prep.finish(self.items.items.clone(), reason, usage);
        self.prep.keep(&obj, &store::of(&self.state));
        self.events_for(changes);
        self.push(|n| StreamEvent::terminal(n, obj));
        self.q.done = true;
    }
    fn fail(&mut self, e: &ApiError) {
        crate::serving::events::log_internal(e);
        let obj = self.prep.failed(e);
        self.push(|sequence_number| StreamEvent::Failed {
            sequence_number,
            response: obj,
        });
        self.q.done = true;
    }
    fn frame(ev: &StreamEvent) -> SseEvent {
        frame_of(ev)
    }
}
