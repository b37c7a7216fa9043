//! A decoder read as an embedding model (`DecoderEmbedder`), on the tiny Qwen3 converted
//! Qwen3-Embedding's way (`qwen3.pooling_type` = last): how the file is told apart, batch
//! invariance bit for bit, pooling, refusals, and llama.cpp's embeddings of the same file
//! (`tests/goldens/tiny/encoders.json`, key `qwen3-embed`, from `scripts/oracle/encoder_goldens.py`).

use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};

use model::testing::{tiny_model_gguf, tiny_qwen3_embedding_gguf, tiny_vocab_size, TINY_SEED};
use model::{load_embedder, Dtype, LoadedEmbedder, ModelKind, Pooling};

/// Writes `bytes` to a fresh file (tests run in parallel) and runs `f` on its path.
fn with_file<T>(bytes: &[u8], f: impl FnOnce(&std::path::Path) -> T) -> T {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let path = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("qwen3-embed-{}-{n}.gguf", std::process::id()));
    std::fs::write(&path, bytes).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let out = f(&path);
    let _ = std::fs::remove_file(&path);
    out
}

fn tiny(threads: usize) -> LoadedEmbedder {
    with_file(&tiny_qwen3_embedding_gguf(TINY_SEED), |p| {
        load_embedder(p, threads, Dtype::Auto).expect("tiny qwen3 embedder loads")
    })
}

fn kind(bytes: &[u8]) -> ModelKind {
    let parsed = gguf::parse(bytes).expect("parses");
    model::model_kind(&parsed.metadata).expect("known")
}

/// The tiny Qwen3's context (`qwen3.context_length`).
const CONTEXT: usize = 256;

/// Inputs of assorted lengths (up to 64 tokens), ids from the vocabulary.
fn inputs() -> Vec<Vec<u32>> {
    let v = tiny_vocab_size() as u64;
    let mut rng = test_support::SplitMix64::new(5);
    [1usize, 9, 64, 3, 30]
        .iter()
        .map(|&len| {
            (0..len)
                .map(|_| (3 + rng.next_u64() % (v - 3)) as u32)
                .collect()
        })
        .collect()
}

#[test]
fn a_pooling_type_makes_a_decoder_an_embedding_model() {
    assert_eq!(
        kind(&tiny_model_gguf("qwen3", TINY_SEED)),
        ModelKind::Decoder
    );
    assert_eq!(
        kind(&tiny_qwen3_embedding_gguf(TINY_SEED)),
        ModelKind::DecoderEmbedder
    );
    let mut none = model::testing::tiny_model_writer("qwen3", TINY_SEED).expect("qwen3");
    none.add_metadata("qwen3.pooling_type", 0u32);
    assert_eq!(kind(&none.write_to_vec()), ModelKind::Decoder);
    assert!(ModelKind::DecoderEmbedder.embeds() && !ModelKind::Decoder.embeds());
    let m = tiny(1);
    assert_eq!(m.embedder.pooling(), Pooling::Last);
    assert_eq!(m.embedder.n_embd(), 64);
    assert_eq!(m.embedder.max_positions(), CONTEXT);
    assert!(!m.embedder.is_reranker());
    // A generative file read as an embedder pools its last token by default.
    let plain = with_file(&tiny_model_gguf("qwen3", TINY_SEED), |p| {
        load_embedder(p, 1, Dtype::Auto)
    });
    assert_eq!(plain.expect("loads").embedder.pooling(), Pooling::Last);
}

#[test]
fn a_decoder_refuses_an_encoder_dtype_naming_the_file() {
    for dtype in [Dtype::Float32, Dtype::Bfloat16] {
        let err = with_file(&tiny_qwen3_embedding_gguf(TINY_SEED), |p| {
            load_embedder(p, 1, dtype).map(|_| ())
        })
        .expect_err("refused");
        let msg = err.to_string();
        assert!(
            msg.contains(".gguf") && msg.contains(dtype.name()) && msg.contains("decoder"),
            "{msg}"
        );
    }
}

#[test]
fn an_input_gets_the_same_bits_alone_or_in_any_batch() {
    let (mut one, mut two) = (tiny(1), tiny(2));
    let ins = inputs();
    let refs: Vec<&[u32]> = ins.iter().map(Vec::as_slice).collect();
    let mut reversed = refs.clone();
    reversed.reverse();
    for pooling in [Pooling::Last, Pooling::Mean, Pooling::Cls, Pooling::None] {
        let batched = two
            .embedder
            .embed_batch(&refs, pooling, true)
            .expect("batch");
        let rev = two
            .embedder
            .embed_batch(&reversed, pooling, true)
            .expect("batch");
        for (i, input) in refs.iter().enumerate() {
            let alone = one
                .embedder
                .embed_batch(&[input], pooling, true)
                .expect("one");
            assert_eq!(alone[0], batched[i], "{pooling:?} input {i}");
            assert_eq!(rev[refs.len() - 1 - i], batched[i], "{pooling:?} input {i}");
        }
    }
}

