//! A real draft model: Qwen2.5-Coder-0.5B drafting for Qwen2.5-Coder-1.5B (one tokenizer) gives
//! greedy output bit-identical to the 1.5B decoding alone, and takes some of its drafts. Models
//! are found at `$TESSERA_MODELS_DIR/<canonical file name>`, else `<workspace>/models/`
//! (scripts/test.sh fetches them); a missing model fails with instructions.
// Full tier only: reads real model files (`--features real-models`, scripts/test.sh fetches them).
#![cfg(feature = "real-models")]

mod common;

use std::sync::atomic::Ordering::Relaxed;

use common::*;
use engine::{
    CpuRunner, DraftLoader, DraftModelConfig, EngineConfig, GenerateRequest, Runner,
    SpeculativeConfig, StartError,
};
use test_support::model_path;

const TARGET: &str = "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf";
const DRAFT: &str = "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf";
const TOKENS: usize = 40;

const CODE: &str = "<|im_start|>user\nAdd a docstring to this function and return it whole:\n\
    ```python\ndef mean(values):\n    total = 0\n    for v in values:\n        total += v\n    \
    return total / len(values)\n```<|im_end|>\n<|im_start|>assistant\n";

/// The draft model on the CPU runner, as `tessera serve --draft-model` builds it.
fn cpu_draft(path: std::path::PathBuf) -> DraftLoader {
    DraftLoader::new(path.display().to_string(), move |kv| {
        let m = model::load(&path, 2).map_err(|e| StartError::Draft(e.to_string()))?;
        Ok(Box::new(CpuRunner::new(m.transformer, kv)?) as Box<dyn Runner>)
    })
}

/// The greedy tokens of each prompt with the 1.5B, drafted for by the 0.5B or not; with the
/// drafted and accepted token counts.
fn run(prompts: &[Vec<u32>], draft: bool) -> (Vec<Vec<u32>>, u64, u64) {
    let m = model::load(&model_path(TARGET), 2).expect("the 1.5B loads");
    let cfg = EngineConfig {
        kv_bytes: 64 << 20,
        warm_kv: false,
        speculative: draft.then(|| SpeculativeConfig {
            tokens: 4,
            draft_model: Some(DraftModelConfig {
                load: cpu_draft(model_path(DRAFT)),
                kv_bytes: 32 << 20,
            }),
            ..SpeculativeConfig::default()
        }),
        ..EngineConfig::default()
    };
    let mut h = Harness::new(m.transformer, m.tokenizer, &cfg);
    // Drafting by measured time would hang the outcome on the machine's load.
    h.engine.set_fixed_draft_length();
    let ids: Vec<_> = prompts
        .iter()
        .map(|p| {
            h.submit(GenerateRequest {
                prompt: p.clone(),
                max_tokens: TOKENS,
                ignore_eos: true,
                ..GenerateRequest::default()
            })
        })
        .collect();
    h.run();
    let out = ids
        .iter()
        .map(|id| {
            let o = h.outcome(*id);
            assert!(o.error.is_none(), "{:?}", o.error);
            o.tokens.clone()
        })
        .collect();
    let st = &h.stats;
    (
        out,
        st.spec_draft_tokens.load(Relaxed),
        st.spec_accepted_tokens.load(Relaxed),
    )
}

#[test]
fn qwen_0_5b_drafting_for_the_1_5b_gives_its_greedy_tokens_bit_for_bit() {
    let tok = model::load_tokenizer(&model_path(TARGET)).expect("tokenizer");
    let prompts = vec![
        tok.encode(CODE, false, true),
        tok.encode("The three primary colours are", false, false),
    ];
    let (plain, d0, _) = run(&prompts, false);
    assert_eq!(d0, 0);
    let (drafted, n, accepted) = run(&prompts, true);
    assert_eq!(drafted, plain);
    eprintln!("drafted {n}, accepted {accepted}");
    assert!(n > 0 && accepted > 0, "drafted {n}, accepted {accepted}");
}

#[test]
fn a_draft_model_with_another_tokenizer_is_refused_naming_both_files() {
    let gemma = model_path("gemma-3-270m-q4_k_m.gguf");
    let err = model::draft_vocab::check_vocab_files(&model_path(TARGET), &gemma)
        .expect_err("Gemma's vocabulary is not Qwen's");
    assert!(
        err.contains(TARGET) && err.contains("gemma-3-270m"),
        "{err}"
    );
    model::draft_vocab::check_vocab_files(&model_path(TARGET), &model_path(DRAFT))
        .expect("the 0.5B shares the 1.5B's vocabulary");
}
