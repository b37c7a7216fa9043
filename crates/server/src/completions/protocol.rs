//! `/v1/completions`: the request as it arrives (`CompletionRequest`, read beside the shared
//! `CommonParams`) and its body's OpenAPI schema (`CompletionBody`). The response's choice is
//! `protocol::response::CompletionChoice`.

use serde::Deserialize;
use utoipa::ToSchema;

use crate::protocol::fields::Route;
use crate::protocol::request::CommonParams;
use crate::protocol::schema::request_body;

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

request_body!(
    CompletionBody,
    "CompletionRequest",
    Route::Completions,
    "The body of `/v1/completions` and `/v1/completions/render`.",
    [CommonParams, CompletionRequest],
    examples: [
        r#"{"prompt": "The capital of France is", "max_tokens": 2, "temperature": 0}"#,
        r#"{"prompt": ["Hello", "Once upon a time"], "max_tokens": 2, "n": 2, "stream": true, "stream_options": {"include_usage": true}}"#,
        r#"{"prompt": [2, 651, 6037], "max_tokens": 0, "echo": true, "logprobs": 1}"#
    ]
);
