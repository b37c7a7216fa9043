//! KV tiers with the fake runner (see `common`): tiles written to a disk tier by one engine are
//! found by another, imported into its pool and used as a prefix hit; whatever the tier holds —
//! tiles of another model, damaged files — the tokens are those of a run without tiers.

mod common;

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
