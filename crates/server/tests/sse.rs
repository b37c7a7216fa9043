//! Streaming over a real socket (the server bound to port 0), and client disconnects.

mod common;

use std::time::Duration;

use common::*;
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Starts the server on a free port; returns its address.
async fn spawn_server(state: server::AppState) -> std::net::SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(server::serve(listener, state, std::future::pending()));
    addr
}

/// Sends a POST as HTTP/1.0, so the response body ends when the server closes the connection.
async fn open_post(addr: std::net::SocketAddr, path: &str, body: &Value) -> TcpStream {
    let mut sock = TcpStream::connect(addr).await.expect("connect");
    let body = body.to_string();
    let req = format!(
        "POST {path} HTTP/1.0\r\nHost: localhost\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\n\r\n{body}",
        body.len()
    );
    sock.write_all(req.as_bytes()).await.expect("write");
    sock
}

/// The `data:` payloads of a complete SSE response.
async fn sse_events(addr: std::net::SocketAddr, path: &str, body: &Value) -> (String, Vec<String>) {
    let mut sock = open_post(addr, path, body).await;
    let mut raw = String::new();
    tokio::time::timeout(Duration::from_secs(30), sock.read_to_string(&mut raw))
        .await
        .expect("the stream ends")
        .expect("read");
    let (head, body) = raw.split_once("\r\n\r\n").expect("headers end");
    let data = body
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .map(str::to_string)
        .collect();
    (head.to_string(), data)
}

#[tokio::test]
async fn streamed_completion_matches_the_whole_one_and_ends_with_done() {
    let state = tiny_state();
    let app = server::router(state.clone());
    let addr = spawn_server(state).await;
    let req = json!({"prompt": [1, 40, 41], "max_tokens": 8, "temperature": 0, "ignore_eos": true});
    let (_, whole) = post(&app, "/v1/completions", &req).await;

    let mut streamed = req.clone();
    streamed["stream"] = json!(true);
    streamed["stream_options"] = json!({"include_usage": true});
    let (head, events) = sse_events(addr, "/v1/completions", &streamed).await;
    assert!(
        head.starts_with("HTTP/1.0 200") || head.starts_with("HTTP/1.1 200"),
        "{head}"
    );
    assert!(
        head.to_ascii_lowercase().contains("text/event-stream"),
        "{head}"
    );
    assert_eq!(events.last().map(String::as_str), Some("[DONE]"));
    let chunks: Vec<Value> = events[..events.len() - 1]
        .iter()
        .map(|e| serde_json::from_str(e).expect("chunk is JSON"))
        .collect();
    let text: String = chunks
        .iter()
        .filter_map(|c| c["choices"][0]["text"].as_str())
        .collect();
    assert_eq!(text, whole["choices"][0]["text"].as_str().expect("text"));
    let usage = &chunks.last().expect("usage chunk")["usage"];
    assert_eq!(usage["completion_tokens"], 8);
    let reasons: Vec<&Value> = chunks
        .iter()
        .map(|c| &c["choices"][0]["finish_reason"])
        .collect();
    assert_eq!(
        reasons
            .iter()
            .filter(|r| r.as_str() == Some("length"))
            .count(),
        1
    );
}

#[tokio::test]
async fn streamed_chat_starts_with_the_role_and_finishes_each_choice() {
    let state = tiny_state();
    let addr = spawn_server(state).await;
    let req = json!({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4,
        "n": 2, "stream": true, "ignore_eos": true});
    let (_, events) = sse_events(addr, "/v1/chat/completions", &req).await;
    assert_eq!(events.last().map(String::as_str), Some("[DONE]"));
    let chunks: Vec<Value> = events[..events.len() - 1]
        .iter()
        .map(|e| serde_json::from_str(e).expect("chunk is JSON"))
        .collect();
    for i in 0..2 {
        let mine: Vec<&Value> = chunks
            .iter()
            .map(|c| &c["choices"][0])
            .filter(|c| c["index"] == i)
            .collect();
        assert_eq!(mine[0]["delta"]["role"], "assistant");
        assert_eq!(mine.last().expect("last")["finish_reason"], "length");
        assert!(chunks
            .iter()
            .all(|c| c["object"] == "chat.completion.chunk"));
    }
}

async fn tiles_in_use(state: &server::AppState) -> u64 {
    let stats = state.loaded().expect("loaded").engine.stats();
    stats
        .tiles_in_use
        .load(std::sync::atomic::Ordering::Relaxed)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_disconnects_gives_its_tiles_back() {
    // The runner lets one step through at a time, so the request (190 steps long) is held in
    // the engine for as long as the test needs, however fast or loaded the machine is.
    let gate = common::gate::Gate::default();
    let state = common::tiny_gated_state(&gate);
    let addr = spawn_server(state.clone()).await;
    let prompt: Vec<u32> = (0..60).map(|i| 40 + i % 50).collect();
    let aborted = || {
        let st = state.loaded().expect("loaded").engine.stats();
        st.finished_abort.load(std::sync::atomic::Ordering::Relaxed)
    };
    for stream in [true, false] {
        let aborted_before = aborted();
        let req =
            json!({"prompt": prompt, "max_tokens": 190, "ignore_eos": true, "stream": stream});
        let mut sock = open_post(addr, "/v1/completions", &req).await;
        // One step (the prefill and the first token), then the engine waits at the next one.
        let started = gate.started() + 1;
        gate.permit(1);
        let g = gate.clone();
        let blocked = tokio::task::spawn_blocking(move || g.wait_blocked(started, || false))
            .await
            .expect("join");
        assert!(
            blocked,
            "the engine never reached its second step (stream: {stream})"
        );
        assert!(
            tiles_in_use(&state).await > 0,
            "the request holds no tiles (stream: {stream})"
        );
        if stream {
            let mut buf = [0u8; 256];
            let _ = sock.read(&mut buf).await;
        }
        drop(sock);
        // Let steps through one at a time until the engine sees the client gone; the request
        // needs 189 more, so it cannot end any other way.
        for _ in 0..150 {
            if aborted() > aborted_before {
                break;
            }
            let started = gate.started() + 1;
            gate.permit(1);
            let g = gate.clone();
            let st = state.clone();
            let stats = move || {
                let e = st.loaded().expect("loaded").engine.stats();
                e.finished_abort.load(std::sync::atomic::Ordering::Relaxed) > aborted_before
            };
            tokio::task::spawn_blocking(move || g.wait_blocked(started, stats))
                .await
                .expect("join");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert_eq!(aborted(), aborted_before + 1, "stream: {stream}");
        // The engine publishes its tile counts after the step that freed them.
        let mut freed = false;
        for _ in 0..6000 {
            if tiles_in_use(&state).await == 0 {
                freed = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert!(
            freed,
            "tiles still in use after the client left (stream: {stream})"
        );
    }
}
