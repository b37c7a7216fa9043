//! `/v1/embeddings` and `/rerank` through the router, on the tiny random-weight encoders
//! (`model::testing::tiny_encoder_gguf`: a nomic-bert embedder, a bert reranker) and a real
//! engine: the shapes, the options (base64, dimensions, normalize, truncation, token-id
//! inputs), batching that changes no bit, and the 400s of bad input and of the wrong kind of
//! model.

mod common;

use std::sync::atomic::{AtomicU64, Ordering};

use base64::Engine as _;
use common::{assert_error, engine_config, post, tiny_state};
use model::{Encoder, Pooling};
use serde_json::{json, Value};
use server::{AppState, ServerConfig};

fn write_tiny(arch: &str) -> std::path::PathBuf {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let path = std::env::temp_dir().join(format!(
        "tessera-embed-test-{}-{}.gguf",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::write(&path, model::testing::encoders::tiny_encoder_gguf(arch, 7))
        .expect("write temp model");
    path
}

fn encoder_state(arch: &str) -> AppState {
    let path = write_tiny(arch);
    let loaded = common::load_cpu(&path, engine_config(), None, None);
    let _ = std::fs::remove_file(&path);
    AppState::with_model(
        ServerConfig::default(),
        loaded.expect("the tiny encoder loads"),
    )
}

/// The tiny encoder itself, to compute the expected rows.
fn encoder(arch: &str) -> Encoder {
    let path = write_tiny(arch);
    let e = model::load_encoder(&path, 1, model::Dtype::Auto)
        .expect("loads")
        .encoder;
    let _ = std::fs::remove_file(&path);
    e
}

fn floats(v: &Value) -> Vec<f32> {
    v.as_array()
        .expect("an array")
        .iter()
        .map(|x| x.as_f64().expect("a number") as f32)
        .collect()
}

async fn embed(app: &axum::Router, body: Value) -> Value {
    let (status, resp) = post(app, "/v1/embeddings", &body).await;
    assert_eq!(status, 200, "{resp}");
    resp
}

#[tokio::test]
async fn an_embedding_is_the_encoder_s_mean_pooled_unit_vector_in_openai_s_shape() {
    let state = encoder_state("nomic-bert");
    let app = server::router(state.clone());
    let resp = embed(&app, json!({"input": "the cat sat on the mat"})).await;
    assert_eq!(resp["object"], "list");
    assert_eq!(resp["data"][0]["object"], "embedding");
    assert_eq!(resp["data"][0]["index"], 0);
    let got = floats(&resp["data"][0]["embedding"]);
    let tok = state.loaded().expect("loaded").engine.tokenizer().clone();
    let ids = tok.encode("the cat sat on the mat", true, false);
    assert_eq!(resp["usage"]["prompt_tokens"], ids.len());
    assert_eq!(resp["usage"]["total_tokens"], ids.len());
    let want = encoder("nomic-bert")
        .embed_batch(&[&ids], Pooling::Mean, true)
        .expect("embeds");
    assert_eq!(got.len(), want[0].len());
    for (g, w) in got.iter().zip(&want[0]) {
        assert!((g - w).abs() < 1e-6, "{got:?} vs {want:?}");
    }
    let norm: f32 = got.iter().map(|x| x * x).sum::<f32>().sqrt();
    assert!((norm - 1.0).abs() < 1e-5);
}

#[tokio::test]
async fn a_batch_gives_each_input_the_bits_it_gets_alone_and_token_ids_equal_text() {
    let app = server::router(encoder_state("nomic-bert"));
    let texts = [
        "hello world",
        "what is the capital of france ?",
        "paris",
        "dog and cat",
    ];
    let batch = embed(&app, json!({"input": texts})).await;
    for (i, t) in texts.iter().enumerate() {
        let one = embed(&app, json!({ "input": t })).await;
        assert_eq!(batch["data"][i]["index"], i);
        assert_eq!(
            batch["data"][i]["embedding"], one["data"][0]["embedding"],
            "{t}"
        );
    }
    let (_, tokens) = post(&app, "/tokenize", &json!({"prompt": "paris"})).await;
    let by_ids = embed(&app, json!({"input": [tokens["tokens"].clone()]})).await;
    assert_eq!(
        by_ids["data"][0]["embedding"],
        batch["data"][2]["embedding"]
    );
}

#[tokio::test]
async fn base64_dimensions_and_normalize_change_the_vector_as_asked() {
    let app = server::router(encoder_state("nomic-bert"));
    let input = json!({"input": "tiny model in the city"});
    let plain = floats(&embed(&app, input.clone()).await["data"][0]["embedding"]);
    let mut b64 = input.clone();
    b64["encoding_format"] = json!("base64");
    let text = embed(&app, b64).await["data"][0]["embedding"]
        .as_str()
        .expect("a base64 string")
        .to_string();
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(text)
        .expect("base64");
    let decoded: Vec<f32> = bytes
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect();
    assert_eq!(decoded, plain, "base64 holds the same floats");

    let mut raw = input.clone();
    raw["normalize"] = json!(false);
    let raw = floats(&embed(&app, raw).await["data"][0]["embedding"]);
    let mut cut = input.clone();
    cut["dimensions"] = json!(8);
    let cut = floats(&embed(&app, cut).await["data"][0]["embedding"]);
    assert_eq!(cut.len(), 8);
    let norm = raw[..8].iter().map(|x| x * x).sum::<f32>().sqrt();
    for (c, r) in cut.iter().zip(&raw[..8]) {
        assert!(
            (c - r / norm).abs() < 1e-6,
            "truncated first, then normalised"
        );
    }
}

#[tokio::test]
async fn truncation_keeps_the_last_tokens_and_without_it_a_long_input_is_a_400() {
    let app = server::router(encoder_state("nomic-bert"));
    // The tiny encoders have 64 positions.
    let long = vec!["paris"; 80].join(" ");
    let (status, body) = post(&app, "/v1/embeddings", &json!({ "input": long })).await;
    assert_error(
        status,
        &body,
        axum::http::StatusCode::BAD_REQUEST,
        Some("input"),
    );
    assert!(body["error"]["message"]
        .as_str()
        .is_some_and(|m| m.contains("truncate_prompt_tokens")));
    let ok = embed(&app, json!({"input": long, "truncate_prompt_tokens": 10})).await;
    assert_eq!(ok["usage"]["prompt_tokens"], 10);
    let full = embed(&app, json!({"input": long, "truncate_prompt_tokens": -1})).await;
    assert_eq!(full["usage"]["prompt_tokens"], 64);
}

#[tokio::test]
async fn bad_input_gets_a_400_naming_the_field() {
    let app = server::router(encoder_state("nomic-bert"));
    let cases = [
        (json!({}), "input"),
        (json!({"input": []}), "input"),
        (
            json!({"input": "x", "encoding_format": "hex"}),
            "encoding_format",
        ),
        (json!({"input": "x", "dimensions": 0}), "dimensions"),
        (json!({"input": "x", "dimensions": 33}), "dimensions"),
        (json!({"input": [[1, 99999]]}), "input"),
        (
            json!({"input": "x", "truncate_prompt_tokens": 0}),
            "truncate_prompt_tokens",
        ),
        (json!({"input": "x", "pooling": "cls"}), "pooling"),
    ];
    for (body, param) in cases {
        let (status, resp) = post(&app, "/v1/embeddings", &body).await;
        assert_error(
            status,
            &resp,
            axum::http::StatusCode::BAD_REQUEST,
            Some(param),
        );
    }
}

#[tokio::test]
async fn the_wrong_kind_of_model_is_a_400_saying_why() {
    let embedder = server::router(encoder_state("nomic-bert"));
    let (status, body) = post(
        &embedder,
        "/v1/chat/completions",
        &json!({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}),
    )
    .await;
    assert_error(
        status,
        &body,
        axum::http::StatusCode::BAD_REQUEST,
        Some("model"),
    );
    assert!(body["error"]["message"]
        .as_str()
        .is_some_and(|m| m.contains("/v1/embeddings")));
    let (status, body) = post(
        &embedder,
        "/rerank",
        &json!({"query": "a", "documents": ["b"]}),
    )
    .await;
    assert_error(
        status,
        &body,
        axum::http::StatusCode::BAD_REQUEST,
        Some("model"),
    );

    let generator = server::router(tiny_state());
    let (status, body) = post(&generator, "/v1/embeddings", &json!({"input": "hi"})).await;
    assert_error(
        status,
        &body,
        axum::http::StatusCode::BAD_REQUEST,
        Some("model"),
    );

    let reranker = server::router(encoder_state("bert"));
    let (status, body) = post(&reranker, "/v1/embeddings", &json!({"input": "hi"})).await;
    assert_error(
        status,
        &body,
        axum::http::StatusCode::BAD_REQUEST,
        Some("model"),
    );
}

#[tokio::test]
async fn rerank_scores_each_pair_as_the_encoder_does_best_first() {
    let state = encoder_state("bert");
    let app = server::router(state.clone());
    let docs = [
        "paris is the capital of france",
        "the dog sat",
        "berlin in germany",
    ];
    let (status, resp) = post(
        &app,
        "/v1/rerank",
        &json!({"query": "what is the capital of france ?", "documents": docs,
                "return_documents": true}),
    )
    .await;
    assert_eq!(status, 200, "{resp}");
    let results = resp["results"].as_array().expect("results");
    assert_eq!(results.len(), 3);
    let tok = state.loaded().expect("loaded").engine.tokenizer().clone();
    let mut enc = encoder("bert");
    let mut prev = f32::INFINITY;
    for r in results {
        let i = r["index"].as_u64().expect("index") as usize;
        assert_eq!(r["document"]["text"], docs[i]);
        let mut ids = tok.encode("what is the capital of france ?", true, false);
        ids.extend(tok.encode(docs[i], false, false));
        ids.extend(tok.sep_id());
        let want = enc
            .embed_batch(&[&ids], Pooling::Rank, false)
            .expect("scores")[0][0];
        let got = r["relevance_score"].as_f64().expect("score") as f32;
        assert!((got - want).abs() < 1e-6, "document {i}: {got} vs {want}");
        assert!(got <= prev, "best first");
        prev = got;
    }
    let (_, top) = post(
        &app,
        "/rerank",
        &json!({"query": "capital", "documents": docs, "top_n": 1}),
    )
    .await;
    assert_eq!(top["results"].as_array().map(Vec::len), Some(1));
    assert!(top["results"][0].get("document").is_none());
    let (status, body) = post(
        &app,
        "/rerank",
        &json!({"query": "capital", "documents": []}),
    )
    .await;
    assert_error(
        status,
        &body,
        axum::http::StatusCode::BAD_REQUEST,
        Some("documents"),
    );
}

/// A state serving `bytes` (a decoder file) as an embedding model, with `pooling` if given.
fn decoder_state(bytes: &[u8], pooling: Option<Pooling>) -> (AppState, model::LoadedEmbedder) {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let path = std::env::temp_dir().join(format!(
        "tessera-embed-decoder-{}-{}.gguf",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::write(&path, bytes).expect("write temp model");
    let loaded = common::load_cpu(&path, engine_config(), None, pooling);
    let reference = model::load_embedder(&path, 1, model::Dtype::Auto).expect("loads");
    let _ = std::fs::remove_file(&path);
    let state = AppState::with_model(ServerConfig::default(), loaded.expect("the decoder loads"));
    (state, reference)
}

#[tokio::test]
async fn a_qwen3_embedding_file_serves_last_token_embeddings_and_generates_nothing() {
    let file = model::testing::tiny_qwen3_embedding_gguf(7);
    let (state, mut reference) = decoder_state(&file, None);
    let app = server::router(state.clone());
    let texts = ["the cat sat on the mat", "hello"];
    let resp = embed(&app, json!({ "input": texts })).await;
    let tok = state.loaded().expect("loaded").engine.tokenizer().clone();
    let ids: Vec<Vec<u32>> = texts.iter().map(|t| tok.encode(t, true, false)).collect();
    let refs: Vec<&[u32]> = ids.iter().map(Vec::as_slice).collect();
    let want = reference
        .embedder
        .embed_batch(&refs, Pooling::Last, true)
        .expect("embeds");
    for (i, w) in want.iter().enumerate() {
        let got = floats(&resp["data"][i]["embedding"]);
        assert_eq!(got.len(), 64);
        for (g, w) in got.iter().zip(w) {
            assert!((g - w).abs() < 1e-6, "input {i}");
        }
    }
    let (status, body) = post(
        &app,
        "/v1/chat/completions",
        &json!({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}),
    )
    .await;
    assert_error(
        status,
        &body,
        axum::http::StatusCode::BAD_REQUEST,
        Some("model"),
    );
}

#[tokio::test]
async fn pooling_on_a_generative_decoder_serves_it_as_an_embedding_model() {
    let file = model::testing::tiny_model_gguf("qwen3", 7);
    let (state, mut reference) = decoder_state(&file, Some(Pooling::Mean));
    let app = server::router(state.clone());
    let resp = embed(&app, json!({ "input": "hello world" })).await;
    let tok = state.loaded().expect("loaded").engine.tokenizer().clone();
    let ids = tok.encode("hello world", true, false);
    let want = reference
        .embedder
        .embed_batch(&[&ids], Pooling::Mean, true)
        .expect("embeds");
    let got = floats(&resp["data"][0]["embedding"]);
    for (g, w) in got.iter().zip(&want[0]) {
        assert!((g - w).abs() < 1e-6);
    }
    let file = model::testing::tiny_model_gguf("qwen3", 7);
    let path = std::env::temp_dir().join(format!("tessera-rank-{}.gguf", std::process::id()));
    std::fs::write(&path, file).expect("write");
    let refused = common::load_cpu(&path, engine_config(), None, Some(Pooling::Rank));
    let _ = std::fs::remove_file(&path);
    let msg = refused.err().expect("rank needs a classifier head");
    assert!(msg.contains("rank"), "{msg}");
}
