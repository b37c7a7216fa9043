//! The encoders (BERT, nomic-bert) on the tiny random-weight files of
//! `model::testing::encoders`: the API's facts, batch invariance bit for bit, pooling and
//! normalisation, refusals, and llama.cpp's outputs for the same files
//! (`tests/goldens/tiny/encoders.json`, from `scripts/oracle/encoder_goldens.py`).

use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};

use model::testing::encoders::{
    tiny_encoder_gguf, tiny_encoder_vocab_size, tiny_encoder_writer, TINY_CLS, TINY_SEP,
};
use model::{load_encoder, Dtype, LoadedEncoder, ModelError, Pooling};

const SEED: u64 = model::testing::TINY_SEED;

/// Writes `bytes` to a fresh file (tests run in parallel) and loads it with `threads` workers,
/// in f32.
fn load_bytes(name: &str, bytes: &[u8], threads: usize) -> Result<LoadedEncoder, ModelError> {
    load_bytes_as(name, bytes, threads, Dtype::Float32)
}

fn load_bytes_as(
    name: &str,
    bytes: &[u8],
    threads: usize,
    dtype: Dtype,
) -> Result<LoadedEncoder, ModelError> {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let path = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("{name}-{}-{n}.gguf", std::process::id()));
    std::fs::write(&path, bytes).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let loaded = load_encoder(&path, threads, dtype);
    if cfg!(unix) {
        let _ = std::fs::remove_file(&path);
    }
    loaded
}

fn tiny(arch: &str, threads: usize) -> LoadedEncoder {
    tiny_as(arch, threads, Dtype::Float32)
}

fn tiny_as(arch: &str, threads: usize, dtype: Dtype) -> LoadedEncoder {
    let m = load_bytes_as(arch, &tiny_encoder_gguf(arch, SEED), threads, dtype)
        .expect("tiny encoder loads");
    assert_eq!(
        m.encoder.bf16(),
        dtype == Dtype::Bfloat16,
        "{arch} {dtype:?}"
    );
    m
}

/// Inputs of assorted lengths, [CLS] ... [SEP], ids from the whole vocabulary.
fn inputs() -> Vec<Vec<u32>> {
    let v = tiny_encoder_vocab_size() as u64;
    let mut rng = test_support::SplitMix64::new(11);
    [1usize, 3, 17, 64, 5, 2, 40]
        .iter()
        .map(|&len| {
            (0..len)
                .map(|i| match i {
                    0 => TINY_CLS,
                    _ if i + 1 == len => TINY_SEP,
                    _ => (5 + rng.next_u64() % (v - 5)) as u32,
                })
                .collect()
        })
        .collect()
}

#[test]
fn facts_of_the_tiny_files() {
    let bert = tiny("bert", 1);
    assert_eq!(bert.encoder.n_embd(), 32);
    assert_eq!(bert.encoder.max_positions(), 64);
    assert_eq!(bert.encoder.pooling(), Pooling::Rank);
    assert!(bert.encoder.is_reranker());
    assert_eq!(bert.encoder.n_scores(), 1);
    let nomic = tiny("nomic-bert", 1);
    assert_eq!(nomic.encoder.pooling(), Pooling::Mean);
    assert!(!nomic.encoder.is_reranker());
    assert_eq!(
        nomic.tokenizer.encode("hello world", true, false),
        [2, 21, 22, 3]
    );
}

#[test]
fn an_input_gets_the_same_bits_alone_or_in_any_batch() {
    for (arch, dtype) in [
        ("bert", Dtype::Float32),
        ("nomic-bert", Dtype::Float32),
        ("bert", Dtype::Bfloat16),
        ("nomic-bert", Dtype::Bfloat16),
    ] {
        for pooling in [Pooling::Mean, Pooling::None, Pooling::Cls, Pooling::Last] {
            let mut one = tiny_as(arch, 1, dtype);
            let mut two = tiny_as(arch, 2, dtype);
            let ins = inputs();
            let refs: Vec<&[u32]> = ins.iter().map(Vec::as_slice).collect();
            let batched = two
                .encoder
                .embed_batch(&refs, pooling, true)
                .expect("batch");
            let mut reversed: Vec<&[u32]> = refs.clone();
            reversed.reverse();
            let rev = two
                .encoder
                .embed_batch(&reversed, pooling, true)
                .expect("batch");
            for (i, input) in refs.iter().enumerate() {
                let alone = one
                    .encoder
                    .embed_batch(&[input], pooling, true)
                    .expect("one");
                assert_eq!(
                    alone[0], batched[i],
                    "{arch} {dtype:?} {pooling:?} input {i}"
                );
                assert_eq!(
                    rev[refs.len() - 1 - i],
                    batched[i],
                    "{arch} {pooling:?} input {i}"
                );
            }
        }
    }
}

