//! Perplexity of the default model on a fixed English text is within 1% of llama.cpp's
//! (`tests/goldens/gemma3_perplexity.json`, made by `scripts/oracle/perplexity.py` the way
//! `llama-perplexity -c 512` computes it).
// Full tier only: reads real model files (`--features real-models`, scripts/test.sh fetches them).
#![cfg(feature = "real-models")]

mod common;

use serde_json::Value;

#[test]
fn perplexity_is_within_one_percent_of_llama_cpp() {
    let golden: Value = serde_json::from_str(
        &std::fs::read_to_string(common::golden("tests/goldens/gemma3_perplexity.json"))
            .expect("golden readable"),
    )
    .expect("golden is JSON");
    let text_path = golden["text"]["file"].as_str().expect("text file");
    let mut text = std::fs::read_to_string(common::golden(text_path)).expect("text readable");
    if text.ends_with('\n') {
        text.pop();
    }
    let m = model::load(&common::default_model_path(), 2).expect("default model loads");
    let (tok, mut tf) = (m.tokenizer, m.transformer);
    let tokens = tok.encode(&text, true, false);
    assert_eq!(
        tokens.len() as u64,
        golden["text"]["n_tokens"].as_u64().expect("n_tokens"),
        "tokenization of the text differs from llama.cpp's"
    );
    let bos = tok.bos_id().expect("model has BOS");
    let ours = model::eval::perplexity(
        &mut tf,
        &tokens,
        Some(bos),
        512,
        model::KvDtype::F16,
        |_, _| {},
    )
    .expect("runs");
    let theirs = golden["ppl"].as_f64().expect("ppl");
    assert_eq!(
        ours.n_scored as u64,
        golden["n_scored_tokens"].as_u64().expect("n_scored")
    );
    let rel = (ours.ppl - theirs).abs() / theirs;
    println!(
        "perplexity: ours {:.4} ± {:.4}, llama.cpp {theirs:.4} (relative difference {:.3}%)",
        ours.ppl,
        ours.ppl_error,
        rel * 100.0
    );
    assert!(
        rel < 0.01,
        "perplexity {:.4} is not within 1% of llama.cpp's {theirs:.4}",
        ours.ppl
    );
}
