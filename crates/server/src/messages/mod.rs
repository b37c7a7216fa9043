//! Anthropic's Messages API (`POST /v1/messages`, `POST /v1/messages/count_tokens`) on top of
//! the chat path.
//!
//! A request's `system` and `messages` (text, `tool_use` and `tool_result` blocks) become chat
//! messages (`input`), its `tools` and `tool_choice` chat's function tools and choice, checked by
//! the same `tools::setup_fields`; the conversation goes through the chat template, and the same
//! checks and engine request as chat completions (`validate`). The reply is read by the same
//! tool-call parser as chat's and assembled into text and `tool_use` blocks (`reply`), once for
//! the whole message and its stream (`stream`, events in `wire`). `protocol` has the request and
//! response shapes, `handler` the routes. Errors on these routes take Anthropic's shape: the
//! app's layer re-renders every `ApiError` of them (`ApiError::anthropic_response`), and a
//! stream's failure is an `error` event.

pub mod handler;
pub mod input;
pub mod protocol;
pub mod reply;
mod stream;
pub mod validate;
pub mod wire;

use protocol::{ContentBlock, MessageObject, MessageUsage};
use validate::Prepared;

/// The message object of `prep`'s reply.
fn message(
    prep: &Prepared,
    content: Vec<ContentBlock>,
    stop_reason: Option<&'static str>,
    stop_sequence: Option<String>,
    usage: MessageUsage,
) -> MessageObject {
    MessageObject {
        id: prep.id.clone(),
        kind: "message",
        role: "assistant",
        model: prep.model.clone(),
        content,
        stop_reason,
        stop_sequence,
        usage,
    }
}
