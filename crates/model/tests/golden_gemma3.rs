//! Golden test: greedy continuations of the default model equal llama.cpp's.
//!
//! `tests/goldens/gemma3_greedy.json` (made by `scripts/oracle/greedy_goldens.py`) holds, for
//! each prompt, llama.cpp's prompt ids, its 64 greedy tokens, and the log-probability gap between
//! its top two candidates at every step. We must produce the same ids up to the end, or up to a
//! step where llama.cpp's own top two were within `NEAR_TIE` (its own code paths disagree at such
//! near-ties); a divergence at a clear choice fails.
// Full tier only: reads real model files (`--features real-models`, scripts/test.sh fetches them).
#![cfg(feature = "real-models")]

mod common;

use common::greedy::load_greedy;
use model::sampler::{argmax, logprobs};
use model::{LogitsWanted, Session};

/// Below this top-1/top-2 log-probability gap, llama.cpp's choice is a near-tie.
const NEAR_TIE: f64 = 0.3;

#[test]
fn greedy_continuations_match_llama_cpp() {
    let cases = load_greedy("tests/goldens/gemma3_greedy.json").cases;
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
        let n = case.steps.len();
        let mut session = Session::new(&tf, 1, case.prompt_ids.len() + n, 16);
        let mut logits = session
            .prefill(&mut tf, 0, &case.prompt_ids, 512)
            .expect("prefill runs");
        for (step, golden) in case.steps.iter().enumerate() {
            let ours = argmax(&logits);
            let (theirs, gap) = (golden.id, golden.gap);
            if ours != theirs {
                if gap < NEAR_TIE {
                    println!(
                        "{}: diverged at step {step} on a near-tie (gap {:.3}); accepted",
                        case.name, gap
                    );
                } else {
                    failures.push(format!(
                        "{}: step {step}: ours {ours}, llama.cpp {theirs} (their top-2 gap {:.3})",
                        case.name, gap
                    ));
                }
                break;
            }
            let (lp, _) = logprobs(&logits, ours, 0);
            worst_logprob_diff = worst_logprob_diff.max((lp as f64 - golden.top5[0].1).abs());
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
