//! KV tiers with the fake runner (see `common`): tiles written to a disk tier by one engine are
//! found by another, imported into its pool and used as a prefix hit; whatever the tier holds —
//! tiles of another model, damaged files — the tokens are those of a run without tiers.

mod common;
mod redis_server;

use std::path::PathBuf;
use std::sync::atomic::Ordering::Relaxed;
use std::time::{Duration, Instant};

use common::*;
use engine::{EngineConfig, TierConfig};

const TS: usize = 4;

fn model() -> FakeModel {
    FakeModel::new(Some(10))
}

fn dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("tessera-tiers-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

fn cfg(tiles: usize, dir: &std::path::Path, fingerprint: u8) -> EngineConfig {
    EngineConfig {
        kv_tiers: Some(TierConfig {
            model_fingerprint: [fingerprint; 32],
            disk: Some((dir.to_path_buf(), 1 << 30)),
            redis: None,
            write_through: false,
        }),
        ..fake_config(&model(), TS, tiles)
    }
}

/// Runs `req` alone in a fresh engine over the tier in `dir`; then writes what the pool holds
/// to the tier (as at shutdown). Returns the outcome and the engine's tier stats.
fn run_once(
    dir: &std::path::Path,
    fingerprint: u8,
    tiles: usize,
    reqs: &[engine::GenerateRequest],
) -> (Vec<Outcome>, u64) {
    let mut h = Harness::new(model(), tiny_tokenizer(), &cfg(tiles, dir, fingerprint));
    let outs = drive(&mut h, reqs);
    let imported = h
        .stats
        .tiers
        .get()
        .map_or(0, |s| s.imported_tiles.load(Relaxed));
    h.engine
        .close_tiers(Instant::now() + Duration::from_secs(10));
    (outs, imported)
}

#[test]
fn a_restarted_engine_finds_the_prompt_in_the_disk_tier() {
    let d = dir("restart");
    let p = prompt(11, 203);
    let req = greedy(p.clone(), 8);
    let want = solo(model, TS, &req).tokens;
    let (first, imported) = run_once(&d, 1, 512, std::slice::from_ref(&req));
    assert_eq!(first[0].tokens, want);
    assert_eq!(imported, 0, "nothing to import the first time");
    let (second, imported) = run_once(&d, 1, 512, std::slice::from_ref(&req));
    assert_eq!(
        second[0].tokens, want,
        "imported tiles give the same tokens"
    );
    let cached = second[0].finish.expect("finished").1.cached_tokens;
    assert_eq!(
        cached, 200,
        "every full tile of the prompt came from the tier"
    );
    assert!(imported > 0);
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn tiles_evicted_from_a_small_pool_are_found_later() {
    let d = dir("evict");
    let reqs: Vec<_> = (0..12).map(|i| greedy(prompt(40 + i, 61), 4)).collect();
    // 96 tiles hold one or two of these prompts at a time: the earlier ones are evicted.
    let (outs, _) = run_once(&d, 1, 96, &reqs);
    for (o, r) in outs.iter().zip(&reqs) {
        assert_eq!(o.tokens, solo(model, TS, r).tokens, "{o:?}");
    }
    let (again, imported) = run_once(&d, 1, 512, &reqs[..1]);
    assert_eq!(again[0].tokens, outs[0].tokens, "{:?}", again[0]);
    assert!(again[0].finish.expect("finished").1.cached_tokens >= 56);
    assert!(imported > 0);
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn tiles_of_another_model_or_damaged_files_are_never_used() {
    let d = dir("foreign");
    let req = greedy(prompt(21, 83), 6);
    let want = solo(model, TS, &req).tokens;
    run_once(&d, 1, 512, std::slice::from_ref(&req));
    // Another model's fingerprint: other keys, nothing found.
    let (other, imported) = run_once(&d, 2, 512, std::slice::from_ref(&req));
    assert_eq!(other[0].tokens, want);
    assert_eq!(imported, 0);
    assert_eq!(other[0].finish.expect("finished").1.cached_tokens, 0);
    // Damage every file of the first model: each is refused, the prompt recomputed.
    let mut damaged = 0;
    for entry in std::fs::read_dir(&d).expect("tier dir") {
        let path = entry.expect("entry").path();
        let mut bytes = std::fs::read(&path).expect("reads");
        if bytes.len() > 40 {
            let mid = bytes.len() / 2;
            bytes[mid] ^= 0xff;
            std::fs::write(&path, &bytes).expect("writes");
            damaged += 1;
        }
    }
    assert!(damaged > 0);
    let mut h = Harness::new(model(), tiny_tokenizer(), &cfg(512, &d, 1));
    let id = h.submit(req.clone());
    while h.engine.has_work() {
        h.step();
    }
    assert_eq!(h.outcome(id).tokens, want);
    let stats = h.stats.tiers.get().expect("tiers on");
    assert!(
        stats.tiers[0].rejected.load(Relaxed) > 0,
        "damaged files are counted"
    );
    assert_eq!(stats.imported_tiles.load(Relaxed), 0);
    let _ = std::fs::remove_dir_all(&d);
}

/// A deliberately weak prefix key: the parent's key and the tile's first token only, so two
/// prompts that agree on the first token of every tile have the same key for every tile.
fn weak_key(parent: Option<u128>, tokens: &[u32]) -> u128 {
    parent
        .unwrap_or(7)
        .wrapping_mul(0x9e37_79b9_7f4a_7c15)
        .wrapping_add(u128::from(tokens[0]) + 1)
}

/// Like `run_once`, with the weak key function.
fn run_weak(d: &std::path::Path, req: &engine::GenerateRequest) -> (Outcome, u64, u64) {
    let mut h = Harness::new(model(), tiny_tokenizer(), &cfg(512, d, 1));
    h.engine.set_prefix_key_fn(weak_key);
    let out = drive(&mut h, std::slice::from_ref(req)).remove(0);
    let st = h.stats.tiers.get().expect("tiers on");
    let imported = st.imported_tiles.load(Relaxed);
    let rejected = st.tiers[0].rejected.load(Relaxed);
    h.engine
        .close_tiers(Instant::now() + Duration::from_secs(10));
    (out, imported, rejected)
}

#[test]
fn tiles_whose_tier_keys_collide_are_told_apart_by_their_tokens() {
    let d = dir("collide");
    let a = prompt(51, 123);
    // `b` agrees with `a` on the first token of every tile and differs in every other: under the
    // weak key every tile of `b` has the tier key of `a`'s tile at the same place.
    let b: Vec<u32> = a
        .iter()
        .enumerate()
        .map(|(i, &t)| if i % TS == 0 { t } else { 3 + (t - 3 + 1) % 97 })
        .collect();
    assert!(a.iter().zip(&b).any(|(x, y)| x != y));
    let (ra, rb) = (greedy(a, 6), greedy(b, 6));
    let (want_a, want_b) = (solo(model, TS, &ra).tokens, solo(model, TS, &rb).tokens);
    assert_ne!(want_a, want_b, "the two prompts must continue differently");
    let (first, _, _) = run_weak(&d, &ra);
    assert_eq!(first.tokens, want_a);
    // The control: `a` itself is found under the weak keys.
    let (again, imported, _) = run_weak(&d, &ra);
    assert_eq!(again.tokens, want_a);
    assert!(imported > 0);
    assert!(again.finish.expect("finished").1.cached_tokens >= 120);
    // `b` finds a stored tile under every key it asks for, and refuses each: other tokens.
    let (out, imported, rejected) = run_weak(&d, &rb);
    assert_eq!(
        out.tokens, want_b,
        "never computed on another prompt's tiles"
    );
    assert_eq!(out.finish.expect("finished").1.cached_tokens, 0);
    assert_eq!(imported, 0);
    assert!(rejected > 0, "the colliding tiles are counted as refused");
    let _ = std::fs::remove_dir_all(&d);
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

/// Runs `reqs` to the end on `h`.
fn drive(h: &mut Harness<FakeModel>, reqs: &[engine::GenerateRequest]) -> Vec<Outcome> {
    let ids: Vec<_> = reqs.iter().map(|r| h.submit(r.clone())).collect();
    let t0 = Instant::now();
    while h.engine.has_work() {
        h.step();
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "engine did not finish"
        );
    }
    ids.iter().map(|id| h.outcome(*id).clone()).collect()
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
