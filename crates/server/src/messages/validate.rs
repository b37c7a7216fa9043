//! A Messages request checked and turned into the same `Job` the chat route builds: the
//! conversation through the chat template (with its tools), the limits and the sampling
//! settings, on top of the shared checks of `serving::validate`. `count_tokens` renders the
//! same prompt and only counts it.

use crate::base::{new_id, ApiError};
use crate::protocol::request::{CommonParams, Stop};
use crate::serving::lora::served_as;
use crate::serving::reasoning::Reasoning;
use crate::serving::state::{Loaded, ServerConfig};
use crate::serving::structured::{self, Asked};
use crate::serving::tools::{self, ToolFields, ToolSetup};
use crate::serving::validate::{
    check_generating_model, check_prompt_lengths, common_request, fit_max_tokens, job, opt_range,
    reasoning_of, render_messages, Job, TemplateKwargs,
};

use super::input;
use super::protocol::{
    Content, CountTokensRequest, InputMessage, MessagesRequest, ThinkingConfig, ToolChoice, ToolIn,
};

/// A validated Messages request, ready to run.
pub struct Prepared {
    pub job: Job,
    /// The tool-call grammar of `any`, a named tool or a strict tool, compiled by the route
    /// before the job starts.
    pub asked: Option<Asked>,
    /// `msg_…`.
    pub id: String,
    pub model: String,
    /// The prompt's length in tokens.
    pub prompt_tokens: usize,
    /// `stop_sequences`, to tell which one ended the reply.
    pub stops: Vec<String>,
}

/// The parts of a request that make the prompt.
struct PromptParts<'a> {
    system: Option<&'a Content>,
    messages: Option<&'a [InputMessage]>,
    tools: Option<&'a [ToolIn]>,
    tool_choice: Option<&'a ToolChoice>,
}

/// Validates a `/v1/messages` body.
pub fn prepare(req: MessagesRequest, m: &Loaded, cfg: &ServerConfig) -> Result<Prepared, ApiError> {
    check_generating_model(req.model.as_deref(), m)?;
    let max_tokens = req
        .max_tokens
        .ok_or_else(|| ApiError::invalid("max_tokens", "max_tokens: Field required"))?;
    let parts = PromptParts {
        system: req.system.as_ref(),
        messages: req.messages.as_deref(),
        tools: req.tools.as_deref(),
        tool_choice: req.tool_choice.as_ref(),
    };
    let (kwargs, reasoning) = thinking(req.thinking.as_ref(), max_tokens, m)?;
    let (prompt, setup) = prompt(parts, kwargs.as_ref(), m)?;
    let prompts = vec![prompt];
    check_prompt_lengths(&prompts, m, "messages")?;
    let explicit = opt_range(Some(max_tokens), "max_tokens", 1, usize::MAX)?;
    let max_tokens = fit_max_tokens(&prompts, explicit, usize::MAX, (m, cfg), "max_tokens")?;
    if req.top_k.is_some_and(|k| k < 0) {
        return Err(ApiError::invalid("top_k", "top_k must be at least 0"));
    }
    let stops = req.stop_sequences.clone().unwrap_or_default();
    let common = CommonParams {
        temperature: req.temperature,
        top_p: req.top_p,
        top_k: req.top_k,
        stop: req.stop_sequences.map(Stop::Many),
        stream: req.stream,
        model: req.model.clone(),
        ..CommonParams::default()
    };
    let mut request = common_request(&common, m).map_err(stop_path)?;
    request.max_tokens = max_tokens;
    let prompt_tokens = prompts[0].len();
    let mut job = job(prompts, request, &common, cfg, false)?;
    job.tools = setup.parse;
    job.reasoning = reasoning;
    let asked = structured::with_tool_grammar(None, setup.constraint.map(|c| c.lark))?;
    Ok(Prepared {
        job,
        asked,
        id: new_id("msg_"),
        model: served_as(req.model.as_deref(), m),
        prompt_tokens,
        stops,
    })
}

/// The prompt's length of a `/v1/messages/count_tokens` body.
pub fn count(req: &CountTokensRequest, m: &Loaded) -> Result<usize, ApiError> {
    check_generating_model(req.model.as_deref(), m)?;
    let parts = PromptParts {
        system: req.system.as_ref(),
        messages: req.messages.as_deref(),
        tools: req.tools.as_deref(),
        tool_choice: req.tool_choice.as_ref(),
    };
    Ok(prompt(parts, None, m)?.0.len())
}

