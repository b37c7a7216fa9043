//! A tiny fake OpenAI streaming server for the integration tests, on 127.0.0.1:0.
//!
//! It speaks just enough HTTP/1.1 by hand (keep-alive, Content-Length request bodies, chunked
//! responses) to serve `GET /v1/models` and streaming `POST /v1/completions` / `/v1/chat/completions`
//! with a fixed delay before the first token and between tokens, records every request body it gets,
//! and can fail every k-th completion request, require an API key, and split SSE events across
//! chunks. Hand-rolled rather than axum so the bench crate needs no server stack even for tests.

#![allow(dead_code)] // each test binary uses a different part of it

use std::{
    net::SocketAddr,
    sync::{
        atomic::{AtomicUsize, Ordering},
        Arc, Mutex,
    },
    time::Duration,
};

use serde_json::{json, Value};
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::{TcpListener, TcpStream},
};

#[derive(Debug, Clone)]
pub struct FakeOptions {
    pub first_token_delay: Duration,
    pub token_delay: Duration,
    /// Every k-th completion request (1-based) is answered with HTTP 500.
    pub fail_every: Option<usize>,
    /// Bearer key required on every request.
    pub api_key: Option<String>,
    /// Honour `stream_options.include_usage`.
    pub usage: bool,
    /// Close the connection shortly after each streamed response, without `Connection: close`, so
    /// a client that pools connections sends its next request on a dying one (seen with
    /// llama-server).
    pub close_after_stream: bool,
}

impl Default for FakeOptions {
    fn default() -> Self {
        Self {
            first_token_delay: Duration::from_millis(30),
            token_delay: Duration::from_millis(10),
            fail_every: None,
            api_key: None,
            usage: true,
            close_after_stream: false,
        }
    }
}

#[derive(Default)]
pub struct Recorded {
    /// (path, body) of every completion request, in arrival order.
    pub requests: Mutex<Vec<(String, Value)>>,
    pub in_flight: AtomicUsize,
    pub peak_in_flight: AtomicUsize,
    pub completions: AtomicUsize,
}

pub struct FakeServer {
    pub addr: SocketAddr,
    pub recorded: Arc<Recorded>,
    task: tokio::task::JoinHandle<()>,
}

impl FakeServer {
    pub async fn start(opts: FakeOptions) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let recorded = Arc::new(Recorded::default());
        let rec = recorded.clone();
        let task = tokio::spawn(async move {
            while let Ok((sock, _)) = listener.accept().await {
                tokio::spawn(serve_connection(sock, opts.clone(), rec.clone()));
            }
        });
        Self {
            addr,
            recorded,
            task,
        }
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn requests(&self) -> Vec<(String, Value)> {
        self.recorded.requests.lock().expect("lock").clone()
    }
}

impl Drop for FakeServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

struct Request {
    method: String,
    path: String,
    auth: Option<String>,
    body: Vec<u8>,
}

async fn read_request(sock: &mut TcpStream, buf: &mut Vec<u8>) -> Option<Request> {
    let head_end = loop {
        if let Some(p) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break p + 4;
        }
        let mut tmp = [0u8; 4096];
        let n = sock.read(&mut tmp).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&tmp[..n]);
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).to_string();
    let mut lines = head.split("\r\n");
    let mut first = lines.next()?.split(' ');
    let (method, path) = (first.next()?.to_string(), first.next()?.to_string());
    let (mut len, mut auth) = (0usize, None);
    for line in lines {
        if let Some((k, v)) = line.split_once(':') {
            match k.trim().to_ascii_lowercase().as_str() {
                "content-length" => len = v.trim().parse().ok()?,
                "authorization" => auth = Some(v.trim().to_string()),
                _ => {}
            }
        }
    }
    while buf.len() < head_end + len {
        let mut tmp = [0u8; 4096];
        let n = sock.read(&mut tmp).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&tmp[..n]);
    }
    let body = buf[head_end..head_end + len].to_vec();
    buf.drain(..head_end + len);
    Some(Request {
        method,
        path,
        auth,
        body,
    })
}

async fn serve_connection(mut sock: TcpStream, opts: FakeOptions, rec: Arc<Recorded>) {
    let mut buf = Vec::new();
    while let Some(req) = read_request(&mut sock, &mut buf).await {
        let authorised = match &opts.api_key {
            None => true,
            Some(k) => req.auth.as_deref() == Some(format!("Bearer {k}").as_str()),
        };
        let ok = if !authorised {
            respond_json(&mut sock, 401, &json!({"error": {"message": "bad key"}})).await
        } else if req.method == "GET" && req.path == "/v1/models" {
            respond_json(
                &mut sock,
                200,
                &json!({"object": "list", "data": [{"id": "fake-model"}]}),
            )
            .await
        } else if req.method == "POST" && req.path == "/v1/embeddings" {
            embeddings(&mut sock, &req, &opts, &rec).await
        } else if req.method == "POST" && req.path.ends_with("completions") {
            let ok = completion(&mut sock, &req, &opts, &rec).await;
            if opts.close_after_stream {
                // Close a moment later, when a pooling client may already be sending on it.
                tokio::time::sleep(Duration::from_millis(5)).await;
                return;
            }
            ok
        } else {
            respond_json(&mut sock, 404, &json!({"error": {"message": "not found"}})).await
        };
        if !ok {
            return;
        }
    }
}

