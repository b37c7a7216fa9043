//! `/v1/chat/completions`: the request as it arrives (`ChatRequest`, read beside the shared
//! `CommonParams`) and its body's OpenAPI schema (`ChatCompletionBody`). Messages and tools
//! are shared pieces (`protocol::request`). The response's choices, messages and chunk deltas
//! follow (inside the shared head and `usage` of `protocol::response`).

use engine::FinishReason;
use serde::{Deserialize, Serialize, Serializer};
use utoipa::openapi::schema::Object;
use utoipa::ToSchema;

use crate::protocol::fields::{empty_list, none_or_auto, NoOp, Route};
use crate::protocol::logprobs::ChatLogprobs;
use crate::protocol::request::{ChatMessage, CommonParams, ToolChoiceIn, ToolDef};
use crate::protocol::response::{nullable_enum, ENGINE_FINISH};
use crate::protocol::schema::request_body;

#[derive(Debug, Deserialize, ToSchema)]
pub struct ChatRequest {
    /// Required (typed as optional so that its absence gets a 400 naming it).
    #[schema(required = true, nullable = false, min_items = 1)]
    pub messages: Option<Vec<ChatMessage>>,
    /// OpenAI's newer name for `max_tokens`; wins when both are given.
    #[schema(minimum = 1)]
    pub max_completion_tokens: Option<i64>,
    pub logprobs: Option<bool>,
    #[schema(minimum = 0)]
    pub top_logprobs: Option<i64>,
    /// vLLM extension (default true).
    pub add_generation_prompt: Option<bool>,
    pub tools: Option<Vec<ToolDef>>,
    pub tool_choice: Option<ToolChoiceIn>,
    /// Default true; false allows at most one call per reply.
    pub parallel_tool_calls: Option<bool>,
    /// More variables for the chat template (vLLM extension; e.g. `{"enable_thinking":
    /// false}`), passed as transformers passes them. `messages`, `tools`,
    /// `add_generation_prompt`, `bos_token` and `eos_token` are the server's.
    #[schema(value_type = Option<Object>)]
    pub chat_template_kwargs: Option<serde_json::Map<String, serde_json::Value>>,
}

/// Chat's deprecated function-calling fields (`tools` / `tool_choice` replace them).
const FUNCTIONS: &str = "the deprecated `functions` / `function_call` are not supported; use \
    `tools` / `tool_choice` for tool calling";
/// Chat completions.
const CHAT_NO_OP: &[NoOp] = &[
    NoOp {
        key: "functions",
        accepts: empty_list,
        why: FUNCTIONS,
    },
    NoOp {
        key: "function_call",
        accepts: none_or_auto,
        why: FUNCTIONS,
    },
    NoOp {
        key: "modalities",
        accepts: |v| v.as_array().is_some_and(|a| a.iter().all(|m| m == "text")),
        why: "only text output is supported",
    },
];

/// What a chat body accepts beyond its typed fields.
pub const CHAT: Route = Route::new(CHAT_NO_OP);

request_body!(
    ChatCompletionBody,
    "ChatCompletionRequest",
    CHAT,
    "The body of `/v1/chat/completions` and `/v1/chat/completions/render`.",
    [CommonParams, ChatRequest],
    examples: [
        r#"{"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2}"#,
        r#"{"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": [{"type": "text", "text": "Hi"}]}], "max_completion_tokens": 2, "stream": true, "logprobs": true, "top_logprobs": 2}"#,
        r#"{"messages": [{"role": "user", "content": "Pick one"}], "max_tokens": 2, "guided_choice": ["yes", "no"]}"#
    ]
);

/// A chat choice's `finish_reason`: the engine's, or `tool_calls` when the reply is calls.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ChatFinish {
    Engine(FinishReason),
    ToolCalls,
}

impl ChatFinish {
    /// `tool_calls` when a reply that stopped by itself made calls, else the engine's reason
    /// (a reply cut at the length limit says so even when it made calls before).
    pub fn of(reason: FinishReason, calls: usize) -> ChatFinish {
        if calls > 0 && reason == FinishReason::Stop {
            ChatFinish::ToolCalls
        } else {
            ChatFinish::Engine(reason)
        }
    }
}

impl Serialize for ChatFinish {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            ChatFinish::Engine(r) => s.serialize_str(r.as_str()),
            ChatFinish::ToolCalls => s.serialize_str("tool_calls"),
        }
    }
}

/// A whole chat choice (`object: "chat.completion"`).
#[derive(Debug, Serialize, ToSchema)]
pub struct ChatChoice {
    pub index: usize,
    pub message: AssistantMessage,
    pub logprobs: Option<ChatLogprobs>,
    #[schema(schema_with = chat_finish_schema)]
    pub finish_reason: Option<ChatFinish>,
}

