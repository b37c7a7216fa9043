//! OpenAI's Responses API (`/v1/responses`) on top of the chat path.
//!
//! A request's `input` (text, or a list of message items) becomes chat messages after the
//! conversation of `previous_response_id` (from `store`) and after `instructions` (a system
//! message, not carried over to later responses, as with OpenAI). The messages go through the
//! chat template and the same checks and engine request as chat completions. Function tools
//! (`tools`) and `text.format` go through chat's paths too (`tools` here converts the flat
//! Responses shapes; `structured::text_format` reads the format), and `function_call` /
//! `function_call_output` input items become an assistant message's calls and `tool`
//! messages (`items`). The output is message and `function_call` items (`items::Items`).
//! `wire` has the response object and stream events, `stream` the SSE driver, `store` the
//! bounded store of finished responses (kept in the server's state as this family's own),
//! `request` the request as it arrives, `handler` the routes.

pub mod handler;
pub mod items;
pub mod request;
pub mod store;
pub mod stream;
pub mod tools;
pub mod wire;

use std::sync::Arc;

use serde_json::json;

use engine::FinishReason;

use crate::base::new_id;
use crate::base::unix_now;
use crate::base::ApiError;
use crate::protocol::request::{CommonParams, ContentPart};
use crate::responses::request::{InputItem, ItemContent, ResponsesInput, ResponsesRequest};
use crate::serving::chat_template::Message;
use crate::serving::lora::served_as;
use crate::serving::state::{Loaded, ServerConfig};
use crate::serving::structured::{self, Asked};
use crate::serving::tools::Family;
use crate::serving::validate::{
    check_generating_model, check_prompt_lengths, common_request, fit_max_tokens, job, opt_range,
    reasoning_of, render_messages, Job,
};

use items::Items;
use store::{ResponseStore, Stored, Turn};
use wire::{IncompleteDetails, OutputItem, ResponseError, ResponseObject, ResponseUsage, Status};

/// A validated `/v1/responses` request, ready to run and then to be finished.
pub struct Prepared {
    pub job: Job,
    /// The response as it starts: in progress, no output, no usage.
    pub head: ResponseObject,
    /// The id of the first output message.
    pub message_id: String,
    /// The output constraint (`text.format`, or the grammar of a `required` / named
    /// `tool_choice`), compiled by the route before the job starts.
    pub asked: Option<Asked>,
    /// This turn's input messages (without `instructions`).
    input: Vec<Message>,
    prev: Option<Arc<Turn>>,
    input_tokens: usize,
}

/// Validates a request: the conversation, the limits and the sampling settings.
pub fn prepare(
    mut req: ResponsesRequest,
    m: &Loaded,
    cfg: &ServerConfig,
    store: &ResponseStore,
) -> Result<Prepared, ApiError> {
    check_generating_model(req.model.as_deref(), m)?;
    let setup = tools::setup(&req, m)?;
    let asked = structured::text_format(req.text.as_ref())?;
    let asked = structured::with_tool_grammar(asked, setup.constraint.map(|c| c.lark))?;
    let input = input_messages(req.input.take(), m.chat_template.tool_family())?;
    let prev = match &req.previous_response_id {
        None => None,
        Some(id) => Some(store.get(id).ok_or_else(|| previous_not_found(id))?.turn),
    };
    let mut messages = prev.as_ref().map(|t| t.conversation()).unwrap_or_default();
    messages.extend(input.iter().cloned());
    if let Some(instr) = &req.instructions {
        put_instructions(&mut messages, instr);
    }
    let text = render_messages(
        &messages,
        setup.rendered.as_deref(),
        true,
        req.chat_template_kwargs.as_ref(),
        m,
        "input",
    )?;
    let prompt = m.engine.tokenizer().encode(&text, false, true);
    let prompts = vec![prompt];
    check_prompt_lengths(&prompts, m, "input")?;
    let explicit = opt_range(req.max_output_tokens, "max_output_tokens", 1, usize::MAX)?;
    let max_tokens = fit_max_tokens(
        &prompts,
        explicit,
        usize::MAX,
        (m, cfg),
        "max_output_tokens",
    )?;
    let common = CommonParams {
        temperature: req.temperature,
        top_p: req.top_p,
        stream: req.stream,
        model: req.model.clone(),
        ..CommonParams::default()
    };
    let mut request = common_request(&common, m)?;
    request.max_tokens = max_tokens;
    let input_tokens = prompts[0].len();
    let mut job = job(prompts, request, &common, cfg, false)?;
    job.tools = setup.parse;
    job.reasoning = reasoning_of(req.chat_template_kwargs.as_ref(), m);
    let text_config = req.text.take().unwrap_or_else(|| json!({}));
    let head = ResponseObject {
        id: new_id("resp_"),
        object: "response",
        created_at: unix_now(),
        status: Status::InProgress,
        error: None,
        incomplete_details: None,
        instructions: req.instructions,
        max_output_tokens: explicit,
        model: served_as(req.model.as_deref(), m),
        output: Vec::new(),
        parallel_tool_calls: req.parallel_tool_calls.unwrap_or(true),
        previous_response_id: req.previous_response_id,
        reasoning: Default::default(),
        store: req.store.unwrap_or(true),
        temperature: req.temperature.unwrap_or(1.0),
        text: text_echo(text_config),
        tool_choice: req.tool_choice.unwrap_or_else(|| json!("auto")),
        tools: req.tools.unwrap_or_default(),
        top_p: req.top_p.unwrap_or(1.0),
        truncation: "disabled",
        usage: None,
        user: req.user,
        metadata: req.metadata.unwrap_or_default(),
    };
    Ok(Prepared {
        job,
        head,
        message_id: new_id("msg_"),
        asked,
        input,
        prev,
        input_tokens,
    })
}

