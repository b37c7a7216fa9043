//! `/v1/completions`: the request as it arrives (`CompletionRequest`, read beside the shared
//! `CommonParams`), its body's OpenAPI schema (`CompletionBody`) and the response's choice
//! (`CompletionChoice`, inside the shared head and `usage` of `protocol::response`).

use engine::FinishReason;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::protocol::fields::{NoOp, Route};
use crate::protocol::logprobs::Legacy;
use crate::protocol::request::CommonParams;
use crate::protocol::response::{finish_reason, finish_reason_schema};
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

/// Completions.
const COMPLETION_NO_OP: &[NoOp] = &[NoOp {
    key: "best_of",
    accepts: |v| v.as_i64() == Some(1),
    why: "best_of is not supported (only 1); use n for several choices",
}];

/// What a completions body accepts beyond its typed fields.
pub const COMPLETIONS: Route = Route::new(COMPLETION_NO_OP);

request_body!(
    CompletionBody,
    "CompletionRequest",
    COMPLETIONS,
    "The body of `/v1/completions` and `/v1/completions/render`.",
    [CommonParams, CompletionRequest],
    examples: [
        r#"{"prompt": "The capital of France is", "max_tokens": 2, "temperature": 0}"#,
        r#"{"prompt": ["Hello", "Once upon a time"], "max_tokens": 2, "n": 2, "stream": true, "stream_options": {"include_usage": true}}"#,
        r#"{"prompt": [2, 651, 6037], "max_tokens": 0, "echo": true, "logprobs": 1}"#
    ]
);

/// A completions choice (`object: "text_completion"`), whole or streamed.
#[derive(Debug, Serialize, ToSchema)]
pub struct CompletionChoice {
    pub index: usize,
    pub text: String,
    pub logprobs: Option<Legacy>,
    #[serde(serialize_with = "finish_reason")]
    #[schema(schema_with = finish_reason_schema)]
    pub finish_reason: Option<FinishReason>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::response::Head;

    #[test]
    fn a_chunk_has_no_usage_and_a_null_finish_reason_until_the_end() {
        let head = Head::new("cmpl", "m");
        let choice = CompletionChoice {
            index: 0,
            text: "x".into(),
            logprobs: None,
            finish_reason: None,
        };
        let json = serde_json::to_value(head.body("text_completion", vec![choice], None))
            .expect("serializes");
        assert!(json.get("usage").is_none(), "{json}");
        assert!(json["choices"][0]["finish_reason"].is_null(), "{json}");
        assert!(json["choices"][0]["logprobs"].is_null(), "{json}");
        assert!(json["id"]
            .as_str()
            .is_some_and(|id| id.starts_with("cmpl-")));
    }
}
