//! `/v1/chat/completions`' validation: the tools, the messages rendered through the chat
//! template, the token limits and log-probs, on top of the shared checks of
//! `serving::validate`.

use crate::base::ApiError;
use crate::protocol::request::CommonParams;
use crate::serving::state::{Loaded, ServerConfig};
use crate::serving::tools;
use crate::serving::validate::{
    check_generating_model, check_prompt_lengths, common_request, fit_max_tokens, job, opt_range,
    reasoning_of, render_chat, Job,
};

use super::protocol::ChatRequest;

/// Validates a `/v1/chat/completions` body.
pub fn chat_job(
    req: ChatRequest,
    common: CommonParams,
    m: &Loaded,
    cfg: &ServerConfig,
) -> Result<Job, ApiError> {
    check_generating_model(common.model.as_deref(), m)?;
    let fields = tools::ToolFields {
        tools: req.tools.as_deref(),
        choice: req.tool_choice.as_ref(),
        parallel: req.parallel_tool_calls,
    };
    let setup = tools::setup_fields(fields, m.chat_template.tool_family(), m.engine.tokenizer())?;
    let messages = req.messages.unwrap_or_default();
    let kwargs = req.chat_template_kwargs.as_ref();
    let text = render_chat(
        &messages,
        setup.rendered.as_deref(),
        req.add_generation_prompt.unwrap_or(true),
        kwargs,
        m,
    )?;
    let prompt = m.engine.tokenizer().encode(&text, false, true);
    let prompts = vec![prompt];
    check_prompt_lengths(&prompts, m, "messages")?;
    let explicit = req.max_completion_tokens.or(common.max_tokens);
    let param = if req.max_completion_tokens.is_some() {
        "max_completion_tokens"
    } else {
        "max_tokens"
    };
    let explicit = opt_range(explicit, param, 1, usize::MAX)?;
    // Without a limit, chat generates to the end of what this sequence can hold (as vLLM).
    let max_tokens = fit_max_tokens(&prompts, explicit, usize::MAX, (m, cfg), param)?;
    let top = opt_range(req.top_logprobs, "top_logprobs", 0, cfg.max_logprobs)?;
    let wants_logprobs = req.logprobs.unwrap_or(false);
    if top.is_some() && !wants_logprobs {
        return Err(ApiError::invalid(
            "top_logprobs",
            "top_logprobs requires logprobs to be true",
        ));
    }
    let mut request = common_request(&common, m)?;
    request.max_tokens = max_tokens;
    request.logprobs = wants_logprobs.then(|| top.unwrap_or(0));
    let mut job = job(prompts, request, &common, cfg, false)?;
    job.tools = setup.parse;
    job.tool_grammar = setup.constraint.map(|c| c.lark);
    job.reasoning = reasoning_of(kwargs, m);
    Ok(job)
}
