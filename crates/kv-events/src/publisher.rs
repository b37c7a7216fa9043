//! The publisher thread: KV event batches from the engine's queue onto a ZeroMQ PUB socket,
//! and a ROUTER socket that replays missed batches from a bounded ring buffer — vLLM's
//! `ZmqEventPublisher`, message for message.
//!
//! - Every batch goes out as three frames: the topic, the sequence number (8 bytes,
//!   big-endian) and the msgpack payload (`wire`). PUB drops messages for subscribers that
//!   fall behind, as libzmq's does at its high-water mark.
//! - The last `buffer_steps` batches are kept, with their numbers. A replay request is
//!   `[identity, "", start]` (`start`: 8 bytes, big-endian; a REQ or DEALER client's empty
//!   delimiter then the number); each kept batch numbered `start` or more is answered
//!   `[identity, "", seq, payload]`, then `[identity, "", -1 (8 bytes), ""]` ends the reply.
//! - Endpoints follow vLLM's rule: one with `*`, `::` or `ipc://` is bound, any other
//!   (`tcp://host:port`) is connected to — a subscriber that binds and gathers many
//!   replicas' events. `*` binds every interface. The replay endpoint is always bound.
//!   (vLLM also takes `inproc://`, which only reaches sockets of the same process.)
//!
//! The thread runs a single-threaded async runtime of its own; the engine only ever does a
//! non-blocking send into the bounded queue before it (`engine::kv_events::KvEventSink`).

use std::collections::VecDeque;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use engine::kv_events::{KvEventBatch, KvEventReceiver, KvEventStats};
use zeromq::{PubSocket, RouterSocket, Socket, SocketOptions, SocketRecv, SocketSend, ZmqMessage};

use crate::wire::encode_batch;
use crate::{PublisherConfig, StartError};

/// The frame that ends a replay: -1 as a signed 8-byte big-endian integer.
const END_SEQ: [u8; 8] = (-1i64).to_be_bytes();

/// Whether vLLM would bind `endpoint` (else it connects to it).
pub(crate) fn binds(endpoint: &str) -> bool {
    endpoint.contains('*') || endpoint.contains("::") || endpoint.starts_with("ipc://")
}

/// `tcp://*:port` as the socket library takes it: `*` is every IPv4 interface.
fn bind_address(endpoint: &str) -> String {
    endpoint.replacen("tcp://*:", "tcp://0.0.0.0:", 1)
}

/// The sockets and the replay buffer.
pub(crate) struct Publisher {
    publish: PubSocket,
    replay: Option<RouterSocket>,
    topic: Bytes,
    tile_size: usize,
    buffer: VecDeque<(u64, Bytes)>,
    buffer_steps: usize,
    stats: Arc<KvEventStats>,
}

impl Publisher {
    /// Binds the sockets that are bound (so that a bad address fails start-up).
    pub(crate) async fn bind(
        cfg: &PublisherConfig,
        stats: Arc<KvEventStats>,
    ) -> Result<Publisher, StartError> {
        // A subscriber that is not up yet is retried for as long as it takes, with backoff,
        // as libzmq does; a peer that goes away is reconnected to.
        let mut options = SocketOptions::default();
        options.no_connect_timeout();
        let mut publish = PubSocket::with_options(options);
        if binds(&cfg.endpoint) {
            publish
                .bind(&bind_address(&cfg.endpoint))
                .await
                .map_err(|e| StartError::Bind(cfg.endpoint.clone(), e.to_string()))?;
        }
        let replay = match &cfg.replay_endpoint {
            Some(ep) => {
                let mut r = RouterSocket::new();
                r.bind(&bind_address(ep))
                    .await
                    .map_err(|e| StartError::Bind(ep.clone(), e.to_string()))?;
                Some(r)
            }
            None => None,
        };
        Ok(Publisher {
            publish,
            replay,
            topic: Bytes::from(cfg.topic.clone().into_bytes()),
            tile_size: cfg.tile_size,
            buffer: VecDeque::with_capacity(cfg.buffer_steps.min(1 << 14)),
            buffer_steps: cfg.buffer_steps.max(1),
            stats,
        })
    }

    /// Publishes until the engine's queue closes. With an endpoint to connect to, batches
    /// that come before the connection only go to the replay buffer (a PUB socket with no
    /// subscriber drops them too).
    pub(crate) async fn run(mut self, cfg: PublisherConfig, mut queue: KvEventReceiver) {
        if !binds(&cfg.endpoint) {
            let mut connecting = std::pin::pin!(self.publish.connect(&cfg.endpoint));
            loop {
                tokio::select! {
                    done = &mut connecting => {
                        if let Err(e) = done {
                            tracing::error!("KV events: cannot connect to {}: {e}", cfg.endpoint);
                        }
                        break;
                    }
                    batch = queue.rx.recv() => match batch {
                        Some(b) => {
                            let payload = Bytes::from(encode_batch(&b, self.tile_size));
                            keep(&mut self.buffer, self.buffer_steps, b.seq, payload);
                        }
                        None => return,
                    },
                    req = recv_opt(&mut self.replay) => {
                        serve_replay(&mut self.replay, &self.buffer, &self.stats, req).await;
                    }
                }
            }
        }
        loop {
            tokio::select! {
                batch = queue.rx.recv() => match batch {
                    Some(b) => self.publish_batch(b).await,
                    None => return,
                },
                req = recv_opt(&mut self.replay) => {
                    serve_replay(&mut self.replay, &self.buffer, &self.stats, req).await;
                }
            }
        }
    }

