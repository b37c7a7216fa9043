//! `/v1/chat/completions`: the request as it arrives (`ChatRequest`, read beside the shared
//! `CommonParams`) and its body's OpenAPI schema (`ChatCompletionBody`). Messages and tools
//! are shared pieces (`protocol::request`); the response's choices and chunks are in
//! `protocol::response`.

use serde::Deserialize;
use utoipa::ToSchema;

use crate::protocol::fields::Route;
use crate::protocol::request::{ChatMessage, CommonParams, ToolChoiceIn, ToolDef};
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
}

request_body!(
    ChatCompletionBody,
    "ChatCompletionRequest",
    Route::Chat,
    "The body of `/v1/chat/completions` and `/v1/chat/completions/render`.",
    [CommonParams, ChatRequest],
    examples: [
        r#"{"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2}"#,
        r#"{"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": [{"type": "text", "text": "Hi"}]}], "max_completion_tokens": 2, "stream": true, "logprobs": true, "top_logprobs": 2}"#,
        r#"{"messages": [{"role": "user", "content": "Pick one"}], "max_tokens": 2, "guided_choice": ["yes", "no"]}"#
    ]
);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::base::ApiError;
    use crate::protocol::fields::{check, struct_fields};

    fn chat(body: &str) -> Result<(), ApiError> {
        let common = struct_fields::<CommonParams>();
        let chat = struct_fields::<ChatRequest>();
        check(body.as_bytes(), Route::Chat, &[common, chat])
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
        // Structured output is honoured (its values are checked by `structured.rs`); vLLM's
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
}
