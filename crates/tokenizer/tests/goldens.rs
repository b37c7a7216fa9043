//! Golden tests: our tokenizer against llama.cpp on real model vocabularies, one table row per
//! model.
//!
//! The goldens (`tests/goldens/<stem>.json`) come from `scripts/oracle/tokenizer_goldens.py`
//! (llama-cpp-python, `vocab_only=True`): Gemma 3 270M (SentencePiece, the default model),
//! Qwen2.5-Coder-0.5B and SmolLM2-135M (byte-level BPE), nomic-embed-text-v1.5 (WordPiece),
//! gpt-oss's o200k_harmony vocabulary (byte-level BPE, `gpt-4o` pre-tokenizer; a
//! vocabulary-only file that `scripts/fetch_o200k_vocab.py` writes). Gemma's file is looked up
//! at `$TESSERA_MODEL`, then the models directory; the others in the models directory
//! (`$TESSERA_MODELS_DIR`, else `<workspace>/models/`), under their canonical names
//! (`test_support::model_path`). A missing file fails the tests, with instructions
//! (scripts/test.sh fetches every model and writes the gpt-oss vocabulary).
// Full tier only: reads real model files (`--features real-models`, scripts/test.sh fetches them).
#![cfg(feature = "real-models")]

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};
use std::time::Instant;

use serde_json::Value;
use tokenizer::Tokenizer;

/// One real vocabulary and its golden file.
struct Spec {
    /// Golden file stem: `tests/goldens/<stem>.json`.
    stem: &'static str,
    /// Canonical model file name.
    file: &'static str,
    /// Whether `$TESSERA_MODEL` names this file (the default model) when set.
    is_default_model: bool,
    /// SentencePiece: a literal U+2581 in a text is the space marker and decodes as a space.
    spm: bool,
    /// WordPiece: decoding is lossy (lowercase, no accents, punctuation spaced out) and
    /// llama.cpp's detokenizer applies clean-up heuristics Tessera does not; the decode check
    /// is then that the decoded text encodes back to the same ids.
    lossy: bool,
    /// The script that writes the file, when it is not a model `tessera fetch-model` fetches.
    written_by: Option<&'static str>,
}

const GEMMA3: Spec = Spec {
    stem: "gemma3_270m",
    file: "gemma-3-270m-q4_k_m.gguf",
    is_default_model: true,
    spm: true,
    lossy: false,
    written_by: None,
};

const QWEN25_CODER: Spec = Spec {
    stem: "qwen2.5-coder-0.5b",
    file: "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
    is_default_model: false,
    spm: false,
    lossy: false,
    written_by: None,
};

const SMOLLM2: Spec = Spec {
    stem: "smollm2-135m",
    file: "smollm2-135m-instruct-q4_1.gguf",
    is_default_model: false,
    spm: false,
    lossy: false,
    written_by: None,
};

fn load(spec: &Spec) -> Tokenizer {
    let path = if spec.is_default_model {
        test_support::default_model_path()
    } else if let Some(script) = spec.written_by {
        let p = test_support::models_dir().join(spec.file);
        assert!(
            p.is_file(),
            "{} missing: write it with `python3 {script}` (a Python with gguf==0.19.0, and \
             cargo; scripts/test.sh runs it), or point TESSERA_MODELS_DIR at the directory that \
             holds it",
            p.display()
        );
        p
    } else {
        test_support::model_path(spec.file)
    };
    let start = Instant::now();
    let file = gguf::GgufFile::open(&path)
        .unwrap_or_else(|e| panic!("cannot open {}: {e}", path.display()));
    let tok = Tokenizer::from_metadata(file.metadata())
        .unwrap_or_else(|e| panic!("cannot build tokenizer from {}: {e}", path.display()));
    eprintln!("loaded {} in {:?}", path.display(), start.elapsed());
    tok
}

/// The real tokenizer, loaded once per test binary and model.
fn tokenizer(spec: &Spec) -> &'static Tokenizer {
    static CACHE: OnceLock<Mutex<HashMap<&'static str, &'static Tokenizer>>> = OnceLock::new();
    let mut cache = CACHE
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    cache
        .entry(spec.stem)
        .or_insert_with(|| Box::leak(Box::new(load(spec))))
}

