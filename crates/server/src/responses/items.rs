//! Output items and the conversation they become.
//!
//! [`Items`] assembles a response's output from the reply as the tool parser gives it out
//! (`tools::Out`: content and whole calls, in the order written), and says what changed at each
//! step so that the stream driver can send the matching events: content goes into the open
//! assistant message (opened by the first text after a call or at the start); a call closes
//! the open message and is a `function_call` item of its own. The whole response and the
//! stream feed the same `Out`s through it, so the stream's items are the whole response's.
//! A reply with neither text nor calls still has one (empty) message.
//!
//! Items also become chat messages for the template: a message item is a message of its role;
//! a `function_call` joins the assistant message just before it (or starts an empty one) as
//! one of its `tool_calls`; a `function_call_output` is a `tool` message. Input items and a
//! stored response's output go through the same rule.

use serde_json::{json, Map, Value};

use crate::base::new_id;
use crate::base::ApiError;
use crate::serving::chat_template::Message;
use crate::serving::tools::{Family, Out};

use super::wire::{
    FunctionCallItem, OutputItem, OutputMessage, OutputText, ReasoningItem, ReasoningText, Status,
};

/// What one step of [`Items`] changed, by output index.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Change {
    /// A reasoning item was opened (with an empty `reasoning_text` part).
    ReasoningAdded(usize),
    /// Reasoning was appended to the open reasoning item.
    ReasoningDelta(usize, String),
    /// The reasoning item is finished.
    ReasoningDone(usize),
    /// A message was opened (with an empty text part).
    MessageAdded(usize),
    /// Text was appended to the open message.
    TextDelta(usize, String),
    /// The message is finished.
    MessageDone(usize),
    /// A call was added, finished.
    CallDone(usize),
}

/// A response's output, assembled.
#[derive(Debug)]
pub struct Items {
    pub items: Vec<OutputItem>,
    /// Whether the last item is a message still taking text.
    open: bool,
    /// Whether the last item is reasoning still taking text.
    thinking: bool,
    /// The id the first message gets (announced before generation starts).
    first_message_id: Option<String>,
    /// The template's family, for the shape of call ids.
    family: Option<Family>,
}

impl Items {
    pub fn new(first_message_id: String, family: Option<Family>) -> Items {
        Items {
            items: Vec::new(),
            open: false,
            thinking: false,
            first_message_id: Some(first_message_id),
            family,
        }
    }

    /// Takes one piece of the reply.
    pub fn push(&mut self, out: Out, changes: &mut Vec<Change>) {
        match out {
            Out::Content(text) | Out::Reasoning(text) if text.is_empty() => {}
            Out::Reasoning(text) => {
                if !self.thinking {
                    self.close_message(Status::Completed, changes);
                    self.items.push(OutputItem::Reasoning(ReasoningItem {
                        kind: "reasoning",
                        id: new_id("rs_"),
                        summary: [],
                        content: vec![ReasoningText::new(String::new())],
                        status: Status::InProgress,
                    }));
                    self.thinking = true;
                    changes.push(Change::ReasoningAdded(self.items.len() - 1));
                }
                let at = self.items.len() - 1;
                if let Some(OutputItem::Reasoning(r)) = self.items.last_mut() {
                    if let Some(part) = r.content.first_mut() {
                        part.text.push_str(&text);
                    }
                }
                changes.push(Change::ReasoningDelta(at, text));
            }
            Out::Content(text) => {
                self.close_reasoning(changes);
                if !self.open {
                    self.open_message(changes);
                }
                let at = self.items.len() - 1;
                if let Some(OutputItem::Message(m)) = self.items.last_mut() {
                    if let Some(part) = m.content.first_mut() {
                        part.text.push_str(&text);
                    }
                }
                changes.push(Change::TextDelta(at, text));
            }
            Out::Call(c) => {
                self.close_reasoning(changes);
                self.close_message(Status::Completed, changes);
                let call_id = match self.family {
                    Some(f) => f.call_id(),
                    None => new_id("call_"),
                };
                self.items.push(OutputItem::FunctionCall(FunctionCallItem {
                    kind: "function_call",
                    id: new_id("fc_"),
                    call_id,
                    name: c.name,
                    arguments: c.arguments,
                    status: Status::Completed,
                }));
                changes.push(Change::CallDone(self.items.len() - 1));
            }
        }
    }

