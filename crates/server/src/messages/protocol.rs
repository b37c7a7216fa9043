//! `/v1/messages` and `/v1/messages/count_tokens`: the requests as they arrive (Anthropic's
//! shapes), their bodies' OpenAPI schemas, and the response message and its usage. The stream
//! events are in `wire`.
//!
//! Content blocks are read loosely typed (`Block`: every field optional) so that a block of a
//! kind this server does not take, or a missing field, gets a 400 naming its path
//! (`messages[1].content[0].type`) from `input`, not a generic serde message. A field no block
//! has is refused by serde, naming its path.

use std::fmt;

use serde::de::{self, Deserializer, SeqAccess, Visitor};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::ToSchema;

use crate::protocol::fields::{NoOp, Route};
use crate::protocol::schema::request_body;

/// `POST /v1/messages`.
#[derive(Debug, Deserialize, ToSchema)]
pub struct MessagesRequest {
    pub model: Option<String>,
    /// Required (typed as optional so that its absence gets a 400 naming it).
    #[schema(required = true, nullable = false, min_items = 1)]
    pub messages: Option<Vec<InputMessage>>,
    /// Required, as with Anthropic.
    #[schema(required = true, nullable = false, minimum = 1)]
    pub max_tokens: Option<i64>,
    /// A string, or text blocks: the system message put first.
    pub system: Option<Content>,
    /// Strings that end the reply (left out of it), at most 16; `stop_reason: "stop_sequence"`
    /// names the one that matched.
    pub stop_sequences: Option<Vec<String>>,
    #[schema(minimum = 0)]
    pub temperature: Option<f64>,
    #[schema(exclusive_minimum = 0, maximum = 1)]
    pub top_p: Option<f64>,
    #[schema(minimum = 0)]
    pub top_k: Option<i64>,
    /// `{"user_id": …}`: accepted and ignored (it does not change the output).
    pub metadata: Option<Metadata>,
    pub stream: Option<bool>,
    pub tools: Option<Vec<ToolIn>>,
    pub tool_choice: Option<ToolChoice>,
    /// Extended thinking: `{"type": "enabled"}` needs a reasoning parser (the thinking comes
    /// as a `thinking` block before the text); `{"type": "disabled"}` is always accepted (a
    /// template with `enable_thinking` is then rendered with it false).
    pub thinking: Option<ThinkingConfig>,
}

/// `thinking`: `{"type": "enabled", "budget_tokens": N}` or `{"type": "disabled"}`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ThinkingConfig {
    #[serde(rename = "type")]
    #[schema(pattern = "^(enabled|disabled)$")]
    pub kind: String,
    /// Not enforced: only accepted at `max_tokens` or more, where it cannot bind.
    pub budget_tokens: Option<i64>,
}

/// `POST /v1/messages/count_tokens`: the parts of a Messages request that make the prompt.
#[derive(Debug, Deserialize, ToSchema)]
pub struct CountTokensRequest {
    pub model: Option<String>,
    #[schema(required = true, nullable = false, min_items = 1)]
    pub messages: Option<Vec<InputMessage>>,
    pub system: Option<Content>,
    pub tools: Option<Vec<ToolIn>>,
    pub tool_choice: Option<ToolChoice>,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Metadata {
    pub user_id: Option<String>,
}

/// One conversation turn.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct InputMessage {
    #[schema(pattern = "^(user|assistant)$")]
    pub role: String,
    pub content: Content,
}

/// Text, or content blocks. Read by hand (an untagged enum would lose the path of an error
/// inside a block); `Serialize` is derived only for its schema, which utoipa reads from serde's
/// `untagged`.
#[derive(Debug, Serialize, ToSchema)]
#[serde(untagged)]
pub enum Content {
    Text(String),
    Blocks(Vec<Block>),
}

impl<'de> Deserialize<'de> for Content {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Content, D::Error> {
        struct TextOrBlocks;

        impl<'de> Visitor<'de> for TextOrBlocks {
            type Value = Content;

            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a string or a list of content blocks")
            }

            fn visit_str<E: de::Error>(self, s: &str) -> Result<Content, E> {
                Ok(Content::Text(s.to_owned()))
            }

            fn visit_string<E: de::Error>(self, s: String) -> Result<Content, E> {
                Ok(Content::Text(s))
            }

            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Content, A::Error> {
                let mut blocks = Vec::new();
                while let Some(b) = seq.next_element()? {
                    blocks.push(b);
                }
                Ok(Content::Blocks(blocks))
            }
        }

        d.deserialize_any(TextOrBlocks)
    }
}

