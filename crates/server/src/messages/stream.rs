//! Streaming a reply as the Messages API's events.
//!
//! The order: `message_start` (the message, no content, its usage counting the whole prompt as
//! input until the end tells how much came from the cache), then per content block
//! (`reply::Blocks` says when one opens and closes) `content_block_start`, its deltas
//! (`thinking_delta` for thinking, `text_delta` for text, as they arrive; one `input_json_delta` with the whole input for
//! a tool_use, sent once the call is whole) and `content_block_stop`, with one `ping` after the
//! first block opens; then `message_delta` (the stop reason, the stop sequence and the final
//! usage) and `message_stop`. A failure after the 200 went out (the engine, the request's
//! deadline, a panic while making an event) is an `error` event, the last. With tools the reply
//! goes through the same `tools::ChoiceReader` as chat (text that may open a call is held
//! back). Dropping the body (a client gone) drops the engine receiver, which aborts the
//! request.

use std::pin::Pin;

use axum::response::sse::Event as SseEvent;
use axum::response::Response;
use engine::FinishReason;
use futures_util::stream::Stream;
use tokenizer::Tokenizer;

use crate::base::ApiError;
use crate::serving::events::{EventDriver, Queue};
use crate::serving::run::Tagged;
use crate::serving::tools::{self, ChoiceReader};

use super::protocol::{ContentBlock, MessageUsage};
use super::reply::{matched_stop, stop_reason, Blocks, Change};
use super::validate::Prepared;
use super::wire::{BlockDelta, MessageDelta, MessageStreamEvent};

struct Driver {
    q: Queue<MessageStreamEvent>,
    prep: Prepared,
    tok: Tokenizer,
    blocks: Blocks,
    /// With tools: the reader that splits the reply into text and calls.
    reader: Option<ChoiceReader>,
    /// The generated token ids and the text sent for them (to tell the stop sequence).
    ids: Vec<u32>,
    sent: String,
    pinged: bool,
}

/// The SSE response for a started request whose (single choice's) events are `events`.
pub fn respond(
    events: Pin<Box<dyn Stream<Item = Tagged> + Send>>,
    prep: Prepared,
    tok: Tokenizer,
) -> Response {
    let family = prep.job.tools.as_ref().map(|t| t.family);
    let reader = ChoiceReader::new(prep.job.tools.as_ref(), prep.job.reasoning.as_ref());
    let start = super::message(
        &prep,
        Vec::new(),
        None,
        None,
        MessageUsage::new(prep.prompt_tokens, 0, 0),
    );
    let d = Driver {
        q: Queue::new(
            events,
            vec![MessageStreamEvent::MessageStart { message: start }],
        ),
        prep,
        tok,
        blocks: Blocks::new(family),
        reader,
        ids: Vec::new(),
        sent: String::new(),
        pinged: false,
    };
    crate::serving::events::respond(d)
}

/// One event as an SSE frame. The event types always serialize; should one ever fail, the
/// frame carries an `error` event instead and the cause is logged.
fn frame_of(ev: &MessageStreamEvent) -> SseEvent {
    match serde_json::to_string(ev) {
        Ok(data) => SseEvent::default().event(ev.name()).data(data),
        Err(e) => {
            let e = ApiError::Internal(format!("cannot serialize a messages event: {e}"));
            tracing::error!("{e}");
            let err = MessageStreamEvent::Error {
                error: e.anthropic_body().error,
            };
            // A struct of strings: it serializes.
            let body = serde_json::to_string(&err).unwrap_or_default();
            SseEvent::default().event(err.name()).data(body)
        }
    }
}

