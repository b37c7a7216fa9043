//! Golden tests: llama.cpp's official chat templates render the same text in Tessera as in
//! Hugging Face transformers' `apply_chat_template`.
//!
//! `tests/goldens/official_chat_templates.json` (from
//! `scripts/oracle/official_templates_goldens.py`) holds the conversations (system, multi-turn,
//! tools, tool calls and their results, `chat_template_kwargs`, …), and for every template of
//! llama.cpp's `models/templates` its file name, its sha256 and transformers' rendering of each
//! conversation with the generation prompt on and off (or the error it raised). The templates
//! themselves are llama.cpp's files, not the repository's: `scripts/fetch_llama_cpp_files.py`
//! extracts them from the llama-cpp-python sdist into `$TESSERA_CHAT_TEMPLATES_DIR` (else
//! `<workspace>/models/chat-templates`), and scripts/test.sh runs it before the tests. A
//! missing or changed file fails.
//!
//! Each template goes through `ChatTemplate::choose` as the server loads a model's template,
//! with the clock fixed at the golden's `now` (transformers' `strftime_now` read the same
//! instant). A template Tessera refuses must be refused at load, naming its line and the
//! reason, and must stand on `REFUSED` below (at most 3).
#![cfg(feature = "real-models")]

use std::path::PathBuf;

use serde_json::Value;
use server::chat_template::{ChatTemplate, Clock, Message};
use sha2::{Digest, Sha256};

/// Templates Tessera refuses at load: the file, and words the refusal must contain.
const REFUSED: &[(&str, &str)] = &[(
    // `"Use the function '"|safe + t["function"]["name"] + … + t["function"] | tojson()`: in
    // Python the Markup string HTML-escapes the tool's JSON (`&#34;name&#34;: …`).
    "meetkai-functionary-medium-v3.1.jinja",
    "line 22: `|safe` beside `+`",
)];

fn templates_dir() -> PathBuf {
    std::env::var_os("TESSERA_CHAT_TEMPLATES_DIR").map_or_else(
        || test_support::repo_root().join("models/chat-templates"),
        PathBuf::from,
    )
}

fn text<'a>(v: &'a Value, key: &str) -> &'a str {
    v[key]
        .as_str()
        .unwrap_or_else(|| panic!("golden lacks {key:?}"))
}

fn golden() -> Value {
    let path = test_support::repo_root().join("tests/goldens/official_chat_templates.json");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).expect("golden is JSON")
}

