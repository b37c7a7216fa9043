//! The greedy goldens (`tests/goldens/<model>_greedy.json`, made by
//! `scripts/oracle/greedy_goldens.py`) and the teacher-forced check against them.
//!
//! Each golden case holds llama.cpp's prompt ids and 64 greedy steps; each step its chosen id,
//! its top-5 `(id, logprob)` and the logprob gap between its top two. Teacher forcing feeds the
//! golden ids (not our own argmax) as the context, so one early near-tie cannot hide every later
//! step: the prompt and the first 63 golden ids run as two batches, and the logits of the last
//! 64 positions are compared step by step. At a step whose golden gap is at least the margin
//! our argmax must be llama.cpp's; at every step our logprob of llama.cpp's chosen id must be
//! within a tolerance of its own (its 2nd..5th candidates are reported, not asserted: the tail
//! of the distribution moves most with rounding).

use model::sampler::{argmax, logprobs};
use model::{LogitsWanted, LoraUse, Session, Transformer};
use serde_json::Value;

/// One generated step as llama.cpp computed it.
pub struct GreedyStep {
    pub id: u32,
    /// llama.cpp's five most likely `(id, logprob)`, best first.
    pub top5: Vec<(u32, f64)>,
    /// logprob(top-1) − logprob(top-2).
    pub gap: f64,
}

/// One prompt and its greedy continuation.
pub struct GreedyCase {
    pub name: String,
    pub prompt: String,
    pub prompt_ids: Vec<u32>,
    pub steps: Vec<GreedyStep>,
}

/// A whole greedy golden file.
pub struct GreedyGolden {
    /// sha256 of the GGUF file llama.cpp ran.
    pub model_sha256: String,
    pub cases: Vec<GreedyCase>,
}

fn id(v: &Value) -> u32 {
    v.as_u64()
        .and_then(|x| u32::try_from(x).ok())
        .expect("token id")
}

/// Reads a greedy golden (path relative to the workspace root).
pub fn load_greedy(rel: &str) -> GreedyGolden {
    let v = load_json(rel);
    GreedyGolden {
        model_sha256: v["model"]["sha256"]
            .as_str()
            .expect("model sha256")
            .to_string(),
        cases: parse_cases(&v["cases"]),
    }
}

/// A golden JSON file (path relative to the workspace root).
pub fn load_json(rel: &str) -> Value {
    let path = super::golden(rel);
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e} (see scripts/oracle/README.md)", path.display()));
    serde_json::from_str(&text).expect("golden file is JSON")
}

/// The cases of a greedy golden (its `cases` list).
pub fn parse_cases(cases: &Value) -> Vec<GreedyCase> {
    let step = |s: &Value| GreedyStep {
        id: id(&s["id"]),
        top5: s["top5"]
            .as_array()
            .expect("top5")
            .iter()
            .map(|p| (id(&p[0]), p[1].as_f64().expect("logprob")))
            .collect(),
        gap: s["gap"].as_f64().expect("gap"),
    };
    let ids = |v: &Value| -> Vec<u32> { v.as_array().expect("ids").iter().map(id).collect() };
    cases
        .as_array()
        .expect("cases")
        .iter()
        .map(|c| {
            let steps: Vec<GreedyStep> = c["steps"]
                .as_array()
                .expect("steps")
                .iter()
                .map(step)
                .collect();
            assert_eq!(
                ids(&c["generated_ids"]),
                steps.iter().map(|s| s.id).collect::<Vec<_>>(),
                "golden steps agree with generated_ids"
            );
            GreedyCase {
                name: c["name"].as_str().expect("name").to_string(),
                prompt: c["prompt"].as_str().expect("prompt").to_string(),
                prompt_ids: ids(&c["prompt_ids"]),
                steps,
            }
        })
        .collect()
}

/// Tolerances of the teacher-forced comparison.
#[derive(Clone, Copy, Debug)]
pub struct Margins {
    /// At a step whose golden top-1/top-2 gap is at least this, our argmax must be llama.cpp's.
    pub gap: f64,
    /// Largest accepted |our logprob − llama.cpp's| of llama.cpp's chosen id.
    pub logprob: f64,
}

/// What teacher forcing one case found.
#[derive(Debug, Default)]
pub struct TeacherForced {
    /// Steps with a clear golden choice where our argmax differed, described.
    pub clear_mismatches: Vec<String>,
    /// Steps whose logprobs were off by more than the tolerance, described.
    pub logprob_mismatches: Vec<String>,
    /// Steps under the gap margin where our argmax differed (accepted: a near-tie).
    pub near_ties_flipped: usize,
    /// Steps whose argmax was required to match.
    pub clear_steps: usize,
    /// Largest |our logprob − llama.cpp's| of the chosen id, over every step.
    pub worst_logprob_diff: f64,
    /// Largest |our logprob − llama.cpp's| over every step's top five (reported only).
    pub worst_top5_diff: f64,
}

/// Runs `case` teacher-forced through `tf` and compares every step with the golden.
pub fn teacher_force(tf: &mut Transformer, case: &GreedyCase, m: Margins) -> TeacherForced {
    teacher_force_with(tf, case, m, &[])
}

/// [`teacher_force`] with the LoRA adapters `loras` applied to the sequence.
pub fn teacher_force_with(
    tf: &mut Transformer,
    case: &GreedyCase,
    m: Margins,
    loras: &[LoraUse],
) -> TeacherForced {
    let (prompt, n) = (&case.prompt_ids, case.steps.len());
    let (last, head) = prompt
        .split_last()
        .expect("a prompt has at least one token");
    let mut session = Session::new(tf, 1, prompt.len() + n, 16);
    session.set_loras(0, loras);
    let mut logits = Vec::new();
    for piece in head.chunks(512) {
        session
            .run(tf, &[(0, piece, LogitsWanted::None)], &mut logits)
            .expect("prefill runs");
    }
    // The last prompt token and the first n-1 golden ids: row s is the context of step s.
    let mut forced = vec![*last];
    forced.extend(case.steps[..n - 1].iter().map(|s| s.id));
    session
        .run(tf, &[(0, &forced, LogitsWanted::All)], &mut logits)
        .expect("teacher-forced batch runs");
    let vocab = logits.len() / n;
    let mut out = TeacherForced::default();
    for (s, (step, row)) in case
        .steps
        .iter()
        .zip(logits.chunks_exact(vocab))
        .enumerate()
    {
        let ours = argmax(row);
        if step.gap >= m.gap {
            out.clear_steps += 1;
            if ours != step.id {
                out.clear_mismatches.push(format!(
                    "{}: step {s}: ours {ours}, llama.cpp {} (its top-2 gap {:.3})",
                    case.name, step.id, step.gap
                ));
            }
        } else if ours != step.id {
            out.near_ties_flipped += 1;
        }
        let diff = |&(id, theirs): &(u32, f64)| (logprobs(row, id, 0).0 as f64 - theirs).abs();
        let top5 = step.top5.iter().map(diff).fold(0.0, f64::max);
        out.worst_top5_diff = out.worst_top5_diff.max(top5);
        let chosen = diff(&step.top5[0]);
        out.worst_logprob_diff = out.worst_logprob_diff.max(chosen);
        if chosen > m.logprob {
            out.logprob_mismatches.push(format!(
                "{}: step {s}: logprob of llama.cpp's token {} differs by {chosen:.3}",
                case.name, step.id
            ));
        }
    }
    out
}
