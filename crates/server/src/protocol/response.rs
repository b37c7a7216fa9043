//! The response parts completions and chat share, as typed `Serialize` structs: the head
//! (`id`, `object`, `created`, `model`), the body around the choices, `usage`, the
//! `finish_reason` serializer and schema; and the small routes' bodies (`/v1/models`,
//! `/tokenize`, `/detokenize`). Each endpoint's choice types are in its folder.
//!
//! Field names and nesting are the wire format the tests pin; fields are declared in the order
//! OpenAI documents them (JSON gives object order no meaning). A field OpenAI always sends goes
//! out as `null` when empty (`logprobs`, a chunk's `finish_reason`); a field OpenAI leaves out
//! is skipped when `None` (a chunk's `usage`, a delta's `role`). Every type here serializes
//! without error: no map has a non-string key and no value is a non-finite float.

use engine::FinishReason;
use serde::{Serialize, Serializer};
use utoipa::openapi::schema::{Object, ObjectBuilder, SchemaType, Type};
use utoipa::ToSchema;

use crate::base::{new_id, unix_now};

/// What every object of one response starts with: built once per request and copied into the
/// whole response or into each of its chunks.
#[derive(Clone, Debug)]
pub struct Head {
    pub id: String,
    pub created: u64,
    pub model: String,
}

impl Head {
    /// A new response of `model`, its id starting with `prefix` (`cmpl`, `chatcmpl`)
    /// (`serving::head` also names the request's trace with it).
    pub fn new(prefix: &str, model: &str) -> Head {
        let id = new_id(&format!("{prefix}-"));
        Head {
            id,
            created: unix_now(),
            model: model.to_string(),
        }
    }

    /// A body of kind `object` with this head.
    pub fn body<C>(&self, object: &'static str, choices: Vec<C>, usage: Option<Usage>) -> Body<C> {
        Body {
            id: self.id.clone(),
            object,
            created: self.created,
            model: self.model.clone(),
            choices,
            usage,
        }
    }
}

/// A completions or chat response, whole or one streamed chunk.
///
/// `usage` is present on whole responses and on the final usage chunk of a stream, absent on
/// the other chunks (whose `choices` hold one choice; the usage chunk's hold none).
#[derive(Debug, Serialize, ToSchema)]
pub struct Body<C> {
    pub id: String,
    pub object: &'static str,
    pub created: u64,
    pub model: String,
    pub choices: Vec<C>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub usage: Option<Usage>,
}

/// `usage` of a completions or chat response.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, ToSchema)]
pub struct Usage {
    pub prompt_tokens: usize,
    pub completion_tokens: usize,
    pub total_tokens: usize,
    pub prompt_tokens_details: PromptTokensDetails,
}

/// `usage.prompt_tokens_details`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, ToSchema)]
pub struct PromptTokensDetails {
    /// Prompt tokens whose KV came from the prefix cache.
    pub cached_tokens: usize,
}

/// Usage over a whole request: prompt tokens once per prompt (not per choice), completion
/// tokens summed, cached tokens the best any copy of each prompt got.
#[derive(Clone, Debug, Default)]
pub struct UsageTotals {
    prompt_lens: Vec<usize>,
    cached: Vec<usize>,
    completion_tokens: usize,
}

impl UsageTotals {
    pub fn new(prompts: &[Vec<u32>]) -> Self {
        UsageTotals {
            prompt_lens: prompts.iter().map(Vec::len).collect(),
            cached: vec![0; prompts.len()],
            completion_tokens: 0,
        }
    }

    /// Adds a finished choice of prompt `prompt_index`.
    pub fn add(&mut self, prompt_index: usize, usage: &engine::Usage) {
        self.completion_tokens += usage.completion_tokens;
        if let Some(c) = self.cached.get_mut(prompt_index) {
            *c = (*c).max(usage.cached_tokens);
        }
    }

    /// The `usage` object so far.
    pub fn usage(&self) -> Usage {
        let prompt_tokens: usize = self.prompt_lens.iter().sum();
        Usage {
            prompt_tokens,
            completion_tokens: self.completion_tokens,
            total_tokens: prompt_tokens + self.completion_tokens,
            prompt_tokens_details: PromptTokensDetails {
                cached_tokens: self.cached.iter().sum(),
            },
        }
    }
}

/// A `finish_reason`: `null` while the choice runs.
pub(crate) fn finish_reason<S: Serializer>(
    r: &Option<FinishReason>,
    s: S,
) -> Result<S::Ok, S::Error> {
    r.map(FinishReason::as_str).serialize(s)
}

/// Every `finish_reason` the engine reports (its `as_str` values).
pub(crate) const ENGINE_FINISH: [FinishReason; 3] = [
    FinishReason::Stop,
    FinishReason::Length,
    FinishReason::Abort,
];

/// A nullable string schema limited to `values`.
pub(crate) fn nullable_enum(values: impl Iterator<Item = &'static str>) -> Object {
    let values = values
        .map(serde_json::Value::from)
        .chain([serde_json::Value::Null]);
    ObjectBuilder::new()
        .schema_type(SchemaType::from_iter([Type::String, Type::Null]))
        .enum_values(Some(values))
        .build()
}

/// The schema of a completions `finish_reason` (`null` while the choice runs).
pub(crate) fn finish_reason_schema() -> Object {
    nullable_enum(ENGINE_FINISH.into_iter().map(FinishReason::as_str))
}

/// `GET /v1/models`.
#[derive(Debug, Serialize, ToSchema)]
pub struct ModelList {
    pub object: &'static str,
    pub data: Vec<ModelCard>,
}

/// One entry of `/v1/models` (`root` and `max_model_len` are vLLM's additions).
#[derive(Debug, Serialize, ToSchema)]
pub struct ModelCard {
    pub id: String,
    pub object: &'static str,
    pub created: u64,
    pub owned_by: &'static str,
    pub root: String,
    /// vLLM's: a LoRA adapter's base model id (null for the base model itself).
    pub parent: Option<String>,
    pub max_model_len: usize,
}

/// vLLM's `POST /tokenize`.
#[derive(Debug, Serialize, ToSchema)]
pub struct Tokenized {
    pub count: usize,
    pub max_model_len: usize,
    pub tokens: Vec<u32>,
}

/// vLLM's `POST /detokenize`.
#[derive(Debug, Serialize, ToSchema)]
pub struct Detokenized {
    pub prompt: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn usage_counts_each_prompt_once_and_its_best_cache_hit() {
        let mut t = UsageTotals::new(&[vec![1, 2, 3], vec![4, 5]]);
        let u = |completion_tokens, cached_tokens| engine::Usage {
            completion_tokens,
            cached_tokens,
            ..Default::default()
        };
        t.add(0, &u(4, 2));
        t.add(0, &u(1, 3));
        t.add(1, &u(2, 0));
        let json = serde_json::to_value(t.usage()).expect("serializes");
        assert_eq!(
            json,
            serde_json::json!({"prompt_tokens": 5, "completion_tokens": 7, "total_tokens": 12,
                "prompt_tokens_details": {"cached_tokens": 3}})
        );
    }
}