    /// Ends the output: the open message (or, with no item at all, an empty one) gets
    /// `status`.
    pub fn finish(&mut self, status: Status, changes: &mut Vec<Change>) {
        self.close_reasoning(changes);
        if !self
            .items
            .iter()
            .any(|i| !matches!(i, OutputItem::Reasoning(_)))
        {
            self.open_message(changes);
        }
        self.close_message(status, changes);
    }

    fn open_message(&mut self, changes: &mut Vec<Change>) {
        let id = self
            .first_message_id
            .take()
            .unwrap_or_else(|| new_id("msg_"));
        let text = vec![OutputText::new(String::new())];
        let m = OutputMessage::new(id, Status::InProgress, text);
        self.items.push(OutputItem::Message(m));
        self.open = true;
        changes.push(Change::MessageAdded(self.items.len() - 1));
    }

    fn close_reasoning(&mut self, changes: &mut Vec<Change>) {
        if !std::mem::take(&mut self.thinking) {
            return;
        }
        if let Some(OutputItem::Reasoning(r)) = self.items.last_mut() {
            r.status = Status::Completed;
        }
        changes.push(Change::ReasoningDone(self.items.len() - 1));
    }

    fn close_message(&mut self, status: Status, changes: &mut Vec<Change>) {
        if !self.open {
            return;
        }
        self.open = false;
        if let Some(OutputItem::Message(m)) = self.items.last_mut() {
            m.status = status;
        }
        changes.push(Change::MessageDone(self.items.len() - 1));
    }
}

/// A call as the chat template reads it, arguments as an object.
fn template_call(call_id: &str, name: &str, arguments: Value) -> Value {
    json!({"id": call_id, "type": "function",
        "function": {"name": name, "arguments": arguments}})
}

/// Appends `call` to the assistant message at the end of `messages`, or to a new one.
fn push_call(messages: &mut Vec<Message>, call: Value) {
    match messages.last_mut() {
        Some(m) if m.role == "assistant" => m.tool_calls.get_or_insert_with(Vec::new).push(call),
        _ => messages.push(Message {
            tool_calls: Some(vec![call]),
            ..Message::text("assistant", "")
        }),
    }
}

/// An assistant message that is only thinking so far (a reasoning item), waiting for the
/// message or calls it led to.
pub fn is_thinking_alone(m: &Message) -> bool {
    m.role == "assistant"
        && m.reasoning_content.is_some()
        && m.content.is_empty()
        && m.tool_calls.is_none()
}

/// The assistant message a reasoning item starts: its thinking, awaiting its answer.
pub fn thinking(text: String) -> Message {
    Message {
        reasoning_content: Some(text),
        ..Message::text("assistant", "")
    }
}

/// Appends `m`, as the answer of the thinking just before it when there is one.
pub fn push_answer(messages: &mut Vec<Message>, m: Message) {
    match messages.last_mut() {
        Some(prev) if m.role == "assistant" && is_thinking_alone(prev) => prev.content = m.content,
        _ => messages.push(m),
    }
}

/// A stored response's output as messages.
pub fn output_messages(items: &[OutputItem], messages: &mut Vec<Message>) {
    for item in items {
        match item {
            OutputItem::Message(m) => {
                let text: String = m.content.iter().map(|c| c.text.as_str()).collect();
                push_answer(messages, Message::text("assistant", text));
            }
            // The template decides whether earlier thinking is shown (Qwen3's keeps only the
            // thinking after the last user message).
            OutputItem::Reasoning(r) => messages.push(thinking(
                r.content.iter().map(|c| c.text.as_str()).collect(),
            )),
            OutputItem::FunctionCall(c) => {
                let args = serde_json::from_str::<Value>(&c.arguments)
                    .ok()
                    .filter(Value::is_object)
                    .unwrap_or_else(|| Value::Object(Map::new()));
                push_call(messages, template_call(&c.call_id, &c.name, args));
            }
        }
    }
}

