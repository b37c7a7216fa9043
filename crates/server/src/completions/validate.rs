//! `/v1/completions`' validation: the prompts (text, texts, token ids) tokenized and checked,
//! `echo` and `logprobs`, on top of the shared checks of `serving::validate`.

use crate::base::ApiError;
use crate::protocol::request::CommonParams;
use crate::serving::state::{Loaded, ServerConfig};
use crate::serving::validate::{
    check_generating_model, check_prompt_lengths, common_request, fit_max_tokens, job, opt_range,
    token_id, Job,
};

use super::protocol::{CompletionRequest, PromptInput};

/// Default `max_tokens` of `/v1/completions` (OpenAI's).
pub const DEFAULT_COMPLETION_TOKENS: usize = 16;

/// Validates a `/v1/completions` body.
pub fn completion_job(
    req: CompletionRequest,
    common: CommonParams,
    m: &Loaded,
    cfg: &ServerConfig,
) -> Result<Job, ApiError> {
    check_generating_model(common.model.as_deref(), m)?;
    let echo = req.echo.unwrap_or(false);
    let logprobs = opt_range(req.logprobs, "logprobs", 0, cfg.max_logprobs)?;
    let prompts = completion_prompts(req.prompt, m, cfg)?;
    let explicit = opt_range(common.max_tokens, "max_tokens", 0, usize::MAX)?;
    if explicit == Some(0) && !echo {
        return Err(ApiError::invalid(
            "max_tokens",
            "max_tokens must be at least 1 (0 is only allowed with echo)",
        ));
    }
    let max_tokens = fit_max_tokens(
        &prompts,
        explicit,
        DEFAULT_COMPLETION_TOKENS,
        (m, cfg),
        "max_tokens",
    )?;
    let mut request = common_request(&common, m)?;
    request.max_tokens = max_tokens;
    request.logprobs = logprobs;
    if echo && (logprobs.is_some() || max_tokens == 0) {
        // The engine scores the prompt only on request; echo with max_tokens 0 is exactly that.
        request.prompt_logprobs = Some(logprobs.unwrap_or(0));
    }
    job(prompts, request, &common, cfg, echo)
}

/// The prompts of a completions request, tokenized and checked.
fn completion_prompts(
    prompt: Option<PromptInput>,
    m: &Loaded,
    cfg: &ServerConfig,
) -> Result<Vec<Vec<u32>>, ApiError> {
    let tok = m.engine.tokenizer();
    let vocab = m.engine.info().vocab_size;
    let ids = |list: Vec<i64>| -> Result<Vec<u32>, ApiError> {
        list.into_iter()
            .map(|t| token_id(t, vocab, "prompt"))
            .collect()
    };
    let prompts = match prompt {
        None => return Err(ApiError::invalid("prompt", "prompt is required")),
        Some(PromptInput::Text(t)) => vec![encode_text(tok, &t)],
        Some(PromptInput::Texts(ts)) => ts.iter().map(|t| encode_text(tok, t)).collect(),
        Some(PromptInput::Tokens(t)) => vec![ids(t)?],
        Some(PromptInput::TokenLists(ls)) => ls.into_iter().map(ids).collect::<Result<_, _>>()?,
    };
    if prompts.is_empty() {
        return Err(ApiError::invalid("prompt", "prompt must not be empty"));
    }
    if prompts.len() > cfg.max_prompts {
        return Err(ApiError::invalid(
            "prompt",
            format!("at most {} prompts per request", cfg.max_prompts),
        ));
    }
    check_prompt_lengths(&prompts, m, "prompt")?;
    Ok(prompts)
}

/// Completion prompts are tokenized with BOS and with special-token strings parsed, as vLLM
/// (through Hugging Face tokenizers) does. An empty text stays empty, so it is refused.
fn encode_text(tok: &tokenizer::Tokenizer, text: &str) -> Vec<u32> {
    if text.is_empty() {
        return Vec::new();
    }
    tok.encode(text, true, true)
}