/// `thinking`, checked: the template's variables it sets (`enable_thinking: false` when
/// disabled) and the reasoning split of the reply. Enabled needs a reasoning parser; a budget
/// is not enforced, so one that could bind (below `max_tokens`) is refused.
fn thinking(
    t: Option<&ThinkingConfig>,
    max_tokens: i64,
    m: &Loaded,
) -> Result<(Option<TemplateKwargs>, Option<Reasoning>), ApiError> {
    let Some(t) = t else {
        return Ok((None, reasoning_of(None, m)));
    };
    match t.kind.as_str() {
        "disabled" => {
            if t.budget_tokens.is_some() {
                return Err(ApiError::invalid(
                    "thinking.budget_tokens",
                    "budget_tokens is only for {\"type\": \"enabled\"}",
                ));
            }
            let mut kwargs = TemplateKwargs::new();
            kwargs.insert("enable_thinking".into(), false.into());
            let reasoning = reasoning_of(Some(&kwargs), m);
            Ok((Some(kwargs), reasoning))
        }
        "enabled" => {
            if m.reasoning.is_none() {
                return Err(ApiError::invalid(
                    "thinking",
                    "extended thinking needs a reasoning model: this server has no reasoning \
                     parser (start it with --reasoning-parser)",
                ));
            }
            if t.budget_tokens.is_some_and(|b| b < max_tokens) {
                return Err(ApiError::invalid(
                    "thinking.budget_tokens",
                    "a thinking budget is not enforced by this server: leave budget_tokens out \
                     or set it to max_tokens or more (max_tokens bounds thinking and answer \
                     together)",
                ));
            }
            Ok((None, reasoning_of(None, m)))
        }
        other => Err(ApiError::invalid(
            "thinking.type",
            format!("thinking.type must be \"enabled\" or \"disabled\", not {other:?}"),
        )),
    }
}

/// The prompt's tokens and the tool setup. A last assistant message is continued: its text
/// follows the generation prompt, and the reply is what comes after it.
fn prompt(
    p: PromptParts<'_>,
    kwargs: Option<&TemplateKwargs>,
    m: &Loaded,
) -> Result<(Vec<u32>, ToolSetup), ApiError> {
    let turns = p
        .messages
        .ok_or_else(|| ApiError::invalid("messages", "messages: Field required"))?;
    if turns.is_empty() {
        return Err(ApiError::invalid("messages", "messages must not be empty"));
    }
    let setup = tool_setup(p.tools, p.tool_choice, m)?;
    if m.chat_template.tool_family().is_none() {
        let tool_block = |t: &InputMessage| match &t.content {
            Content::Blocks(b) => b
                .iter()
                .any(|b| b.kind == "tool_use" || b.kind == "tool_result"),
            Content::Text(_) => false,
        };
        if let Some(i) = turns.iter().position(tool_block) {
            return Err(ApiError::invalid(
                &format!("messages[{i}].content"),
                "this model's chat template has no known tool-call format, so tool_use and \
                 tool_result blocks cannot be sent to it",
            ));
        }
    }
    let mut messages = input::messages(p.system, turns)?;
    let prefill = match messages.last() {
        Some(last) if last.role == "assistant" => {
            if last.tool_calls.is_some() {
                return Err(ApiError::invalid(
                    &format!("messages[{}].content", turns.len() - 1),
                    "the last message is an assistant's with tool_use blocks: send their \
                     tool_result blocks in a user message after it",
                ));
            }
            messages.pop().map(|m| m.content).unwrap_or_default()
        }
        _ => String::new(),
    };
    let tools = setup.rendered.as_deref();
    let mut text = render_messages(&messages, tools, true, kwargs, m, "messages")?;
    text.push_str(&prefill);
    let prompt = m.engine.tokenizer().encode(&text, false, true);
    Ok((prompt, setup))
}

/// `tools` and `tool_choice` checked through chat's tool setup.
fn tool_setup(
    tools: Option<&[ToolIn]>,
    choice: Option<&ToolChoice>,
    m: &Loaded,
) -> Result<ToolSetup, ApiError> {
    let defs = input::tool_defs(tools)?;
    let (choice, parallel) = match choice {
        None => (None, None),
        Some(c) => {
            let (c, p) = input::tool_choice(c)?;
            (Some(c), p)
        }
    };
    let fields = ToolFields {
        tools: Some(&defs),
        choice: choice.as_ref(),
        parallel,
    };
    tools::setup_fields(fields, m.chat_template.tool_family(), m.engine.tokenizer())
        .map_err(input::anthropic_paths)
}

/// The shared checks name `stop`; here the field is `stop_sequences`.
fn stop_path(e: ApiError) -> ApiError {
    match e {
        ApiError::BadRequest {
            message,
            param: Some(p),
            code,
        } if p == "stop" => ApiError::BadRequest {
            message: message.replace("stop strings", "stop sequences"),
            param: Some("stop_sequences".into()),
            code,
        },
        e => e,
    }
}