/// The template's text, checked against the golden's sha256.
fn source(entry: &Value) -> String {
    let path = templates_dir().join(text(entry, "file"));
    let bytes = std::fs::read(&path).unwrap_or_else(|e| {
        panic!(
            "{}: {e}; scripts/fetch_llama_cpp_files.py fetches the templates \
             (or set TESSERA_CHAT_TEMPLATES_DIR)",
            path.display()
        )
    });
    let digest: String = Sha256::digest(&bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    assert_eq!(
        digest,
        text(entry, "sha256"),
        "{} is not the file the golden was made from",
        path.display()
    );
    String::from_utf8(bytes).expect("a template is UTF-8")
}

/// A conversation's messages as the server passes them; their JSON is the golden's exactly.
fn messages(conv: &Value) -> Vec<Message> {
    conv["messages"]
        .as_array()
        .expect("messages")
        .iter()
        .map(|m| {
            let msg: Message = serde_json::from_value(m.clone()).expect("a message");
            let back = serde_json::to_value(&msg).expect("serializes");
            assert_eq!(&back, m, "the template sees the golden's message");
            msg
        })
        .collect()
}

/// `"2026-02-03T04:05:06"` as seconds since the epoch (the clock's time zone is UTC).
fn fixed_clock(iso: &str) -> Clock {
    let num = |r: std::ops::Range<usize>| -> i64 { iso[r].parse().expect("a number") };
    let (y, mo, d) = (num(0..4), num(5..7), num(8..10));
    let (h, mi, s) = (num(11..13), num(14..16), num(17..19));
    // Days from 1970-01-01 to y-mo-d (proleptic Gregorian, Howard Hinnant's algorithm).
    let y = if mo <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * ((mo + 9) % 12) + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    Clock::Fixed(days * 86_400 + h * 3600 + mi * 60 + s)
}

/// Where two texts part, with some context either side.
fn first_difference(ours: &str, theirs: &str) -> String {
    let at = ours
        .char_indices()
        .zip(theirs.chars())
        .find(|((_, a), b)| a != b)
        .map_or(ours.len().min(theirs.len()), |((i, _), _)| i);
    let around = |s: &str| -> String {
        let (mut start, mut end) = (at.saturating_sub(60), (at + 60).min(s.len()));
        while !s.is_char_boundary(start) {
            start -= 1;
        }
        while !s.is_char_boundary(end) {
            end += 1;
        }
        format!("{:?}", &s[start..end])
    };
    format!(
        "they part at byte {at}:\n ours   {}\n theirs {}",
        around(ours),
        around(theirs)
    )
}

/// The mismatches of one template (empty: it renders every case as transformers does).
fn check_template(golden: &Value, entry: &Value, t: &ChatTemplate) -> Vec<String> {
    let (bos, eos) = (text(golden, "bos_token"), text(golden, "eos_token"));
    let convs = golden["conversations"].as_array().expect("conversations");
    let mut failures = Vec::new();
    for case in entry["cases"].as_array().expect("cases") {
        let name = text(case, "conversation");
        let conv = convs
            .iter()
            .find(|c| c["name"] == name)
            .unwrap_or_else(|| panic!("no conversation {name}"));
        let tools: Option<Vec<Value>> = conv
            .get("tools")
            .map(|t| t.as_array().expect("tools").clone());
        let add_gen = case["add_generation_prompt"].as_bool().expect("flag");
        let label = format!("{name} (add_generation_prompt={add_gen})");
        let ours = t.render(
            &messages(conv),
            tools.as_deref(),
            add_gen,
            bos,
            eos,
            conv.get("kwargs").and_then(Value::as_object),
        );
        match (ours, case.get("rendered").and_then(Value::as_str)) {
            (Ok(ours), Some(theirs)) if ours == theirs => {}
            (Ok(ours), Some(theirs)) => {
                failures.push(format!("{label}: {}", first_difference(&ours, theirs)))
            }
            (Err(e), None) => {
                // transformers refused it too; a `raise_exception` message must be the same.
                let err = &case["error"];
                if err["kind"] == "raise_exception" && !e.0.contains(text(err, "message")) {
                    failures.push(format!("{label}: we refused with {:?}, not {err}", e.0));
                }
            }
            (Err(e), Some(_)) => failures.push(format!("{label}: we refused it: {}", e.0)),
            (Ok(ours), None) => failures.push(format!(
                "{label}: transformers refused it ({}), we rendered {ours:?}",
                case["error"]
            )),
        }
    }
    failures
}

#[test]
fn official_chat_templates_render_as_transformers_renders_them() {
    let golden = golden();
    let clock = fixed_clock(text(&golden, "now"));
    let entries = golden["templates"].as_array().expect("templates");
    assert!(entries.len() >= 70, "the golden covers every template");
    assert!(REFUSED.len() <= 3, "at most 3 templates may be refused");
    let mut failures = Vec::new();
    let mut refused = Vec::new();
    for entry in entries {
        let file = text(entry, "file");
        let loaded = ChatTemplate::choose_with_clock(None, Some(source(entry)), "llama", clock);
        let expected_refusal = REFUSED.iter().find(|(f, _)| *f == file);
        match (loaded, expected_refusal) {
            (Ok(t), None) => {
                let f = check_template(&golden, entry, &t);
                if !f.is_empty() {
                    failures.push(format!(
                        "== {file}: {} cases differ\n{}",
                        f.len(),
                        f.join("\n")
                    ));
                }
            }
            (Ok(_), Some(_)) => failures.push(format!("== {file}: loads, but REFUSED lists it")),
            (Err(e), Some((_, why))) => {
                assert!(
                    e.contains(why),
                    "{file}: refused with {e:?}, expected {why:?}"
                );
                assert!(
                    e.contains("line "),
                    "{file}: the refusal names no line: {e}"
                );
                refused.push(file);
            }
            (Err(e), None) => failures.push(format!("== {file}: refused at load: {e}")),
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} templates differ from transformers:\n{}",
        failures.len(),
        entries.len(),
        failures.join("\n")
    );
    assert_eq!(
        refused.len(),
        REFUSED.len(),
        "every REFUSED entry is a golden template"
    );
}
