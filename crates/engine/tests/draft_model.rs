//! A draft model drafting through the engine: tiny GGUF transformers (the model crate's test
//! models, one vocabulary) draft for the fake model and for a tiny transformer target. Greedy
//! output must be exactly the output without drafts, whatever the draft model proposes; the
//! draft model's own tiles must all come back when its sequences end, are preempted or are
//! evicted for room.

mod common;

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use common::*;
use engine::{
    CpuRunner, DraftAsk, DraftModel, Drafter, EngineConfig, FinishReason, GenerateRequest, KvSpec,
    SeqId, Speculation,
};
use model::{KvDtype, SamplingParams, Transformer};

const TS: usize = 4;

/// A tiny `llama` model file with weights from `seed` (same vocabulary for every seed).
fn tiny_file(seed: u64) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("tessera-draft-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let path = dir.join(format!("tiny-{seed}.gguf"));
    if !path.exists() {
        // Tests run on parallel threads: each writes its own temporary file, and the renames
        // (atomic) leave one complete file whoever wins.
        static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let tmp = dir.join(format!("tiny-{seed}.gguf.{n}.tmp"));
        std::fs::write(&tmp, model::testing::tiny_model_gguf("llama", seed)).expect("write");
        std::fs::rename(&tmp, &path).expect("rename");
    }
    path
}

fn tiny(seed: u64) -> Transformer {
    model::load(&tiny_file(seed), 1)
        .expect("tiny model loads")
        .transformer
}

/// A `DraftModel` the test can still look into after handing it to the engine.
#[derive(Clone)]
struct Shared(Arc<Mutex<DraftModel>>);

impl Drafter for Shared {
    fn propose(&mut self, id: SeqId, tokens: &[u32], max: usize) -> Vec<u32> {
        self.0
            .lock()
            .expect("draft model lock")
            .propose(id, tokens, max)
    }
    fn propose_all(&mut self, asks: &[DraftAsk]) -> Vec<Result<engine::Draft, ()>> {
        self.0.lock().expect("draft model lock").propose_all(asks)
    }
    fn release(&mut self, id: SeqId) {
        self.0.lock().expect("draft model lock").release(id)
    }
}

fn draft_model(seed: u64, tiles: usize) -> Shared {
    let t = tiny(seed);
    let tile_bytes = t.config().kv_layout(TS).tile_bytes();
    let kv = KvSpec {
        tile_size: TS,
        bytes: tiles * tile_bytes,
        dtype: KvDtype::F16,
        warm: false,
    };
    Shared(Arc::new(Mutex::new(
        DraftModel::new(Box::new(CpuRunner::new(t, &kv).expect("draft runner")))
            .expect("draft model"),
    )))
}

fn speculate(d: &Shared, max_tokens: usize) -> Speculation {
    Speculation {
        drafter: Box::new(d.clone()),
        max_tokens,
        adaptive: false,
    }
}

fn tiny_config(tiles: usize) -> EngineConfig {
    let t = tiny(7);
    EngineConfig {
        tile_size: TS,
        kv_bytes: tiles * t.config().kv_layout(TS).tile_bytes(),
        max_batch_tokens: 64,
        max_seqs: 8,
        warm_kv: false,
        ..EngineConfig::default()
    }
}

/// Every request's tokens from one engine over the tiny target (seed 7), with `draft` if any.
fn run_tiny(reqs: &[GenerateRequest], draft: Option<&Shared>, tiles: usize) -> Vec<Vec<u32>> {
    let mut h = Harness::new(tiny(7), tiny_tokenizer(), &tiny_config(tiles));
    if let Some(d) = draft {
        h.engine.set_speculation(speculate(d, 4));
    }
    let ids: Vec<SeqId> = reqs.iter().map(|r| h.submit(r.clone())).collect();
    h.run();
    ids.iter()
        .map(|id| {
            let o = h.outcome(*id);
            assert!(o.error.is_none(), "{:?}", o.error);
            o.tokens.clone()
        })
        .collect()
}