fn goldens(spec: &Spec) -> Value {
    let path = format!(
        "{}/tests/goldens/{}.json",
        env!("CARGO_MANIFEST_DIR"),
        spec.stem
    );
    let text = std::fs::read_to_string(path).expect("golden file is committed");
    serde_json::from_str(&text).expect("golden file is valid JSON")
}

fn cases(g: &Value) -> &Vec<Value> {
    g["cases"].as_array().expect("`cases` array")
}

fn ids(v: &Value) -> Vec<u32> {
    v.as_array()
        .expect("id array")
        .iter()
        .map(|x| {
            x.as_u64()
                .and_then(|x| u32::try_from(x).ok())
                .expect("u32 id")
        })
        .collect()
}

fn text(case: &Value) -> &str {
    case["text"].as_str().expect("text")
}

/// A readable account of where two id lists diverge.
fn describe_mismatch(tok: &Tokenizer, ours: &[u32], want: &[u32]) -> String {
    let at = ours.iter().zip(want).take_while(|(a, b)| a == b).count();
    let window = |ids: &[u32]| -> Vec<String> {
        ids.iter()
            .skip(at.saturating_sub(2))
            .take(6)
            .map(|&id| format!("{id}:{:?}", tok.token_piece(id).unwrap_or("?")))
            .collect()
    };
    format!(
        "first difference at index {at} (lengths {} vs {}): ours {:?}, llama.cpp {:?}",
        ours.len(),
        want.len(),
        window(ours),
        window(want)
    )
}

fn check_metadata(spec: &Spec) {
    let tok = tokenizer(spec);
    let g = goldens(spec);
    assert_eq!(Some(tok.vocab_size() as u64), g["n_vocab"].as_u64());
    assert_eq!(tok.bos_id().map(u64::from), g["bos"].as_u64());
    assert_eq!(tok.eos_id().map(u64::from), g["eos"].as_u64());
    assert_eq!(Some(tok.add_bos()), g["add_bos"].as_bool());
    if let Some(sep) = g.get("sep").and_then(Value::as_i64) {
        assert_eq!(tok.sep_id().map_or(-1, i64::from), sep);
        assert_eq!(Some(tok.add_sep()), g["add_sep"].as_bool());
    }
    assert!(cases(&g).len() >= 180);
}