/// An input `function_call` item (`input[i]`) appended to `messages`.
pub fn input_call(
    i: usize,
    call_id: Option<String>,
    name: Option<String>,
    arguments: Option<String>,
    messages: &mut Vec<Message>,
) -> Result<(), ApiError> {
    let path = |f: &str| format!("input[{i}].{f}");
    let call_id = call_id.ok_or_else(|| ApiError::invalid(&path("call_id"), "required"))?;
    let name = name.ok_or_else(|| ApiError::invalid(&path("name"), "required"))?;
    let args = arguments
        .and_then(|a| serde_json::from_str::<Value>(&a).ok())
        .filter(Value::is_object)
        .ok_or_else(|| {
            ApiError::invalid(
                &path("arguments"),
                "arguments must be the JSON text of an object",
            )
        })?;
    push_call(messages, template_call(&call_id, &name, args));
    Ok(())
}

/// An input `function_call_output` item: the `tool` message answering `call_id`.
pub fn input_output(
    i: usize,
    call_id: Option<String>,
    output: String,
) -> Result<Message, ApiError> {
    let call_id =
        call_id.ok_or_else(|| ApiError::invalid(&format!("input[{i}].call_id"), "required"))?;
    Ok(Message {
        tool_call_id: Some(call_id),
        ..Message::text("tool", output)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::serving::tools::ParsedCall;

    fn call(name: &str) -> Out {
        Out::Call(ParsedCall {
            name: name.into(),
            arguments: r#"{"city":"Paris"}"#.into(),
        })
    }

    #[test]
    fn content_and_calls_become_items_in_order() {
        let mut items = Items::new("msg_1".into(), Some(Family::Hermes));
        let mut changes = Vec::new();
        for out in [
            Out::Content("Sure.".into()),
            Out::Content(String::new()),
            call("f"),
            call("g"),
            Out::Content("Done".into()),
        ] {
            items.push(out, &mut changes);
        }
        items.finish(Status::Incomplete, &mut changes);
        assert_eq!(
            changes,
            vec![
                Change::MessageAdded(0),
                Change::TextDelta(0, "Sure.".into()),
                Change::MessageDone(0),
                Change::CallDone(1),
                Change::CallDone(2),
                Change::MessageAdded(3),
                Change::TextDelta(3, "Done".into()),
                Change::MessageDone(3),
            ]
        );
        let v = serde_json::to_value(&items.items).expect("serializes");
        assert_eq!(v[0]["id"], "msg_1");
        assert_eq!(v[0]["status"], "completed");
        assert_eq!(v[1]["type"], "function_call");
        assert_eq!(v[1]["name"], "f");
        assert!(v[1]["call_id"]
            .as_str()
            .is_some_and(|c| c.starts_with("call_")));
        assert_ne!(v[1]["call_id"], v[2]["call_id"]);
        assert_eq!(v[3]["status"], "incomplete");
        // As a conversation: the calls join the message before them.
        let mut messages = Vec::new();
        output_messages(&items.items, &mut messages);
        assert_eq!(messages.len(), 2);
        assert_eq!(messages[0].content, "Sure.");
        let calls = messages[0].tool_calls.as_ref().expect("calls");
        assert_eq!(calls[1]["function"]["name"], "g");
        assert_eq!(calls[0]["function"]["arguments"], json!({"city": "Paris"}));
    }

    #[test]
    fn an_empty_reply_is_one_empty_message() {
        let mut items = Items::new("msg_1".into(), None);
        let mut changes = Vec::new();
        items.finish(Status::Completed, &mut changes);
        assert_eq!(
            changes,
            vec![Change::MessageAdded(0), Change::MessageDone(0)]
        );
        assert_eq!(items.items.len(), 1);
    }

    #[test]
    fn input_calls_need_an_id_a_name_and_object_arguments() {
        let mut m = vec![Message::text("user", "x")];
        input_call(
            1,
            Some("c1".into()),
            Some("f".into()),
            Some("{}".into()),
            &mut m,
        )
        .expect("valid");
        assert_eq!(m.len(), 2);
        assert_eq!(m[1].role, "assistant");
        for (id, name, args, p) in [
            (None, Some("f"), Some("{}"), "input[3].call_id"),
            (Some("c"), None, Some("{}"), "input[3].name"),
            (Some("c"), Some("f"), Some("[1]"), "input[3].arguments"),
        ] {
            let e = input_call(
                3,
                id.map(String::from),
                name.map(String::from),
                args.map(String::from),
                &mut m,
            )
            .expect_err("refused");
            let ApiError::BadRequest { param, .. } = e else {
                panic!("a 400")
            };
            assert_eq!(param.as_deref(), Some(p));
        }
    }
}
