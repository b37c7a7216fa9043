//! The Responses API's wire format: the response object and its stream events.
//!
//! Field names, nesting and event names follow OpenAI's Responses API as its official clients
//! parse them. The response object always carries every field OpenAI documents (`null` when it
//! does not apply), so clients that read `instructions`, `usage` or `incomplete_details` find
//! them. The output items are assistant messages (one `output_text` part each) and
//! `function_call`s, in the order the model wrote them; a response without calls has one
//! message.

use std::collections::HashMap;

use engine::FinishReason;
use serde::Serialize;
use serde_json::Value;
use utoipa::ToSchema;

/// `status` of a response.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    InProgress,
    Completed,
    Incomplete,
    Failed,
}

impl Status {
    /// The status a finished generation leaves: `length` is `incomplete`, as with OpenAI when
    /// `max_output_tokens` (or the context) runs out; an abort is a failure.
    pub fn of(reason: FinishReason) -> Status {
        match reason {
            FinishReason::Stop => Status::Completed,
            FinishReason::Length => Status::Incomplete,
            FinishReason::Abort => Status::Failed,
        }
    }
}

impl Status {
    /// The status of the last output item of a response in this status: completed, or
    /// incomplete when the response is not.
    pub fn finished_item(self) -> Status {
        match self {
            Status::Completed => Status::Completed,
            _ => Status::Incomplete,
        }
    }
}

/// The response object (`object: "response"`), in progress, finished or failed.
#[derive(Clone, Debug, Serialize, ToSchema)]
pub struct ResponseObject {
    pub id: String,
    pub object: &'static str,
    pub created_at: u64,
    pub status: Status,
    pub error: Option<ResponseError>,
    pub incomplete_details: Option<IncompleteDetails>,
    pub instructions: Option<String>,
    pub max_output_tokens: Option<usize>,
    pub model: String,
    pub output: Vec<OutputItem>,
    pub parallel_tool_calls: bool,
    pub previous_response_id: Option<String>,
    pub reasoning: Reasoning,
    pub store: bool,
    pub temperature: f64,
    /// `{"format": …}` as the request gave it (`{"format": {"type": "text"}}` by default).
    #[schema(value_type = Object)]
    pub text: Value,
    /// As the request gave it (`"auto"` by default): a string or an object.
    #[schema(value_type = Value)]
    pub tool_choice: Value,
    /// The request's tools, as given.
    #[schema(value_type = Vec<Object>)]
    pub tools: Vec<Value>,
    pub top_p: f64,
    pub truncation: &'static str,
    pub usage: Option<ResponseUsage>,
    pub user: Option<String>,
    pub metadata: HashMap<String, String>,
}

impl ResponseObject {
    /// The output text (every message's `output_text` parts, in order).
    pub fn output_text(&self) -> String {
        self.output
            .iter()
            .filter_map(|i| match i {
                OutputItem::Message(m) => Some(m),
                OutputItem::FunctionCall(_) | OutputItem::Reasoning(_) => None,
            })
            .flat_map(|m| m.content.iter().map(|c| c.text.as_str()))
            .collect()
    }
}

/// `error` of a failed response.
#[derive(Clone, Debug, Serialize, ToSchema)]
pub struct ResponseError {
    pub code: &'static str,
    pub message: String,
}

/// `incomplete_details`.
#[derive(Clone, Debug, Serialize, ToSchema)]
pub struct IncompleteDetails {
    pub reason: &'static str,
}

/// `reasoning`: Tessera's models do not reason, so both are always `null`.
#[derive(Clone, Debug, Default, Serialize, ToSchema)]
pub struct Reasoning {
    #[schema(value_type = Option<String>)]
    pub effort: Option<()>,
    #[schema(value_type = Option<String>)]
    pub summary: Option<()>,
}

/// One output item; each serializes with its own `type`.
#[derive(Clone, Debug, Serialize, ToSchema)]
#[serde(untagged)]
pub enum OutputItem {
    Reasoning(ReasoningItem),
    Message(OutputMessage),
    FunctionCall(FunctionCallItem),
}

/// The model's reasoning (`type: "reasoning"`, with a reasoning parser), before its message:
/// the text whole in one `reasoning_text` part; no summary is made.
#[derive(Clone, Debug, Serialize, ToSchema)]
pub struct ReasoningItem {
    #[serde(rename = "type")]
    pub kind: &'static str,
    /// `rs_…`.
    pub id: String,
    #[schema(value_type = Vec<Object>, max_items = 0)]
    pub summary: [(); 0],
    pub content: Vec<ReasoningText>,
    pub status: Status,
}

