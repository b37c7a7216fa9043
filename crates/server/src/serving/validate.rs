//! The one place request bodies are checked and turned into engine work.
//!
//! Each endpoint's validation (`completions::validate`, `chat::validate`, the Responses API's
//! `prepare`) is built from the checks here: the model name, the sampling fields, the stops,
//! the lengths against the context, `n` and streaming. Together they check every range,
//! tokenize, and produce a `Job`: the tokenized prompts and one `GenerateRequest` template that
//! is copied for each of the `n` choices. Nothing past the validation re-checks client input; the
//! engine's own checks are a second line that should never fire for a validated job.

use engine::GenerateRequest;
use model::SamplingParams;

pub use crate::base::parse_body;
use crate::base::ApiError;
use crate::protocol::request::{ChatMessage, CommonParams, MessageContent, Stop};
use crate::serving::chat_template::{Message, RESERVED_KWARGS};
use crate::serving::reasoning::{Reasoning, ReasoningParser};
use crate::serving::state::{Loaded, ServerConfig};
use crate::serving::tools::{self, ToolParse};

const MAX_STOP_STRINGS: usize = 16;
const MAX_LOGIT_BIAS: usize = 1024;

/// Validated work for the engine.
#[derive(Debug)]
pub struct Job {
    /// Tokenized prompts; choice `p * n + j` is copy `j` of prompt `p`.
    pub prompts: Vec<Vec<u32>>,
    /// Choices per prompt.
    pub n: usize,
    /// Everything but the prompt; `prompt` is empty here.
    pub request: GenerateRequest,
    pub stream: bool,
    pub include_usage: bool,
    /// Completions: prepend the prompt to the text (and its log-probs when asked).
    pub echo: bool,
    /// Chat with tools: how to read each choice's reply for calls.
    pub tools: Option<ToolParse>,
    /// Chat with `tool_choice` `required` or a named function: the grammar (llguidance's Lark)
    /// that holds the reply to the family's call syntax, so that it always parses as calls;
    /// with a strict tool under `auto`, the grammar that holds every call to its schema.
    pub tool_grammar: Option<String>,
    /// With a reasoning parser: how to split each choice's reply into reasoning and answer.
    pub reasoning: Option<Reasoning>,
}

impl Job {
    /// The engine request of choice `j` for prompt `p`: seeded requests get distinct seeds per
    /// choice, or the `n` copies would be identical.
    pub fn request_for(&self, p: usize, j: usize) -> GenerateRequest {
        let mut r = self.request.clone();
        r.prompt = self.prompts[p].clone();
        if let Some(s) = r.sampling.seed {
            r.sampling.seed = Some(s.wrapping_add(j as u64));
        }
        r
    }
}

/// Checks `model` against the names the model is served under: an unknown one is a 404
/// `model_not_found`, as with OpenAI and vLLM. An absent `model` means the served one.
pub fn check_model(requested: Option<&str>, m: &Loaded) -> Result<(), ApiError> {
    match requested {
        Some(r) if !m.names().any(|n| n == r) && m.loras.by_name(r).is_none() => {
            Err(model_not_found(r, m))
        }
        _ => Ok(()),
    }
}

/// `check_model`, and the 400 of an embedding model on a route that generates.
pub fn check_generating_model(requested: Option<&str>, m: &Loaded) -> Result<(), ApiError> {
    check_model(requested, m)?;
    match m.engine.info().embedding {
        None => Ok(()),
        Some(e) => Err(ApiError::invalid(
            "model",
            format!(
                "the model `{}` computes embeddings and generates no text: use {}",
                m.model_id,
                if e.scores {
                    "/rerank"
                } else {
                    "/v1/embeddings"
                }
            ),
        )),
    }
}

/// The 404 for a model this server does not serve.
pub fn model_not_found(requested: &str, m: &Loaded) -> ApiError {
    let adapters = m.loras.list().into_iter().map(|e| e.name);
    let names: Vec<String> = m
        .names()
        .map(str::to_string)
        .chain(adapters)
        .map(|n| format!("`{n}`"))
        .collect();
    ApiError::Missing {
        message: format!(
            "the model `{requested}` does not exist; this server serves {}",
            names.join(", ")
        ),
        param: Some("model".into()),
        code: Some("model_not_found"),
    }
}

