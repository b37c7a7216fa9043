//! The Messages API's stream events: each SSE frame is `event: <type>` and `data: <event
//! JSON>` (whose `type` is the same name). `stream` sends them in Anthropic's order.

use serde::Serialize;
use utoipa::ToSchema;

use crate::base::AnthropicError;

use super::protocol::{ContentBlock, MessageObject, MessageUsage};

/// One stream event.
#[derive(Debug, Serialize, ToSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum MessageStreamEvent {
    /// First: the message with no content and no stop reason yet.
    MessageStart {
        message: MessageObject,
    },
    /// A block opens: text (empty), or a tool_use (its `input` empty until the deltas).
    ContentBlockStart {
        index: usize,
        content_block: ContentBlock,
    },
    /// Keeps the connection alive (after the first block opens).
    Ping,
    ContentBlockDelta {
        index: usize,
        delta: BlockDelta,
    },
    ContentBlockStop {
        index: usize,
    },
    /// The stop reason, and the usage (cumulative, with the cache counts).
    MessageDelta {
        delta: MessageDelta,
        usage: MessageUsage,
    },
    MessageStop,
    /// A failure after the 200 went out; the last event.
    Error {
        error: AnthropicError,
    },
}

impl MessageStreamEvent {
    /// The SSE event name: the event's `type`.
    pub fn name(&self) -> &'static str {
        match self {
            MessageStreamEvent::MessageStart { .. } => "message_start",
            MessageStreamEvent::ContentBlockStart { .. } => "content_block_start",
            MessageStreamEvent::Ping => "ping",
            MessageStreamEvent::ContentBlockDelta { .. } => "content_block_delta",
            MessageStreamEvent::ContentBlockStop { .. } => "content_block_stop",
            MessageStreamEvent::MessageDelta { .. } => "message_delta",
            MessageStreamEvent::MessageStop => "message_stop",
            MessageStreamEvent::Error { .. } => "error",
        }
    }
}

/// What a delta adds to its block.
#[derive(Debug, Serialize, ToSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum BlockDelta {
    TextDelta {
        text: String,
    },
    /// A piece of a thinking block.
    ThinkingDelta {
        thinking: String,
    },
    /// A piece of the tool_use's input, JSON text; a block's pieces concatenate to its input.
    InputJsonDelta {
        partial_json: String,
    },
}

/// The message's end.
#[derive(Debug, Serialize, ToSchema)]
pub struct MessageDelta {
    #[schema(pattern = "^(end_turn|max_tokens|stop_sequence|tool_use)$")]
    pub stop_reason: &'static str,
    pub stop_sequence: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn events_carry_their_name_as_type() {
        let events = [
            MessageStreamEvent::Ping,
            MessageStreamEvent::MessageStop,
            MessageStreamEvent::ContentBlockStop { index: 2 },
            MessageStreamEvent::ContentBlockDelta {
                index: 1,
                delta: BlockDelta::InputJsonDelta {
                    partial_json: "{}".into(),
                },
            },
            MessageStreamEvent::Error {
                error: AnthropicError {
                    kind: "api_error",
                    message: "m".into(),
                },
            },
        ];
        for ev in &events {
            let v = serde_json::to_value(ev).expect("serializes");
            assert_eq!(v["type"], ev.name());
        }
        let v = serde_json::to_value(&events[3]).expect("serializes");
        assert_eq!(
            v,
            json!({"type": "content_block_delta", "index": 1,
                "delta": {"type": "input_json_delta", "partial_json": "{}"}})
        );
        let v = serde_json::to_value(&events[4]).expect("serializes");
        assert_eq!(
            v,
            json!({"type": "error", "error": {"type": "api_error", "message": "m"}})
        );
    }
}
