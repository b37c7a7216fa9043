//! Server-sent events for streamed completions.
//!
//! A route supplies a `ChunkWriter` that turns engine events into typed OpenAI chunks; this
//! file drives it over the merged event stream and frames the output: `data: {json}` per
//! chunk, the usage chunk when asked, and `data: [DONE]` last. An engine failure after the 200
//! went out is told in-band: an error body as the next frame, then `[DONE]`. The body is a
//! pull-driven stream with no task behind it, so a client that disconnects drops the stream,
//! which drops the engine receivers, which aborts the requests. The stream is polled with the
//! request's `guard` context, so a request deadline that passes mid-stream ends it with an
//! in-band timeout error, an internal error names the request id, and a panic while making a
//! frame (in a route's `ChunkWriter`) ends the stream with an in-band internal error instead of
//! cutting the connection.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;

use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use engine::Event;
use futures_util::stream::{self, Stream};
use futures_util::FutureExt;
use serde::Serialize;

use crate::base::ApiError;
use crate::serving::run::Tagged;

/// Formats one route's chunks.
pub trait ChunkWriter: Send + 'static {
    /// One chunk object of this route.
    type Chunk: Serialize;
    /// Chunks for one event of choice `index`. Returns true when the choice is finished.
    fn on_event(&mut self, index: usize, ev: Event, out: &mut Vec<Self::Chunk>) -> bool;
    /// The final usage chunk (called only when `include_usage` was asked).
    fn usage_chunk(&self) -> Self::Chunk;
}

/// One frame's JSON. The response types always serialize; should one ever fail, the client
/// gets the internal-error body in its place and the cause is logged.
fn frame<T: Serialize>(value: &T) -> String {
    serde_json::to_string(value).unwrap_or_else(|e| {
        let e = ApiError::Internal(format!("cannot serialize a chunk: {e}"));
        tracing::error!("{e}");
        error_frame(&e)
    })
}

/// An error body as a frame (a struct of strings: it always serializes).
fn error_frame(e: &ApiError) -> String {
    serde_json::to_string(&e.body()).unwrap_or_default()
}

struct State<W> {
    events: Pin<Box<dyn Stream<Item = Tagged> + Send>>,
    writer: W,
    pending: VecDeque<String>,
    remaining: usize,
    include_usage: bool,
    done: bool,
}

/// The SSE response for `choices` choices whose events arrive on `events`.
pub fn respond<W: ChunkWriter>(
    events: Pin<Box<dyn Stream<Item = Tagged> + Send>>,
    writer: W,
    choices: usize,
    include_usage: bool,
    initial: Vec<W::Chunk>,
) -> Response {
    let state = State {
        events,
        writer,
        pending: initial.iter().map(frame).collect(),
        remaining: choices,
        include_usage,
        done: false,
    };
    let ctx = crate::base::context::current();
    let body = stream::unfold(state, move |mut st| {
        let ctx = ctx.clone();
        async move {
            let step = AssertUnwindSafe(next_frame(&mut st)).catch_unwind();
            let data = match crate::base::context::within(ctx.clone(), step).await {
                Ok(data) => data?,
                Err(panic) => {
                    let what = crate::base::context::panic_message(panic.as_ref()).to_string();
                    st.pending = VecDeque::from(["[DONE]".to_string()]);
                    st.done = true;
                    let e = ApiError::Internal(format!("a stream panicked: {what}"));
                    crate::base::context::within(ctx, async { log_and_frame(&e) }).await
                }
            };
            Some((Ok::<_, Infallible>(SseEvent::default().data(data)), st))
        }
    });
    Sse::new(body)
        .keep_alive(KeepAlive::default())
        .into_response()
}

/// An internal error's frame, its cause logged (with the request id when in scope).
fn log_and_frame(e: &ApiError) -> String {
    if let ApiError::Internal(cause) = e {
        let id = crate::base::context::request_id();
        tracing::error!(request_id = id.as_deref(), "internal error: {cause}");
    }
    error_frame(e)
}

async fn next_frame<W: ChunkWriter>(st: &mut State<W>) -> Option<String> {
    loop {
        if let Some(f) = st.pending.pop_front() {
            return Some(f);
        }
        if st.done {
            return None;
        }
        if st.remaining == 0 {
            if st.include_usage {
                st.pending.push_back(frame(&st.writer.usage_chunk()));
            }
            st.pending.push_back("[DONE]".into());
            st.done = true;
            continue;
        }
        let next = match crate::serving::run::next_before(&mut st.events).await {
            Ok(next) => next,
            Err(e) => {
                st.pending.push_back(error_frame(&e));
                st.pending.push_back("[DONE]".into());
                st.done = true;
                continue;
            }
        };
        let Some((index, ev)) = next else {
            // The engine went away mid-stream: say so in-band, the status is already sent.
            let e = ApiError::Internal("the engine stopped mid-stream".into());
            st.pending.push_back(error_frame(&e));
            st.pending.push_back("[DONE]".into());
            st.done = true;
            continue;
        };
        if let Event::Error(e) = ev {
            let e: ApiError = e.into();
            st.pending.push_back(log_and_frame(&e));
            st.pending.push_back("[DONE]".into());
            st.done = true;
            continue;
        }
        let mut chunks = Vec::new();
        if st.writer.on_event(index, ev, &mut chunks) {
            st.remaining -= 1;
        }
        st.pending.extend(chunks.iter().map(frame));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures_util::StreamExt;

    /// A writer whose formatting panics on the first token.
    struct Exploding;

    impl ChunkWriter for Exploding {
        type Chunk = String;
        fn on_event(&mut self, _: usize, ev: Event, out: &mut Vec<String>) -> bool {
            if let Event::Token { text, .. } = ev {
                panic!("formatting {text} exploded");
            }
            out.push("accepted".into());
            false
        }
        fn usage_chunk(&self) -> String {
            String::new()
        }
    }

    #[tokio::test]
    async fn a_panic_while_formatting_ends_the_stream_with_an_internal_error() {
        let events = stream::iter([
            (0, Event::Accepted),
            (
                0,
                Event::Token {
                    id: 1,
                    text: "x".into(),
                    logprob: None,
                },
            ),
        ])
        .chain(stream::pending())
        .boxed();
        let resp = respond(events, Exploding, 1, false, Vec::new());
        let body = tokio::time::timeout(
            std::time::Duration::from_secs(5),
            axum::body::to_bytes(resp.into_body(), usize::MAX),
        )
        .await
        .expect("the stream ends")
        .expect("body");
        let text = String::from_utf8_lossy(&body);
        let frames: Vec<&str> = text
            .lines()
            .filter_map(|l| l.strip_prefix("data: "))
            .collect();
        assert_eq!(frames.len(), 3, "{text}");
        assert_eq!(frames[0], "\"accepted\"");
        assert!(frames[1].contains("internal_error"), "{text}");
        assert!(
            !frames[1].contains("exploded"),
            "the cause is logged, not sent"
        );
        assert_eq!(frames[2], "[DONE]");
    }
}
