//! Server-sent events: an incremental parser and the meaning of OpenAI streaming chunks.
//!
//! Design: [`SseParser`] takes the body in whatever pieces the network delivers (an event may be split
//! anywhere, even inside a UTF-8 sequence or between `\r` and `\n`) and yields the `data` payload of
//! each complete event. Bytes are buffered until a line ends, so a line is decoded only once it is
//! whole. [`interpret`] then reads one payload as an OpenAI completion or chat chunk.
//!
//! Token counting rule: a chunk carries a generated token when its first choice has non-empty `text`
//! (completions) or `delta.content` (chat). Role-only and finish-only chunks carry none. The final
//! usage chunk (`stream_options.include_usage`), when present, gives the authoritative count.

use serde_json::Value;

/// Incremental SSE parser; feed it body pieces, collect complete events' data.
#[derive(Debug, Default)]
pub struct SseParser {
    /// Bytes of the current, not yet terminated line.
    line: Vec<u8>,
    /// `data` lines of the current event, joined with `\n`.
    data: String,
    /// Whether the current event has a `data` field at all (an empty one counts).
    has_data: bool,
    /// The previous piece ended in `\r`: a `\n` starting the next piece belongs to that line end.
    after_cr: bool,
}

impl SseParser {
    pub fn new() -> Self {
        Self::default()
    }

    /// Consumes a piece of the body and returns the data of every event it completes.
    pub fn feed(&mut self, bytes: &[u8]) -> Vec<String> {
        let mut events = Vec::new();
        for &b in bytes {
            let after_cr = std::mem::replace(&mut self.after_cr, false);
            match b {
                b'\n' if after_cr => {}
                b'\n' | b'\r' => {
                    self.after_cr = b == b'\r';
                    let line = std::mem::take(&mut self.line);
                    if let Some(data) = self.end_line(&line) {
                        events.push(data);
                    }
                }
                _ => self.line.push(b),
            }
        }
        events
    }

    /// The body ended: an event left without its closing blank line is still delivered.
    pub fn finish(&mut self) -> Option<String> {
        let line = std::mem::take(&mut self.line);
        if !line.is_empty() {
            if let Some(data) = self.end_line(&line) {
                return Some(data);
            }
        }
        self.dispatch()
    }

    /// Handles one complete line; returns an event's data when the line is the blank dispatcher.
    fn end_line(&mut self, line: &[u8]) -> Option<String> {
        if line.is_empty() {
            return self.dispatch();
        }
        if line.first() == Some(&b':') {
            return None; // comment / keep-alive
        }
        let text = String::from_utf8_lossy(line);
        let (field, value) = match text.split_once(':') {
            Some((f, v)) => (f, v.strip_prefix(' ').unwrap_or(v)),
            None => (text.as_ref(), ""),
        };
        if field == "data" {
            if self.has_data {
                self.data.push('\n');
            }
            self.data.push_str(value);
            self.has_data = true;
        }
        None
    }

    fn dispatch(&mut self) -> Option<String> {
        if !std::mem::take(&mut self.has_data) {
            return None;
        }
        Some(std::mem::take(&mut self.data))
    }
}

/// What one event of an OpenAI stream says.
#[derive(Debug, Clone, PartialEq)]
pub enum StreamEvent {
    /// `data: [DONE]`: the stream is complete.
    Done,
    /// A JSON chunk.
    Chunk(Chunk),
    /// An error object sent inside the stream (vLLM and llama-server do this on failures mid-stream).
    Error(String),
}

/// The parts of a streaming chunk the benchmark needs.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Chunk {
    /// The chunk carries generated text (see the module's counting rule).
    pub has_token: bool,
    /// `finish_reason` of the first choice, when set.
    pub finish_reason: Option<String>,
    /// `usage.completion_tokens`, when the chunk has usage.
    pub completion_tokens: Option<u64>,
    /// `usage.prompt_tokens`, when the chunk has usage.
    pub prompt_tokens: Option<u64>,
}

/// A payload that is neither `[DONE]` nor JSON.
#[derive(Debug, thiserror::Error)]
#[error("stream event is not JSON ({source}): {snippet:?}")]
pub struct BadEvent {
    pub snippet: String,
    #[source]
    pub source: serde_json::Error,
}

