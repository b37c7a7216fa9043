//! Golden test: greedy continuations of the default model equal llama.cpp's.
//!
//! `tests/goldens/gemma3_greedy.json` (made by `scripts/oracle/greedy_goldens.py`) holds, for
//! each prompt, llama.cpp's prompt ids, its 64 greedy tokens, and the log-probability gap between
//! its top two candidates at every step. We must produce the same ids up to the end, or up to a
//! step where llama.cpp's own top two were within `NEAR_TIE` (its own code paths disagree at such
//! near-ties); a divergence at a clear choice fails.

mod common;

use model::sampler::{argmax, logprobs};
use model::{LogitsWanted, Session};
use serde_json::Value;

/// Below this top-1/top-2 log-probability gap, llama.cpp's choice is a near-tie.
const NEAR_TIE: f64 = 0.3;

struct Case {
    name: String,
    prompt: String,
    prompt_ids: Vec<u32>,
    generated: Vec<u32>,
    gaps: Vec<f64>,
    top1_logprob: Vec<f64>,
}

fn load_cases() -> Vec<Case> {
    let path = common::golden("tests/goldens/gemma3_greedy.json");
    let text = std::fs::read_to_string(&path).expect("golden file readable");
    let v: Value = serde_json::from_str(&text).expect("golden file is JSON");
    let ids = |x: &Value| -> Vec<u32> {
        x.as_array()
            .expect("array of ids")
            .iter()
            .map(|i| i.as_u64().expect("id") as u32)
            .collect()
    };
    v["cases"]
        .as_array()
        .expect("cases")
        .iter()
        .map(|c| {
            let steps = c["steps"].as_array().expect("steps");
            Case {
                name: c["name"].as_str().expect("name").to_string(),
                prompt: c["prompt"].as_str().expect("prompt").to_string(),
                prompt_ids: ids(&c["prompt_ids"]),
                generated: ids(&c["generated_ids"]),
                gaps: steps
                    .iter()
                    .map(|s| s["gap"].as_f64().expect("gap"))
                    .collect(),
                top1_logprob: steps
                    .iter()
                    .map(|s| s["top5"][0][1].as_f64().expect("logprob"))
                    .collect(),
            }
        })
        .collect()
}

#[test]
fn greedy_continuations_match_llama_cpp() {
    let cases = load_cases();
    assert!(cases.len() >= 8, "expected at least 8 golden prompts");
    let m = model::load(&common::default_model_path(), 2).expect("default model loads");
    let (tok, mut tf) = (m.tokenizer, m.transformer);
    let mut failures = Vec::new();
    let mut worst_logprob_diff = 0.0f64;
    for case in &cases {
        assert_eq!(
            tok.encode(&case.prompt, true, false),
            case.prompt_ids,
            "{}: prompt tokenization differs from llama.cpp",
            case.name
        );
        let n = case.generated.len();
        let mut session = Session::new(&tf, 1, case.prompt_ids.len() + n, 16);
        let mut logits = session
            .prefill(&mut tf, 0, &case.prompt_ids, 512)
            .expect("prefill runs");
        for step in 0..n {
            let ours = argmax(&logits);
            let theirs = case.generated[step];
            if ours != theirs {
                if case.gaps[step] < NEAR_TIE {
                    println!(
                        "{}: diverged at step {step} on a near-tie (gap {:.3}); accepted",
                        case.name, case.gaps[step]
                    );
                } else {
                    failures.push(format!(
                        "{}: step {step}: ours {ours}, llama.cpp {theirs} (their top-2 gap {:.3})",
                        case.name, case.gaps[step]
                    ));
                }
                break;
            }
            let (lp, _) = logprobs(&logits, ours, 0);
            worst_logprob_diff =
                worst_logprob_diff.max((lp as f64 - case.top1_logprob[step]).abs());
            if step + 1 < n {
                session
                    .run(&mut tf, &[(0, &[ours], LogitsWanted::Last)], &mut logits)
                    .expect("decode step runs");
            }
        }
    }
    println!(
        "largest |logprob(top-1) - llama.cpp's| before any divergence: {worst_logprob_diff:.4}"
    );
    assert!(
        failures.is_empty(),
        "divergences at clear choices:\n{}",
        failures.join("\n")
    );
}
