//! Golden tests for byte-level BPE: our tokenizer against llama.cpp on a synthetic vocabulary.
//!
//! `tests/goldens/bpe_synthetic.json` (from `scripts/oracle/tokenizer_goldens.py`) holds a BPE
//! vocabulary learned from the golden texts and llama.cpp's ids for every text under four
//! pre-tokenizers (`default`, `gpt-2`, `llama-bpe`, `qwen2`). The vocabulary goes through the
//! same GGUF metadata path as a real model, so pre-tokenizer names and defaults (e.g. LLaMA 3
//! adding BOS) are checked too. Needs no model file.

use gguf::{Array, Metadata, Value};
use serde_json::Value as Json;
use tokenizer::Tokenizer;

fn goldens() -> Json {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/goldens/bpe_synthetic.json"
    );
    let text = std::fs::read_to_string(path).expect("golden file is committed");
    serde_json::from_str(&text).expect("golden file is valid JSON")
}

fn strings(v: &Json) -> Vec<String> {
    v.as_array()
        .expect("string array")
        .iter()
        .map(|s| s.as_str().expect("string").to_string())
        .collect()
}

fn u32s(v: &Json) -> Vec<u32> {
    v.as_array()
        .expect("id array")
        .iter()
        .map(|x| x.as_u64().and_then(|x| u32::try_from(x).ok()).expect("u32"))
        .collect()
}

fn tokenizer_for(g: &Json, pre: &str) -> Tokenizer {
    let types: Vec<i32> = u32s(&g["token_types"])
        .into_iter()
        .map(|t| t as i32)
        .collect();
    let mut md = Metadata::new();
    md.insert("tokenizer.ggml.model", Value::String("gpt2".into()));
    md.insert("tokenizer.ggml.pre", Value::String(pre.into()));
    md.insert(
        "tokenizer.ggml.tokens",
        Value::Array(Array::String(strings(&g["tokens"]))),
    );
    md.insert("tokenizer.ggml.token_type", Value::Array(Array::I32(types)));
    md.insert(
        "tokenizer.ggml.merges",
        Value::Array(Array::String(strings(&g["merges"]))),
    );
    for (key, field) in [
        ("tokenizer.ggml.bos_token_id", "bos"),
        ("tokenizer.ggml.eos_token_id", "eos"),
    ] {
        let id = g[field].as_u64().and_then(|x| u32::try_from(x).ok());
        md.insert(key, Value::U32(id.expect("id")));
    }
    Tokenizer::from_metadata(&md).unwrap_or_else(|e| panic!("pre {pre}: {e}"))
}

const PRES: [&str; 4] = ["default", "gpt-2", "llama-bpe", "qwen2"];

#[test]
fn bpe_encodes_every_golden_text_exactly_like_llama_cpp() {
    let g = goldens();
    let cases = g["cases"].as_array().expect("cases");
    assert!(cases.len() >= 30);
    let mut failures = Vec::new();
    for pre in PRES {
        let tok = tokenizer_for(&g, pre);
        for case in cases {
            let text = case["text"].as_str().expect("text");
            for (key, parse_special) in [("ids", false), ("ids_special", true)] {
                let want = u32s(&case[key][pre]);
                let ours = tok.encode(text, true, parse_special);
                if ours != want {
                    let at = ours.iter().zip(&want).take_while(|(a, b)| a == b).count();
                    let show = |ids: &[u32]| -> Vec<String> {
                        ids.iter()
                            .skip(at.saturating_sub(2))
                            .take(5)
                            .map(|&id| format!("{id}:{:?}", tok.token_piece(id).unwrap_or("?")))
                            .collect()
                    };
                    failures.push(format!(
                        "{pre}/{} (parse_special={parse_special}) at {at}: ours {:?} llama.cpp {:?}",
                        case["name"],
                        show(&ours),
                        show(&want)
                    ));
                }
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} mismatches:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn bpe_decode_round_trips_golden_ids() {
    let g = goldens();
    for pre in PRES {
        let tok = tokenizer_for(&g, pre);
        for case in g["cases"].as_array().expect("cases") {
            let text = case["text"].as_str().expect("text");
            let ids = u32s(&case["ids"][pre]);
            assert_eq!(tok.decode(&ids, true), text, "{pre}/{}", case["name"]);
        }
    }
}