async fn respond_json(sock: &mut TcpStream, status: u16, v: &Value) -> bool {
    let body = v.to_string();
    let head = format!(
        "HTTP/1.1 {status} X\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
        body.len()
    );
    sock.write_all(head.as_bytes()).await.is_ok() && sock.write_all(body.as_bytes()).await.is_ok()
}

async fn write_chunk(sock: &mut TcpStream, data: &[u8]) -> bool {
    let mut out = format!("{:x}\r\n", data.len()).into_bytes();
    out.extend_from_slice(data);
    out.extend_from_slice(b"\r\n");
    sock.write_all(&out).await.is_ok() && sock.flush().await.is_ok()
}

/// Writes one SSE event, split in two HTTP chunks a millisecond apart to exercise reassembly.
async fn write_event(sock: &mut TcpStream, payload: &str) -> bool {
    let event = format!("data: {payload}\n\n");
    let (a, b) = event.as_bytes().split_at(event.len() / 2);
    if !write_chunk(sock, a).await {
        return false;
    }
    tokio::time::sleep(Duration::from_millis(1)).await;
    write_chunk(sock, b).await
}

/// One vector per input text, `usage.prompt_tokens` = the inputs' words; a request whose n-th
/// place is a multiple of `fail_every` gets a 500.
async fn embeddings(
    sock: &mut TcpStream,
    req: &Request,
    opts: &FakeOptions,
    rec: &Recorded,
) -> bool {
    let body: Value = serde_json::from_slice(&req.body).unwrap_or(Value::Null);
    rec.requests
        .lock()
        .expect("lock")
        .push((req.path.clone(), body.clone()));
    let nth = rec.completions.fetch_add(1, Ordering::SeqCst) + 1;
    if opts.fail_every.is_some_and(|k| nth.is_multiple_of(k)) {
        let e = json!({"error": {"message": "injected failure"}});
        return respond_json(sock, 500, &e).await;
    }
    let now = rec.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
    rec.peak_in_flight.fetch_max(now, Ordering::SeqCst);
    tokio::time::sleep(opts.first_token_delay).await;
    rec.in_flight.fetch_sub(1, Ordering::SeqCst);
    let texts: Vec<&str> = body["input"]
        .as_array()
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let words: usize = texts.iter().map(|t| t.split_whitespace().count()).sum();
    let data: Vec<Value> = (0..texts.len())
        .map(|i| json!({"object": "embedding", "index": i, "embedding": [0.6, 0.8]}))
        .collect();
    let v = json!({"object": "list", "data": data, "usage": {"prompt_tokens": words, "total_tokens": words}});
    respond_json(sock, 200, &v).await
}

async fn completion(
    sock: &mut TcpStream,
    req: &Request,
    opts: &FakeOptions,
    rec: &Recorded,
) -> bool {
    let body: Value = serde_json::from_slice(&req.body).unwrap_or(Value::Null);
    rec.requests
        .lock()
        .expect("lock")
        .push((req.path.clone(), body.clone()));
    let nth = rec.completions.fetch_add(1, Ordering::SeqCst) + 1;
    if opts.fail_every.is_some_and(|k| nth.is_multiple_of(k)) {
        return respond_json(
            sock,
            500,
            &json!({"error": {"message": "injected failure"}}),
        )
        .await;
    }
    let now = rec.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
    rec.peak_in_flight.fetch_max(now, Ordering::SeqCst);
    let ok = stream_tokens(sock, &body, req.path.contains("chat"), opts).await;
    rec.in_flight.fetch_sub(1, Ordering::SeqCst);
    ok
}

async fn stream_tokens(sock: &mut TcpStream, body: &Value, chat: bool, opts: &FakeOptions) -> bool {
    let max_tokens = body["max_tokens"].as_u64().unwrap_or(16);
    let head =
        "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n";
    if sock.write_all(head.as_bytes()).await.is_err() {
        return false;
    }
    if chat
        && !write_event(
            sock,
            r#"{"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}"#,
        )
        .await
    {
        return false;
    }
    for i in 0..max_tokens {
        let delay = if i == 0 {
            opts.first_token_delay
        } else {
            opts.token_delay
        };
        tokio::time::sleep(delay).await;
        let chunk = if chat {
            json!({"choices": [{"index": 0, "delta": {"content": format!(" w{i}")}, "finish_reason": null}]})
        } else {
            json!({"choices": [{"index": 0, "text": format!(" w{i}"), "finish_reason": null}]})
        };
        if !write_event(sock, &chunk.to_string()).await {
            return false;
        }
    }
    let last = if chat {
        json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "length"}]})
    } else {
        json!({"choices": [{"index": 0, "text": "", "finish_reason": "length"}]})
    };
    let mut events = vec![last.to_string()];
    if opts.usage && body["stream_options"]["include_usage"] == json!(true) {
        let prompt_words = body["prompt"]
            .as_str()
            .map_or(0, |p| p.split_whitespace().count());
        events.push(
            json!({"choices": [], "usage": {"prompt_tokens": prompt_words, "completion_tokens": max_tokens}})
                .to_string(),
        );
    }
    events.push("[DONE]".to_string());
    for e in events {
        if !write_event(sock, &e).await {
            return false;
        }
    }
    write_chunk(sock, b"").await // the zero-length chunk ends the body
}