/// A content block as sent: `text` (`text`), `tool_use` (an assistant's call: `id`, `name`,
/// `input`), `tool_result` (a user's answer to one: `tool_use_id`, `content`, `is_error`).
/// `cache_control` is accepted and ignored: prompt prefixes are cached without it.
#[derive(Debug, Deserialize, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Block {
    #[serde(rename = "type")]
    #[schema(pattern = "^(text|thinking|tool_use|tool_result)$")]
    pub kind: String,
    pub text: Option<String>,
    pub id: Option<String>,
    pub name: Option<String>,
    #[schema(value_type = Option<Object>)]
    pub input: Option<Value>,
    pub tool_use_id: Option<String>,
    /// A tool result's content: text or text blocks.
    #[schema(no_recursion)]
    pub content: Option<Content>,
    pub is_error: Option<bool>,
    #[schema(value_type = Option<Object>)]
    pub cache_control: Option<Value>,
    /// Only empty or null: citations are not produced.
    #[schema(value_type = Option<Vec<Object>>)]
    pub citations: Option<Value>,
    /// Any other kind of block (image, document, thinking…) is refused by `input`.
    #[schema(value_type = Option<Object>)]
    pub source: Option<Value>,
    #[schema(value_type = Option<String>)]
    pub thinking: Option<Value>,
    #[schema(value_type = Option<String>)]
    pub signature: Option<Value>,
    #[schema(value_type = Option<String>)]
    pub data: Option<Value>,
}

/// A tool the model may call: a client tool (`type` absent or `custom`).
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ToolIn {
    #[serde(rename = "type")]
    pub kind: Option<String>,
    pub name: Option<String>,
    pub description: Option<String>,
    /// The JSON schema of the tool's input (an object).
    #[schema(value_type = Option<Object>)]
    pub input_schema: Option<Value>,
    /// Hold every call of it to `input_schema`, also under `auto`.
    pub strict: Option<bool>,
    #[schema(value_type = Option<Object>)]
    pub cache_control: Option<Value>,
}

/// `{"type": "auto" | "any" | "tool" | "none", "name" (tool), "disable_parallel_tool_use"}`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ToolChoice {
    #[serde(rename = "type")]
    #[schema(pattern = "^(auto|any|tool|none)$")]
    pub kind: String,
    pub name: Option<String>,
    /// At most one call per reply.
    pub disable_parallel_tool_use: Option<bool>,
}

/// The Messages API's settings that only mean something with features this server lacks.
const MESSAGES_NO_OP: &[NoOp] = &[
    // Top-level prompt caching: prefixes are cached without it.
    NoOp {
        key: "cache_control",
        accepts: crate::protocol::fields::any,
        why: "",
    },
    NoOp {
        key: "mcp_servers",
        accepts: crate::protocol::fields::empty_list,
        why: "MCP servers are not supported",
    },
];

/// What a Messages body accepts beyond its typed fields.
pub const MESSAGES: Route = Route::new(MESSAGES_NO_OP);

request_body!(
    MessagesBody,
    "MessagesRequest",
    MESSAGES,
    "The body of `POST /v1/messages` (Anthropic's Messages API).",
    [MessagesRequest],
    examples: [
        r#"{"model": "m", "max_tokens": 2, "messages": [{"role": "user", "content": "Hi"}]}"#,
        r#"{"max_tokens": 2, "system": [{"type": "text", "text": "Be brief."}], "messages": [{"role": "user", "content": [{"type": "text", "text": "Hi"}]}], "stream": true, "stop_sequences": ["."], "temperature": 0}"#
    ]
);

request_body!(
    CountTokensBody,
    "MessagesCountTokensRequest",
    MESSAGES,
    "The body of `POST /v1/messages/count_tokens`.",
    [CountTokensRequest],
    examples: [r#"{"model": "m", "system": "Be brief.", "messages": [{"role": "user", "content": "Hi"}]}"#]
);

/// A whole reply (`type: "message"`), also the `message` of `message_start` (then with no
/// content and no stop reason yet).
#[derive(Clone, Debug, Serialize, ToSchema)]
pub struct MessageObject {
    /// `msg_…`.
    pub id: String,
    /// Always `message`.
    #[serde(rename = "type")]
    pub kind: &'static str,
    /// Always `assistant`.
    pub role: &'static str,
    pub model: String,
    pub content: Vec<ContentBlock>,
    /// `end_turn`, `max_tokens`, `stop_sequence` or `tool_use` (`null` in `message_start`).
    #[schema(pattern = "^(end_turn|max_tokens|stop_sequence|tool_use)$")]
    pub stop_reason: Option<&'static str>,
    /// The stop sequence that ended the reply, if one did.
    pub stop_sequence: Option<String>,
    pub usage: MessageUsage,
}

/// A block of the reply.
#[derive(Clone, Debug, PartialEq, Serialize, ToSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ContentBlock {
    /// The model's reasoning (with a reasoning parser), before the text. `signature` is
    /// empty: nothing is signed here.
    Thinking {
        thinking: String,
        signature: String,
    },
    Text {
        text: String,
    },
    ToolUse {
        /// `toolu_…`.
        id: String,
        name: String,
        /// The call's arguments (an object).
        #[schema(value_type = Object)]
        input: Value,
    },
}