    async fn publish_batch(&mut self, b: KvEventBatch) {
        let payload = Bytes::from(encode_batch(&b, self.tile_size));
        let frames = vec![
            self.topic.clone(),
            Bytes::copy_from_slice(&b.seq.to_be_bytes()),
            payload.clone(),
        ];
        match ZmqMessage::try_from(frames) {
            Ok(msg) => match self.publish.send(msg).await {
                Ok(()) => {
                    self.stats.published_batches.fetch_add(1, Relaxed);
                }
                Err(e) => tracing::warn!("KV events: batch {} not published: {e}", b.seq),
            },
            Err(e) => tracing::error!("KV events: batch {}: {e}", b.seq),
        }
        keep(&mut self.buffer, self.buffer_steps, b.seq, payload);
    }
}

/// Keeps a batch for replay, dropping the oldest past `cap`.
fn keep(buffer: &mut VecDeque<(u64, Bytes)>, cap: usize, seq: u64, payload: Bytes) {
    if buffer.len() == cap {
        buffer.pop_front();
    }
    buffer.push_back((seq, payload));
}

/// The next replay request, or never without a replay socket.
async fn recv_opt(replay: &mut Option<RouterSocket>) -> zeromq::ZmqResult<ZmqMessage> {
    match replay {
        Some(r) => r.recv().await,
        None => std::future::pending().await,
    }
}

/// Answers one replay request (see the module docs); malformed ones are logged and ignored.
async fn serve_replay(
    replay: &mut Option<RouterSocket>,
    buffer: &VecDeque<(u64, Bytes)>,
    stats: &KvEventStats,
    req: zeromq::ZmqResult<ZmqMessage>,
) {
    let Some(socket) = replay.as_mut() else {
        return;
    };
    let frames = match req {
        Ok(m) => m.into_vec(),
        Err(e) => {
            tracing::warn!("KV events: replay socket: {e}");
            return;
        }
    };
    let start = match frames.as_slice() {
        [_, delim, seq] if delim.is_empty() && seq.len() == 8 => {
            let mut b = [0u8; 8];
            b.copy_from_slice(seq);
            u64::from_be_bytes(b)
        }
        _ => {
            tracing::warn!(
                "KV events: a replay request of {} frames, not [identity, \"\", seq]",
                frames.len()
            );
            return;
        }
    };
    let id = frames[0].clone();
    let reply = |seq: Bytes, payload: Bytes| {
        ZmqMessage::try_from(vec![id.clone(), Bytes::new(), seq, payload])
    };
    for (seq, payload) in buffer.iter().filter(|(s, _)| *s >= start) {
        let seq = Bytes::copy_from_slice(&seq.to_be_bytes());
        if let Ok(m) = reply(seq, payload.clone()) {
            if let Err(e) = send_within(socket, m).await {
                tracing::warn!("KV events: replay abandoned: {e}");
                return;
            }
        }
    }
    if let Ok(m) = reply(Bytes::from_static(&END_SEQ), Bytes::new()) {
        let _ = send_within(socket, m).await;
    }
    stats.replays.fetch_add(1, Relaxed);
}

/// How long one replay message may wait for a client that does not read: the thread also
/// publishes, and a stuck client must not hold it (the engine's queue would fill and drop).
const REPLAY_SEND_TIMEOUT: Duration = Duration::from_secs(2);

async fn send_within(socket: &mut RouterSocket, m: ZmqMessage) -> Result<(), String> {
    match tokio::time::timeout(REPLAY_SEND_TIMEOUT, socket.send(m)).await {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err("the client does not read".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints_are_bound_or_connected_as_vllm_does() {
        assert!(binds("tcp://*:5557"));
        assert!(binds("tcp://[::]:5557"));
        assert!(binds("ipc:///tmp/kv"));
        assert!(!binds("tcp://127.0.0.1:5557"));
        assert!(!binds("tcp://indexer:5557"));
        assert_eq!(bind_address("tcp://*:5557"), "tcp://0.0.0.0:5557");
        assert_eq!(bind_address("tcp://127.0.0.1:1"), "tcp://127.0.0.1:1");
    }

    #[test]
    fn the_replay_buffer_keeps_the_last_batches() {
        let mut b = VecDeque::new();
        for seq in 0..5 {
            keep(&mut b, 3, seq, Bytes::new());
        }
        assert_eq!(b.iter().map(|x| x.0).collect::<Vec<_>>(), vec![2, 3, 4]);
    }
}
