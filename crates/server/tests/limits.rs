//! HTTP limits over real sockets: header read and keep-alive timeouts, the connection cap,
//! large bodies answered 413 (read to the end first, so the client sees the answer), a body
//! that stops arriving, and the request id.

mod common;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use common::*;
use serde_json::Value;
use server::ServerConfig;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

async fn spawn(cfg: ServerConfig) -> SocketAddr {
    let state = state_with(cfg, engine_config(), Some(TEST_TEMPLATE));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(server::serve(listener, state, std::future::pending()));
    addr
}

fn quick(cfg: ServerConfig) -> ServerConfig {
    ServerConfig {
        header_read_timeout: Duration::from_secs(1),
        keep_alive_timeout: Duration::from_secs(1),
        ..cfg
    }
}

/// Reads until the peer closes (or `limit` passes); returns what was read and whether it closed.
async fn read_until_closed(sock: &mut TcpStream, limit: Duration) -> (String, bool) {
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    let end = Instant::now() + limit;
    loop {
        match tokio::time::timeout_at(end.into(), sock.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) => return (String::from_utf8_lossy(&out).into(), true),
            Ok(Ok(n)) => out.extend_from_slice(&buf[..n]),
            Err(_) => return (String::from_utf8_lossy(&out).into(), false),
        }
    }
}

/// Reads one whole response with a Content-Length body from a keep-alive connection.
async fn read_response(sock: &mut TcpStream) -> (u16, String, String) {
    let mut raw = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let n = tokio::time::timeout(Duration::from_secs(30), sock.read(&mut buf))
            .await
            .expect("a response in time")
            .expect("read");
        assert!(n > 0, "closed before a whole response: {raw:?}");
        raw.extend_from_slice(&buf[..n]);
        let text = String::from_utf8_lossy(&raw).to_string();
        if let Some(split) = text.find("\r\n\r\n") {
            let head = text[..split].to_string();
            let len: usize = head
                .lines()
                .find_map(|l| {
                    let (k, v) = l.split_once(':')?;
                    k.eq_ignore_ascii_case("content-length")
                        .then(|| v.trim().parse().ok())?
                })
                .unwrap_or(0);
            let body = &text[split + 4..];
            if body.len() >= len {
                let status = head[9..12].parse().expect("status");
                return (status, head, body[..len].to_string());
            }
        }
    }
}

fn get_health() -> &'static [u8] {
    b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n"
}

