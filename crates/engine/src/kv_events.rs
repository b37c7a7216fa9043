//! KV cache events: what the prefix index gained and lost, for routers that track which
//! replica holds which prefix (vLLM's `BlockStored` / `BlockRemoved` / `AllBlocksCleared`).
//!
//! The `KvManager` notes an event at each change of the prefix index — a full tile registered
//! under its key (after compute or a tier import), a cached tile evicted when its tile is taken
//! for reuse — only when events are on, so without a publisher nothing is noted and nothing is
//! paid. At the end of every engine step the engine hands that step's events, as one batch, to
//! a `KvEventSink`: a bounded queue to a publisher thread, never waited on. When the queue is
//! full the batch is dropped and counted; its sequence number is used all the same, so a
//! subscriber sees a gap and knows it lost events (the publisher's replay buffer cannot fill
//! it, and the subscriber has to resynchronise).
//!
//! Invariant: applying every batch in sequence order (insert on `Stored`, delete on
//! `Removed`, empty on `AllCleared`) to an empty map of `(group, key)` gives exactly the tiles
//! that hold a key (`KvManager::registered`) after the last batch sent.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use tokio::sync::mpsc;

use crate::tiles::PrefixKey;

/// A full tile that holds a key: its KV group (and that group's sliding window, if its tiles
/// out of the window are released), the key it is indexed under (the chain key mixed with the
/// group, `tiles::group_key`), its parent's key in the same group (none for a sequence's
/// first tile), its token ids, and the LoRA adapters it was computed with (none: the base
/// model).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoredTile {
    pub group: usize,
    pub window: Option<usize>,
    pub key: PrefixKey,
    pub parent: Option<PrefixKey>,
    pub tokens: Vec<u32>,
    pub lora: Option<Arc<LoraTag>>,
}

/// The LoRA adapters a tile was computed with, as vLLM's `BlockStored` names them: `lora_id`,
/// the adapter's number (1 for the first adapter registered, and so on, never reused; vLLM
/// numbers its adapters from 1), and `lora_name`, the name requests use. A tile computed with
/// several adapters, or with one at a scale other than 1, has no id and the name
/// `NAME*SCALE+NAME*SCALE...` (sorted), which no single adapter can have.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LoraTag {
    pub id: Option<u64>,
    pub name: String,
}

/// One change of the prefix index.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum KvEvent {
    /// A tile now holds a key and can serve prefix hits.
    Stored(StoredTile),
    /// The tile that held `key` in `group` was taken for other contents.
    Removed { group: usize, key: PrefixKey },
    /// Nothing is cached (the pool is new).
    AllCleared,
}

/// The events of one engine step.
#[derive(Clone, Debug)]
pub struct KvEventBatch {
    /// Consecutive from 0, dropped batches included.
    pub seq: u64,
    /// Unix seconds when the batch was sent.
    pub ts: f64,
    pub events: Vec<KvEvent>,
}

/// The 64-bit block hash routers index by: the low 64 bits of a key. Keys are SHA-256 output
/// (`tiles::chain_key`), so any 64 bits of them are as good as any others; these are the
/// digest's first eight bytes read as a little-endian integer.
pub fn external_hash(key: PrefixKey) -> u64 {
    key as u64
}

/// Counters of the event stream, shared by the engine (sending) and the publisher.
#[derive(Debug, Default)]
pub struct KvEventStats {
    /// Batches handed to the sink (the next sequence number).
    pub sent_batches: AtomicU64,
    /// Batches, and the events in them, dropped because the publisher's queue was full.
    pub dropped_batches: AtomicU64,
    pub dropped_events: AtomicU64,
    /// Batches the publisher sent on its socket.
    pub published_batches: AtomicU64,
    /// Replay requests answered.
    pub replays: AtomicU64,
}

/// The engine's end of the queue to the publisher thread.
#[derive(Clone, Debug)]
pub struct KvEventSink {
    tx: mpsc::Sender<KvEventBatch>,
    stats: Arc<KvEventStats>,
}

/// The publisher's end of the queue.
pub struct KvEventReceiver {
    pub rx: mpsc::Receiver<KvEventBatch>,
    pub stats: Arc<KvEventStats>,
}

/// A queue of at most `capacity` batches from the engine to a publisher.
pub fn channel(capacity: usize) -> (KvEventSink, KvEventReceiver) {
    let (tx, rx) = mpsc::channel(capacity.max(1));
    let stats = Arc::new(KvEventStats::default());
    let sink = KvEventSink {
        tx,
        stats: stats.clone(),
    };
    (sink, KvEventReceiver { rx, stats })
}

impl KvEventSink {
    /// Queues `events` as the next batch without waiting; a full queue (or a stopped
    /// publisher) drops it, counted. Returns its sequence number.
    pub fn send(&self, events: Vec<KvEvent>) -> u64 {
        let seq = self.stats.sent_batches.fetch_add(1, Relaxed);
        let ts = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0.0, |d| d.as_secs_f64());
        let n = events.len() as u64;
        if self.tx.try_send(KvEventBatch { seq, ts, events }).is_err() {
            self.stats.dropped_batches.fetch_add(1, Relaxed);
            self.stats.dropped_events.fetch_add(n, Relaxed);
        }
        seq
    }

    /// The sequence number of the last batch sent, if any.
    pub fn last_seq(&self) -> Option<u64> {
        self.stats.sent_batches.load(Relaxed).checked_sub(1)
    }

    pub fn stats(&self) -> &Arc<KvEventStats> {
        &self.stats
    }
}

/// The prefix index as it is between two steps, and the last batch sent before it was read:
/// a subscriber that applied every batch up to `last_seq` holds exactly `tiles`.
#[derive(Clone, Debug)]
pub struct KvIndexSnapshot {
    pub last_seq: Option<u64>,
    pub tile_size: usize,
    pub tiles: Vec<StoredTile>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_queue_drops_the_batch_but_uses_its_sequence_number() {
        let (sink, mut rx) = channel(1);
        assert_eq!(sink.last_seq(), None);
        assert_eq!(sink.send(vec![KvEvent::AllCleared]), 0);
        assert_eq!(sink.send(vec![KvEvent::AllCleared, KvEvent::AllCleared]), 1);
        assert_eq!(sink.last_seq(), Some(1));
        assert_eq!(rx.stats.dropped_batches.load(Relaxed), 1);
        assert_eq!(rx.stats.dropped_events.load(Relaxed), 2);
        let b = rx.rx.try_recv().expect("the first batch is queued");
        assert_eq!((b.seq, b.events.len()), (0, 1));
        assert!(b.ts > 1.7e9);
        assert_eq!(sink.send(Vec::new()), 2);
        assert_eq!(rx.rx.try_recv().expect("room again").seq, 2);
    }

    #[test]
    fn the_external_hash_is_the_low_64_bits() {
        assert_eq!(
            external_hash(0x1111_2222_3333_4444_5555_6666_7777_8888),
            0x5555_6666_7777_8888
        );
    }
}
