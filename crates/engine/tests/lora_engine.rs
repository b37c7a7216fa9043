//! LoRA adapters through the engine, on the tiny llama model with tiny adapters: requests name
//! adapters by name and scale; sequences of different adapters batched together get the tokens
//! each gets alone; a prompt shared across adapters is never served from another adapter's
//! tiles (prefix cache, disk KV tier); `max_loras` drops the least recently used adapter, never
//! one a request uses.

mod common;

use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering::Relaxed;
use std::time::{Duration, Instant};

use common::*;
use engine::{EngineConfig, EngineError, GenerateRequest, LoraRequest, TierConfig};
use model::Transformer;

const TS: usize = 4;
const MODEL_SEED: u64 = 7;

/// A directory of this test process with the tiny model and adapters `a0`..`a3`.
fn files() -> PathBuf {
    let dir = std::env::temp_dir().join(format!("tessera-lora-engine-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let write = |name: &str, bytes: Vec<u8>| {
        let path = dir.join(name);
        if !path.exists() {
            // Tests run on parallel threads: write aside, rename (atomic) into place.
            let tmp = dir.join(format!("{name}.{:?}.tmp", std::thread::current().id()));
            std::fs::write(&tmp, bytes).expect("write");
            std::fs::rename(&tmp, &path).expect("rename");
        }
    };
    write(
        "tiny.gguf",
        model::testing::tiny_model_gguf("llama", MODEL_SEED),
    );
    for i in 0..4 {
        let bytes = model::testing::lora::tiny_lora_gguf("llama", 40 + i);
        write(&format!("a{i}.gguf"), bytes);
    }
    dir
}

fn tiny() -> Transformer {
    model::load(&files().join("tiny.gguf"), 1)
        .expect("tiny model loads")
        .transformer
}

fn adapter(i: usize) -> (String, PathBuf) {
    (format!("a{i}"), files().join(format!("a{i}.gguf")))
}

fn config(tiles: usize, max_loras: usize, adapters: &[usize]) -> EngineConfig {
    EngineConfig {
        tile_size: TS,
        kv_bytes: tiles * tiny().config().kv_layout(TS).tile_bytes(),
        max_batch_tokens: 64,
        max_seqs: 16,
        warm_kv: false,
        itl_slowdown: 0.0,
        loras: adapters.iter().map(|&i| adapter(i)).collect(),
        max_loras,
        ..EngineConfig::default()
    }
}

fn harness(cfg: &EngineConfig) -> Harness<Transformer> {
    Harness::new(tiny(), tiny_tokenizer(), cfg)
}

/// `req` computing with the named adapters and scales.
fn with(mut req: GenerateRequest, loras: &[(&str, f32)]) -> GenerateRequest {
    req.loras = loras
        .iter()
        .map(|&(name, scale)| LoraRequest {
            name: name.into(),
            scale,
        })
        .collect();
    req
}

/// `req`'s tokens alone in a fresh engine with every adapter registered.
fn alone(req: &GenerateRequest) -> Vec<u32> {
    let mut h = harness(&config(512, 4, &[0, 1, 2, 3]));
    let out = drive(&mut h, std::slice::from_ref(req));
    assert!(out[0].error.is_none(), "{:?}", out[0].error);
    out[0].tokens.clone()
}

#[test]
fn sixteen_sequences_over_four_adapters_and_the_base_get_their_tokens_alone() {
    let reqs: Vec<GenerateRequest> = (0..16)
        .map(|i| {
            let req = greedy(prompt(100 + i as u64 % 3, 9 + i), 10);
            match i % 5 {
                4 => req,
                a => with(req, &[(["a0", "a1", "a2", "a3"][a], [1.0, 0.5][i % 2])]),
            }
        })
        .collect();
    let mut h = harness(&config(512, 4, &[0, 1, 2, 3]));
    let together = drive(&mut h, &reqs);
    assert!(h.steps < 16 * 10, "the sequences ran together");
    for (o, r) in together.iter().zip(&reqs) {
        assert!(o.error.is_none(), "{:?}", o.error);
        assert_eq!(o.tokens, alone(r), "{:?}", r.loras);
    }
    // The adapters change what is generated (else this test could not fail).
    let base = greedy(prompt(100, 12), 10);
    let base_tokens = alone(&base);
    let changed = (0..4)
        .filter(|i| alone(&with(base.clone(), &[(&format!("a{i}"), 1.0)])) != base_tokens)
        .count();
    assert!(
        changed >= 3,
        "only {changed} of 4 adapters changed the output"
    );
}

/// Registered tiles holding `block` in KV group 0.
fn tiles_holding(h: &mut Harness<Transformer>, block: &[u32]) -> usize {
    let index = h.engine.kv_index();
    index
        .tiles
        .iter()
        .filter(|t| t.group == 0 && t.tokens == block)
        .count()
}

#[test]
fn a_shared_system_prompt_is_never_served_from_another_adapters_tiles() {
    let system = prompt(7, 40);
    let ask = |i: u64| {
        let mut p = system.clone();
        p.extend(prompt(200 + i, 5));
        greedy(p, 6)
    };
    let mut h = harness(&config(512, 4, &[0, 1, 2, 3]));
    let runs: [(&[(&str, f32)], usize); 6] = [
        (&[], 0),
        (&[("a0", 1.0)], 0),
        (&[("a1", 1.0)], 0),
        (&[("a0", 0.5)], 0),
        (&[("a0", 1.0), ("a1", 1.0)], 0),
        // The same adapter and scale again: its own tiles.
        (&[("a0", 1.0)], 40),
    ];
    for (i, (loras, cached)) in runs.iter().enumerate() {
        let req = with(ask(i as u64), loras);
        let o = &drive(&mut h, std::slice::from_ref(&req))[0];
        assert!(o.error.is_none(), "{:?}", o.error);
        assert_eq!(o.tokens, alone(&req), "{loras:?}");
        let usage = o.finish.expect("finished").1;
        assert_eq!(usage.cached_tokens, *cached, "{loras:?}");
    }
    // Each adapter set computed the system prompt's tiles under a key of its own: the prefix
    // index (what KV events publish) holds the first block five times.
    assert_eq!(tiles_holding(&mut h, &system[..TS]), 5);
    // ... each named as KV events name it: vLLM's lora_id and lora_name for one adapter at
    // scale 1, a combined name and no id otherwise, nothing for the base model.
    let mut names: Vec<Option<(Option<u64>, String)>> = h
        .engine
        .kv_index()
        .tiles
        .iter()
        .filter(|t| t.group == 0 && t.tokens == system[..TS])
        .map(|t| t.lora.as_ref().map(|l| (l.id, l.name.clone())))
        .collect();
    names.sort();
    let expected = [
        None,
        Some((None, "a0*0.5".to_string())),
        Some((None, "a0*1+a1*1".to_string())),
        Some((Some(1), "a0".to_string())),
        Some((Some(2), "a1".to_string())),
    ];
    assert_eq!(names, expected);
}

fn tier_dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("tessera-lora-tier-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("tier dir");
    d
}

/// One engine over the disk tier in `dir` runs `req`, then writes its pool to the tier (as at
/// shutdown); the outcome's tokens, its cached prompt tokens and the tiles imported.
fn run_tiered(dir: &Path, req: &GenerateRequest) -> (Vec<u32>, usize, u64) {
    let cfg = EngineConfig {
        kv_tiers: Some(TierConfig {
            model_fingerprint: [3; 32],
            disk: Some((dir.to_path_buf(), 1 << 30)),
            redis: None,
            write_through: false,
        }),
        ..config(512, 4, &[0, 1, 2, 3])
    };
    let mut h = harness(&cfg);
    let o = drive(&mut h, std::slice::from_ref(req))[0].clone();
    assert!(o.error.is_none(), "{:?}", o.error);
    let imported = h
        .stats
        .tiers
        .get()
        .map_or(0, |s| s.imported_tiles.load(Relaxed));
    h.engine
        .close_tiers(Instant::now() + Duration::from_secs(10));
    (
        o.tokens,
        o.finish.expect("finished").1.cached_tokens,
        imported,
    )
}

#[test]
fn a_disk_tier_never_serves_one_adapters_tiles_to_another() {
    let d = tier_dir("shared");
    let p = prompt(31, 41);
    let a0 = with(greedy(p.clone(), 6), &[("a0", 1.0)]);
    let (tokens, cached, _) = run_tiered(&d, &a0);
    assert_eq!((tokens, cached), (alone(&a0), 0));
    for other in [
        greedy(p.clone(), 6),
        with(greedy(p.clone(), 6), &[("a1", 1.0)]),
        with(greedy(p.clone(), 6), &[("a0", 0.5)]),
    ] {
        let (tokens, cached, imported) = run_tiered(&d, &other);
        assert_eq!(tokens, alone(&other), "{:?}", other.loras);
        assert_eq!((cached, imported), (0, 0), "{:?}", other.loras);
    }
    // The same adapter at the same scale finds its tiles in the tier.
    let (tokens, cached, imported) = run_tiered(&d, &a0);
    assert_eq!(tokens, alone(&a0));
    assert_eq!(cached, 40);
    assert!(imported > 0);
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn the_least_recently_used_adapter_goes_first_never_one_in_use() {
    // Two slots for three adapters: registering a2 at start dropped a0.
    let mut h = harness(&config(512, 2, &[0, 1, 2]));
    assert_eq!(h.engine.loras_loaded(), 2);
    let long = |seed: u64, name: &str| with(greedy(prompt(seed, 9), 40), &[(name, 1.0)]);
    let (r0, r1, r2) = (long(1, "a0"), long(2, "a1"), long(3, "a2"));
    let id0 = h.submit(r0.clone()); // loads a0 again, dropping a1 (used less recently than a2)
    h.step();
    let id1 = h.submit(r1.clone()); // loads a1, dropping a2: a0 is in use
    h.step();
    assert_eq!(h.engine.loras_loaded(), 2);
    // a0 and a1 are in use: no room for a2.
    let id2 = h.submit(r2.clone());
    let err = h.outcome(id2).error.clone().expect("refused");
    assert!(
        matches!(&err, EngineError::Overloaded(m) if m.contains("in use")),
        "{err:?}"
    );
    h.run();
    for (id, r) in [(id0, &r0), (id1, &r1)] {
        let o = h.outcome(id);
        assert!(o.error.is_none(), "{:?}", o.error);
        assert_eq!(o.tokens, alone(r));
    }
    // Now free, they make room again.
    let id2 = h.submit(r2.clone());
    h.run();
    assert_eq!(h.outcome(id2).tokens, alone(&r2));
    assert_eq!(h.engine.loras_loaded(), 2);
}

#[test]
fn an_adapter_removed_while_in_use_serves_its_requests_to_the_end() {
    let mut h = harness(&config(512, 4, &[0, 1]));
    let r = with(greedy(prompt(5, 9), 20), &[("a0", 1.0)]);
    let id = h.submit(r.clone());
    h.step();
    h.engine.unload_lora("a0").expect("a0 is registered");
    assert_eq!(h.engine.loras().len(), 1, "its name is gone at once");
    assert_eq!(
        h.engine.loras_loaded(),
        2,
        "the runner keeps it while in use"
    );
    let refused = h.submit(r.clone());
    let err = h.outcome(refused).error.clone().expect("refused");
    assert!(
        err.to_string().contains("no LoRA adapter named 'a0'"),
        "{err}"
    );
    h.run();
    assert_eq!(h.outcome(id).tokens, alone(&r));
    assert_eq!(h.engine.loras_loaded(), 1, "dropped once its request ended");
    // Registered again under the same name, it computes the same.
    let (_, path) = adapter(0);
    h.engine.load_lora("a0", &path).expect("loads again");
    let again = h.submit(r.clone());
    h.run();
    assert_eq!(h.outcome(again).tokens, alone(&r));
}

#[test]
fn bad_adapter_requests_and_files_are_refused_naming_what_is_wrong() {
    let mut h = harness(&config(512, 4, &[0]));
    let req = greedy(prompt(9, 9), 4);
    let cases: [(&[(&str, f32)], &str); 3] = [
        (&[("nope", 1.0)], "no LoRA adapter named 'nope'"),
        (&[("a0", 1.0), ("a0", 0.5)], "named twice"),
        (&[("a0", f32::NAN)], "finite"),
    ];
    for (loras, want) in cases {
        let id = h.submit(with(req.clone(), loras));
        let err = h.outcome(id).error.clone().expect("refused");
        assert!(
            matches!(&err, EngineError::InvalidRequest(m) if m.contains(want)),
            "{loras:?}: {err:?}"
        );
    }
    // Scale 0 is the base model.
    let id = h.submit(with(req.clone(), &[("a0", 0.0)]));
    h.run();
    assert_eq!(h.outcome(id).tokens, alone(&req));
    // An adapter of another architecture, a file that is not there, a name taken.
    let dir = files();
    let other = dir.join("qwen2-adapter.gguf");
    std::fs::write(&other, model::testing::lora::tiny_lora_gguf("qwen2", 1)).expect("write");
    let err = h.engine.load_lora("q", &other).expect_err("refused");
    assert!(err.to_string().contains("qwen2-adapter.gguf"), "{err}");
    let err = h
        .engine
        .load_lora("m", &dir.join("missing.gguf"))
        .expect_err("refused");
    assert!(err.to_string().contains("missing.gguf"), "{err}");
    let err = h
        .engine
        .load_lora("a0", &adapter(1).1)
        .expect_err("refused");
    assert!(err.to_string().contains("already loaded"), "{err}");
    assert_eq!(h.engine.loras().len(), 1);
}

/// Keys that ignore the chain's root and parent: every adapter's first tiles collide.
fn rootless_key(_parent: Option<u128>, tokens: &[u32]) -> u128 {
    engine::tiles::chain_key(None, tokens)
}

#[test]
fn tiles_of_another_adapter_are_refused_even_when_keys_collide() {
    let mut h = harness(&config(512, 4, &[0]));
    h.engine.set_prefix_key_fn(rootless_key);
    let p = prompt(12, 21);
    let base = greedy(p.clone(), 6);
    let a0 = with(base.clone(), &[("a0", 1.0)]);
    for (req, cached) in [(&base, 0), (&a0, 0), (&base, 20)] {
        let o = &drive(&mut h, std::slice::from_ref(req))[0];
        assert_eq!(o.tokens, alone(req), "{:?}", req.loras);
        assert_eq!(o.finish.expect("finished").1.cached_tokens, cached);
    }
}