#[tokio::test]
async fn a_half_sent_header_is_disconnected_after_the_header_timeout() {
    let addr = spawn(ServerConfig {
        keep_alive_timeout: Duration::from_secs(60),
        ..quick(ServerConfig::default())
    })
    .await;
    let mut sock = TcpStream::connect(addr).await.expect("connect");
    sock.write_all(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Ty")
        .await
        .expect("write");
    let t0 = Instant::now();
    let (_, closed) = read_until_closed(&mut sock, Duration::from_secs(10)).await;
    assert!(closed, "still open after 10 s");
    let took = t0.elapsed();
    assert!(
        took >= Duration::from_millis(900) && took < Duration::from_secs(4),
        "{took:?}"
    );

    // A connection that sends nothing is bounded by the header timeout too, not the keep-alive.
    let mut silent = TcpStream::connect(addr).await.expect("connect");
    let t0 = Instant::now();
    let (_, closed) = read_until_closed(&mut silent, Duration::from_secs(10)).await;
    assert!(
        closed && t0.elapsed() < Duration::from_secs(4),
        "{:?}",
        t0.elapsed()
    );
}

#[tokio::test]
async fn an_idle_keep_alive_connection_is_closed_and_a_busy_one_is_not() {
    let addr = spawn(quick(ServerConfig::default())).await;
    let mut sock = TcpStream::connect(addr).await.expect("connect");
    // Requests closer together than the idle timeout keep the connection.
    for _ in 0..3 {
        sock.write_all(get_health()).await.expect("write");
        let (status, _, _) = read_response(&mut sock).await;
        assert_eq!(status, 200);
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let t0 = Instant::now();
    let (_, closed) = read_until_closed(&mut sock, Duration::from_secs(10)).await;
    assert!(closed, "an idle connection still open after 10 s");
    assert!(t0.elapsed() < Duration::from_secs(3), "{:?}", t0.elapsed());
}

#[tokio::test]
async fn connections_over_the_cap_wait_until_one_closes() {
    let addr = spawn(ServerConfig {
        max_connections: 2,
        keep_alive_timeout: Duration::from_secs(60),
        ..ServerConfig::default()
    })
    .await;
    let mut held = Vec::new();
    for _ in 0..2 {
        let mut s = TcpStream::connect(addr).await.expect("connect");
        s.write_all(get_health()).await.expect("write");
        assert_eq!(read_response(&mut s).await.0, 200);
        held.push(s);
    }
    let mut third = TcpStream::connect(addr)
        .await
        .expect("the kernel queues it");
    third.write_all(get_health()).await.expect("write");
    let mut buf = [0u8; 64];
    let early = tokio::time::timeout(Duration::from_millis(500), third.read(&mut buf)).await;
    assert!(
        early.is_err(),
        "the third connection was served over the cap"
    );
    drop(held.pop());
    assert_eq!(read_response(&mut third).await.0, 200);
}

/// Sends `body` (after `head`) in pieces while reading; returns the whole response text.
async fn send_big(addr: SocketAddr, head: String, body: Vec<u8>) -> String {
    let sock = TcpStream::connect(addr).await.expect("connect");
    let (mut rd, mut wr) = sock.into_split();
    let writer = tokio::spawn(async move {
        wr.write_all(head.as_bytes()).await?;
        for piece in body.chunks(1 << 20) {
            wr.write_all(piece).await?;
        }
        wr.flush().await?;
        Ok::<_, std::io::Error>(wr)
    });
    let mut out = Vec::new();
    let mut buf = [0u8; 8192];
    let t0 = Instant::now();
    while !String::from_utf8_lossy(&out).contains("}}") && t0.elapsed() < Duration::from_secs(60) {
        match tokio::time::timeout(Duration::from_secs(60), rd.read(&mut buf)).await {
            Ok(Ok(0)) | Err(_) => break,
            Ok(Ok(n)) => out.extend_from_slice(&buf[..n]),
            Ok(Err(e)) => panic!("the client saw {e} instead of a response"),
        }
    }
    writer
        .await
        .expect("writer task")
        .expect("the whole body was accepted by the server");
    String::from_utf8_lossy(&out).into_owned()
}

fn assert_413(resp: &str) {
    assert!(resp.starts_with("HTTP/1.1 413"), "{resp}");
    let body = &resp[resp.find("\r\n\r\n").expect("a head") + 4..];
    let v: Value = serde_json::from_str(body).expect("a JSON body");
    assert_eq!(v["error"]["type"], "invalid_request_error", "{v}");
    assert!(v["error"]["message"]
        .as_str()
        .is_some_and(|m| m.contains("exceeds")));
}

#[tokio::test]
async fn a_50_mb_body_gets_a_413_the_client_can_read() {
    let addr = spawn(ServerConfig::default()).await;
    let body = vec![b'x'; 50 << 20];
    let head = format!(
        "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\n\r\n",
        body.len()
    );
    assert_413(&send_big(addr, head, body).await);

    // The same without a length (chunked).
    let mut chunked = Vec::new();
    for piece in vec![b'y'; 20 << 20].chunks(1 << 16) {
        chunked.extend_from_slice(format!("{:x}\r\n", piece.len()).as_bytes());
        chunked.extend_from_slice(piece);
        chunked.extend_from_slice(b"\r\n");
    }
    chunked.extend_from_slice(b"0\r\n\r\n");
    let head =
        "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n\
                Transfer-Encoding: chunked\r\n\r\n"
            .to_string();
    assert_413(&send_big(addr, head, chunked).await);
}

#[tokio::test]
async fn a_client_expecting_100_continue_gets_the_413_before_sending() {
    let addr = spawn(ServerConfig::default()).await;
    let mut sock = TcpStream::connect(addr).await.expect("connect");
    sock.write_all(
        b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n\
          Content-Length: 52428800\r\nExpect: 100-continue\r\n\r\n",
    )
    .await
    .expect("write");
    let (resp, _) = read_until_closed(&mut sock, Duration::from_secs(10)).await;
    assert_413(&resp);
}

#[tokio::test]
async fn a_body_that_stops_arriving_gets_408() {
    let addr = spawn(ServerConfig {
        body_read_timeout: Duration::from_secs(1),
        ..ServerConfig::default()
    })
    .await;
    let mut sock = TcpStream::connect(addr).await.expect("connect");
    sock.write_all(
        b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n\
          Content-Length: 100\r\n\r\n{\"prompt\":",
    )
    .await
    .expect("write");
    let (resp, closed) = read_until_closed(&mut sock, Duration::from_secs(10)).await;
    assert!(closed && resp.starts_with("HTTP/1.1 408"), "{resp}");
    assert!(resp.contains("\"timeout_error\""), "{resp}");
}

#[tokio::test]
async fn responses_carry_a_request_id_and_keep_a_sane_client_one() {
    let addr = spawn(ServerConfig::default()).await;
    let mut sock = TcpStream::connect(addr).await.expect("connect");
    sock.write_all(get_health()).await.expect("write");
    let (_, head, _) = read_response(&mut sock).await;
    assert!(
        head.to_ascii_lowercase().contains("x-request-id: req-"),
        "{head}"
    );
    sock.write_all(b"GET /health HTTP/1.1\r\nHost: x\r\nX-Request-Id: trace-42.a\r\n\r\n")
        .await
        .expect("write");
    let (_, head, _) = read_response(&mut sock).await;
    assert!(head.contains("trace-42.a"), "{head}");
    sock.write_all(b"GET /health HTTP/1.1\r\nHost: x\r\nX-Request-Id: bad id\r\n\r\n")
        .await
        .expect("write");
    let (_, head, _) = read_response(&mut sock).await;
    assert!(!head.contains("bad id"), "{head}");
}

#[tokio::test]
async fn health_and_metrics_are_open_unless_protected() {
    let key = "sk-test";
    let open = server::router(state_with(
        ServerConfig {
            api_key: Some(key.into()),
            ..ServerConfig::default()
        },
        engine_config(),
        Some(TEST_TEMPLATE),
    ));
    assert_eq!(get(&open, "/health").await.0, 200);
    assert_eq!(get(&open, "/metrics").await.0, 200);
    let guarded = server::router(state_with(
        ServerConfig {
            api_key: Some(key.into()),
            protect_metrics: true,
            protect_health: true,
            ..ServerConfig::default()
        },
        engine_config(),
        Some(TEST_TEMPLATE),
    ));
    for path in ["/health", "/metrics"] {
        assert_eq!(get(&guarded, path).await.0, 401, "{path}");
        let bearer = format!("Bearer {key}");
        let (status, _, _) = send(&guarded, "GET", path, "", Some(&bearer)).await;
        assert_eq!(status, 200, "{path}");
    }
}

#[tokio::test]
async fn a_request_without_the_key_is_refused_before_its_body_is_read() {
    let addr = spawn(ServerConfig {
        api_key: Some("sk-test".into()),
        body_read_timeout: Duration::from_secs(30),
        ..ServerConfig::default()
    })
    .await;
    for auth in ["", "Authorization: Bearer sk-wrong\r\n"] {
        let mut sock = TcpStream::connect(addr).await.expect("connect");
        // The header announces a 1 MB body and none of it is sent: a server that read the body
        // first would wait for the body-read timeout (30 s) before answering.
        let head = format!(
            "POST /v1/completions HTTP/1.1\r\nHost: x\r\n{auth}Content-Type: application/json\r\nContent-Length: 1000000\r\n\r\n"
        );
        sock.write_all(head.as_bytes()).await.expect("write");
        let t0 = Instant::now();
        let (status, head, body) = read_response(&mut sock).await;
        assert_eq!(status, 401, "{head}\n{body}");
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "answered without the body"
        );
        assert!(
            head.to_ascii_lowercase().contains("connection: close"),
            "{head}"
        );
        assert!(
            body.contains("\"unauthorized\"") || body.contains("key"),
            "{body}"
        );
    }
}

#[tokio::test]
async fn shutdown_lets_the_request_in_flight_finish_and_closes_idle_connections() {
    let state = state_with(
        ServerConfig::default(),
        engine_config(),
        Some(TEST_TEMPLATE),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let served = tokio::spawn(server::serve(listener, state.clone(), async {
        let _ = stop_rx.await;
    }));

    let mut idle = TcpStream::connect(addr).await.expect("connect");
    idle.write_all(get_health()).await.expect("write");
    assert_eq!(read_response(&mut idle).await.0, 200);

    let prompt: Vec<u32> = (0..60).map(|i| 40 + i % 50).collect();
    let body = serde_json::json!({"prompt": prompt, "max_tokens": 190, "ignore_eos": true,
        "stream": true})
    .to_string();
    let mut busy = TcpStream::connect(addr).await.expect("connect");
    busy.write_all(
        format!(
            "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n\
             Content-Length: {}\r\n\r\n{body}",
            body.len()
        )
        .as_bytes(),
    )
    .await
    .expect("write");
    let engine = state.loaded().expect("loaded").engine.clone();
    for _ in 0..500 {
        if engine
            .stats()
            .tiles_in_use
            .load(std::sync::atomic::Ordering::Relaxed)
            > 0
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    stop_tx.send(()).expect("serve is running");

    let (_, closed) = read_until_closed(&mut idle, Duration::from_secs(5)).await;
    assert!(closed, "an idle connection outlived the shutdown");
    let (stream, closed) = read_until_closed(&mut busy, Duration::from_secs(30)).await;
    assert!(closed && stream.contains("data: [DONE]"), "{stream}");
    assert!(stream.contains("\"finish_reason\":\"length\""), "{stream}");
    tokio::time::timeout(Duration::from_secs(5), served)
        .await
        .expect("serve returns once the connections are gone")
        .expect("task")
        .expect("serve");
    assert!(TcpStream::connect(addr).await.is_err(), "still accepting");
}
