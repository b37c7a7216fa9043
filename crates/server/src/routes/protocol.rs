//! The bodies of vLLM's `/tokenize` and `/detokenize`, and their OpenAPI schemas.

use serde::Deserialize;
use utoipa::ToSchema;

use crate::protocol::fields::Route;
use crate::protocol::request::{ChatMessage, ToolDef};
use crate::protocol::schema::request_body;

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
    /// With `messages`: extra template variables, as on chat (`{"enable_thinking": false}`).
    #[schema(value_type = Option<Object>)]
    pub chat_template_kwargs: Option<serde_json::Map<String, serde_json::Value>>,
}

#[derive(Debug, Deserialize, ToSchema)]
pub struct DetokenizeRequest {
    pub model: Option<String>,
    pub tokens: Vec<i64>,
}

/// `/tokenize` and `/detokenize` accept nothing beyond their typed fields (and `IGNORED`).
pub const TOKENIZE: Route = Route::new(&[]);
/// See `TOKENIZE`.
pub const DETOKENIZE: Route = Route::new(&[]);

request_body!(
    TokenizeBody,
    "TokenizeRequest",
    TOKENIZE,
    "The body of `/tokenize`: `prompt` or `messages`.",
    [TokenizeRequest],
    examples: [
        r#"{"prompt": "Hello world"}"#,
        r#"{"messages": [{"role": "user", "content": "Hi"}], "add_generation_prompt": true}"#
    ]
);
request_body!(
    DetokenizeBody,
    "DetokenizeRequest",
    DETOKENIZE,
    "The body of `/detokenize`.",
    [DetokenizeRequest],
    examples: [r#"{"tokens": [2, 9259, 1902]}"#]
);