/// The generated chat message: `content` is `null` only for a reply of calls and no text.
#[derive(Debug, Serialize, ToSchema)]
pub struct AssistantMessage {
    pub role: &'static str,
    pub content: Option<String>,
    /// With a reasoning parser: the thinking before the answer (absent without one; `null`
    /// when the reply had none).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reasoning_content: Option<Option<String>>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCall>,
}

/// A call in a whole reply.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, ToSchema)]
pub struct ToolCall {
    /// `call_…`, unique per process.
    pub id: String,
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub function: FunctionCall,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, ToSchema)]
pub struct FunctionCall {
    pub name: String,
    /// The JSON text of the arguments object.
    pub arguments: String,
}

/// A streamed chat choice (`object: "chat.completion.chunk"`).
#[derive(Debug, Serialize, ToSchema)]
pub struct ChatChunkChoice {
    pub index: usize,
    pub delta: Delta,
    pub logprobs: Option<ChatLogprobs>,
    #[schema(schema_with = chat_finish_schema)]
    pub finish_reason: Option<ChatFinish>,
}

/// What a chat chunk adds to the message: the role once, first; then content or calls; the
/// last chunk of a choice has an empty delta and the finish reason.
#[derive(Debug, Default, Serialize, ToSchema)]
pub struct Delta {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub role: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub content: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_calls: Option<Vec<ToolCallDelta>>,
    /// With a reasoning parser: the next piece of the thinking (never in `content`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reasoning_content: Option<String>,
}

/// A piece of a streamed call: the first of a call has its `id`, `type` and name (and empty
/// arguments), the next ones argument text; the pieces with one `index` concatenate to a call.
#[derive(Debug, Serialize, ToSchema)]
pub struct ToolCallDelta {
    pub index: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    #[serde(rename = "type", skip_serializing_if = "Option::is_none")]
    pub kind: Option<&'static str>,
    pub function: FunctionDelta,
}

#[derive(Debug, Default, Serialize, ToSchema)]
pub struct FunctionDelta {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub arguments: Option<String>,
}

/// The schema of a chat `finish_reason`: the engine's reasons and `tool_calls`.
fn chat_finish_schema() -> Object {
    let calls = std::iter::once("tool_calls");
    nullable_enum(
        ENGINE_FINISH
            .into_iter()
            .map(FinishReason::as_str)
            .chain(calls),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::base::ApiError;
    use crate::protocol::fields::{check, struct_fields};

    fn chat(body: &str) -> Result<(), ApiError> {
        let common = struct_fields::<CommonParams>();
        let chat = struct_fields::<ChatRequest>();
        check(body.as_bytes(), CHAT, &[common, chat])
    }

    fn param(e: ApiError) -> Option<String> {
        match e {
            ApiError::BadRequest { param, .. } => param,
            _ => None,
        }
    }

    #[test]
    fn struct_fields_lists_what_serde_parses() {
        let f = struct_fields::<CommonParams>();
        assert!(
            f.contains(&"max_tokens") && f.contains(&"stream_options"),
            "{f:?}"
        );
        assert!(!f.contains(&"messages"));
    }

    #[test]
    fn honoured_ignored_and_no_op_fields_pass_and_the_rest_is_named() {
        chat(r#"{"messages": [], "max_tokens": 3, "user": "u", "metadata": {"a": "b"}}"#)
            .expect("honoured and ignored fields pass");
        chat(r#"{"tools": [], "tool_choice": "none"}"#).expect("no-op values pass");
        chat(r#"{"tools": null, "guided_whitespace_pattern": null}"#).expect("null is absent");
        // Structured output is honoured (its values are checked by `serving::structured`); vLLM's
        // other guided-decoding settings are not.
        chat(r#"{"response_format": {"type": "json_object"}, "guided_json": {}}"#)
            .expect("structured output fields are honoured");
        let e = chat(r#"{"guided_whitespace_pattern": " "}"#).expect_err("refused");
        assert_eq!(param(e), Some("guided_whitespace_pattern".into()));
        chat(r#"{"tools": [{"type": "function"}], "tool_choice": "required"}"#)
            .expect("tools are honoured (and checked by the chat route)");
        let e = chat(r#"{"functions": [{"name": "f"}]}"#).expect_err("refused");
        assert!(e.to_string().contains("tool calling"), "{e}");
        let e = chat(r#"{"max_token": 5}"#).expect_err("a misspelling is refused");
        assert_eq!(param(e), Some("max_token".into()));
        let e = chat(r#"{"guided_decoding_backend": "xgrammar"}"#).expect_err("refused");
        assert_eq!(param(e), Some("guided_decoding_backend".into()));
    }

    #[test]
    fn a_delta_leaves_out_what_it_does_not_carry() {
        let empty = serde_json::to_string(&Delta::default()).expect("serializes");
        assert_eq!(empty, "{}");
        let first = Delta {
            role: Some("assistant"),
            content: Some(String::new()),
            tool_calls: None,
            reasoning_content: None,
        };
        let first = serde_json::to_string(&first).expect("serializes");
        assert_eq!(first, r#"{"role":"assistant","content":""}"#);
    }
}