#[test]
fn pooled_embeddings_are_unit_vectors_and_none_pooling_gives_every_token() {
    let mut m = tiny("nomic-bert", 2);
    let ins = inputs();
    let refs: Vec<&[u32]> = ins.iter().map(Vec::as_slice).collect();
    let pooled = m
        .encoder
        .embed_batch(&refs, Pooling::Mean, true)
        .expect("mean");
    for v in &pooled {
        assert_eq!(v.len(), 32);
        let norm: f32 = v.iter().map(|x| x * x).sum::<f32>().sqrt();
        assert!((norm - 1.0).abs() < 1e-5, "norm {norm}");
    }
    let raw = m
        .encoder
        .embed_batch(&refs, Pooling::Mean, false)
        .expect("mean");
    let cos: f32 = raw[3]
        .iter()
        .zip(&pooled[3])
        .map(|(a, b)| a * b)
        .sum::<f32>()
        / raw[3].iter().map(|x| x * x).sum::<f32>().sqrt();
    assert!((cos - 1.0).abs() < 1e-5);
    let tokens = m
        .encoder
        .embed_batch(&refs, Pooling::None, false)
        .expect("none");
    for (t, input) in tokens.iter().zip(&ins) {
        assert_eq!(t.len(), 32 * input.len());
    }
    // Mean of the per-token states is the mean pooling.
    let d = 32;
    let n = ins[2].len();
    for j in 0..d {
        let mean: f32 = (0..n).map(|r| tokens[2][r * d + j]).sum::<f32>() / n as f32;
        assert!((mean - raw[2][j]).abs() < 1e-4);
    }
    let first = m
        .encoder
        .embed_batch(&refs, Pooling::Cls, false)
        .expect("cls");
    let last = m
        .encoder
        .embed_batch(&refs, Pooling::Last, false)
        .expect("last");
    assert_eq!(first[2], tokens[2][..d]);
    assert_eq!(last[2], tokens[2][(n - 1) * d..]);
}

#[test]
fn rank_pooling_gives_one_raw_score_per_input() {
    let mut m = tiny("bert", 2);
    let ins = inputs();
    let refs: Vec<&[u32]> = ins.iter().map(Vec::as_slice).collect();
    let scores = m
        .encoder
        .embed_batch(&refs, Pooling::Rank, true)
        .expect("rank");
    assert!(scores.iter().all(|s| s.len() == 1 && s[0].is_finite()));
    assert!(scores.windows(2).any(|w| w[0] != w[1]));
}

#[test]
fn bad_inputs_are_errors_naming_the_problem() {
    let mut m = tiny("nomic-bert", 1);
    let err = |r: Result<Vec<Vec<f32>>, ModelError>| r.expect_err("refused").to_string();
    let e = err(m.encoder.embed_batch(&[&[2, 3], &[]], Pooling::Mean, true));
    assert!(e.contains("input 1 has no tokens"), "{e}");
    let long = vec![5u32; 65];
    let e = err(m.encoder.embed_batch(&[&long], Pooling::Mean, true));
    assert!(e.contains("65 tokens") && e.contains("64"), "{e}");
    let e = err(m.encoder.embed_batch(&[&[2, 9999, 3]], Pooling::Mean, true));
    assert!(e.contains("9999"), "{e}");
    let e = err(m.encoder.embed_batch(&[&[2, 3]], Pooling::Rank, true));
    assert!(e.contains("classifier"), "{e}");
    assert!(m
        .encoder
        .embed_batch(&[], Pooling::Mean, true)
        .expect("none")
        .is_empty());
}

#[test]
fn unsupported_variants_and_decoders_are_refused_with_the_file_named() {
    let mut w = tiny_encoder_writer("bert", SEED).expect("bert");
    let zeros = vec![0u8; 8 * 4];
    w.add_tensor("blk.0.attn_q_norm.weight", &[8], gguf::GgmlType::F32, zeros);
    let e = load_bytes("qnorm", &w.write_to_vec(), 1)
        .err()
        .expect("refused")
        .to_string();
    assert!(
        e.contains("blk.0.attn_q_norm.weight") && e.contains("qnorm-"),
        "{e}"
    );

    let mut w = tiny_encoder_writer("nomic-bert", SEED).expect("nomic");
    w.add_metadata("nomic-bert.attention.causal", true);
    let e = load_bytes("causal", &w.write_to_vec(), 1)
        .err()
        .expect("refused")
        .to_string();
    assert!(e.contains("causal") && e.contains("causal-"), "{e}");

    let decoder = model::testing::tiny_model_gguf("llama", SEED);
    let e = load_bytes("decoder", &decoder, 1)
        .err()
        .expect("refused")
        .to_string();
    assert!(e.contains("llama"), "{e}");
    let parsed = gguf::parse(&decoder).expect("parses");
    assert_eq!(
        model::model_kind(&parsed.metadata).ok(),
        Some(model::ModelKind::Decoder)
    );
    let parsed = gguf::parse(&tiny_encoder_gguf("bert", SEED)).expect("parses");
    assert_eq!(
        model::model_kind(&parsed.metadata).ok(),
        Some(model::ModelKind::Encoder)
    );
}

