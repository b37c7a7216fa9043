//! OpenAI (and vLLM) request bodies as they arrive, before validation.
//!
//! A completions or chat body is read twice, as `CommonParams` and as the route's own fields
//! (serde's `flatten` would lose the path of a wrongly typed field, and with it the `param` of
//! the 400). Types here only describe shapes: every numeric field is taken wide (`i64`, `f64`)
//! so that an out-of-range value reaches `validate.rs` and gets a precise 400 there, instead of
//! a generic serde message. The fields here are the ones honoured; `fields.rs` decides about
//! every other top-level field (ignored harmlessly, accepted at a no-op value, or a 400).
//! Response bodies are in `response.rs` and `responses/wire.rs`.

use std::collections::HashMap;

use serde::Deserialize;
use utoipa::ToSchema;

/// Fields shared by completions and chat completions.
#[derive(Debug, Default, Deserialize, ToSchema)]
pub struct CommonParams {
    pub model: Option<String>,
    /// Completions: 0 only with `echo` (the prompt's log-probs alone).
    #[schema(minimum = 0)]
    pub max_tokens: Option<i64>,
    #[schema(minimum = 0)]
    pub temperature: Option<f64>,
    #[schema(exclusive_minimum = 0, maximum = 1)]
    pub top_p: Option<f64>,
    /// vLLM extension; -1 or 0 mean off.
    #[schema(minimum = -1)]
    pub top_k: Option<i64>,
    /// vLLM extension.
    #[schema(minimum = 0, maximum = 1)]
    pub min_p: Option<f64>,
    #[schema(minimum = 1)]
    pub n: Option<i64>,
    pub stop: Option<Stop>,
    /// vLLM extension.
    pub stop_token_ids: Option<Vec<i64>>,
    pub seed: Option<i64>,
    #[schema(minimum = -2, maximum = 2)]
    pub presence_penalty: Option<f64>,
    #[schema(minimum = -2, maximum = 2)]
    pub frequency_penalty: Option<f64>,
    /// vLLM extension.
    #[schema(exclusive_minimum = 0)]
    pub repetition_penalty: Option<f64>,
    /// Token id (as a string key, as OpenAI sends it) → bias in [-100, 100].
    pub logit_bias: Option<HashMap<String, f64>>,
    /// vLLM extension: lower runs sooner.
    pub priority: Option<i64>,
    /// vLLM extension.
    pub ignore_eos: Option<bool>,
    /// Tessera extension: `false` keeps this request out of speculative decoding (its output
    /// is the same either way; only its speed may differ).
    pub speculative: Option<bool>,
    /// Accepted and ignored (OpenAI uses it for abuse monitoring).
    pub user: Option<String>,
    pub stream: Option<bool>,
    pub stream_options: Option<StreamOptions>,
    /// `{"type": "text" | "json_object" | "json_schema", ...}`: read by `structured.rs`.
    #[schema(value_type = Option<Object>)]
    pub response_format: Option<serde_json::Value>,
    /// vLLM extension: a JSON schema (object, or JSON text) the output must follow.
    pub guided_json: Option<serde_json::Value>,
    /// vLLM extension: a regular expression the whole output must match.
    pub guided_regex: Option<String>,
    /// vLLM extension: the output is exactly one of these strings.
    #[schema(min_items = 1)]
    pub guided_choice: Option<Vec<String>>,
    /// vLLM extension: a Lark grammar (llguidance's dialect) the output must follow.
    pub guided_grammar: Option<String>,
}

#[derive(Debug, Default, Deserialize, ToSchema)]
pub struct StreamOptions {
    pub include_usage: Option<bool>,
}

/// `stop`: one string or a list.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(untagged)]
pub enum Stop {
    One(String),
    Many(Vec<String>),
}

/// `prompt`: text, texts, token ids, or lists of token ids.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(untagged)]
pub enum PromptInput {
    Text(String),
    Texts(Vec<String>),
    Tokens(Vec<i64>),
    TokenLists(Vec<Vec<i64>>),
}

