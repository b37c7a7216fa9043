//! OpenAI's Responses API (`/v1/responses`) on top of the chat path.
//!
//! A request's `input` (text, or a list of message items) becomes chat messages after the
//! conversation of `previous_response_id` (from `store`) and after `instructions` (a system
//! message, not carried over to later responses, as with OpenAI). The messages go through the
//! chat template and the same checks and engine request as chat completions; the result is one
//! assistant message. `wire` has the response object and stream events, `stream` the SSE
//! driver, `store` the bounded store of finished responses. Tool calling and structured output
//! are refused before this point (`fields.rs`).

pub mod store;
pub mod stream;
pub mod wire;

use std::sync::Arc;

use engine::FinishReason;

use crate::chat_template::Message;
use crate::error::ApiError;
use crate::openai::{
    CommonParams, ContentPart, InputItem, ItemContent, ResponsesInput, ResponsesRequest,
};
use crate::response::new_id;
use crate::state::{unix_now, Loaded, ServerConfig};
use crate::validate::{
    check_model, check_prompt_lengths, common_request, fit_max_tokens, job, opt_range,
    render_messages, Job,
};

use store::{ResponseStore, Stored, Turn};
use wire::{
    IncompleteDetails, OutputMessage, OutputText, ResponseError, ResponseObject, ResponseUsage,
    Status,
};

/// A validated `/v1/responses` request, ready to run and then to be finished.
pub struct Prepared {
    pub job: Job,
    /// The response as it starts: in progress, no output, no usage.
    pub head: ResponseObject,
    /// The id of the output message.
    pub message_id: String,
    /// This turn's input messages (without `instructions`).
    input: Vec<Message>,
    prev: Option<Arc<Turn>>,
    input_tokens: usize,
}

/// Validates a request: the conversation, the limits and the sampling settings.
pub fn prepare(
    req: ResponsesRequest,
    m: &Loaded,
    cfg: &ServerConfig,
    store: &ResponseStore,
) -> Result<Prepared, ApiError> {
    check_model(req.model.as_deref(), m)?;
    let input = input_messages(req.input)?;
    let prev = match &req.previous_response_id {
        None => None,
        Some(id) => Some(store.get(id).ok_or_else(|| previous_not_found(id))?.turn),
    };
    let mut messages = prev.as_ref().map(|t| t.conversation()).unwrap_or_default();
    messages.extend(input.iter().cloned());
    if let Some(instr) = &req.instructions {
        put_instructions(&mut messages, instr);
    }
    let text = render_messages(&messages, None, true, m, "input")?;
    let prompt = m.engine.tokenizer().encode(&text, false, true);
    let prompts = vec![prompt];
    check_prompt_lengths(&prompts, m, "input")?;
    let explicit = opt_range(req.max_output_tokens, "max_output_tokens", 1, usize::MAX)?;
    let max_tokens = fit_max_tokens(&prompts, explicit, usize::MAX, m, "max_output_tokens")?;
    let common = CommonParams {
        temperature: req.temperature,
        top_p: req.top_p,
        stream: req.stream,
        ..CommonParams::default()
    };
    let mut request = common_request(&common, m)?;
    request.max_tokens = max_tokens;
    let input_tokens = prompts[0].len();
    let job = job(prompts, request, &common, cfg, false)?;
    let head = ResponseObject {
        id: new_id("resp_"),
        object: "response",
        created_at: unix_now(),
        status: Status::InProgress,
        error: None,
        incomplete_details: None,
        instructions: req.instructions,
        max_output_tokens: explicit,
        model: m.model_id.clone(),
        output: Vec::new(),
        parallel_tool_calls: true,
        previous_response_id: req.previous_response_id,
        reasoning: Default::default(),
        store: req.store.unwrap_or(true),
        temperature: req.temperature.unwrap_or(1.0),
        text: Default::default(),
        tool_choice: "auto",
        tools: [],
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
        input,
        prev,
        input_tokens,
    })
}

impl Prepared {
    /// The finished response for the generated `text`.
    pub fn finish(
        &self,
        text: String,
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
        obj.output = vec![OutputMessage::new(
            self.message_id.clone(),
            if status == Status::Completed {
                Status::Completed
            } else {
                Status::Incomplete
            },
            vec![OutputText::new(text)],
        )];
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
        messages.push(Message::text("assistant", obj.output_text()));
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

/// `input` as chat messages: text is one user message; items must be text messages.
fn input_messages(input: Option<ResponsesInput>) -> Result<Vec<Message>, ApiError> {
    let items = match input {
        None => return Err(ApiError::invalid("input", "input is required")),
        Some(ResponsesInput::Text(t)) => return Ok(vec![Message::text("user", t)]),
        Some(ResponsesInput::Items(items)) => items,
    };
    if items.is_empty() {
        return Err(ApiError::invalid("input", "input must not be empty"));
    }
    items
        .into_iter()
        .enumerate()
        .map(|(i, item)| item_message(i, item))
        .collect()
}

fn item_message(i: usize, item: InputItem) -> Result<Message, ApiError> {
    if let Some(kind) = item.kind.as_deref().filter(|k| *k != "message") {
        return Err(ApiError::invalid(
            &format!("input[{i}].type"),
            format!("input items of type `{kind}` are not supported (only messages; tool calling is not supported yet)"),
        ));
    }
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
    let content = match item.content {
        None => String::new(),
        Some(ItemContent::Text(t)) => t,
        Some(ItemContent::Parts(parts)) => parts_text(i, &parts)?,
    };
    Ok(Message::text(role, content))
}

fn parts_text(i: usize, parts: &[ContentPart]) -> Result<String, ApiError> {
    let mut text = String::new();
    for (j, part) in parts.iter().enumerate() {
        match (part.kind.as_str(), &part.text) {
            ("input_text" | "output_text" | "text", Some(t)) => text.push_str(t),
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
