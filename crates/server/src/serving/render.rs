//! What `POST /v1/completions/render` and `POST /v1/chat/completions/render` answer: what a
//! request would be prefilled with, without running it (vLLM's render endpoints). The handlers
//! are in the endpoint folders (`completions::render`, `chat::render`).
//!
//! A router that scores replicas by prefix needs the exact token ids a request becomes here:
//! the chat template, the special tokens, the tokenizer's pre-tokenization. The body is
//! validated by the same code as the generating route (`completions::completion_job` /
//! `chat_job`), so a request render accepts is one the route accepts, with the same prompt
//! tokens and the same sampling settings. Completions answer one object per prompt (a list);
//! chat answers one object, as vLLM does. Each object is vLLM's token-in request: `request_id`,
//! `token_ids`, `sampling_params`, `model`, `stream`, `stream_options`, `priority`.

use std::collections::BTreeMap;

use serde::Serialize;
use utoipa::ToSchema;

use super::validate::Job;
use crate::base::new_id;

/// One rendered prompt: the request as token ids.
#[derive(Serialize, ToSchema)]
pub struct Rendered {
    request_id: String,
    token_ids: Vec<u32>,
    sampling_params: Sampling,
    model: String,
    stream: bool,
    stream_options: Option<StreamOptions>,
    priority: i32,
}

/// The stream options of a rendered request (named apart from the request's own
/// `StreamOptions`, whose `include_usage` is optional: one OpenAPI component per name).
#[derive(Serialize, ToSchema)]
#[schema(as = RenderedStreamOptions)]
struct StreamOptions {
    include_usage: bool,
}

/// The settings the engine would sample with, in vLLM's `SamplingParams` names.
#[derive(Serialize, ToSchema)]
struct Sampling {
    n: usize,
    temperature: f32,
    top_p: f32,
    top_k: usize,
    min_p: f32,
    seed: Option<u64>,
    presence_penalty: f32,
    frequency_penalty: f32,
    repetition_penalty: f32,
    max_tokens: usize,
    stop: Vec<String>,
    stop_token_ids: Vec<u32>,
    ignore_eos: bool,
    logprobs: Option<usize>,
    prompt_logprobs: Option<usize>,
    /// Token id (as a string, JSON keys being strings) → bias.
    logit_bias: BTreeMap<String, f32>,
}

pub fn rendered(job: &Job, prompt: &[u32], prefix: &str, model: &str) -> Rendered {
    let r = &job.request;
    let s = &r.sampling;
    Rendered {
        request_id: new_id(prefix),
        token_ids: prompt.to_vec(),
        sampling_params: Sampling {
            n: job.n,
            temperature: s.temperature,
            top_p: s.top_p,
            top_k: s.top_k,
            min_p: s.min_p,
            seed: s.seed,
            presence_penalty: s.presence_penalty,
            frequency_penalty: s.frequency_penalty,
            repetition_penalty: s.repetition_penalty,
            max_tokens: r.max_tokens,
            stop: r.stop_strings.clone(),
            stop_token_ids: r.stop_token_ids.clone(),
            ignore_eos: r.ignore_eos,
            logprobs: r.logprobs,
            prompt_logprobs: r.prompt_logprobs,
            logit_bias: s
                .logit_bias
                .iter()
                .map(|&(id, b)| (id.to_string(), b))
                .collect(),
        },
        model: model.to_string(),
        stream: job.stream,
        stream_options: job.stream.then_some(StreamOptions {
            include_usage: job.include_usage,
        }),
        priority: r.priority,
    }
}