#[test]
fn a_model_drafting_for_itself_is_always_right_and_changes_no_token() {
    let reqs: Vec<GenerateRequest> = (0..4).map(|i| greedy(prompt(20 + i, 9), 24)).collect();
    let plain = run_tiny(&reqs, None, 256);
    let d = draft_model(7, 256);
    let stats_before = d.0.lock().expect("draft model lock").tiles();
    let mut h = Harness::new(tiny(7), tiny_tokenizer(), &tiny_config(256));
    h.engine.set_speculation(speculate(&d, 4));
    let ids: Vec<SeqId> = reqs.iter().map(|r| h.submit(r.clone())).collect();
    h.run();
    for (id, want) in ids.iter().zip(&plain) {
        assert_eq!(&h.outcome(*id).tokens, want);
    }
    let drafted = h
        .stats
        .spec_draft_tokens
        .load(std::sync::atomic::Ordering::Relaxed);
    let accepted = h
        .stats
        .spec_accepted_tokens
        .load(std::sync::atomic::Ordering::Relaxed);
    assert!(drafted > 40, "drafted {drafted}");
    // The same weights compute the same logits one token at a time as in a chunk.
    assert_eq!(accepted, drafted, "a self-draft was rejected");
    // Fewer steps than tokens: drafts were taken.
    assert!(h.steps < 24 + 4, "{} steps", h.steps);
    let dm = d.0.lock().expect("draft model lock");
    assert_eq!(dm.sequences(), 0, "finished sequences keep draft state");
    assert_eq!(dm.tiles(), stats_before, "draft tiles leaked");
}

#[test]
fn another_model_drafts_and_greedy_output_is_exactly_the_output_without_it() {
    let reqs: Vec<GenerateRequest> = (0..6)
        .map(|i| greedy(prompt(40 + i, 5 + i as usize), 20))
        .collect();
    let plain = run_tiny(&reqs, None, 256);
    // Roomy, then so small (8 tiles for 6 sequences of up to 25 tokens) that sequences
    // evict each other's draft caches and some draft nothing.
    for tiles in [256, 8] {
        let d = draft_model(8, tiles);
        let drafted = run_tiny(&reqs, Some(&d), 256);
        assert_eq!(drafted, plain, "draft pool of {tiles} tiles");
        let dm = d.0.lock().expect("draft model lock");
        assert_eq!(dm.sequences(), 0);
        assert_eq!(dm.tiles().0, dm.tiles().1, "draft tiles leaked");
    }
}

#[test]
fn draft_model_drafts_for_the_fake_model_through_preemption_and_sampling() {
    // The fake model's windowed groups and a pool that forces preemption; a third of the
    // requests sample (speculative sampling), the rest are greedy and must match their solo
    // runs token for token.
    let window = Some(10);
    let model = || FakeModel::new(window);
    let mut rng = SplitMix64::new(5);
    let reqs: Vec<GenerateRequest> = (0..40u64)
        .map(|i| {
            let p = prompt(500 + i, 1 + rng.below(20));
            let n = 1 + rng.below(30);
            if i % 3 == 0 {
                GenerateRequest {
                    sampling: SamplingParams {
                        temperature: 0.9,
                        top_k: 20,
                        seed: Some(i),
                        ..SamplingParams::default()
                    },
                    ..greedy(p, n)
                }
            } else {
                greedy(p, n)
            }
        })
        .collect();
    let m = model();
    let mut cfg = fake_config(&m, TS, 40);
    cfg.max_batch_tokens = 24;
    let mut h = Harness::new(m, tiny_tokenizer(), &cfg);
    let d = draft_model(7, 64);
    h.engine.set_speculation(speculate(&d, 3));
    let mut ids = Vec::new();
    for r in &reqs {
        ids.push(h.submit(r.clone()));
        for _ in 0..rng.below(3) {
            h.step();
        }
    }
    h.run();
    assert!(
        h.engine.scheduler().preemptions_total() > 0,
        "the pool forces preemption"
    );
    for (id, r) in ids.iter().zip(&reqs) {
        let o = h.outcome(*id);
        assert_eq!(o.finish.map(|f| f.0), Some(FinishReason::Length), "{o:?}");
        assert_eq!(o.tokens.len(), r.max_tokens);
        if r.sampling.temperature == 0.0 {
            assert_eq!(o.tokens, solo(model, TS, r).tokens);
        }
    }
    let dm = d.0.lock().expect("draft model lock");
    assert_eq!(dm.sequences(), 0);
    assert_eq!(dm.tiles().0, dm.tiles().1, "draft tiles leaked");
    assert!(
        h.stats
            .spec_draft_tokens
            .load(std::sync::atomic::Ordering::Relaxed)
            > 100
    );
}

#[test]
fn a_draft_model_of_another_vocabulary_is_refused_naming_both_files() {
    let ok = model::draft_vocab::check_vocab_files(&tiny_file(7), &tiny_file(8));
    assert!(ok.is_ok(), "{ok:?}");
    // The same tiny vocabulary with one token spelled differently.
    let tok = tiny_tokenizer();
    let mut tokens: Vec<String> = (0..tok.vocab_size() as u32)
        .map(|t| {
            tok.token_piece(t)
                .expect("every id has a piece")
                .to_string()
        })
        .collect();
    tokens[40] = "≠".into();
    let mut w = model::testing::tiny_model_writer("llama", 9).expect("llama");
    w.add_metadata("tokenizer.ggml.tokens", gguf::Array::String(tokens));
    let other = tiny_file(7).with_file_name("tiny-other-vocab.gguf");
    std::fs::write(&other, w.write_to_vec()).expect("write");
    let err = model::draft_vocab::check_vocab_files(&tiny_file(7), &other)
        .expect_err("a different vocabulary is refused");
    assert!(
        err.contains("tiny-7.gguf") && err.contains("tiny-other-vocab.gguf"),
        "{err}"
    );
    assert!(err.contains("token 40"), "{err}");
}

