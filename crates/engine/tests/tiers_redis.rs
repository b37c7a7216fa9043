//! The Redis KV tier with the fake runner (see `common`): two engines sharing one real
//! `redis-server` (see `redis_server`) share a prefix; with Redis down requests are recomputed
//! and the fault counted; a fetch slower than recomputing is skipped.
// Full tier only: starts a real `redis-server` (`--features services`).
#![cfg(feature = "services")]

mod common;
mod redis_server;

use std::sync::atomic::Ordering::Relaxed;
use std::time::{Duration, Instant};

use common::*;
use engine::{EngineConfig, TierConfig};

const TS: usize = 4;

fn model() -> FakeModel {
    FakeModel::new(Some(10))
}

fn redis_cfg(tiles: usize, url: &str, write_through: bool) -> EngineConfig {
    EngineConfig {
        kv_tiers: Some(TierConfig {
            model_fingerprint: [1; 32],
            disk: None,
            redis: Some((url.to_string(), None)),
            write_through,
        }),
        ..fake_config(&model(), TS, tiles)
    }
}

#[test]
fn two_engines_sharing_one_redis_share_a_prefix() {
    let redis = redis_server::RedisServer::start(&[]);
    let req = greedy(prompt(31, 150), 6);
    let want = solo(model, TS, &req).tokens;
    // A computes the prompt; with write-through its full tiles reach Redis at once.
    let mut a = Harness::new(
        model(),
        tiny_tokenizer(),
        &redis_cfg(512, &redis.url(0), true),
    );
    assert_eq!(drive(&mut a, std::slice::from_ref(&req))[0].tokens, want);
    wait_for_writes(&a);
    let mut b = Harness::new(
        model(),
        tiny_tokenizer(),
        &redis_cfg(512, &redis.url(0), false),
    );
    let out = drive(&mut b, std::slice::from_ref(&req));
    assert_eq!(out[0].tokens, want);
    assert_eq!(out[0].finish.expect("finished").1.cached_tokens, 148);
    let st = b.stats.tiers.get().expect("tiers on");
    assert!(st.imported_tiles.load(Relaxed) > 0);
    assert!(st.tiers[0].hits.load(Relaxed) > 0);
}

#[test]
fn with_redis_down_requests_are_recomputed_and_the_fault_counted() {
    let mut redis = redis_server::RedisServer::start(&[]);
    let url = redis.url(0);
    redis.kill();
    let req = greedy(prompt(32, 90), 5);
    let want = solo(model, TS, &req).tokens;
    let mut h = Harness::new(model(), tiny_tokenizer(), &redis_cfg(512, &url, true));
    let out = drive(&mut h, &[req.clone(), greedy(prompt(33, 90), 5)]);
    assert_eq!(out[0].tokens, want);
    assert_eq!(out[0].finish.expect("finished").1.cached_tokens, 0);
    let st = h.stats.tiers.get().expect("tiers on").clone();
    assert!(st.tiers[0].errors.load(Relaxed) > 0, "the fault is counted");
    // Redis returns: the tier works again without a restart.
    redis.restart();
    let t0 = Instant::now();
    loop {
        let again = drive(&mut h, &[greedy(prompt(34, 60), 3)]);
        assert!(again[0].error.is_none());
        if st.tiers[0].bytes_written.load(Relaxed) > 0 {
            break;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "the tier did not reconnect"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Waits until `h`'s tier I/O thread has written everything queued (a live engine flushes
/// nothing by itself): the bytes written stop growing.
fn wait_for_writes(h: &Harness<FakeModel>) {
    let written = || {
        h.stats.tiers.get().expect("tiers on").tiers[0]
            .bytes_written
            .load(Relaxed)
    };
    let t0 = Instant::now();
    let mut last = 0;
    loop {
        std::thread::sleep(Duration::from_millis(50));
        let w = written();
        if w > 0 && w == last {
            return;
        }
        last = w;
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "the writes did not arrive"
        );
    }
}

/// Runs each of `reqs` alone, one after another; returns their `cached_tokens`.
fn one_by_one(h: &mut Harness<FakeModel>, reqs: &[engine::GenerateRequest]) -> Vec<usize> {
    reqs.iter()
        .map(|r| {
            let out = drive(h, std::slice::from_ref(r)).remove(0);
            assert_eq!(out.tokens, solo(model, TS, r).tokens, "{out:?}");
            out.finish.expect("finished").1.cached_tokens
        })
        .collect()
}

#[test]
fn a_fetch_slower_than_recomputing_is_skipped_and_a_faster_one_made() {
    let redis = redis_server::RedisServer::start(&[]);
    // Prefill costs 300 µs a token: recomputing a 161-token prompt's 40 full tiles ~48 ms.
    let costly = || FakeModel {
        per_token: Duration::from_micros(300),
        ..model()
    };
    let stored: Vec<_> = (0..4).map(|i| greedy(prompt(70 + i, 161), 3)).collect();
    let mut a = Harness::new(
        costly(),
        tiny_tokenizer(),
        &redis_cfg(1024, &redis.url(0), true),
    );
    drive(&mut a, &stored);
    wait_for_writes(&a);
    let fresh = |seed| greedy(prompt(seed, 161), 3);
    // Over loopback a fetch takes about a millisecond: fetched every time. (The first prompt,
    // in no tier, has the prefill cost measured.)
    let mut b = Harness::new(
        costly(),
        tiny_tokenizer(),
        &redis_cfg(1024, &redis.url(0), false),
    );
    let cached = one_by_one(&mut b, &[fresh(80), stored[0].clone(), stored[1].clone()]);
    assert_eq!(cached, [0, 160, 160]);
    let st = b.stats.tiers.get().expect("tiers on");
    assert_eq!(st.skipped_fetches.load(Relaxed), 0);
    // Through a link that holds each reply 300 ms: the first fetch that finds tiles is made
    // (nothing is known of the link yet) and measured; the next one would take ~300 ms against
    // ~48 ms of recomputing, and is skipped: the prompt is computed, with the same tokens.
    let proxy = redis_server::DelayProxy::start(redis.port(), Duration::from_millis(300));
    let slow = format!("redis://127.0.0.1:{}/0", proxy.port);
    let mut c = Harness::new(costly(), tiny_tokenizer(), &redis_cfg(1024, &slow, false));
    let cached = one_by_one(&mut c, &[fresh(81), stored[2].clone(), stored[3].clone()]);
    assert_eq!(cached, [0, 160, 0]);
    let st = c.stats.tiers.get().expect("tiers on");
    assert_eq!(st.skipped_fetches.load(Relaxed), 1);
}