#[test]
fn poolings_agree_with_the_per_token_states() {
    let mut m = tiny(2);
    let ins = inputs();
    let refs: Vec<&[u32]> = ins.iter().map(Vec::as_slice).collect();
    let d = m.embedder.n_embd();
    let tokens = m
        .embedder
        .embed_batch(&refs, Pooling::None, false)
        .expect("none");
    let last = m
        .embedder
        .embed_batch(&refs, Pooling::Last, false)
        .expect("last");
    let first = m
        .embedder
        .embed_batch(&refs, Pooling::Cls, false)
        .expect("cls");
    let mean = m
        .embedder
        .embed_batch(&refs, Pooling::Mean, false)
        .expect("mean");
    for (i, input) in ins.iter().enumerate() {
        let n = input.len();
        assert_eq!(tokens[i].len(), n * d);
        assert_eq!(last[i], tokens[i][(n - 1) * d..], "input {i}");
        assert_eq!(first[i], tokens[i][..d], "input {i}");
        for j in 0..d {
            let want: f32 = (0..n).map(|r| tokens[i][r * d + j]).sum::<f32>() / n as f32;
            assert!((mean[i][j] - want).abs() < 1e-4, "input {i} dim {j}");
        }
    }
    // Causal: a prefix's last state is the longer input's state at that position.
    let long = &ins[2];
    let prefix = m
        .embedder
        .embed_batch(&[&long[..9]], Pooling::Last, false)
        .expect("prefix");
    let whole = m
        .embedder
        .embed_batch(&[long], Pooling::None, false)
        .expect("whole");
    let diff = prefix[0]
        .iter()
        .zip(&whole[0][8 * d..9 * d])
        .map(|(a, b)| (a - b).abs())
        .fold(0.0f32, f32::max);
    assert!(diff < 1e-4, "{diff}");
}

#[test]
fn refusals_name_the_problem() {
    let mut m = tiny(1);
    let err = |r: Result<Vec<Vec<f32>>, model::ModelError>| r.expect_err("refused").to_string();
    assert!(err(m.embedder.embed_batch(&[&[1, 2]], Pooling::Rank, true)).contains("classifier"));
    assert!(err(m.embedder.embed_batch(&[&[1], &[]], Pooling::Last, true)).contains("input 1"));
    let long = vec![5u32; CONTEXT + 1];
    let msg = format!("{CONTEXT} positions");
    assert!(err(m.embedder.embed_batch(&[&long], Pooling::Last, true)).contains(&msg));
    let bad = [tiny_vocab_size() as u32];
    assert!(err(m.embedder.embed_batch(&[&bad], Pooling::Last, true)).contains("vocabulary"));
    assert!(m
        .embedder
        .embed_batch(&[], Pooling::Last, true)
        .expect("empty")
        .is_empty());
}

#[test]
fn tiny_qwen3_embeddings_match_llama_cpp() {
    let path = test_support::repo_root().join("tests/goldens/tiny/encoders.json");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let g: serde_json::Value = serde_json::from_str(&text).expect("golden is JSON");
    let g = &g["qwen3-embed"];
    use sha2::Digest;
    let sha: String = sha2::Sha256::digest(tiny_qwen3_embedding_gguf(TINY_SEED))
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    assert_eq!(
        g["model_sha256"].as_str(),
        Some(sha.as_str()),
        "rerun the oracle"
    );
    let mut m = tiny(2);
    let mut worst = 1.0f32;
    for (key, pooling) in [("last", Pooling::Last), ("mean", Pooling::Mean)] {
        let cases = g[key].as_array().expect("cases");
        assert!(cases.len() >= 5);
        let inputs: Vec<Vec<u32>> = cases
            .iter()
            .map(|c| {
                let ids = m
                    .tokenizer
                    .encode(c["text"].as_str().expect("text"), true, false);
                let want: Vec<u32> = c["ids"]
                    .as_array()
                    .expect("ids")
                    .iter()
                    .map(|x| x.as_u64().expect("id") as u32)
                    .collect();
                assert_eq!(ids, want, "{:?}", c["text"]);
                ids
            })
            .collect();
        let refs: Vec<&[u32]> = inputs.iter().map(Vec::as_slice).collect();
        let got = m
            .embedder
            .embed_batch(&refs, pooling, true)
            .expect("embeds");
        for (c, e) in cases.iter().zip(&got) {
            let want: Vec<f32> = c["embedding"]
                .as_array()
                .expect("floats")
                .iter()
                .map(|x| x.as_f64().expect("float") as f32)
                .collect();
            assert_eq!(e.len(), want.len());
            let cos: f32 = e.iter().zip(&want).map(|(a, b)| a * b).sum();
            worst = worst.min(cos);
            assert!(cos >= 0.9999, "{key} {:?}: cosine {cos}", c["text"]);
        }
    }
    eprintln!("smallest cosine with llama.cpp: {worst}");
}
