//! SmolLM2-135M-Instruct (`llama` architecture, Q4_1 weights, the `smollm` BPE pre-tokenizer)
//! loads and answers sensibly: its tokenizer splits digits one by one as llama.cpp's `smollm`
//! pre-tokenizer does, and its greedy continuation of a factual prompt names the answer.
//!
//! The model is `$TESSERA_MODELS_DIR/smollm2-135m-instruct-q4_1.gguf` (else
//! `<workspace>/models/`); `tessera fetch-model smollm2-135m` fetches it (scripts/test.sh does).
//! A missing file fails with that instruction, never a silent pass.
// Full tier only: reads real model files (`--features real-models`, scripts/test.sh fetches them).
#![cfg(feature = "real-models")]

use model::{LogitsWanted, Session};

const FILE: &str = "smollm2-135m-instruct-q4_1.gguf";

fn argmax(v: &[f32]) -> u32 {
    let mut best = 0;
    for (i, &x) in v.iter().enumerate() {
        if x > v[best] {
            best = i;
        }
    }
    best as u32
}

#[test]
fn smollm2_tokenizes_digits_one_by_one_and_continues_greedily_with_the_answer() {
    let m = model::load(&test_support::model_path(FILE), 2).expect("SmolLM2 loads");
    let (tok, mut tf) = (m.tokenizer, m.transformer);
    // "Hello", " world", "!", " ", "1", "2", "3": no BOS (the file says so), every digit alone.
    assert_eq!(
        tok.encode("Hello world! 123", true, false),
        [19556, 905, 17, 216, 33, 34, 35]
    );
    let prompt = tok.encode("The capital of France is", true, false);
    let n = 4;
    let mut session = Session::new(&tf, 1, prompt.len() + n, 16);
    let mut logits = session
        .prefill(&mut tf, 0, &prompt, 512)
        .expect("prefill runs");
    let mut out = Vec::new();
    for _ in 0..n {
        let next = argmax(&logits);
        out.push(next);
        session
            .run(&mut tf, &[(0, &[next], LogitsWanted::Last)], &mut logits)
            .expect("decode step runs");
    }
    let text = tok.decode(&out, false);
    assert!(text.starts_with(" Paris"), "greedy continuation {text:?}");
}
