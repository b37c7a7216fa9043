//! Encoding speed on the default model's real vocabulary (Gemma 3, SentencePiece):
//! `cargo bench -p tessera-tokenizer --bench encode`. Goal: 10,000 tokens well under 100 ms,
//! both for a mix of the golden corpus's texts and for one paragraph with no newline (the slow
//! case for SentencePiece: nothing splits the text before the merges).
//!
//! The model is found by `test_support::default_model_path` (`$TESSERA_MODEL`, else the models
//! directory); a missing model fails with instructions.

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use serde_json::Value;
use tokenizer::Tokenizer;

/// The golden corpus's texts for the default model.
fn corpus() -> Vec<(String, String)> {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/goldens/gemma3_270m.json"
    );
    let text = std::fs::read_to_string(path).expect("golden file is committed");
    let g: Value = serde_json::from_str(&text).expect("golden file is valid JSON");
    g["cases"]
        .as_array()
        .expect("`cases` array")
        .iter()
        .map(|c| {
            let name = c["name"].as_str().unwrap_or_default().to_string();
            (name, c["text"].as_str().expect("text").to_string())
        })
        .collect()
}

/// Repeats `unit` (joined by `sep`) until it encodes to at least 10k tokens.
fn ten_thousand_tokens_of(tok: &Tokenizer, unit: &str, sep: &str) -> String {
    let mut text = String::new();
    while tok.encode(&text, false, false).len() < 10_000 {
        text.push_str(unit);
        text.push_str(sep);
    }
    text
}

fn encode(c: &mut Criterion) {
    let path = test_support::default_model_path();
    let file = gguf::GgufFile::open(&path).unwrap_or_else(|e| {
        panic!(
            "{}: {e} (fetch it with `tessera fetch-model`)",
            path.display()
        )
    });
    let tok = Tokenizer::from_metadata(file.metadata()).expect("tokenizer from metadata");
    let cases = corpus();
    let all: Vec<&str> = cases.iter().map(|(_, t)| t.as_str()).collect();
    let mixed = ten_thousand_tokens_of(&tok, &all.join("\n"), "\n");
    let prose = cases
        .iter()
        .find(|(n, _)| n == "prose")
        .map(|(_, t)| t.as_str())
        .expect("prose case");
    let paragraph = ten_thousand_tokens_of(&tok, prose, " ");
    let mut g = c.benchmark_group("encode");
    for (name, input) in [("mixed", &mixed), ("one_paragraph", &paragraph)] {
        let n = tok.encode(input, true, true).len();
        g.throughput(Throughput::Elements(n as u64));
        g.bench_function(name, |b| b.iter(|| tok.encode(input, true, true).len()));
    }
    g.finish();
}

criterion_group!(benches, encode);
criterion_main!(benches);
