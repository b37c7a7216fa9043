//! llama.cpp's vocabulary test files: each `ggml-vocab-NAME.gguf` (a vocabulary with no
//! weights) with `.inp` (texts, separated by `__ggml_vocab_test__` lines) and `.out` (llama.cpp's
//! token ids for each, as its `test-tokenizer-0` checks them: no special tokens added, control
//! tokens in the text not parsed). Each vocabulary must tokenize every text to llama.cpp's ids.
//!
//! The files are llama.cpp's, not the repository's: `scripts/fetch_llama_cpp_files.py` takes
//! them from the llama-cpp-python sdist into `models/llama-cpp-vocabs` (or
//! `$TESSERA_LLAMA_CPP_VOCABS_DIR`), checking the sha256 of each against
//! `tests/goldens/llama_cpp_vocabs.json`. Behind the `real-models` feature; a missing file fails.

#![cfg(feature = "real-models")]

use std::path::PathBuf;

use tokenizer::Tokenizer;

/// Every vocabulary with test texts; each must give llama.cpp's ids.
const VOCABS: &[&str] = &[
    "bert-bge",
    "command-r",
    "deepseek-coder",
    "deepseek-llm",
    "falcon",
    "gemma-4",
    "gpt-2",
    "llama-bpe",
    "llama-spm",
    "mpt",
    "phi-3",
    "qwen2",
    "qwen35",
    "refact",
    "starcoder",
];

fn dir() -> PathBuf {
    match std::env::var_os("TESSERA_LLAMA_CPP_VOCABS_DIR") {
        Some(d) => PathBuf::from(d),
        None => test_support::repo_root().join("models/llama-cpp-vocabs"),
    }
}

const SEPARATOR: &str = "\n__ggml_vocab_test__\n";

/// The texts of `.inp` and the ids of `.out`, paired.
fn cases(name: &str) -> Vec<(String, Vec<u32>)> {
    let read = |ext: &str| {
        let p = dir().join(format!("ggml-vocab-{name}.gguf.{ext}"));
        std::fs::read_to_string(&p).unwrap_or_else(|e| {
            panic!(
                "{}: {e} (run scripts/fetch_llama_cpp_vocabs.py)",
                p.display()
            )
        })
    };
    let inp = read("inp");
    let texts: Vec<&str> = inp
        .strip_suffix(SEPARATOR)
        .unwrap_or(&inp)
        .split(SEPARATOR)
        .collect();
    let out = read("out");
    let ids: Vec<Vec<u32>> = out
        .lines()
        .map(|l| {
            l.split_whitespace()
                .map(|t| t.parse().expect("a token id"))
                .collect()
        })
        .collect();
    assert_eq!(
        texts.len(),
        ids.len(),
        "{name}: .inp and .out differ in length"
    );
    texts.into_iter().map(String::from).zip(ids).collect()
}

fn load(name: &str) -> Result<Tokenizer, String> {
    let p = dir().join(format!("ggml-vocab-{name}.gguf"));
    let file = gguf::GgufFile::open(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    Tokenizer::from_metadata(file.metadata()).map_err(|e| e.to_string())
}

#[test]
fn each_vocabulary_tokenizes_as_llama_cpp() {
    let mut failures = Vec::new();
    for &name in VOCABS {
        let t = match load(name) {
            Ok(t) => t,
            Err(e) => {
                failures.push(format!("{name}: {e}"));
                continue;
            }
        };
        let cases = cases(name);
        for (text, want) in &cases {
            let got = t.encode(text, false, false);
            if &got != want {
                failures.push(format!("{name}: {text:?}: {got:?}, llama.cpp {want:?}"));
            }
        }
        println!("{name}: {} texts as llama.cpp", cases.len());
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn every_vocabulary_with_test_texts_is_listed() {
    let mut names: Vec<String> = std::fs::read_dir(dir())
        .unwrap_or_else(|e| {
            panic!(
                "{}: {e} (run scripts/fetch_llama_cpp_files.py)",
                dir().display()
            )
        })
        .filter_map(|e| {
            let n = e.ok()?.file_name().into_string().ok()?;
            let stem = n.strip_suffix(".gguf.inp")?.strip_prefix("ggml-vocab-")?;
            Some(stem.to_string())
        })
        .collect();
    names.sort();
    assert_eq!(names, VOCABS);
}
