//! The OpenAI (and vLLM) request pieces several endpoints share, as they arrive, before
//! validation: the sampling fields of completions and chat (`CommonParams`), chat messages and
//! tools (read by chat, `/tokenize` and the Responses API). Each endpoint's own request type is
//! in its folder (`chat::protocol`, `completions::protocol`, `responses::request`).
//!
//! A completions or chat body is read twice, as `CommonParams` and as the route's own fields
//! (serde's `flatten` would lose the path of a wrongly typed field, and with it the `param` of
//! the 400). Types here only describe shapes: every numeric field is taken wide (`i64`, `f64`)
//! so that an out-of-range value reaches the validation and gets a precise 400 there, instead of
//! a generic serde message. The fields here are the ones honoured; `fields` decides about
//! every other top-level field (ignored harmlessly, accepted at a no-op value, or a 400).
//! Response bodies are in `response` and the endpoint folders.

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
    /// `{"type": "text" | "json_object" | "json_schema", ...}`: read by `serving::structured`.
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
    /// llama-server extension: the LoRA adapters to compute with, by id (`GET /lora-adapters`)
    /// with a scale each; `[]` is the base model. Absent: the adapter `model` names, else the
    /// global scales.
    pub lora: Option<Vec<LoraChoice>>,
}

/// One LoRA adapter by llama-server's id, with its scale.
#[derive(Clone, Debug, Deserialize, ToSchema)]
pub struct LoraChoice {
    #[schema(minimum = 0)]
    pub id: i64,
    /// Multiplies the adapter's `alpha / rank`; 0 leaves it out.
    pub scale: f64,
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
    /// An assistant message's thinking, as a reply gave it (vLLM's newer name `reasoning`
    /// too), passed to the chat template.
    #[serde(alias = "reasoning")]
    pub reasoning_content: Option<String>,
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