fn golden() -> serde_json::Value {
    let path = test_support::repo_root().join("tests/goldens/tiny/encoders.json");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).expect("golden is JSON")
}

fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::Digest;
    sha2::Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

fn ids_of(v: &serde_json::Value) -> Vec<u32> {
    v.as_array()
        .expect("ids")
        .iter()
        .map(|x| x.as_u64().expect("id") as u32)
        .collect()
}

fn floats_of(v: &serde_json::Value) -> Vec<f32> {
    v.as_array()
        .expect("floats")
        .iter()
        .map(|x| x.as_f64().expect("float") as f32)
        .collect()
}

/// The golden was made from exactly these bytes (else the generator changed: rerun the oracle).
fn check_bytes(arch: &str, g: &serde_json::Value) {
    let want = g[arch]["model_sha256"].as_str().expect("sha256");
    assert_eq!(sha256_hex(&tiny_encoder_gguf(arch, SEED)), want, "{arch}");
}

#[test]
fn tiny_bert_reranker_scores_match_llama_cpp() {
    rerank_against_llama_cpp(Dtype::Float32, 1e-4);
}

/// In BF16 the scores move by BF16's rounding of the activations (2^-9 relative, over every
/// projection of every layer).
#[test]
fn tiny_bert_reranker_bf16_scores_match_llama_cpp() {
    rerank_against_llama_cpp(Dtype::Bfloat16, RERANK_BF16_TOL);
}

/// The BF16 reranker's relative tolerance against llama.cpp's f32 scores.
const RERANK_BF16_TOL: f32 = 1e-2;

fn rerank_against_llama_cpp(dtype: Dtype, tol: f32) {
    let g = golden();
    check_bytes("bert", &g);
    let mut m = tiny_as("bert", 2, dtype);
    for case in g["bert"]["tokenize"].as_array().expect("tokenize") {
        let text = case["text"].as_str().expect("text");
        assert_eq!(
            m.tokenizer.encode(text, true, false),
            ids_of(&case["ids"]),
            "{text:?}"
        );
    }
    let pairs = g["bert"]["rerank"].as_array().expect("rerank");
    let inputs: Vec<Vec<u32>> = pairs
        .iter()
        .map(|p| {
            let q = m
                .tokenizer
                .encode(p["query"].as_str().expect("q"), false, false);
            let d = m
                .tokenizer
                .encode(p["document"].as_str().expect("d"), false, false);
            let ids: Vec<u32> = [&[TINY_CLS][..], &q, &[TINY_SEP], &d, &[TINY_SEP]].concat();
            assert_eq!(ids, ids_of(&p["ids"]));
            ids
        })
        .collect();
    let refs: Vec<&[u32]> = inputs.iter().map(Vec::as_slice).collect();
    let scores = m
        .encoder
        .embed_batch(&refs, Pooling::Rank, false)
        .expect("rank");
    let mut worst = 0.0f32;
    for (p, s) in pairs.iter().zip(&scores) {
        let want = p["score"].as_f64().expect("score") as f32;
        worst = worst.max((s[0] - want).abs());
        assert!(
            (s[0] - want).abs() <= tol * want.abs().max(1.0),
            "{dtype:?}: {s:?} vs {want}"
        );
    }
    eprintln!("{dtype:?}: largest score difference from llama.cpp: {worst:e}");
}

#[test]
fn tiny_nomic_bert_embeddings_match_llama_cpp() {
    embed_against_llama_cpp(Dtype::Float32);
}

#[test]
fn tiny_nomic_bert_bf16_embeddings_match_llama_cpp() {
    embed_against_llama_cpp(Dtype::Bfloat16);
}

fn embed_against_llama_cpp(dtype: Dtype) {
    let g = golden();
    check_bytes("nomic-bert", &g);
    let mut m = tiny_as("nomic-bert", 2, dtype);
    let cases = g["nomic-bert"]["embeddings"]
        .as_array()
        .expect("embeddings");
    let inputs: Vec<Vec<u32>> = cases
        .iter()
        .map(|c| {
            let ids = m
                .tokenizer
                .encode(c["text"].as_str().expect("text"), true, false);
            assert_eq!(ids, ids_of(&c["ids"]));
            ids
        })
        .collect();
    let refs: Vec<&[u32]> = inputs.iter().map(Vec::as_slice).collect();
    let got = m
        .encoder
        .embed_batch(&refs, Pooling::Mean, true)
        .expect("mean");
    let mut worst = 1.0f32;
    for (c, e) in cases.iter().zip(&got) {
        let want = floats_of(&c["embedding"]);
        let cos: f32 = e.iter().zip(&want).map(|(a, b)| a * b).sum();
        worst = worst.min(cos);
        assert!(cos >= 0.9999, "{dtype:?} {:?}: cosine {cos}", c["text"]);
    }
    eprintln!("{dtype:?}: smallest cosine with llama.cpp: {worst}");
}
