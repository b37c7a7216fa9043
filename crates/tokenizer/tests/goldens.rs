//! Golden tests: our tokenizer against llama.cpp on the real Gemma 3 270M vocabulary.
//!
//! The goldens (`tests/goldens/gemma3_270m.json`) come from
//! `scripts/oracle/tokenizer_goldens.py` (llama-cpp-python, `vocab_only=True`). The model is
//! looked up at `$TESSERA_MODEL`, then `<workspace>/models/`, then `/work/tmp/model/`. A
//! missing model fails the tests (with instructions) unless `TESSERA_SKIP_MODEL_TESTS=1`.

use std::path::PathBuf;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use serde_json::Value;
use tokenizer::Tokenizer;

const MODEL_FILE: &str = "gemma-3-270m-q4_k_m.gguf";

/// `$TESSERA_MODEL` if set (and then only it), else the first default location that exists.
fn model_path() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("TESSERA_MODEL") {
        return Some(PathBuf::from(p)).filter(|p| p.exists());
    }
    let workspace = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."));
    [
        workspace.join("models").join(MODEL_FILE),
        PathBuf::from("/work/tmp/model").join(MODEL_FILE),
    ]
    .into_iter()
    .find(|p| p.exists())
}

/// The real tokenizer, loaded once per test binary; `None` means "skip" (explicitly allowed).
fn tokenizer() -> Option<&'static Tokenizer> {
    static TOKENIZER: OnceLock<Option<Tokenizer>> = OnceLock::new();
    TOKENIZER
        .get_or_init(|| {
            let Some(path) = model_path() else {
                if std::env::var("TESSERA_SKIP_MODEL_TESTS").as_deref() == Ok("1") {
                    eprintln!("skipping: {MODEL_FILE} not found and TESSERA_SKIP_MODEL_TESTS=1");
                    return None;
                }
                let env = std::env::var("TESSERA_MODEL").unwrap_or_else(|_| "unset".into());
                panic!(
                    "{MODEL_FILE} not found (looked at $TESSERA_MODEL ({env}), <workspace>/models/, \
                     /work/tmp/model/). Fetch it with `cargo run --release -- fetch-model` \
                     (or scripts/test.sh), point TESSERA_MODEL at it, or set \
                     TESSERA_SKIP_MODEL_TESTS=1 to skip these tests."
                );
            };
            let start = Instant::now();
            let file = gguf::GgufFile::open(&path)
                .unwrap_or_else(|e| panic!("cannot open {}: {e}", path.display()));
            let tok = Tokenizer::from_metadata(file.metadata())
                .unwrap_or_else(|e| panic!("cannot build tokenizer from {}: {e}", path.display()));
            eprintln!("loaded {} in {:?}", path.display(), start.elapsed());
            Some(tok)
        })
        .as_ref()
}

fn goldens() -> Value {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/goldens/gemma3_270m.json"
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

#[test]
fn golden_metadata_matches_the_model() {
    let Some(tok) = tokenizer() else { return };
    let g = goldens();
    assert_eq!(Some(tok.vocab_size() as u64), g["n_vocab"].as_u64());
    assert_eq!(tok.bos_id().map(u64::from), g["bos"].as_u64());
    assert_eq!(tok.eos_id().map(u64::from), g["eos"].as_u64());
    assert!(cases(&g).len() >= 180);
}

#[test]
fn encodes_every_golden_text_exactly_like_llama_cpp() {
    let Some(tok) = tokenizer() else { return };
    let g = goldens();
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

#[test]
fn decodes_golden_ids_back_to_the_text_and_to_llama_cpp_detokenization() {
    let Some(tok) = tokenizer() else { return };
    let g = goldens();
    for case in cases(&g) {
        let name = case["name"].as_str().unwrap_or("?");
        let plain = ids(&case["ids"]);
        // A literal U+2581 in the text is the SPM space marker, so it comes back as a space.
        let want = text(case).replace('\u{2581}', " ");
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

#[test]
fn streaming_decode_equals_whole_decode_for_golden_ids() {
    let Some(tok) = tokenizer() else { return };
    let g = goldens();
    for case in cases(&g) {
        let ids = ids(&case["ids_special"]);
        let mut dec = tok.incremental_decoder(false);
        let mut streamed: String = ids.iter().map(|&id| dec.push(id)).collect();
        streamed.push_str(&dec.flush());
        assert_eq!(streamed, tok.decode(&ids, false), "{}", case["name"]);
    }
}

#[test]
fn gemma_end_of_generation_ids_include_end_of_turn() {
    let Some(tok) = tokenizer() else { return };
    let eot = tok
        .token_to_id("<end_of_turn>")
        .expect("gemma has <end_of_turn>");
    assert!(tok.eog_ids().contains(&eot));
    assert!(tok.eog_ids().contains(&tok.eos_id().expect("eos")));
    assert!(tok.is_special(eot));
    assert_eq!(tok.encode("<start_of_turn>", false, true).len(), 1);
}

/// Best of three timings of encoding `text` (the machine is shared: one slow run says little).
fn best_encode_time(tok: &Tokenizer, text: &str) -> Duration {
    (0..3)
        .map(|_| {
            let start = Instant::now();
            let n = tok.encode(text, true, true).len();
            assert!(n >= 10_000, "only {n} tokens");
            start.elapsed()
        })
        .min()
        .unwrap_or(Duration::MAX)
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

#[test]
fn encodes_ten_thousand_tokens_in_well_under_100ms() {
    let Some(tok) = tokenizer() else { return };
    let g = goldens();
    let all: Vec<&str> = cases(&g).iter().map(text).collect();
    let mixed = ten_thousand_tokens_of(tok, &all.join("\n"), "\n");
    // One paragraph without newlines is the slow case for SPM: nothing splits the text.
    let prose = cases(&g)
        .iter()
        .find(|c| c["name"] == "prose")
        .map(text)
        .expect("prose case");
    let paragraph = ten_thousand_tokens_of(tok, prose, " ");
    for (name, input) in [("mixed", &mixed), ("one paragraph", &paragraph)] {
        let best = best_encode_time(tok, input);
        eprintln!("encoding {name} ({} bytes) took {best:?}", input.len());
        assert!(best < Duration::from_millis(100), "{name} took {best:?}");
    }
}
