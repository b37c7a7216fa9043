//! Server-sent events: arrival-stamped events of a body, and the meaning of OpenAI streaming chunks.
//!
//! Design: [`timed_events`] turns the body, as the pieces the network delivers, into the `data` of
//! each event. The SSE grammar (events split anywhere, even inside a UTF-8 sequence or between `\r`
//! and `\n`; comments; multi-line data) is `eventsource-stream`'s. Each event is stamped with the
//! instant the piece that completed it came off the network, taken as that piece is pulled from the
//! body, before any parsing: events completed by one network read share its stamp, and parsing time
//! never shifts a stamp. A body that ends inside an event still delivers it (stamped at the end of
//! the body): a blank line is appended after the last piece. [`interpret`] then reads one payload as
//! an OpenAI completion or chat chunk.
//!
//! Token counting rule: a chunk carries a generated token when its first choice has non-empty `text`
//! (completions) or `delta.content` (chat). Role-only and finish-only chunks carry none. The final
//! usage chunk (`stream_options.include_usage`), when present, gives the authoritative count.

use std::{
    sync::{Arc, Mutex},
    time::Instant,
};

use eventsource_stream::{EventStream, EventStreamError};
use futures_util::{future, stream, Stream, StreamExt as _, TryStreamExt as _};
use serde_json::Value;

/// One event's `data` (its `data` lines joined with `\n`) and when its last byte arrived.
#[derive(Debug, Clone, PartialEq)]
pub struct TimedEvent {
    pub data: String,
    /// When the network read that completed the event returned.
    pub arrived: Instant,
}

/// A piece of the body, or the blank line appended after its end.
enum Piece<B> {
    Body(B),
    End,
}

impl<B: AsRef<[u8]>> AsRef<[u8]> for Piece<B> {
    fn as_ref(&self) -> &[u8] {
        match self {
            Piece::Body(b) => b.as_ref(),
            Piece::End => b"\n\n",
        }
    }
}