impl Prepared {
    /// The output's assembler: the first message gets `message_id`, calls ids of the
    /// template's family.
    pub fn items(&self) -> Items {
        let family = self.job.tools.as_ref().map(|t| t.family);
        Items::new(self.message_id.clone(), family)
    }

    /// The finished response with the generated `output` (from [`Prepared::items`], finished).
    pub fn finish(
        &self,
        output: Vec<OutputItem>,
        reason: FinishReason,
        usage: &engine::Usage,
    ) -> ResponseObject {
        let status = Status::of(reason);
        let mut obj = self.head.clone();
        obj.status = status;
        match status {
            Status::Incomplete => {
                obj.incomplete_details = Some(IncompleteDetails {
                    reason: "max_output_tokens",
                })
            }
            Status::Failed => {
                obj.error = Some(ResponseError {
                    code: "server_error",
                    message: "the request was aborted".into(),
                })
            }
            Status::Completed | Status::InProgress => {}
        }
        obj.output = output;
        obj.usage = Some(ResponseUsage::new(self.input_tokens, usage));
        obj
    }

    /// The response failed after it started (an engine error mid-stream).
    pub fn failed(&self, e: &ApiError) -> ResponseObject {
        let mut obj = self.head.clone();
        obj.status = Status::Failed;
        obj.error = Some(ResponseError {
            code: "server_error",
            message: e.body().error.message,
        });
        obj
    }

    /// Stores a finished response when the request asked for it (`store`, the default).
    pub fn keep(&self, obj: &ResponseObject, store: &ResponseStore) {
        if !obj.store || obj.status == Status::Failed {
            return;
        }
        let mut messages = self.input.clone();
        items::output_messages(&obj.output, &mut messages);
        store.insert(Stored {
            object: obj.clone(),
            turn: Arc::new(Turn {
                prev: self.prev.clone(),
                messages,
            }),
        });
    }
}

/// `instructions` as the first system message (joined with a system message already first).
fn put_instructions(messages: &mut Vec<Message>, instructions: &str) {
    match messages.first_mut() {
        Some(first) if first.role == "system" => {
            first.content = format!("{instructions}\n\n{}", first.content);
        }
        _ => messages.insert(0, Message::text("system", instructions)),
    }
}

/// The 400 OpenAI answers for an unknown `previous_response_id`.
fn previous_not_found(id: &str) -> ApiError {
    ApiError::BadRequest {
        message: format!(
            "previous response with id `{id}` not found (never stored, deleted, or evicted)"
        ),
        param: Some("previous_response_id".into()),
        code: Some("previous_response_not_found"),
    }
}