fn check_encode(spec: &Spec) {
    let tok = tokenizer(spec);
    let g = goldens(spec);
    let mut failures = Vec::new();
    for case in cases(&g) {
        for (key, parse_special) in [("ids", false), ("ids_special", true)] {
            let want = ids(&case[key]);
            let ours = tok.encode(text(case), true, parse_special);
            if ours != want {
                let name = case["name"].as_str().unwrap_or("?");
                let why = describe_mismatch(tok, &ours, &want);
                failures.push(format!("{name} (parse_special={parse_special}): {why}"));
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

fn check_decode(spec: &Spec) {
    let tok = tokenizer(spec);
    let g = goldens(spec);
    if spec.lossy {
        return check_reencode(tok, &g);
    }
    for case in cases(&g) {
        let name = case["name"].as_str().unwrap_or("?");
        let plain = ids(&case["ids"]);
        // A literal U+2581 in the text is the SPM space marker, so it comes back as a space.
        let want = if spec.spm {
            text(case).replace('\u{2581}', " ")
        } else {
            text(case).to_string()
        };
        assert_eq!(tok.decode(&plain, true), want, "round trip of {name}");
        let special = ids(&case["ids_special"]);
        let llama = case["detok_special"].as_str().expect("detok_special");
        assert_eq!(
            tok.decode(&special, true),
            llama,
            "control tokens hidden in {name}"
        );
    }
}

/// Lossy vocabularies: the decoded text of a case's ids (specials hidden) encodes back to the
/// same ids, for every case without [UNK] (which decodes to nothing), and equals llama.cpp's.
fn check_reencode(tok: &Tokenizer, g: &Value) {
    let mut checked = 0;
    for case in cases(g) {
        let name = case["name"].as_str().unwrap_or("?");
        let body: Vec<u32> = ids(&case["ids"])
            .into_iter()
            .filter(|&id| !tok.is_special(id))
            .collect();
        if body.iter().any(|&id| Some(id) == tok.unk_id()) {
            continue;
        }
        let text = tok.decode(&body, true);
        assert_eq!(
            tok.encode(&text, false, false),
            body,
            "re-encoding {name}: {text:?}"
        );
        checked += 1;
    }
    assert!(checked >= 100, "only {checked} cases without [UNK]");
}

fn check_streaming_decode(spec: &Spec) {
    let tok = tokenizer(spec);
    let g = goldens(spec);
    for case in cases(&g) {
        let ids = ids(&case["ids_special"]);
        let mut dec = tok.incremental_decoder(false);
        let mut streamed: String = ids.iter().map(|&id| dec.push(id)).collect();
        streamed.push_str(&dec.flush());
        assert_eq!(streamed, tok.decode(&ids, false), "{}", case["name"]);
    }
}

/// The four golden checks as tests of one table row.
macro_rules! golden_tests {
    ($module:ident, $spec:expr) => {
        mod $module {
            use super::*;

            #[test]
            fn golden_metadata_matches_the_model() {
                check_metadata(&$spec);
            }

            #[test]
            fn encodes_every_golden_text_exactly_like_llama_cpp() {
                check_encode(&$spec);
            }

            #[test]
            fn decodes_golden_ids_back_to_the_text_and_to_llama_cpp_detokenization() {
                check_decode(&$spec);
            }

            #[test]
            fn streaming_decode_equals_whole_decode_for_golden_ids() {
                check_streaming_decode(&$spec);
            }
        }
    };
}

const NOMIC: Spec = Spec {
    stem: "nomic-embed-text-v1.5",
    file: "nomic-embed-text-v1.5.f16.gguf",
    is_default_model: false,
    spm: false,
    lossy: true,
    written_by: None,
};

/// gpt-oss's o200k_harmony vocabulary (`gpt-4o` pre-tokenizer), rebuilt from OpenAI's ranks
/// by the script, since no gpt-oss file reaches the test machines.
const GPT_OSS: Spec = Spec {
    stem: "gpt-oss-o200k",
    file: "gpt-oss-o200k-vocab.gguf",
    is_default_model: false,
    spm: false,
    lossy: false,
    written_by: Some("scripts/fetch_o200k_vocab.py"),
};

golden_tests!(gemma3, GEMMA3);
golden_tests!(gpt_oss, GPT_OSS);
golden_tests!(nomic, NOMIC);
golden_tests!(qwen25_coder, QWEN25_CODER);
golden_tests!(smollm2, SMOLLM2);

#[test]
fn gemma_end_of_generation_ids_include_end_of_turn() {
    let tok = tokenizer(&GEMMA3);
    let eot = tok
        .token_to_id("<end_of_turn>")
        .expect("gemma has <end_of_turn>");
    assert!(tok.eog_ids().contains(&eot));
    assert!(tok.eog_ids().contains(&tok.eos_id().expect("eos")));
    assert!(tok.is_special(eot));
    assert_eq!(tok.encode("<start_of_turn>", false, true).len(), 1);
}

/// gpt-oss as llama.cpp loads it: generation ends at <|return|>, <|call|> and <|endoftext|> but
/// not at <|end|> (which ends a message), and the harmony markers are user-defined tokens, so
/// they are split out of text without special parsing and shown when special tokens are hidden.
#[test]
fn gpt_oss_ends_generation_at_return_and_call_and_shows_harmony_markers() {
    let tok = tokenizer(&GPT_OSS);
    let id = |t: &str| tok.token_to_id(t).expect("a harmony token");
    assert_eq!(
        tok.eog_ids(),
        [id("<|endoftext|>"), id("<|return|>"), id("<|call|>")]
    );
    for marker in [
        "<|start|>",
        "<|channel|>",
        "<|message|>",
        "<|constrain|>",
        "<|end|>",
    ] {
        assert!(!tok.is_special(id(marker)), "{marker}");
        assert_eq!(tok.encode(marker, false, false), [id(marker)]);
        assert_eq!(tok.decode(&[id(marker)], true), marker);
    }
    assert!(tok.is_special(id("<|return|>")));
    assert_eq!(tok.encode("<|return|>", false, false).len(), 5);
}
