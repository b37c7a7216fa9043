//! Opens the project's default model (Gemma 3 270M Q4_K_M) and checks its header.
//!
//! Found by `test_support::default_model_path` (`$TESSERA_MODEL`, else the models directory);
//! a missing file fails the test with instructions: weights are never committed.
// Full tier only: reads real model files (`--features real-models`, scripts/test.sh fetches them).
#![cfg(feature = "real-models")]

use gguf::{Array, GgmlType, GgufFile};

#[test]
fn default_model_has_the_expected_gemma3_header() {
    let path = test_support::default_model_path();
    let file = GgufFile::open(&path).expect("the default model opens");
    let md = file.metadata();
    assert_eq!(
        md.require_str("general.architecture")
            .expect("architecture"),
        "gemma3"
    );
    assert_eq!(
        md.require_u32("gemma3.block_count").expect("block count"),
        18
    );
    match md.require_array("tokenizer.ggml.tokens").expect("tokens") {
        Array::String(tokens) => assert_eq!(tokens.len(), 262_144),
        other => panic!(
            "tokens should be strings, got array<{}>",
            other.elem_type_name()
        ),
    }
    let allowed = [
        GgmlType::Q8_0,
        GgmlType::Q5_0,
        GgmlType::Q4_K,
        GgmlType::Q6_K,
        GgmlType::F32,
    ];
    for t in file.tensors() {
        assert!(
            allowed.contains(&t.ggml_type),
            "{} has type {}",
            t.name,
            t.ggml_type
        );
    }
    let embd = file
        .require_tensor("token_embd.weight")
        .expect("embedding present");
    assert_eq!(embd.dims(), [640, 262_144]);
    assert_eq!(embd.data.len(), 262_144 * 640 / 32 * 34);
}
