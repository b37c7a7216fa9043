//! `POST /v1/responses`: the request as it arrives, and its body's OpenAPI schema
//! (`ResponsesBody`). The response object and stream events are in `wire`.

use std::collections::HashMap;

use serde::Deserialize;
use serde_json::Value;
use utoipa::ToSchema;

use crate::protocol::fields::{any, empty_list, NoOp, Route};
use crate::protocol::request::ContentPart;
use crate::protocol::schema::request_body;

/// `POST /v1/responses`.
#[derive(Debug, Deserialize, ToSchema)]
pub struct ResponsesRequest {
    pub model: Option<String>,
    /// Required (typed as optional so that its absence gets a 400 naming it).
    #[schema(required = true, nullable = false)]
    pub input: Option<ResponsesInput>,
    /// A system message put first; not carried over to responses that continue this one.
    pub instructions: Option<String>,
    #[schema(minimum = 1)]
    pub max_output_tokens: Option<i64>,
    #[schema(minimum = 0)]
    pub temperature: Option<f64>,
    #[schema(exclusive_minimum = 0, maximum = 1)]
    pub top_p: Option<f64>,
    pub stream: Option<bool>,
    /// Continue the conversation of a stored response.
    pub previous_response_id: Option<String>,
    /// Keep the result for `previous_response_id` and retrieval (default true).
    pub store: Option<bool>,
    /// Echoed in the response object.
    pub metadata: Option<HashMap<String, String>>,
    /// Echoed in the response object.
    pub user: Option<String>,
    /// Function tools, flat (`{"type": "function", "name", "description", "parameters",
    /// "strict"}`): read by `responses::tools`, echoed as given.
    pub tools: Option<Vec<serde_json::Value>>,
    /// `"none"`, `"auto"`, `"required"` or `{"type": "function", "name": …}`.
    pub tool_choice: Option<serde_json::Value>,
    /// Default true; false allows at most one call per response.
    pub parallel_tool_calls: Option<bool>,
    /// With tools: only 1 (the same as `parallel_tool_calls: false`).
    pub max_tool_calls: Option<i64>,
    /// `{"format": {"type": "text" | "json_object" | "json_schema", …}}`: read by
    /// `structured::text_format`.
    pub text: Option<serde_json::Value>,
    /// Extra chat-template variables, as on chat completions (vLLM's extension, e.g.
    /// `{"enable_thinking": false}`).
    #[schema(value_type = Option<Object>)]
    pub chat_template_kwargs: Option<serde_json::Map<String, serde_json::Value>>,
}

/// `input`: text (one user message) or a list of message items.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(untagged)]
pub enum ResponsesInput {
    Text(String),
    Items(Vec<InputItem>),
}

/// One `input` item: a message (`type` absent or `"message"`), a `function_call` the model
/// made, or a `function_call_output` answering one. Other fields (`id`, `status`, as in an
/// output item passed back) are ignored.
#[derive(Debug, Deserialize, ToSchema)]
pub struct InputItem {
    #[serde(rename = "type")]
    pub kind: Option<String>,
    pub role: Option<String>,
    pub content: Option<ItemContent>,
    /// `function_call` / `function_call_output`: the call's id.
    pub call_id: Option<String>,
    /// `function_call`: the function's name.
    pub name: Option<String>,
    /// `function_call`: the arguments, JSON text of an object.
    pub arguments: Option<String>,
    /// `function_call_output`: the result, text or text parts.
    pub output: Option<ItemContent>,
}

/// A message item's content: text, or parts (`input_text`, `output_text`).
#[derive(Debug, Deserialize, ToSchema)]
#[serde(untagged)]
pub enum ItemContent {
    Text(String),
    Parts(Vec<ContentPart>),
}

/// Responses: the settings that only mean something with reasoning models, background runs or
/// truncation.
const RESPONSES_NO_OP: &[NoOp] = &[
    NoOp {
        key: "truncation",
        accepts: |v| v == "disabled",
        why: "only \"disabled\" is supported (an input too long for the context is refused)",
    },
    NoOp {
        key: "reasoning",
        accepts: |v| {
            v.as_object()
                .is_some_and(|o| o.values().all(Value::is_null))
        },
        why: "this model does not reason: reasoning settings are not supported",
    },
    NoOp {
        key: "include",
        accepts: empty_list,
        why: "extra output data (`include`) is not supported",
    },
    NoOp {
        key: "background",
        accepts: |v| v == false,
        why: "background responses are not supported",
    },
    // Obfuscation padding of stream events: no effect on the content.
    NoOp {
        key: "stream_options",
        accepts: any,
        why: "",
    },
];

/// What a Responses body accepts beyond its typed fields.
pub const RESPONSES: Route = Route::new(RESPONSES_NO_OP);

request_body!(
    ResponsesBody,
    "ResponsesRequest",
    RESPONSES,
    "The body of `POST /v1/responses`.",
    [ResponsesRequest],
    examples: [
        r#"{"input": "Hi", "instructions": "Be brief.", "max_output_tokens": 2}"#,
        r#"{"input": [{"role": "user", "content": [{"type": "input_text", "text": "Hi"}]}], "max_output_tokens": 2, "stream": true, "store": false}"#
    ]
);
