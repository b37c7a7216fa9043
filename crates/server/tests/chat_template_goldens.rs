//! Golden tests: chat prompts rendered from each real model's own `tokenizer.chat_template` equal
//! what llama.cpp's Python binding renders, one table row per model.
//!
//! `tests/goldens/<stem>_chat_template.json` (from `scripts/oracle/chat_template_goldens.py`)
//! holds the template, the BOS/EOS texts given to it, and for every conversation (system
//! message, multi-turn, a final assistant turn, empty content, surrounding whitespace,
//! non-ASCII text; each with and without the generation prompt) llama-cpp-python's
//! `Jinja2ChatFormatter` rendering. Here the same template goes through `ChatTemplate` exactly as
//! the server builds it: the template from the GGUF, BOS/EOS as the vocabulary's texts of the
//! GGUF's BOS and EOS ids (what the tokenizer's `token_piece` gives the server; read here from
//! the metadata, so a model whose weights or pre-tokenizer Tessera cannot load yet is covered).
//!
//! Models are found at `$TESSERA_MODELS_DIR/<canonical file name>`, else `<workspace>/models/`;
//! a missing file fails (scripts/test.sh fetches all three).
#![cfg(feature = "real-models")]

use serde_json::Value;
use server::chat_template::{ChatTemplate, Message};

struct Spec {
    /// Golden file stem: `tests/goldens/<stem>_chat_template.json`.
    stem: &'static str,
    /// Canonical model file name.
    file: &'static str,
    /// Environment variable that must be 1 for this row to run; `None` runs always.
    gate: Option<&'static str>,
}

const QWEN25_CODER_05B: Spec = Spec {
    stem: "qwen2.5-coder-0.5b",
    file: "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
    gate: None,
};

const QWEN25_CODER_15B: Spec = Spec {
    stem: "qwen2.5-coder-1.5b",
    file: "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
    gate: None,
};

const SMOLLM2_135M: Spec = Spec {
    stem: "smollm2-135m",
    file: "smollm2-135m-instruct-q4_1.gguf",
    gate: None,
};

use test_support::model_path;

fn text<'a>(v: &'a Value, key: &str) -> &'a str {
    v[key]
        .as_str()
        .unwrap_or_else(|| panic!("golden lacks {key:?}"))
}

fn check(spec: &Spec) {
    if let Some(var) = spec.gate {
        if std::env::var(var).as_deref() != Ok("1") {
            eprintln!(
                "not run: {} chat template goldens are gated; set {var}=1",
                spec.stem
            );
            return;
        }
    }
    let golden_path =
        test_support::repo_root().join(format!("tests/goldens/{}_chat_template.json", spec.stem));
    let golden: Value = serde_json::from_str(
        &std::fs::read_to_string(&golden_path)
            .unwrap_or_else(|e| panic!("{}: {e}", golden_path.display())),
    )
    .expect("golden is JSON");
    let path = model_path(spec.file);
    let file = gguf::GgufFile::open(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let md = file.metadata();
    let meta_text = |key: &str| match md.get(key) {
        Some(gguf::Value::String(s)) => s.clone(),
        other => panic!("{key}: {other:?}"),
    };
    let source = meta_text("tokenizer.chat_template");
    assert_eq!(
        source,
        text(&golden, "chat_template"),
        "the golden was made from this template"
    );
    let Some(gguf::Value::Array(gguf::Array::String(pieces))) = md.get("tokenizer.ggml.tokens")
    else {
        panic!("tokenizer.ggml.tokens is not a string array")
    };
    let piece = |key: &str| match md.get(key) {
        Some(gguf::Value::U32(id)) => pieces[*id as usize].as_str(),
        other => panic!("{key}: {other:?}"),
    };
    let (bos, eos) = (
        piece("tokenizer.ggml.bos_token_id"),
        piece("tokenizer.ggml.eos_token_id"),
    );
    assert_eq!(bos, text(&golden, "bos_token"));
    assert_eq!(eos, text(&golden, "eos_token"));
    let template = ChatTemplate::choose(None, Some(source), &meta_text("general.architecture"))
        .expect("template compiles");

    let cases = golden["cases"].as_array().expect("cases");
    assert!(cases.len() >= 10, "too few cases");
    let mut failures = Vec::new();
    for case in cases {
        let messages: Vec<Message> = case["messages"]
            .as_array()
            .expect("messages")
            .iter()
            .map(|m| Message::text(text(m, "role"), text(m, "content")))
            .collect();
        let add_gen = case["add_generation_prompt"].as_bool().expect("flag");
        let label = format!("{} (add_generation_prompt={add_gen})", text(case, "name"));
        let ours = template.render(&messages, None, add_gen, bos, eos, None);
        match (ours, case.get("rendered").and_then(Value::as_str)) {
            (Ok(ours), Some(theirs)) if ours == theirs => {}
            (Ok(ours), Some(theirs)) => {
                failures.push(format!("{label}:\n ours   {ours:?}\n theirs {theirs:?}"))
            }
            (Err(_), None) => {} // llama.cpp's renderer refused it too (the golden's "error")
            (Err(e), Some(_)) => failures.push(format!("{label}: we refused it: {}", e.0)),
            (Ok(ours), None) => failures.push(format!(
                "{label}: llama.cpp refused it ({}), we rendered {ours:?}",
                case["error"]
            )),
        }
    }
    assert!(
        failures.is_empty(),
        "{}:\n{}",
        spec.stem,
        failures.join("\n")
    );
}

#[test]
fn qwen25_coder_05b_chat_template_renders_like_llama_cpp() {
    check(&QWEN25_CODER_05B);
}

#[test]
fn qwen25_coder_15b_chat_template_renders_like_llama_cpp() {
    check(&QWEN25_CODER_15B);
}

#[test]
fn smollm2_135m_chat_template_renders_like_llama_cpp() {
    check(&SMOLLM2_135M);
}