/// `input` as chat messages: text is one user message; items are messages, calls and call
/// outputs (a model without a tool-call format takes messages only).
fn input_messages(
    input: Option<ResponsesInput>,
    family: Option<Family>,
) -> Result<Vec<Message>, ApiError> {
    let items = match input {
        None => return Err(ApiError::invalid("input", "input is required")),
        Some(ResponsesInput::Text(t)) => return Ok(vec![Message::text("user", t)]),
        Some(ResponsesInput::Items(items)) => items,
    };
    if items.is_empty() {
        return Err(ApiError::invalid("input", "input must not be empty"));
    }
    let mut messages = Vec::with_capacity(items.len());
    // The last reasoning item's index (for the error of one left without its answer).
    let mut reasoning_at = 0;
    for (i, item) in items.into_iter().enumerate() {
        let kind = item.kind.as_deref().unwrap_or("message");
        if !matches!(kind, "message" | "reasoning") && family.is_none() {
            return Err(ApiError::invalid(
                &format!("input[{i}].type"),
                "this model's chat template has no known tool-call format, so function calls \
                 and their outputs cannot be sent to it",
            ));
        }
        match kind {
            "message" => items::push_answer(&mut messages, item_message(i, item)?),
            "reasoning" => {
                reasoning_at = i;
                let text = content_text(i, item.content, REASONING_PARTS)?;
                messages.push(items::thinking(text));
            }
            "function_call" => {
                items::input_call(i, item.call_id, item.name, item.arguments, &mut messages)?
            }
            "function_call_output" => {
                let output = content_text(i, item.output, MESSAGE_PARTS)?;
                messages.push(items::input_output(i, item.call_id, output)?);
            }
            other => {
                return Err(ApiError::invalid(
                    &format!("input[{i}].type"),
                    format!(
                        "input items of type `{other}` are not supported (only message, \
                         reasoning, function_call and function_call_output)"
                    ),
                ))
            }
        }
    }
    if messages.last().is_some_and(items::is_thinking_alone) {
        return Err(ApiError::invalid(
            &format!("input[{reasoning_at}].type"),
            "a reasoning item must be followed by the message or function_call it led to",
        ));
    }
    Ok(messages)
}

/// `text` for the response object: `{"format": {"type": "text"}}` unless a format was given.
fn text_echo(mut text: serde_json::Value) -> serde_json::Value {
    if text.get("format").is_none_or(serde_json::Value::is_null) {
        text["format"] = json!({"type": "text"});
    }
    text
}

fn item_message(i: usize, item: InputItem) -> Result<Message, ApiError> {
    let role = match item.role.as_deref() {
        Some("developer" | "system") => "system",
        Some(r @ ("user" | "assistant")) => r,
        other => {
            return Err(ApiError::invalid(
                &format!("input[{i}].role"),
                format!("role must be user, assistant, system or developer, not {other:?}"),
            ))
        }
    };
    let content = content_text(i, item.content, MESSAGE_PARTS)?;
    Ok(Message::text(role, content))
}

/// Text parts of the given kinds.
const MESSAGE_PARTS: &[&str] = &["input_text", "output_text", "text"];
const REASONING_PARTS: &[&str] = &["reasoning_text"];

/// Item `i`'s content as text: none is empty, parts must be of `kinds`.
fn content_text(
    i: usize,
    content: Option<ItemContent>,
    kinds: &[&str],
) -> Result<String, ApiError> {
    match content {
        None => Ok(String::new()),
        Some(ItemContent::Text(t)) => Ok(t),
        Some(ItemContent::Parts(parts)) => parts_text(i, &parts, kinds),
    }
}

fn parts_text(i: usize, parts: &[ContentPart], kinds: &[&str]) -> Result<String, ApiError> {
    let mut text = String::new();
    for (j, part) in parts.iter().enumerate() {
        match (part.kind.as_str(), &part.text) {
            (kind, Some(t)) if kinds.contains(&kind) => text.push_str(t),
            (kind, _) => {
                return Err(ApiError::invalid(
                    &format!("input[{i}].content[{j}]"),
                    format!("only text content is supported, not `{kind}`"),
                ))
            }
        }
    }
    Ok(text)
}