/// A `reasoning_text` part.
#[derive(Clone, Debug, Serialize, ToSchema)]
pub struct ReasoningText {
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub text: String,
}

impl ReasoningText {
    pub fn new(text: String) -> ReasoningText {
        ReasoningText {
            kind: "reasoning_text",
            text,
        }
    }
}

/// A call the model made (`type: "function_call"`); `call_id` is what a
/// `function_call_output` input item answers.
#[derive(Clone, Debug, Serialize, ToSchema)]
pub struct FunctionCallItem {
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub id: String,
    pub call_id: String,
    pub name: String,
    /// JSON text of an object.
    pub arguments: String,
    pub status: Status,
}

/// The assistant message a response outputs.
#[derive(Clone, Debug, Serialize, ToSchema)]
pub struct OutputMessage {
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub id: String,
    pub status: Status,
    pub role: &'static str,
    pub content: Vec<OutputText>,
}

impl OutputMessage {
    pub fn new(id: String, status: Status, content: Vec<OutputText>) -> OutputMessage {
        OutputMessage {
            kind: "message",
            id,
            status,
            role: "assistant",
            content,
        }
    }
}

/// An `output_text` content part.
#[derive(Clone, Debug, Serialize, ToSchema)]
pub struct OutputText {
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub text: String,
    #[schema(value_type = Vec<Object>, max_items = 0)]
    pub annotations: [(); 0],
    #[schema(value_type = Vec<Object>, max_items = 0)]
    pub logprobs: [(); 0],
}

impl OutputText {
    pub fn new(text: String) -> OutputText {
        OutputText {
            kind: "output_text",
            text,
            annotations: [],
            logprobs: [],
        }
    }
}

/// `usage` of a response.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, ToSchema)]
pub struct ResponseUsage {
    pub input_tokens: usize,
    pub input_tokens_details: InputTokensDetails,
    pub output_tokens: usize,
    pub output_tokens_details: OutputTokensDetails,
    pub total_tokens: usize,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, ToSchema)]
pub struct InputTokensDetails {
    /// Input tokens whose KV came from the prefix cache.
    pub cached_tokens: usize,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, ToSchema)]
pub struct OutputTokensDetails {
    pub reasoning_tokens: usize,
}

impl ResponseUsage {
    pub fn new(input_tokens: usize, u: &engine::Usage) -> ResponseUsage {
        ResponseUsage {
            input_tokens,
            input_tokens_details: InputTokensDetails {
                cached_tokens: u.cached_tokens,
            },
            output_tokens: u.completion_tokens,
            output_tokens_details: OutputTokensDetails::default(),
            total_tokens: input_tokens + u.completion_tokens,
        }
    }
}

/// `DELETE /v1/responses/{id}`.
#[derive(Debug, Serialize, ToSchema)]
pub struct Deleted {
    pub id: String,
    pub object: &'static str,
    pub deleted: bool,
}