#[test]
fn the_draft_cost_counts_drafting_passes_only_never_a_prompt_catch_up() {
    let d = draft_model(11, 64);
    let mut m = d.0.lock().expect("draft model lock");
    // Unmeasured: zero, so the engine's adaptive rule drafts and measures it.
    assert_eq!(m.secs_per_position(), Some(0.0));
    let prompt: Vec<u32> = (0..40).map(|i| 3 + i % 20).collect();
    let greedy = SamplingParams::default();
    let ask = |max| DraftAsk {
        id: SeqId(1),
        tokens: &prompt,
        max,
        sampling: &greedy,
    };
    // One position: the pass that catches the 40-token prompt up, which is not a drafting cost.
    let out = m.propose_all(&[ask(1)]);
    assert!(
        matches!(&out[..], [Ok(d)] if d.tokens.len() == 1),
        "{out:?}"
    );
    assert_eq!(m.secs_per_position(), Some(0.0));
    // Three positions: the later two feed one token each and are measured.
    let out = m.propose_all(&[ask(3)]);
    assert!(
        matches!(&out[..], [Ok(d)] if d.tokens.len() == 3),
        "{out:?}"
    );
    assert!(m.secs_per_position().is_some_and(|s| s > 0.0));
}

/// The draft model as `tessera serve --draft-model` gives it: a loader in the configuration,
/// which the engine calls for a second runner (it loads no model itself).
fn loader_config(draft_seed: u64) -> EngineConfig {
    let path = tiny_file(draft_seed);
    let load = engine::DraftLoader::new(path.display().to_string(), move |kv| {
        let m = model::load(&path, 1).map_err(|e| engine::StartError::Draft(e.to_string()))?;
        Ok(Box::new(CpuRunner::new(m.transformer, kv)?) as Box<dyn engine::Runner>)
    });
    EngineConfig {
        speculative: Some(engine::SpeculativeConfig {
            tokens: 4,
            draft_model: Some(engine::DraftModelConfig {
                load,
                kv_bytes: 256 * tiny(7).config().kv_layout(TS).tile_bytes(),
            }),
            ..engine::SpeculativeConfig::default()
        }),
        ..tiny_config(256)
    }
}

#[test]
fn a_draft_model_from_its_loader_drafts_on_a_second_runner_and_changes_no_greedy_token() {
    let reqs: Vec<GenerateRequest> = (0..3).map(|i| greedy(prompt(60 + i, 7), 16)).collect();
    let plain = run_tiny(&reqs, None, 256);
    let mut h = Harness::new(tiny(7), tiny_tokenizer(), &loader_config(8));
    // The adaptive rule drafts by measured time: fixed, so that the outcome does not hang on the machine.
    h.engine.set_fixed_draft_length();
    let ids: Vec<SeqId> = reqs.iter().map(|r| h.submit(r.clone())).collect();
    h.run();
    for (id, want) in ids.iter().zip(&plain) {
        assert_eq!(&h.outcome(*id).tokens, want);
    }
    let drafted = h
        .stats
        .spec_draft_tokens
        .load(std::sync::atomic::Ordering::Relaxed);
    assert!(drafted > 0, "the loaded draft model drafted nothing");
}

#[test]
fn a_draft_runner_of_another_vocabulary_size_stops_the_engine_naming_it() {
    let mut cfg = tiny_config(256);
    let load = engine::DraftLoader::new("the-other-draft", |kv| {
        let mut other = FakeModel::new(None);
        other.vocab += 1;
        Ok(Box::new(engine::IntoRunner::into_runner(other, kv)?) as Box<dyn engine::Runner>)
    });
    cfg.speculative = Some(engine::SpeculativeConfig {
        draft_model: Some(engine::DraftModelConfig {
            load,
            kv_bytes: 1 << 20,
        }),
        ..engine::SpeculativeConfig::default()
    });
    let err = engine::Engine::new(
        CpuRunner::new(tiny(7), &cfg.kv_spec()).expect("runner"),
        tiny_tokenizer(),
        &cfg,
        Default::default(),
    )
    .err()
    .expect("refused")
    .to_string();
    let want = format!(
        "the-other-draft has {} tokens",
        model::testing::tiny_vocab_size() + 1
    );
    assert!(err.contains(&want), "{err}");
}