/// Turns chat messages into the prompt text through the model's chat template, with `tools`
/// (OpenAI's tool objects) shown to the model if given.
pub fn render_chat(
    messages: &[ChatMessage],
    tools: Option<&[serde_json::Value]>,
    add_generation_prompt: bool,
    kwargs: Option<&TemplateKwargs>,
    m: &Loaded,
) -> Result<String, ApiError> {
    if messages.is_empty() {
        return Err(ApiError::invalid("messages", "messages must not be empty"));
    }
    let plain = plain_messages(messages)?;
    if m.chat_template.tool_family().is_none() {
        if tools.is_some() {
            return Err(ApiError::invalid(
                "tools",
                "this model's chat template has no known tool-call format, so it cannot be \
                 given tools",
            ));
        }
        if let Some(i) = plain.iter().position(Message::is_tool_related) {
            return Err(ApiError::invalid(
                &format!("messages[{i}]"),
                "this model's chat template has no known tool-call format, so tool calls \
                 and tool results cannot be sent to it",
            ));
        }
    }
    render_messages(&plain, tools, add_generation_prompt, kwargs, m, "messages")
}

/// A request's `chat_template_kwargs`: more variables for the chat template.
pub type TemplateKwargs = serde_json::Map<String, serde_json::Value>;

/// Checks `chat_template_kwargs`: any name passes to the template (as transformers passes
/// them) but the variables the server sets itself.
pub fn check_template_kwargs(kwargs: Option<&TemplateKwargs>) -> Result<(), ApiError> {
    let reserved = kwargs
        .into_iter()
        .flat_map(|k| k.keys())
        .find(|k| RESERVED_KWARGS.contains(&k.as_str()));
    match reserved {
        Some(k) => Err(ApiError::invalid(
            "chat_template_kwargs",
            format!("chat_template_kwargs may not set `{k}`: the server sets it"),
        )),
        None => Ok(()),
    }
}

/// The reasoning split of a request: the served model's parser, unless the request turned
/// thinking off (`chat_template_kwargs: {"enable_thinking": false}`, with a parser that reads
/// `<think>` blocks: the reply then has none, and the whole of it is the answer).
pub fn reasoning_of(kwargs: Option<&TemplateKwargs>, m: &Loaded) -> Option<Reasoning> {
    let off = kwargs
        .and_then(|k| k.get("enable_thinking"))
        .is_some_and(|v| v == &serde_json::Value::Bool(false));
    m.reasoning
        .clone()
        .filter(|r| !(off && r.parser == ReasoningParser::Qwen3))
}

/// Chat messages as role and text (only text content parts are accepted), with an assistant
/// message's tool calls and thinking and a tool message's call id.
fn plain_messages(messages: &[ChatMessage]) -> Result<Vec<Message>, ApiError> {
    let mut plain = Vec::with_capacity(messages.len());
    for (i, msg) in messages.iter().enumerate() {
        let content = match &msg.content {
            None => String::new(),
            Some(MessageContent::Text(t)) => t.clone(),
            Some(MessageContent::Parts(parts)) => {
                let mut text = String::new();
                for part in parts {
                    match (part.kind.as_str(), &part.text) {
                        ("text", Some(t)) => text.push_str(t),
                        _ => {
                            return Err(ApiError::invalid(
                                &format!("messages[{i}].content"),
                                "only text content parts are supported",
                            ))
                        }
                    }
                }
                text
            }
        };
        let tool_calls = match &msg.tool_calls {
            Some(calls) if !calls.is_empty() => Some(tools::history::calls(i, calls)?),
            _ => None,
        };
        let is_tool = msg.role == "tool";
        if msg.reasoning_content.is_some() && msg.role != "assistant" {
            return Err(ApiError::invalid(
                &format!("messages[{i}].reasoning_content"),
                "only an assistant message carries reasoning_content",
            ));
        }
        plain.push(Message {
            role: msg.role.clone(),
            content,
            tool_calls,
            tool_call_id: msg.tool_call_id.clone(),
            name: msg.name.clone().filter(|_| is_tool),
            reasoning_content: msg.reasoning_content.clone(),
        });
    }
    Ok(plain)
}

