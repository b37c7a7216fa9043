//! Tessera's KV events on the wire: the prefix index changes the engine notes
//! (`engine::kv_events`) published over ZeroMQ in vLLM's format, so routers built for vLLM
//! (llm-d's KV cache indexer, Dynamo's KV router, vLLM's own example subscriber) track which
//! replica holds which prefix.
//!
//! - `wire`: the msgpack encoding of a batch, byte for byte as vLLM's `msgspec` structs.
//! - `publisher`: the thread with the PUB socket and the replay (ROUTER) socket.
//!
//! `start` binds what is to be bound before it returns, so a bad endpoint stops start-up
//! instead of leaving a server that publishes nothing.

pub mod publisher;
pub mod wire;

use engine::kv_events::{self, KvEventSink};

/// Where and how events are published.
#[derive(Clone, Debug)]
pub struct PublisherConfig {
    /// PUB endpoint, e.g. `tcp://*:5557` (bound) or `tcp://indexer:5557` (connected to).
    pub endpoint: String,
    /// ROUTER endpoint answering replay requests (always bound), if any.
    pub replay_endpoint: Option<String>,
    /// The first frame of every message (llm-d expects `kv@<pod>@<model>`).
    pub topic: String,
    /// Batches kept for replay.
    pub buffer_steps: usize,
    /// Batches the engine may queue before the publisher thread takes them; more are
    /// dropped, counted, and leave a gap in the sequence numbers.
    pub queue_batches: usize,
    /// Tokens per tile (`block_size` on the wire).
    pub tile_size: usize,
}

impl PublisherConfig {
    /// vLLM's defaults for what is not given: 10,000 batches kept for replay, a queue of
    /// 100,000.
    pub fn new(endpoint: String, tile_size: usize) -> PublisherConfig {
        PublisherConfig {
            endpoint,
            replay_endpoint: None,
            topic: String::new(),
            buffer_steps: 10_000,
            queue_batches: 100_000,
            tile_size,
        }
    }
}

/// Why publishing could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("KV events endpoint {0:?} is not tcp:// or ipc://")]
    Endpoint(String),
    #[error("cannot bind the KV events endpoint {0}: {1}")]
    Bind(String, String),
    #[error("cannot start the KV events thread: {0}")]
    Thread(#[from] std::io::Error),
}

/// Starts the publisher thread; events sent into the returned sink are published until
/// every clone of it is dropped.
pub fn start(cfg: PublisherConfig) -> Result<KvEventSink, StartError> {
    for ep in std::iter::once(&cfg.endpoint).chain(&cfg.replay_endpoint) {
        if !["tcp://", "ipc://"].iter().any(|p| ep.starts_with(p)) {
            return Err(StartError::Endpoint(ep.clone()));
        }
    }
    let (sink, queue) = kv_events::channel(cfg.queue_batches);
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    std::thread::Builder::new()
        .name("tessera-kv-events".into())
        .spawn(move || {
            let rt = match tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            {
                Ok(rt) => rt,
                Err(e) => {
                    let _ = ready_tx.send(Err(StartError::Thread(e)));
                    return;
                }
            };
            rt.block_on(async move {
                match publisher::Publisher::bind(&cfg, queue.stats.clone()).await {
                    Ok(p) => {
                        let _ = ready_tx.send(Ok(()));
                        p.run(cfg, queue).await;
                    }
                    Err(e) => {
                        let _ = ready_tx.send(Err(e));
                    }
                }
            });
        })?;
    match ready_rx.recv() {
        Ok(Ok(())) => Ok(sink),
        Ok(Err(e)) => Err(e),
        Err(_) => Err(StartError::Thread(std::io::Error::other(
            "the KV events thread ended while starting",
        ))),
    }
}
