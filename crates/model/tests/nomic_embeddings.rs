//! nomic-embed-text-v1.5 (the real F16 file) against llama.cpp's embeddings of the same file
//! (`tests/goldens/nomic-embed-text-v1.5_embeddings.json`, from
//! `scripts/oracle/encoder_goldens.py`): for every text, from one word to the full 2,048-token
//! context, the same token ids (count, and ids where stored) and a cosine of at least 0.9999
//! between our mean-pooled, L2-normalised embedding and llama.cpp's.
// Full tier only: reads the real model file (`--features real-models`).
#![cfg(feature = "real-models")]

use serde_json::Value;

use model::{load_encoder, Dtype, Pooling};

const FILE: &str = "nomic-embed-text-v1.5.f16.gguf";
const MIN_COSINE: f64 = 0.9999;

fn golden() -> Value {
    let path =
        test_support::repo_root().join("tests/goldens/nomic-embed-text-v1.5_embeddings.json");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).expect("golden is JSON")
}

fn floats(v: &Value) -> Vec<f64> {
    v.as_array()
        .expect("array")
        .iter()
        .map(|x| x.as_f64().expect("number"))
        .collect()
}

fn cosine(a: &[f32], b: &[f64]) -> f64 {
    let dot: f64 = a.iter().zip(b).map(|(x, y)| f64::from(*x) * y).sum();
    let na: f64 = a.iter().map(|x| f64::from(*x).powi(2)).sum::<f64>().sqrt();
    let nb: f64 = b.iter().map(|y| y * y).sum::<f64>().sqrt();
    dot / (na * nb)
}

#[test]
fn embeddings_match_llama_cpp_for_every_golden_text() {
    check_against_llama_cpp(Dtype::Float32);
}

/// BF16 arithmetic (`--dtype bfloat16`, the default where the CPU has AVX-512 BF16) stays
/// within the same cosine of llama.cpp's embeddings, on every CPU (emulated where it is not
/// native).
#[test]
fn bf16_embeddings_match_llama_cpp_for_every_golden_text() {
    check_against_llama_cpp(Dtype::Bfloat16);
}

fn check_against_llama_cpp(dtype: Dtype) {
    let g = golden();
    let path = test_support::model_path(FILE);
    let mut m = load_encoder(&path, 2, dtype).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    assert_eq!(
        m.encoder.n_embd() as u64,
        g["n_embd"].as_u64().expect("n_embd")
    );
    assert_eq!(m.encoder.max_positions(), 2048);
    assert_eq!(m.encoder.pooling(), Pooling::Mean);
    assert!(!m.encoder.is_reranker());
    let cases = g["cases"].as_array().expect("cases");
    assert!(cases.len() >= 50, "{} cases", cases.len());
    let mut ids_all = Vec::new();
    for case in cases {
        let name = case["name"].as_str().expect("name");
        let ids = m
            .tokenizer
            .encode(case["text"].as_str().expect("text"), true, false);
        assert_eq!(
            ids.len() as u64,
            case["n_tokens"].as_u64().expect("n_tokens"),
            "{name}"
        );
        if let Some(want) = case.get("ids") {
            let want: Vec<u32> = floats(want).iter().map(|&x| x as u32).collect();
            assert_eq!(ids, want, "{name}");
        }
        ids_all.push(ids);
    }
    assert!(
        ids_all.iter().any(|ids| ids.len() == 2048),
        "no full-context text"
    );
    // Short texts in one batch (as the engine would run them), long ones alone.
    let (mut worst, mut worst_name) = (1.0f64, "");
    let mut i = 0;
    while i < cases.len() {
        let mut j = i;
        let mut rows = 0;
        while j < cases.len() && (j == i || rows + ids_all[j].len() <= 512) {
            rows += ids_all[j].len();
            j += 1;
        }
        let batch: Vec<&[u32]> = ids_all[i..j].iter().map(Vec::as_slice).collect();
        let got = m
            .encoder
            .embed_batch(&batch, Pooling::Mean, true)
            .expect("embeds");
        for (k, emb) in got.iter().enumerate() {
            let case = &cases[i + k];
            let c = cosine(emb, &floats(&case["embedding"]));
            if c < worst {
                (worst, worst_name) = (c, case["name"].as_str().unwrap_or("?"));
            }
        }
        i = j;
    }
    eprintln!(
        "{dtype:?}: minimum cosine {worst:.7} ({worst_name}) over {} texts",
        cases.len()
    );
    assert!(
        worst >= MIN_COSINE,
        "{dtype:?}: cosine {worst} for {worst_name}"
    );
}