#[derive(Debug, Deserialize, ToSchema)]
pub struct CompletionRequest {
    /// Required (typed as optional so that its absence gets a 400 naming it).
    #[schema(required = true, nullable = false)]
    pub prompt: Option<PromptInput>,
    pub echo: Option<bool>,
    /// Number of alternatives per position (0 = only the chosen token's log-prob).
    #[schema(minimum = 0)]
    pub logprobs: Option<i64>,
}

/// One chat message; `content` may be text or a list of text parts.
#[derive(Debug, Deserialize, ToSchema)]
pub struct ChatMessage {
    /// OpenAI's roles; a chat template may accept fewer (Gemma's has no `tool`).
    #[schema(pattern = "^(system|developer|user|assistant|tool)$")]
    pub role: String,
    pub content: Option<MessageContent>,
    pub name: Option<String>,
    /// An assistant message's calls, sent back in a conversation.
    pub tool_calls: Option<Vec<ToolCallIn>>,
    /// A `tool` message: the call this is the result of.
    pub tool_call_id: Option<String>,
}

/// A call of an earlier assistant message.
#[derive(Debug, Deserialize, ToSchema)]
pub struct ToolCallIn {
    pub id: Option<String>,
    #[serde(rename = "type")]
    #[schema(pattern = "^function$")]
    pub kind: Option<String>,
    pub function: FunctionCallIn,
}

#[derive(Debug, Deserialize, ToSchema)]
pub struct FunctionCallIn {
    pub name: String,
    /// JSON text of an object, as OpenAI sends it (an object itself is taken too).
    pub arguments: serde_json::Value,
}

/// One entry of `tools`.
#[derive(Debug, Deserialize, ToSchema)]
pub struct ToolDef {
    #[serde(rename = "type")]
    #[schema(pattern = "^function$")]
    pub kind: String,
    pub function: Option<FunctionDef>,
}

#[derive(Debug, Deserialize, ToSchema)]
pub struct FunctionDef {
    pub name: String,
    pub description: Option<String>,
    /// A JSON schema of the arguments object.
    pub parameters: Option<serde_json::Value>,
    pub strict: Option<bool>,
}

/// `tool_choice`: `"none"`, `"auto"`, `"required"`, or one function by name.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(untagged)]
pub enum ToolChoiceIn {
    Mode(String),
    Named(NamedToolChoice),
}

/// `{"type": "function", "function": {"name": …}}`.
#[derive(Debug, Deserialize, ToSchema)]
pub struct NamedToolChoice {
    #[serde(rename = "type")]
    #[schema(pattern = "^function$")]
    pub kind: String,
    pub function: Option<NamedFunction>,
}

#[derive(Debug, Deserialize, ToSchema)]
pub struct NamedFunction {
    pub name: String,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(untagged)]
pub enum MessageContent {
    Text(String),
    Parts(Vec<ContentPart>),
}

#[derive(Debug, Deserialize, ToSchema)]
pub struct ContentPart {
    #[serde(rename = "type")]
    #[schema(pattern = "^(text|input_text|output_text)$")]
    pub kind: String,
    pub text: Option<String>,
}

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
}

/// vLLM's `/tokenize` body: either a prompt or chat messages.
#[derive(Debug, Deserialize, ToSchema)]
pub struct TokenizeRequest {
    pub model: Option<String>,
    pub prompt: Option<String>,
    pub messages: Option<Vec<ChatMessage>>,
    pub add_special_tokens: Option<bool>,
    pub add_generation_prompt: Option<bool>,
    /// With `messages`: the tools the chat template shows (as a chat request with them would).
    pub tools: Option<Vec<ToolDef>>,
}

#[derive(Debug, Deserialize, ToSchema)]
pub struct DetokenizeRequest {
    pub model: Option<String>,
    pub tokens: Vec<i64>,
}

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