/// Renders plain messages through the model's chat template (a template error blames `param`).
pub(crate) fn render_messages(
    plain: &[Message],
    tools: Option<&[serde_json::Value]>,
    add_generation_prompt: bool,
    kwargs: Option<&TemplateKwargs>,
    m: &Loaded,
    param: &str,
) -> Result<String, ApiError> {
    check_template_kwargs(kwargs)?;
    let tok = m.engine.tokenizer();
    let piece = |id: Option<u32>| {
        id.and_then(|i| tok.token_piece(i))
            .unwrap_or_default()
            .to_string()
    };
    m.chat_template
        .render(
            plain,
            tools,
            add_generation_prompt,
            &piece(tok.bos_id()),
            &piece(tok.eos_id()),
            kwargs,
        )
        .map_err(|e| ApiError::invalid(param, e.0))
}

pub(crate) fn job(
    prompts: Vec<Vec<u32>>,
    request: GenerateRequest,
    c: &CommonParams,
    cfg: &ServerConfig,
    echo: bool,
) -> Result<Job, ApiError> {
    let n = opt_range(c.n, "n", 1, cfg.max_n)?.unwrap_or(1);
    let stream = c.stream.unwrap_or(false);
    let include_usage = c
        .stream_options
        .as_ref()
        .and_then(|o| o.include_usage)
        .unwrap_or(false);
    if c.stream_options.is_some() && !stream {
        return Err(ApiError::invalid(
            "stream_options",
            "stream_options is only allowed when stream is true",
        ));
    }
    Ok(Job {
        prompts,
        n,
        request,
        stream,
        include_usage,
        echo,
        tools: None,
        tool_grammar: None,
        reasoning: None,
    })
}

pub(crate) fn check_prompt_lengths(
    prompts: &[Vec<u32>],
    m: &Loaded,
    param: &str,
) -> Result<(), ApiError> {
    let ctx = max_model_len(m);
    for p in prompts {
        if p.is_empty() {
            return Err(ApiError::invalid(
                param,
                format!("{param} must not be empty"),
            ));
        }
        if p.len() >= ctx {
            return Err(ApiError::BadRequest {
                message: format!(
                    "{}, and the prompt has {} (at least one token must be left to generate)",
                    limit_text(m),
                    p.len()
                ),
                param: Some(param.to_string()),
                code: Some("context_length_exceeded"),
            });
        }
    }
    Ok(())
}

/// The longest sequence (prompt plus output) this server runs: the model's context length, or
/// less when the KV pool cannot hold a whole context for one sequence (`max_model_len`).
pub fn max_model_len(m: &Loaded) -> usize {
    let info = m.engine.info();
    info.max_seq_len.min(info.context_length)
}

/// "this model's maximum context length is N tokens", naming the KV pool when it is the limit.
fn limit_text(m: &Loaded) -> String {
    let ctx = max_model_len(m);
    if ctx < m.engine.info().context_length {
        format!(
            "this server's maximum context length is {ctx} tokens (what its KV pool holds for \
             one sequence; the model's own is {})",
            m.engine.info().context_length
        )
    } else {
        format!("this model's maximum context length is {ctx} tokens")
    }
}

/// The `max_tokens` to use: an explicit value must be within the server's
/// `max_tokens_limit` and fit beside every prompt within `max_model_len`; the default is cut
/// to both, so a default never causes a refusal.
pub(crate) fn fit_max_tokens(
    prompts: &[Vec<u32>],
    explicit: Option<usize>,
    default: usize,
    (m, cfg): (&Loaded, &ServerConfig),
    param: &str,
) -> Result<usize, ApiError> {
    let ctx = max_model_len(m);
    let longest = prompts.iter().map(Vec::len).max().unwrap_or(0);
    let limit = cfg.max_tokens_limit.unwrap_or(usize::MAX);
    if let Some(n) = explicit.filter(|&n| n > limit) {
        return Err(ApiError::invalid(
            param,
            format!("{param} is {n}; this server generates at most {limit} tokens per request"),
        ));
    }
    let default = default.min(limit);
    match explicit {
        Some(n) if longest.saturating_add(n) > ctx => Err(ApiError::BadRequest {
            message: format!(
                "{}; the prompt has {longest} tokens and {n} were requested for the completion",
                limit_text(m)
            ),
            param: Some(param.into()),
            code: Some("context_length_exceeded"),
        }),
        Some(n) => Ok(n),
        None => Ok(default.min(ctx.saturating_sub(longest))),
    }
}