/// Reads one event's data as an OpenAI completions or chat chunk.
pub fn interpret(data: &str) -> Result<StreamEvent, BadEvent> {
    let trimmed = data.trim();
    if trimmed == "[DONE]" {
        return Ok(StreamEvent::Done);
    }
    let v: Value = serde_json::from_str(trimmed).map_err(|source| BadEvent {
        snippet: trimmed.chars().take(120).collect(),
        source,
    })?;
    if let Some(err) = v.get("error") {
        let msg = err
            .get("message")
            .and_then(Value::as_str)
            .map(str::to_string)
            .unwrap_or_else(|| err.to_string());
        return Ok(StreamEvent::Error(msg));
    }
    let choice = v.get("choices").and_then(|c| c.get(0));
    let text = choice.and_then(|c| {
        c.get("text")
            .or_else(|| c.get("delta").and_then(|d| d.get("content")))
            .and_then(Value::as_str)
    });
    let finish_reason = choice
        .and_then(|c| c.get("finish_reason"))
        .and_then(Value::as_str)
        .map(str::to_string);
    let usage = v.get("usage").filter(|u| u.is_object());
    let count = |key: &str| usage.and_then(|u| u.get(key)).and_then(Value::as_u64);
    Ok(StreamEvent::Chunk(Chunk {
        has_token: text.is_some_and(|t| !t.is_empty()),
        finish_reason,
        completion_tokens: count("completion_tokens"),
        prompt_tokens: count("prompt_tokens"),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chunk(e: StreamEvent) -> Chunk {
        match e {
            StreamEvent::Chunk(c) => c,
            other => panic!("expected a chunk, got {other:?}"),
        }
    }

    #[test]
    fn parses_events_separated_by_blank_lines() {
        let mut p = SseParser::new();
        let ev = p.feed(b"data: {\"a\":1}\n\ndata: [DONE]\n\n");
        assert_eq!(ev, vec!["{\"a\":1}".to_string(), "[DONE]".to_string()]);
        assert_eq!(p.finish(), None);
    }

    #[test]
    fn events_split_across_pieces_at_every_position_parse_the_same() {
        let body =
            "data: {\"x\":\"\u{e9}t\u{e9}\"}\r\n\r\n: keep-alive\r\n\r\ndata: [DONE]\r\n\r\n";
        let bytes = body.as_bytes();
        for cut in 0..=bytes.len() {
            let mut p = SseParser::new();
            let mut ev = p.feed(&bytes[..cut]);
            ev.extend(p.feed(&bytes[cut..]));
            ev.extend(p.finish());
            assert_eq!(
                ev,
                vec!["{\"x\":\"\u{e9}t\u{e9}\"}", "[DONE]"],
                "cut at {cut}"
            );
        }
    }

    #[test]
    fn byte_by_byte_feeding_matches_whole_feeding() {
        let body = b"event: x\ndata: one\ndata: two\nid: 3\n\ndata:three\n\n";
        let mut p = SseParser::new();
        let mut ev = Vec::new();
        for b in body {
            ev.extend(p.feed(std::slice::from_ref(b)));
        }
        assert_eq!(ev, vec!["one\ntwo".to_string(), "three".to_string()]);
    }

    #[test]
    fn comments_and_other_fields_produce_no_event() {
        let mut p = SseParser::new();
        assert!(p.feed(b": ping\n\nevent: noop\nid: 1\n\n").is_empty());
    }

    #[test]
    fn unterminated_last_event_is_delivered_at_end_of_body() {
        let mut p = SseParser::new();
        assert!(p.feed(b"data: [DONE]").is_empty());
        assert_eq!(p.finish().as_deref(), Some("[DONE]"));
    }

    #[test]
    fn done_marker_is_recognised() {
        assert_eq!(interpret("[DONE]").ok(), Some(StreamEvent::Done));
        assert_eq!(interpret(" [DONE] ").ok(), Some(StreamEvent::Done));
    }

    #[test]
    fn completion_chunk_with_text_carries_a_token() {
        let c = chunk(
            interpret(r#"{"choices":[{"index":0,"text":" hi","finish_reason":null}]}"#)
                .expect("json"),
        );
        assert!(c.has_token);
        assert_eq!(c.finish_reason, None);
    }

    #[test]
    fn chat_role_chunk_carries_no_token_and_content_chunk_does() {
        let role = r#"{"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}"#;
        assert!(!chunk(interpret(role).expect("json")).has_token);
        let content = r#"{"choices":[{"index":0,"delta":{"content":"Hello"}}]}"#;
        assert!(chunk(interpret(content).expect("json")).has_token);
    }

    #[test]
    fn finish_chunk_reports_reason_without_a_token() {
        let c = chunk(
            interpret(r#"{"choices":[{"text":"","finish_reason":"length"}]}"#).expect("json"),
        );
        assert!(!c.has_token);
        assert_eq!(c.finish_reason.as_deref(), Some("length"));
    }

    #[test]
    fn usage_chunk_gives_token_counts() {
        let u = r#"{"choices":[],"usage":{"prompt_tokens":250,"completion_tokens":128,"total_tokens":378}}"#;
        let c = chunk(interpret(u).expect("json"));
        assert!(!c.has_token);
        assert_eq!(
            (c.prompt_tokens, c.completion_tokens),
            (Some(250), Some(128))
        );
        let null_usage = r#"{"choices":[{"text":"a"}],"usage":null}"#;
        assert_eq!(
            chunk(interpret(null_usage).expect("json")).completion_tokens,
            None
        );
    }

    #[test]
    fn error_object_in_stream_is_reported() {
        let e =
            interpret(r#"{"error":{"message":"context too long","type":"invalid_request_error"}}"#);
        assert_eq!(e.ok(), Some(StreamEvent::Error("context too long".into())));
    }

    #[test]
    fn non_json_payload_is_an_error() {
        assert!(interpret("not json").is_err());
    }
}
