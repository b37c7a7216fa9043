//! Server-sent events for streamed completions.
//!
//! A route supplies a `ChunkWriter` that turns engine events into OpenAI chunk objects; this file
//! drives it over the merged event stream and frames the output: `data: {json}` per chunk,
//! the usage chunk when asked, and `data: [DONE]` last. The body is a pull-driven stream with no
//! task behind it, so a client that disconnects drops the stream, which drops the engine
//! receivers, which aborts the requests.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::pin::Pin;

use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use engine::Event;
use futures_util::stream::{self, Stream, StreamExt};

use crate::error::ApiError;
use crate::run::Tagged;

/// Formats one route's chunks.
pub trait ChunkWriter: Send + 'static {
    /// Chunks for one event of choice `index`. Returns true when the choice is finished.
    fn on_event(&mut self, index: usize, ev: Event, out: &mut Vec<serde_json::Value>) -> bool;
    /// The final usage chunk (called only when `include_usage` was asked).
    fn usage_chunk(&self) -> serde_json::Value;
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
    initial: Vec<serde_json::Value>,
) -> Response {
    let state = State {
        events,
        writer,
        pending: initial.iter().map(|v| v.to_string()).collect(),
        remaining: choices,
        include_usage,
        done: false,
    };
    let body = stream::unfold(state, |mut st| async move {
        let data = next_frame(&mut st).await?;
        Some((Ok::<_, Infallible>(SseEvent::default().data(data)), st))
    });
    Sse::new(body)
        .keep_alive(KeepAlive::default())
        .into_response()
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
                st.pending.push_back(st.writer.usage_chunk().to_string());
            }
            st.pending.push_back("[DONE]".into());
            st.done = true;
            continue;
        }
        let Some((index, ev)) = st.events.next().await else {
            // The engine went away mid-stream: say so in-band, the status is already sent.
            let e = ApiError::Internal("the engine stopped mid-stream".into());
            st.pending.push_back(e.body().to_string());
            st.pending.push_back("[DONE]".into());
            st.done = true;
            continue;
        };
        if let Event::Error(e) = ev {
            let e: ApiError = e.into();
            st.pending.push_back(e.body().to_string());
            st.pending.push_back("[DONE]".into());
            st.done = true;
            continue;
        }
        let mut chunks = Vec::new();
        if st.writer.on_event(index, ev, &mut chunks) {
            st.remaining -= 1;
        }
        st.pending.extend(chunks.iter().map(|c| c.to_string()));
    }
}