/// Sampling, stops, priority: the fields both routes share.
pub(crate) fn common_request(c: &CommonParams, m: &Loaded) -> Result<GenerateRequest, ApiError> {
    let vocab = m.engine.info().vocab_size;
    let sampling = sampling_params(c, vocab)?;
    let stop_strings = match &c.stop {
        None => Vec::new(),
        Some(Stop::One(s)) => vec![s.clone()],
        Some(Stop::Many(v)) => v.clone(),
    };
    if stop_strings.len() > MAX_STOP_STRINGS {
        return Err(ApiError::invalid(
            "stop",
            format!("at most {MAX_STOP_STRINGS} stop strings"),
        ));
    }
    if stop_strings.iter().any(String::is_empty) {
        return Err(ApiError::invalid("stop", "stop strings must not be empty"));
    }
    let stop_token_ids = c
        .stop_token_ids
        .iter()
        .flatten()
        .map(|&t| token_id(t, vocab, "stop_token_ids"))
        .collect::<Result<_, _>>()?;
    let priority = match c.priority {
        None => 0,
        Some(p) => i32::try_from(p)
            .map_err(|_| ApiError::invalid("priority", "priority must fit in 32 bits"))?,
    };
    Ok(GenerateRequest {
        prompt: Vec::new(),
        sampling,
        max_tokens: 0,
        stop_token_ids,
        stop_strings,
        ignore_eos: c.ignore_eos.unwrap_or(false),
        logprobs: None,
        prompt_logprobs: None,
        priority,
        no_speculation: c.speculative == Some(false),
        // Compiled and attached by `structured::attach`.
        constraint: None,
        loras: crate::serving::lora::request_loras(c.model.as_deref(), c.lora.as_deref(), m)?,
    })
}

/// A value checked to be > 0 as the sampler's `f32`: one below `f32`'s range (5e-324) becomes
/// the smallest positive `f32` rather than 0, which the sampler would refuse as out of range.
fn positive_f32(v: f64) -> f32 {
    (v as f32).max(f32::MIN_POSITIVE)
}

fn sampling_params(c: &CommonParams, vocab: usize) -> Result<SamplingParams, ApiError> {
    let temperature = c.temperature.unwrap_or(1.0);
    if !temperature.is_finite() || temperature < 0.0 {
        return Err(ApiError::invalid("temperature", "temperature must be >= 0"));
    }
    let top_p = c.top_p.unwrap_or(1.0);
    if !(top_p > 0.0 && top_p <= 1.0) {
        return Err(ApiError::invalid("top_p", "top_p must be in (0, 1]"));
    }
    let top_k = match c.top_k {
        None | Some(-1) => 0,
        Some(k) if k >= 0 => usize::try_from(k).unwrap_or(usize::MAX).min(vocab),
        Some(_) => return Err(ApiError::invalid("top_k", "top_k must be -1 (off) or >= 0")),
    };
    let min_p = in_range(c.min_p, "min_p", 0.0, 1.0, 0.0)?;
    let presence_penalty = in_range(c.presence_penalty, "presence_penalty", -2.0, 2.0, 0.0)?;
    let frequency_penalty = in_range(c.frequency_penalty, "frequency_penalty", -2.0, 2.0, 0.0)?;
    let repetition_penalty = c.repetition_penalty.unwrap_or(1.0);
    if !(repetition_penalty.is_finite() && repetition_penalty > 0.0) {
        return Err(ApiError::invalid(
            "repetition_penalty",
            "repetition_penalty must be > 0",
        ));
    }
    let logit_bias = logit_bias(c, vocab)?;
    let params = SamplingParams {
        temperature: temperature as f32,
        top_k,
        top_p: positive_f32(top_p),
        min_p: min_p as f32,
        repetition_penalty: positive_f32(repetition_penalty),
        presence_penalty: presence_penalty as f32,
        frequency_penalty: frequency_penalty as f32,
        logit_bias,
        seed: c.seed.map(|s| s as u64),
    };
    // Narrowing to f32 can overflow (e.g. 1e300): the model's own check catches what is left.
    params
        .validate()
        .map_err(|(field, msg)| ApiError::invalid(field, format!("{field} {msg}")))?;
    Ok(params)
}