/// One streamed event; `type` is also the SSE `event:` name.
#[derive(Debug, Serialize, ToSchema)]
#[serde(tag = "type")]
pub enum StreamEvent {
    #[serde(rename = "response.created")]
    Created {
        sequence_number: u64,
        response: ResponseObject,
    },
    #[serde(rename = "response.in_progress")]
    InProgress {
        sequence_number: u64,
        response: ResponseObject,
    },
    #[serde(rename = "response.output_item.added")]
    OutputItemAdded {
        sequence_number: u64,
        output_index: usize,
        item: OutputItem,
    },
    #[serde(rename = "response.function_call_arguments.delta")]
    FunctionCallArgumentsDelta {
        sequence_number: u64,
        item_id: String,
        output_index: usize,
        delta: String,
    },
    #[serde(rename = "response.function_call_arguments.done")]
    FunctionCallArgumentsDone {
        sequence_number: u64,
        item_id: String,
        output_index: usize,
        name: String,
        arguments: String,
    },
    #[serde(rename = "response.reasoning_text.delta")]
    ReasoningTextDelta {
        sequence_number: u64,
        item_id: String,
        output_index: usize,
        content_index: usize,
        delta: String,
    },
    #[serde(rename = "response.reasoning_text.done")]
    ReasoningTextDone {
        sequence_number: u64,
        item_id: String,
        output_index: usize,
        content_index: usize,
        text: String,
    },
    #[serde(rename = "response.content_part.added")]
    ContentPartAdded {
        sequence_number: u64,
        item_id: String,
        output_index: usize,
        content_index: usize,
        part: OutputText,
    },
    #[serde(rename = "response.output_text.delta")]
    OutputTextDelta {
        sequence_number: u64,
        item_id: String,
        output_index: usize,
        content_index: usize,
        delta: String,
        #[schema(value_type = Vec<Object>, max_items = 0)]
        logprobs: [(); 0],
    },
    #[serde(rename = "response.output_text.done")]
    OutputTextDone {
        sequence_number: u64,
        item_id: String,
        output_index: usize,
        content_index: usize,
        text: String,
        #[schema(value_type = Vec<Object>, max_items = 0)]
        logprobs: [(); 0],
    },
    #[serde(rename = "response.content_part.done")]
    ContentPartDone {
        sequence_number: u64,
        item_id: String,
        output_index: usize,
        content_index: usize,
        part: OutputText,
    },
    #[serde(rename = "response.output_item.done")]
    OutputItemDone {
        sequence_number: u64,
        output_index: usize,
        item: OutputItem,
    },
    #[serde(rename = "response.completed")]
    Completed {
        sequence_number: u64,
        response: ResponseObject,
    },
    #[serde(rename = "response.incomplete")]
    Incomplete {
        sequence_number: u64,
        response: ResponseObject,
    },
    #[serde(rename = "response.failed")]
    Failed {
        sequence_number: u64,
        response: ResponseObject,
    },
    /// OpenAI's stream-level error: sent only when an event cannot be serialized (the types
    /// here always serialize; generation failures are `response.failed`).
    #[serde(rename = "error")]
    Error {
        sequence_number: u64,
        code: &'static str,
        message: &'static str,
        param: Option<String>,
    },
}

impl StreamEvent {
    /// The event's `type`, sent as the SSE event name.
    pub fn name(&self) -> &'static str {
        match self {
            StreamEvent::Created { .. } => "response.created",
            StreamEvent::InProgress { .. } => "response.in_progress",
            StreamEvent::OutputItemAdded { .. } => "response.output_item.added",
            StreamEvent::FunctionCallArgumentsDelta { .. } => {
                "response.function_call_arguments.delta"
            }
            StreamEvent::FunctionCallArgumentsDone { .. } => {
                "response.function_call_arguments.done"
            }
            StreamEvent::ContentPartAdded { .. } => "response.content_part.added",
            StreamEvent::ReasoningTextDelta { .. } => "response.reasoning_text.delta",
            StreamEvent::ReasoningTextDone { .. } => "response.reasoning_text.done",
            StreamEvent::OutputTextDelta { .. } => "response.output_text.delta",
            StreamEvent::OutputTextDone { .. } => "response.output_text.done",
            StreamEvent::ContentPartDone { .. } => "response.content_part.done",
            StreamEvent::OutputItemDone { .. } => "response.output_item.done",
            StreamEvent::Completed { .. } => "response.completed",
            StreamEvent::Incomplete { .. } => "response.incomplete",
            StreamEvent::Failed { .. } => "response.failed",
            StreamEvent::Error { .. } => "error",
        }
    }

    /// The final event for a response in `status`.
    pub fn terminal(sequence_number: u64, response: ResponseObject) -> StreamEvent {
        match response.status {
            Status::Completed => StreamEvent::Completed {
                sequence_number,
                response,
            },
            Status::Incomplete => StreamEvent::Incomplete {
                sequence_number,
                response,
            },
            Status::InProgress | Status::Failed => StreamEvent::Failed {
                sequence_number,
                response,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_event_serializes_with_its_name_as_type() {
        let ev = StreamEvent::OutputTextDelta {
            sequence_number: 4,
            item_id: "msg_1".into(),
            output_index: 0,
            content_index: 0,
            delta: "Hi".into(),
            logprobs: [],
        };
        let json = serde_json::to_value(&ev).expect("serializes");
        assert_eq!(json["type"], ev.name());
        assert_eq!(json["delta"], "Hi");
        assert_eq!(json["sequence_number"], 4);
        assert_eq!(json["logprobs"], serde_json::json!([]));
    }

    #[test]
    fn an_output_message_has_the_parts_clients_read() {
        let m = OutputMessage::new(
            "msg_1".into(),
            Status::Completed,
            vec![OutputText::new("x".into())],
        );
        let json = serde_json::to_value(&m).expect("serializes");
        assert_eq!(
            json,
            serde_json::json!({"type": "message", "id": "msg_1", "status": "completed",
                "role": "assistant", "content": [{"type": "output_text", "text": "x",
                "annotations": [], "logprobs": []}]})
        );
    }
}