/// The events of a body delivered as `pieces`, each stamped with its arrival (see the module doc).
/// A transport error from `pieces` comes out as [`EventStreamError::Transport`].
pub fn timed_events<S, B, E>(
    pieces: S,
) -> impl Stream<Item = Result<TimedEvent, EventStreamError<E>>>
where
    S: Stream<Item = Result<B, E>>,
    B: AsRef<[u8]>,
{
    // The parser pulls a piece only when its buffer holds no complete event, so when it yields an
    // event, the latest piece pulled is the one that completed it.
    let latest = Arc::new(Mutex::new(Instant::now()));
    let stamp = Arc::clone(&latest);
    let stamped = pieces
        .map_ok(Piece::Body)
        .chain(stream::once(future::ready(Ok(Piece::End))))
        .inspect(move |_| {
            if let Ok(mut t) = stamp.lock() {
                *t = Instant::now();
            }
        });
    EventStream::new(stamped).map_ok(move |event| TimedEvent {
        data: event.data,
        // The lock is never held across a panic; a poisoned one still holds a valid instant.
        arrived: *latest.lock().unwrap_or_else(|e| e.into_inner()),
    })
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

    use std::time::Duration;

    /// Every event of `pieces` (each delivered 1 ms after the previous one) and the instants the
    /// pieces were pulled; the consumer pauses for `pause` after each event.
    async fn timed(pieces: &[&[u8]], pause: Duration) -> (Vec<TimedEvent>, Vec<Instant>) {
        let pulled = Arc::new(Mutex::new(Vec::<Instant>::new()));
        let log = Arc::clone(&pulled);
        let body = stream::iter(pieces.iter().map(|p| Ok::<_, ()>(p.to_vec()))).then(|p| {
            let log = Arc::clone(&log);
            async move {
                tokio::time::sleep(Duration::from_millis(1)).await;
                log.lock().expect("lock").push(Instant::now());
                p
            }
        });
        let mut events = std::pin::pin!(timed_events(body));
        let mut got = Vec::new();
        while let Some(e) = events.next().await {
            got.push(e.expect("no transport error"));
            tokio::time::sleep(pause).await;
        }
        let pulled = pulled.lock().expect("lock").clone();
        (got, pulled)
    }

    async fn data(pieces: &[&[u8]]) -> Vec<String> {
        let (events, _) = timed(pieces, Duration::ZERO).await;
        events.into_iter().map(|e| e.data).collect()
    }

    #[tokio::test]
    async fn parses_events_separated_by_blank_lines() {
        let ev = data(&[b"data: {\"a\":1}\n\ndata: [DONE]\n\n"]).await;
        assert_eq!(ev, vec!["{\"a\":1}".to_string(), "[DONE]".to_string()]);
    }

    #[tokio::test]
    async fn events_split_across_pieces_at_every_position_parse_the_same() {
        let body =
            "data: {\"x\":\"\u{e9}t\u{e9}\"}\r\n\r\n: keep-alive\r\n\r\ndata: [DONE]\r\n\r\n";
        let bytes = body.as_bytes();
        for cut in 0..=bytes.len() {
            let ev = data(&[&bytes[..cut], &bytes[cut..]]).await;
            assert_eq!(
                ev,
                vec!["{\"x\":\"\u{e9}t\u{e9}\"}", "[DONE]"],
                "cut at {cut}"
            );
        }
    }

    #[tokio::test]
    async fn byte_by_byte_feeding_matches_whole_feeding() {
        let body = b"event: x\ndata: one\ndata: two\nid: 3\n\ndata:three\n\n";
        let pieces: Vec<&[u8]> = body.chunks(1).collect();
        assert_eq!(
            data(&pieces).await,
            vec!["one\ntwo".to_string(), "three".to_string()]
        );
    }

    #[tokio::test]
    async fn comments_and_other_fields_produce_no_event() {
        assert!(data(&[b": ping\n\nevent: noop\nid: 1\n\n"])
            .await
            .is_empty());
    }

    #[tokio::test]
    async fn unterminated_last_event_is_delivered_at_end_of_body() {
        assert_eq!(data(&[b"data: [DONE]"]).await, vec!["[DONE]"]);
        assert_eq!(data(&[b"data: [DONE]\r"]).await, vec!["[DONE]"]);
    }

    #[tokio::test]
    async fn events_are_stamped_with_the_read_that_completed_them() {
        // Piece 0 completes a and starts b; piece 1 completes b and c; piece 2 completes nothing;
        // piece 3 completes d. The consumer is slow (5 ms per event), so a stamp taken when an
        // event is handed over instead of when its bytes came in would be visibly late.
        let pieces: [&[u8]; 4] = [
            b"data: a\n\ndata: ",
            b"b\n\ndata: c\n\n",
            b"data: d",
            b"\n\n",
        ];
        let (events, pulled) = timed(&pieces, Duration::from_millis(5)).await;
        let data: Vec<&str> = events.iter().map(|e| e.data.as_str()).collect();
        assert_eq!(data, vec!["a", "b", "c", "d"]);
        for (event, piece) in events.iter().zip([0, 1, 1, 3]) {
            let since_pull = event
                .arrived
                .checked_duration_since(pulled[piece])
                .expect("stamped no earlier than its piece");
            assert!(
                since_pull < Duration::from_micros(500),
                "{} stamped {since_pull:?} after its piece arrived",
                event.data
            );
        }
        assert_eq!(events[1].arrived, events[2].arrived, "one read, one stamp");
    }

    #[tokio::test]
    async fn transport_error_is_passed_through() {
        let body = stream::iter(vec![Ok(b"data: a\n\n".to_vec()), Err("reset")]);
        let got: Vec<_> = timed_events(body).collect().await;
        assert_eq!(got.len(), 2);
        assert_eq!(got[0].as_ref().map(|e| e.data.as_str()).ok(), Some("a"));
        assert!(matches!(got[1], Err(EventStreamError::Transport("reset"))));
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