/// Token counts. As with Anthropic, `input_tokens` counts the prompt tokens that were not read
/// from the cache; `cache_read_input_tokens` the ones whose K/V came from the prefix cache (so
/// the prompt is their sum). Prefixes are cached without being asked, so nothing counts as a
/// cache write.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, ToSchema)]
pub struct MessageUsage {
    pub input_tokens: usize,
    pub output_tokens: usize,
    pub cache_creation_input_tokens: usize,
    pub cache_read_input_tokens: usize,
}

impl MessageUsage {
    /// The usage of a prompt of `prompt` tokens (`cached` of them from the prefix cache) and
    /// `output` generated tokens.
    pub fn new(prompt: usize, cached: usize, output: usize) -> MessageUsage {
        let cached = cached.min(prompt);
        MessageUsage {
            input_tokens: prompt - cached,
            output_tokens: output,
            cache_creation_input_tokens: 0,
            cache_read_input_tokens: cached,
        }
    }
}

/// The answer of `count_tokens`.
#[derive(Debug, Serialize, ToSchema)]
pub struct TokenCount {
    pub input_tokens: usize,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::base::{parse_body, ApiError};
    use crate::protocol::fields::{check, struct_fields};

    fn fields(body: &str) -> Result<(), ApiError> {
        check(
            body.as_bytes(),
            MESSAGES,
            &[struct_fields::<MessagesRequest>()],
        )
    }

    fn param(e: ApiError) -> Option<String> {
        match e {
            ApiError::BadRequest { param, .. } => param,
            _ => None,
        }
    }

    #[test]
    fn unknown_and_unhonoured_fields_are_named() {
        fields(r#"{"max_tokens": 1, "messages": [], "metadata": {"user_id": "u"}}"#)
            .expect("typed fields pass");
        fields(r#"{"thinking": {"type": "disabled"}, "service_tier": "auto"}"#)
            .expect("no-op values pass");
        // `thinking` is typed; whether it is honoured is the model's (`validate::thinking`).
        fields(r#"{"thinking": {"type": "enabled", "budget_tokens": 1024}}"#)
            .expect("thinking is a field of the request");
        let e = fields(r#"{"max_token": 5}"#).expect_err("a misspelling is refused");
        assert_eq!(param(e), Some("max_token".into()));
        let e = fields(r#"{"container": "c"}"#).expect_err("refused");
        assert_eq!(param(e), Some("container".into()));
    }

    #[test]
    fn unknown_fields_inside_blocks_tools_and_choices_are_named() {
        let e = parse_body::<MessagesRequest>(
            br#"{"messages": [{"role": "user", "content": [{"type": "text", "text": "x", "colour": 1}]}]}"#,
        )
        .expect_err("refused");
        assert_eq!(param(e), Some("messages[0].content[0].colour".into()));
        let e = parse_body::<MessagesRequest>(
            br#"{"tools": [{"name": "f", "input_schema": {}, "parameters": {}}]}"#,
        )
        .expect_err("refused");
        assert_eq!(param(e), Some("tools[0].parameters".into()));
        let e = parse_body::<MessagesRequest>(br#"{"tool_choice": {"type": "any", "x": 1}}"#)
            .expect_err("refused");
        assert_eq!(param(e), Some("tool_choice.x".into()));
        let e =
            parse_body::<MessagesRequest>(br#"{"metadata": {"tags": []}}"#).expect_err("refused");
        assert_eq!(param(e), Some("metadata.tags".into()));
        let e = parse_body::<MessagesRequest>(br#"{"messages": [{"role": "user", "content": 3}]}"#)
            .expect_err("refused");
        assert_eq!(param(e), Some("messages[0].content".into()));
        let r = parse_body::<MessagesRequest>(
            br#"{"system": "s", "messages": [{"role": "user", "content": [{"type": "text", "text": "x"}]}]}"#,
        )
        .expect("valid");
        assert!(matches!(r.system, Some(Content::Text(t)) if t == "s"));
        let m = r.messages.expect("messages");
        assert!(matches!(&m[0].content, Content::Blocks(b) if b[0].text.as_deref() == Some("x")));
    }

    #[test]
    fn the_reply_has_anthropic_s_shape() {
        let m = MessageObject {
            id: "msg_1".into(),
            kind: "message",
            role: "assistant",
            model: "m".into(),
            content: vec![
                ContentBlock::Text { text: "Hi".into() },
                ContentBlock::ToolUse {
                    id: "toolu_1".into(),
                    name: "f".into(),
                    input: serde_json::json!({"a": 1}),
                },
            ],
            stop_reason: Some("tool_use"),
            stop_sequence: None,
            usage: MessageUsage::new(10, 4, 3),
        };
        let v = serde_json::to_value(&m).expect("serializes");
        assert_eq!(
            v,
            serde_json::json!({"id": "msg_1", "type": "message", "role": "assistant",
                "model": "m", "content": [{"type": "text", "text": "Hi"},
                {"type": "tool_use", "id": "toolu_1", "name": "f", "input": {"a": 1}}],
                "stop_reason": "tool_use", "stop_sequence": null,
                "usage": {"input_tokens": 6, "output_tokens": 3,
                    "cache_creation_input_tokens": 0, "cache_read_input_tokens": 4}})
        );
    }
}
