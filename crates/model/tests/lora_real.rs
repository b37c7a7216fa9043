//! Qwen2.5-Coder-0.5B with a random LoRA adapter against llama.cpp.
//!
//! `scripts/oracle/qwen_lora_goldens.py` ran llama.cpp (`Llama(model_path, lora_path,
//! lora_scale)`) with the adapter of `model::testing::lora::real_lora_gguf` (rank 8 on attn_q,
//! attn_v and ffn_down, seed `QWEN_LORA_SEED`, strength `QWEN_LORA_STRENGTH`) at scales 1.0
//! and 0.5 and committed the greedy continuations in
//! `tests/goldens/qwen2.5-coder-0.5b_lora_greedy.json`. This test writes the adapter again
//! from the golden's seed and strength, requires the golden's sha256 (the very bytes llama.cpp
//! read), loads it unmerged and checks every scale's cases teacher-forced as the base model's
//! goldens are (`common::greedy`, the margins of `golden_models.rs`): at every step whose
//! llama.cpp top-1/top-2 gap is at least 0.5 our argmax is llama.cpp's, and our logprob of its
//! token is within 0.5 everywhere; closer steps are near-ties that rounding may flip. The
//! golden's base continuations differ from the adapted ones (the oracle checked it), and so
//! the test also checks the base model no longer gives the adapted tokens.
// Full tier only: reads a real model file (`--features real-models`, scripts/test.sh fetches it).
#![cfg(feature = "real-models")]

mod common;

use common::greedy::{load_json, parse_cases, teacher_force_with, Margins, TeacherForced};
use model::testing::lora::real_lora_gguf;
use model::LoraUse;
use sha2::{Digest, Sha256};

const GOLDEN: &str = "tests/goldens/qwen2.5-coder-0.5b_lora_greedy.json";
const MODEL_FILE: &str = "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf";
const MARGINS: Margins = Margins {
    gap: 0.5,
    logprob: 0.5,
};

#[test]
fn qwen_with_a_random_adapter_matches_llama_cpp_at_scales_1_and_half() {
    let g = load_json(GOLDEN);
    let path = common::model_path(MODEL_FILE);
    assert_eq!(
        common::file_sha256(&path),
        g["model"]["sha256"].as_str().expect("model sha256"),
        "{} is not the file the golden was made from",
        path.display()
    );
    let seed = g["adapter"]["seed"].as_u64().expect("adapter seed");
    let strength = g["adapter"]["strength"].as_f64().expect("adapter strength") as f32;
    let file = gguf::GgufFile::open(&path).expect("model opens");
    let bytes = real_lora_gguf(&file, seed, strength).expect("qwen has q, v and ffn_down");
    let sha: String = Sha256::digest(&bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    assert_eq!(
        sha,
        g["adapter"]["sha256"].as_str().expect("adapter sha256"),
        "the regenerated adapter is not the one llama.cpp ran"
    );
    let dir = std::env::temp_dir().join(format!("tessera-lora-real-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let lora_path = dir.join("qwen-lora.gguf");
    std::fs::write(&lora_path, &bytes).expect("write adapter");
    let loaded = model::load(&path, 2).expect("model loads");
    let (tok, mut tf) = (loaded.tokenizer, loaded.transformer);
    let id = tf.load_lora(&lora_path).expect("adapter loads");
    let _ = std::fs::remove_dir_all(&dir);
    for scale in ["1.0", "0.5"] {
        let cases = parse_cases(&g["scales"][scale]["cases"]);
        assert!(cases.len() >= 4, "scale {scale}: too few cases");
        let use_ = [LoraUse {
            id,
            scale: scale.parse().expect("scale"),
        }];
        let mut total = TeacherForced::default();
        for case in &cases {
            assert_eq!(
                tok.encode(&case.prompt, true, false),
                case.prompt_ids,
                "{}: prompt tokenization differs from llama.cpp",
                case.name
            );
            let r = teacher_force_with(&mut tf, case, MARGINS, &use_);
            total.clear_mismatches.extend(r.clear_mismatches);
            total.logprob_mismatches.extend(r.logprob_mismatches);
            total.near_ties_flipped += r.near_ties_flipped;
            total.clear_steps += r.clear_steps;
            total.worst_logprob_diff = total.worst_logprob_diff.max(r.worst_logprob_diff);
            if scale == "1.0" {
                // Without the adapter the same teacher-forced run must disagree with the
                // adapted golden: the adapter is being applied, not ignored.
                let base = teacher_force_with(&mut tf, case, MARGINS, &[]);
                assert!(
                    !base.clear_mismatches.is_empty() || !base.logprob_mismatches.is_empty(),
                    "{}: the base model reproduces the adapted continuation",
                    case.name
                );
            }
        }
        println!(
            "scale {scale}: {} cases, {} steps with a clear choice, {} near-ties flipped, \
             largest logprob difference {:.4} on llama.cpp's token",
            cases.len(),
            total.clear_steps,
            total.near_ties_flipped,
            total.worst_logprob_diff
        );
        assert!(
            total.clear_mismatches.is_empty() && total.logprob_mismatches.is_empty(),
            "scale {scale}: teacher-forced steps differ from llama.cpp:\n{}\n{}",
            total.clear_mismatches.join("\n"),
            total.logprob_mismatches.join("\n")
        );
    }
}
