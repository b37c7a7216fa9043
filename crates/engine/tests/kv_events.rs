//! KV events through the engine thread, with the fake model (one global and two windowed KV
//! groups) and a pool small enough that prefixes are evicted: a subscriber applying every
//! batch in order ends with exactly the prefix index the engine reports, the first batch
//! clears, sequence numbers are consecutive, and a full queue shows as a gap.

mod common;

use std::collections::HashMap;
use std::sync::atomic::Ordering::Relaxed;
use std::time::{Duration, Instant};

use common::*;
use engine::kv_events::{self, KvEvent, KvEventBatch, StoredTile};
use engine::{EngineConfig, EngineHandle, Event, RequestStream};

fn finish(stream: &mut RequestStream) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while Instant::now() < deadline {
        match stream.events.try_recv() {
            Ok(Event::Finished { .. }) => return,
            Ok(Event::Error(e)) => panic!("request failed: {e}"),
            Ok(_) => {}
            Err(_) => std::thread::sleep(Duration::from_millis(1)),
        }
    }
    panic!("a request did not finish");
}

/// Applies batches to a subscriber's map; returns the sequence numbers seen.
fn apply(map: &mut HashMap<(usize, u128), StoredTile>, batches: &[KvEventBatch]) -> Vec<u64> {
    for b in batches {
        for e in &b.events {
            match e {
                KvEvent::Stored(t) => {
                    assert!(map.insert((t.group, t.key), t.clone()).is_none());
                }
                KvEvent::Removed { group, key } => {
                    assert!(map.remove(&(*group, *key)).is_some());
                }
                KvEvent::AllCleared => map.clear(),
            }
        }
    }
    batches.iter().map(|b| b.seq).collect()
}

fn sorted(mut v: Vec<StoredTile>) -> Vec<StoredTile> {
    v.sort_by_key(|t| (t.group, t.key));
    v
}

#[test]
fn a_subscriber_applying_the_events_ends_with_the_engines_prefix_index() {
    let m = FakeModel::new(Some(10));
    let (sink, mut rx) = kv_events::channel(1 << 16);
    let cfg = EngineConfig {
        kv_events: Some(sink),
        ..fake_config(&m, 4, 60)
    };
    let h = EngineHandle::spawn(cfg, move || Ok((m, tiny_tokenizer()))).expect("starts");
    let mut rng = SplitMix64::new(11);
    let bases: Vec<Vec<u32>> = (0..5).map(|i| prompt(100 + i, 40)).collect();
    for round in 0..40 {
        let mut streams = Vec::new();
        for _ in 0..1 + rng.below(3) {
            let base = &bases[rng.below(bases.len())];
            let mut p = base[..8 + rng.below(32)].to_vec();
            p.extend(prompt(round * 10 + rng.below(10) as u64, 1 + rng.below(12)));
            streams.push(h.submit(greedy(p, 1 + rng.below(10))).expect("accepted"));
        }
        streams.iter_mut().for_each(finish);
    }
    let snapshot = h
        .kv_index()
        .expect("engine running")
        .blocking_recv()
        .expect("answered");
    let mut batches = Vec::new();
    while let Ok(b) = rx.rx.try_recv() {
        batches.push(b);
    }
    let mut map = HashMap::new();
    let seqs = apply(&mut map, &batches);
    assert_eq!(batches[0].events, vec![KvEvent::AllCleared]);
    assert_eq!(seqs, (0..seqs.len() as u64).collect::<Vec<_>>());
    assert_eq!(snapshot.last_seq, seqs.last().copied());
    assert_eq!(snapshot.tile_size, 4);
    let removed = batches
        .iter()
        .flat_map(|b| &b.events)
        .filter(|e| matches!(e, KvEvent::Removed { .. }))
        .count();
    assert!(
        removed > 50,
        "the pool must have evicted ({removed} removals)"
    );
    assert!(snapshot.tiles.iter().any(|t| t.group > 0));
    assert_eq!(sorted(map.into_values().collect()), sorted(snapshot.tiles));
    assert_eq!(rx.stats.dropped_batches.load(Relaxed), 0);
    h.shutdown(Duration::from_secs(1));
}

#[test]
fn batches_the_queue_cannot_take_are_dropped_and_leave_a_gap() {
    let m = FakeModel::new(None);
    let (sink, mut rx) = kv_events::channel(1);
    let cfg = EngineConfig {
        kv_events: Some(sink),
        ..fake_config(&m, 4, 64)
    };
    let h = EngineHandle::spawn(cfg, move || Ok((m, tiny_tokenizer()))).expect("starts");
    // The queue holds the first batch (AllCleared); every later one is dropped.
    let mut s = h.submit(greedy(prompt(1, 30), 8)).expect("accepted");
    finish(&mut s);
    let snap = h
        .kv_index()
        .expect("running")
        .blocking_recv()
        .expect("answered");
    assert_eq!(rx.rx.try_recv().expect("first batch").seq, 0);
    assert!(rx.rx.try_recv().is_err());
    let last = snap.last_seq.expect("batches were sent");
    assert!(last >= 1);
    assert_eq!(rx.stats.dropped_batches.load(Relaxed), last);
    assert!(
        rx.stats.dropped_events.load(Relaxed) >= 7,
        "7 full tiles were stored"
    );
    // Room again: the next batch carries the next number, past the gap.
    let mut s = h.submit(greedy(prompt(2, 30), 8)).expect("accepted");
    finish(&mut s);
    let b = rx.rx.try_recv().expect("a batch after the gap");
    assert_eq!(b.seq, last + 1);
    h.shutdown(Duration::from_secs(1));
}

#[test]
fn events_need_the_prefix_cache() {
    let m = FakeModel::new(None);
    let (sink, _rx) = kv_events::channel(4);
    let cfg = EngineConfig {
        kv_events: Some(sink),
        prefix_caching: false,
        ..fake_config(&m, 4, 64)
    };
    assert!(cfg.validate().is_err());
}