fn logit_bias(c: &CommonParams, vocab: usize) -> Result<Vec<(u32, f32)>, ApiError> {
    let Some(map) = &c.logit_bias else {
        return Ok(Vec::new());
    };
    if map.len() > MAX_LOGIT_BIAS {
        return Err(ApiError::invalid(
            "logit_bias",
            format!("at most {MAX_LOGIT_BIAS} entries"),
        ));
    }
    let mut out = Vec::with_capacity(map.len());
    for (k, &v) in map {
        let id = k
            .trim()
            .parse::<i64>()
            .map_err(|_| ApiError::invalid("logit_bias", format!("key {k:?} is not a token id")))?;
        let id = token_id(id, vocab, "logit_bias")?;
        if !(-100.0..=100.0).contains(&v) {
            return Err(ApiError::invalid(
                "logit_bias",
                "bias values must be in [-100, 100]",
            ));
        }
        out.push((id, v as f32));
    }
    out.sort_by_key(|e| e.0);
    Ok(out)
}

pub(crate) fn token_id(t: i64, vocab: usize, param: &str) -> Result<u32, ApiError> {
    match u32::try_from(t) {
        Ok(id) if (id as usize) < vocab => Ok(id),
        _ => Err(ApiError::invalid(
            param,
            format!("token id {t} is outside the vocabulary (0..{vocab})"),
        )),
    }
}

/// An optional float in [lo, hi], or `default`.
fn in_range(v: Option<f64>, param: &str, lo: f64, hi: f64, default: f64) -> Result<f64, ApiError> {
    let v = v.unwrap_or(default);
    if (lo..=hi).contains(&v) {
        Ok(v)
    } else {
        Err(ApiError::invalid(
            param,
            format!("{param} must be in [{lo}, {hi}]"),
        ))
    }
}

/// An optional integer in [lo, hi].
pub(crate) fn opt_range(
    v: Option<i64>,
    param: &str,
    lo: usize,
    hi: usize,
) -> Result<Option<usize>, ApiError> {
    match v {
        None => Ok(None),
        Some(x) => match usize::try_from(x) {
            Ok(u) if (lo..=hi).contains(&u) => Ok(Some(u)),
            _ if hi == usize::MAX => Err(ApiError::invalid(
                param,
                format!("{param} must be at least {lo}"),
            )),
            _ => Err(ApiError::invalid(
                param,
                format!("{param} must be in [{lo}, {hi}]"),
            )),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The chat route gives a template the messages the official-template goldens were rendered
    /// from (`scripts/oracle/official_templates_goldens.py`) when an OpenAI client sends them:
    /// arguments as JSON text, `content: null` beside tool calls when there is no text.
    #[test]
    fn chat_messages_reach_the_template_in_the_goldens_shapes() {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../tests/goldens/official_chat_templates.json"
        );
        let golden: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(path).expect("golden")).expect("JSON");
        let conversations = golden["conversations"].as_array().expect("conversations");
        let mut with_calls = 0;
        for conv in conversations {
            let expected = conv["messages"].as_array().expect("messages");
            let sent: Vec<serde_json::Value> = expected
                .iter()
                .map(|m| {
                    let mut m = m.clone();
                    if let Some(calls) = m.get_mut("tool_calls").and_then(|c| c.as_array_mut()) {
                        with_calls += 1;
                        for c in calls {
                            let args = c["function"]["arguments"].to_string();
                            c["function"]["arguments"] = args.into();
                        }
                        if m["content"] == "" {
                            m["content"] = serde_json::Value::Null;
                        }
                    }
                    m
                })
                .collect();
            let sent: Vec<ChatMessage> =
                serde_json::from_value(sent.into()).expect("OpenAI messages");
            let plain = plain_messages(&sent).expect("valid");
            assert_eq!(
                &serde_json::to_value(&plain).expect("serializes"),
                &conv["messages"],
                "{}",
                conv["name"]
            );
        }
        assert!(with_calls >= 2, "the goldens have tool calls");
    }
}