impl Driver {
    /// The events announcing `changes` to the content.
    fn events_for(&mut self, changes: Vec<Change>) {
        for ch in changes {
            match ch {
                Change::ThinkingStart(index) => self.block_start(
                    index,
                    ContentBlock::Thinking {
                        thinking: String::new(),
                        signature: String::new(),
                    },
                ),
                Change::ThinkingDelta(index, thinking) => {
                    self.q
                        .pending
                        .push_back(MessageStreamEvent::ContentBlockDelta {
                            index,
                            delta: BlockDelta::ThinkingDelta { thinking },
                        })
                }
                Change::TextStart(index) => self.block_start(
                    index,
                    ContentBlock::Text {
                        text: String::new(),
                    },
                ),
                Change::TextDelta(index, text) => {
                    self.q
                        .pending
                        .push_back(MessageStreamEvent::ContentBlockDelta {
                            index,
                            delta: BlockDelta::TextDelta { text },
                        })
                }
                Change::ToolUse(index) => self.tool_use(index),
                Change::Stop(index) => self
                    .q
                    .pending
                    .push_back(MessageStreamEvent::ContentBlockStop { index }),
            }
        }
    }

    fn block_start(&mut self, index: usize, content_block: ContentBlock) {
        self.q
            .pending
            .push_back(MessageStreamEvent::ContentBlockStart {
                index,
                content_block,
            });
        if !std::mem::replace(&mut self.pinged, true) {
            self.q.pending.push_back(MessageStreamEvent::Ping);
        }
    }

    /// A whole call: its block with an empty input, then the input as one delta.
    fn tool_use(&mut self, index: usize) {
        let Some(ContentBlock::ToolUse { id, name, input }) =
            self.blocks.blocks.get(index).cloned()
        else {
            return;
        };
        let empty = serde_json::Value::Object(serde_json::Map::new());
        self.block_start(
            index,
            ContentBlock::ToolUse {
                id,
                name,
                input: empty,
            },
        );
        self.q
            .pending
            .push_back(MessageStreamEvent::ContentBlockDelta {
                index,
                delta: BlockDelta::InputJsonDelta {
                    partial_json: input.to_string(),
                },
            });
    }
}

impl EventDriver for Driver {
    type Out = MessageStreamEvent;
    const WHAT: &'static str = "a messages stream";
    fn queue(&mut self) -> &mut Queue<MessageStreamEvent> {
        &mut self.q
    }
    /// Reads a token's text (`Some(id)`) or the last text of the reply into the content.
    fn read(&mut self, id: Option<u32>, text: String) {
        self.ids.extend(id);
        self.sent.push_str(&text);
        let outs = tools::read_next(self.reader.as_mut(), id, text);
        let mut changes = Vec::new();
        for o in outs {
            self.blocks.push(o, &mut changes);
        }
        self.events_for(changes);
    }
    /// The closing events of a finished generation.
    fn closing(&mut self, reason: FinishReason, usage: &engine::Usage) {
        if reason == FinishReason::Abort {
            self.fail(&ApiError::Internal("the engine aborted the request".into()));
            return;
        }
        let mut changes = Vec::new();
        self.blocks.finish(&mut changes);
        self.events_for(changes);
        let stop = matched_stop(&self.prep.stops, &self.tok, &self.ids, &self.sent);
        let stop_reason = stop_reason(reason, self.blocks.calls(), stop.as_deref());
        let usage = MessageUsage::new(
            self.prep.prompt_tokens,
            usage.cached_tokens,
            usage.completion_tokens,
        );
        self.q.pending.push_back(MessageStreamEvent::MessageDelta {
            delta: MessageDelta {
                stop_reason,
                stop_sequence: stop,
            },
            usage,
        });
        self.q.pending.push_back(MessageStreamEvent::MessageStop);
        self.q.done = true;
    }
    fn fail(&mut self, e: &ApiError) {
        crate::serving::events::log_internal(e);
        let error = e.anthropic_body().error;
        self.q
            .pending
            .push_back(MessageStreamEvent::Error { error });
        self.q.done = true;
    }
    fn frame(ev: &MessageStreamEvent) -> SseEvent {
        frame_of(ev)
    }
}
