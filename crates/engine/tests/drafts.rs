//! Multi-token steps: a decoding sequence feeds its next token plus a draft, and keeps the
//! prefix of the draft its own draws agree with. With the fake runner (see `common`), the
//! output must be the same whatever the drafts were — right, wrong or partly right — while the
//! tiles taken for a rejected tail are freed and never become findable in the prefix cache.

mod common;

use std::collections::HashMap;

use common::*;
use engine::{Drafter, FinishReason, GenerateRequest, SeqId, Speculation};
use model::SamplingParams;

const TS: usize = 4;
const WINDOW: usize = 10;

fn model() -> FakeModel {
    FakeModel::new(Some(WINDOW))
}

/// Drafts that are right with probability `right_pct` / 100 per token (it knows each
/// request's solo output), random otherwise, of random lengths up to `max_len`.
struct TestDrafter {
    rng: SplitMix64,
    /// Each sequence's prompt and solo output.
    truth: HashMap<SeqId, Vec<u32>>,
    right_pct: usize,
    max_len: usize,
    /// Drafted tokens proposed, and how many of them were right.
    proposed: std::sync::Arc<std::sync::atomic::AtomicUsize>,
}

impl Drafter for TestDrafter {
    fn propose(&mut self, id: SeqId, tokens: &[u32], max: usize) -> Vec<u32> {
        let n = self.rng.below(self.max_len + 1).min(max);
        let truth = self.truth.get(&id);
        let vocab = model::testing::tiny_vocab_size();
        let draft: Vec<u32> = (0..n)
            .map(|j| {
                let right = truth.and_then(|t| t.get(tokens.len() + j).copied());
                match right {
                    Some(t) if self.rng.below(100) < self.right_pct => t,
                    _ => 3 + self.rng.below(vocab - 3) as u32,
                }
            })
            .collect();
        self.proposed
            .fetch_add(draft.len(), std::sync::atomic::Ordering::Relaxed);
        draft
    }
}

fn sampled(prompt: Vec<u32>, max_tokens: usize, seed: u64) -> GenerateRequest {
    GenerateRequest {
        sampling: SamplingParams {
            temperature: 0.8,
            top_p: 0.9,
            seed: Some(seed),
            presence_penalty: 0.5,
            ..SamplingParams::default()
        },
        ..greedy(prompt, max_tokens)
    }
}

/// Tiles each running sequence holds never cover more than its known tokens: a rejected
/// draft's tiles were given back in the step that rejected them.
fn assert_no_tail_tiles<R: engine::Runner>(h: &Harness<impl engine::IntoRunner<Runner = R>>) {
    let s = h.engine.scheduler();
    for id in s.decoding_ids() {
        let seq = s.get(id).expect("running sequence");
        let tables = s.tile_tables(id).expect("running sequence");
        for t in tables {
            assert!(
                t.len() <= seq.tokens.len().div_ceil(TS),
                "{id:?} holds a tile past its tokens"
            );
        }
        assert!(seq.draft.is_empty(), "a draft outlived its step");
    }
}

#[test]
fn a_rejected_draft_leaves_no_tile_and_no_prefix_entry() {
    let p = prompt(5, 8);
    let m = model();
    let mut cfg = fake_config(&m, TS, 256);
    cfg.max_seqs = 1;
    let mut h = Harness::new(m, tiny_tokenizer(), &cfg);
    // Eight tokens the fake model does not produce after `p` and its first token.
    let solo_out = solo(model, TS, &greedy(p.clone(), 12)).tokens;
    let wrong: Vec<u32> = (0..8u32).map(|i| 3 + (solo_out[1] + 1 + i) % 300).collect();
    assert_ne!(wrong[0], solo_out[1]);
    struct Wrong(Vec<u32>);
    impl Drafter for Wrong {
        fn propose(&mut self, _: SeqId, _: &[u32], max: usize) -> Vec<u32> {
            self.0.iter().copied().take(max).collect()
        }
    }
    h.engine.set_speculation(Speculation {
        drafter: Box::new(Wrong(wrong.clone())),
        max_tokens: 64,
        adaptive: false,
    });
    let a = h.submit(greedy(p.clone(), 12));
    h.run();
    assert_eq!(h.outcome(a).tokens, solo_out);
    // The first decode step fed the first token and the draft at positions 8..17: tiles 2, 3
    // and 4. Only the first token was accepted; a prompt spelling out the rejected draft must
    // find no more than the tiles of the prompt itself.
    let mut poisoned = p.clone();
    poisoned.push(solo_out[0]);
    poisoned.extend_from_slice(&wrong);
    poisoned.extend(prompt(6, 3));
    let b = h.submit(greedy(poisoned.clone(), 5));
    h.run();
    let (_, usage) = h.outcome(b).finish.expect("finished");
    assert!(usage.cached_tokens <= 8, "cached {}", usage.cached_tokens);
    assert_eq!(
        h.outcome(b).tokens,
        solo(model, TS, &greedy(poisoned, 5)).tokens
    );
}

#[test]
fn drafts_change_the_steps_never_the_tokens_over_many_random_requests() {
    let mut rng = SplitMix64::new(11);
    let bases: Vec<Vec<u32>> = (0..4).map(|i| prompt(300 + i, 24)).collect();
    let mut reqs = Vec::new();
    for i in 0..600u64 {
        let mut p = bases[rng.below(bases.len())][..rng.below(25)].to_vec();
        p.extend(prompt(1000 + i, 1 + rng.below(30)));
        let n = 1 + rng.below(40);
        reqs.push(if i % 3 == 0 {
            sampled(p, n, i)
        } else {
            greedy(p, n)
        });
    }
    let truths: Vec<Vec<u32>> = reqs
        .iter()
        .map(|r| {
            let mut t = r.prompt.clone();
            t.extend(solo(model, TS, r).tokens);
            t
        })
        .collect();
    let mut total_fed = 0;
    for (right_pct, tiles) in [(70, 48), (20, 48), (95, 400)] {
        let m = model();
        let mut cfg = fake_config(&m, TS, tiles);
        cfg.max_batch_tokens = 24;
        let proposed = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let mut h = Harness::new(m, tiny_tokenizer(), &cfg);
        let mut drafter = TestDrafter {
            rng: SplitMix64::new(right_pct as u64),
            truth: HashMap::new(),
            right_pct,
            max_len: 6,
            proposed: proposed.clone(),
        };
        // Ids are handed out in order from 1.
        for (i, t) in truths.iter().enumerate() {
            drafter.truth.insert(SeqId(i as u64 + 1), t.clone());
        }
        h.engine.set_speculation(Speculation {
            drafter: Box::new(drafter),
            max_tokens: 64,
            adaptive: false,
        });
        let mut ids = Vec::new();
        let mut ops = 0usize;
        for r in &reqs {
            ids.push(h.submit(r.clone()));
            for _ in 0..rng.below(4) {
                ops += h.step();
                assert_no_tail_tiles(&h);
            }
        }
        while h.engine.has_work() {
            ops += h.step();
            assert_no_tail_tiles(&h);
        }
        assert_eq!(h.engine.scheduler().tile_counts().in_use, 0);
        let generated: usize = truths
            .iter()
            .zip(&reqs)
            .map(|(t, r)| t.len() - r.prompt.len())
            .sum();
        for ((id, r), t) in ids.iter().zip(&reqs).zip(&truths) {
            let o = h.outcome(*id);
            assert_eq!(o.finish.map(|f| f.0), Some(FinishReason::Length), "{o:?}");
            assert_eq!(
                o.tokens,
                t[r.prompt.len()..],
                "right {right_pct}%, {tiles} tiles"
            );
        }
        let steps = h.steps;
        total_fed += ops;
        eprintln!(
            "right {right_pct}%, {tiles} tiles: {steps} steps, {ops} tokens fed, {} drafted, {generated} generated, {} preemptions",
            proposed.load(std::sync::atomic::Ordering::Relaxed),
            h.engine.scheduler().preemptions_total()
        );
        assert!(proposed.load(std::sync::atomic::Ordering::Relaxed) > 1000);
        if tiles < 100 {
            assert!(
                h.engine.scheduler().preemptions_total() > 0,
                "the pool forces preemption"
            );
        }
    }
    assert!(total_fed > 100_000, "{total_fed} tokens fed");
}

#[test]
fn a_drafter_that_panics_for_one_request_fails_only_that_request() {
    struct Fragile;
    impl Drafter for Fragile {
        fn propose(&mut self, _: SeqId, tokens: &[u32], max: usize) -> Vec<u32> {
            assert!(
                !tokens.contains(&7),
                "injected fault: a token the drafter cannot take"
            );
            tokens.iter().rev().take(max).copied().collect()
        }
    }
    let m = model();
    let cfg = fake_config(&m, TS, 256);
    let mut h = Harness::new(m, tiny_tokenizer(), &cfg);
    h.engine.set_speculation(Speculation {
        drafter: Box::new(Fragile),
        max_tokens: 3,
        adaptive: false,
    });
    let mut bad = prompt(8, 10);
    bad[3] = 7;
    let good = greedy(prompt(9, 10).into_iter().filter(|&t| t != 7).collect(), 8);
    let b = h.submit(greedy(bad, 8));
    let g = h.submit(good.clone());
    h.run();
    let err = h
        .outcome(b)
        .error
        .clone()
        .expect("the faulty request fails");
    assert!(
        err.to_string().contains(&format!("request {}", b.0)),
        "{err}"
    );
    let o = h.outcome(g);
    assert!(o.error.is_none());
    let solo_out = solo(model, TS, &good).tokens;
    // The good request's own tokens may contain 7 too; then it fails as well, which is fine,
    // but this prompt is chosen so that it does not.
    assert_eq!(o.tokens, solo_out);
}

#[test]
fn drafts_leave_logprobs_stop_strings_and_forked_choices_as_they_were() {
    let with_logprobs = GenerateRequest {
        logprobs: Some(2),
        ..sampled(prompt(70, 13), 20, 5)
    };
    let tok = tiny_tokenizer();
    // A stop string taken from the text the request produces without drafts.
    let plain_text = solo(model, TS, &greedy(prompt(71, 9), 24)).text;
    let stop: String = plain_text
        .chars()
        .skip(plain_text.chars().count() / 2)
        .take(3)
        .collect();
    assert!(!stop.trim().is_empty(), "{plain_text:?}");
    let with_stop = GenerateRequest {
        stop_strings: vec![stop],
        ..greedy(prompt(71, 9), 24)
    };
    let group: Vec<GenerateRequest> = (0..3)
        .map(|j| GenerateRequest {
            logprobs: Some(1),
            ..sampled(prompt(72, 11), 12, 40 + j)
        })
        .collect();
    let run = |drafts: Option<&HashMap<SeqId, Vec<u32>>>| {
        let m = model();
        let cfg = fake_config(&m, TS, 256);
        let mut h = Harness::new(m, tok.clone(), &cfg);
        if let Some(truth) = drafts {
            h.engine.set_speculation(Speculation {
                drafter: Box::new(TestDrafter {
                    rng: SplitMix64::new(3),
                    truth: truth.clone(),
                    right_pct: 80,
                    max_len: 5,
                    proposed: Default::default(),
                }),
                max_tokens: 5,
                adaptive: false,
            });
        }
        let mut ids = vec![h.submit(with_logprobs.clone()), h.submit(with_stop.clone())];
        ids.extend(h.submit_group(group.clone()));
        h.run();
        ids.iter()
            .map(|id| (*id, h.outcome(*id).clone()))
            .collect::<Vec<_>>()
    };
    let plain = run(None);
    let truth: HashMap<SeqId, Vec<u32>> = plain
        .iter()
        .zip([&with_logprobs, &with_stop, &group[0], &group[1], &group[2]])
        .map(|((id, o), r)| {
            let mut t = r.prompt.clone();
            t.extend(&o.tokens);
            (*id, t)
        })
        .collect();
    let drafted = run(Some(&truth));
    for ((_, a), (_, b)) in plain.iter().zip(&drafted) {
        assert_eq!(a.tokens, b.tokens);
        assert_eq!(a.text, b.text);
        assert_eq!(a.logprobs, b.logprobs);
        // Reason and token counts (the usage's timings are wall-clock).
        let counts = |o: &Outcome| {
            o.finish
                .map(|(r, u)| (r, u.prompt_tokens, u.completion_tokens, u.cached_tokens))
        };
        assert_eq!(counts(a), counts(b));
        assert!(b.error.is_none());
    }
    assert_eq!(drafted[1].1.finish.map(|f| f.0), Some(FinishReason::Stop));
}

#[test]
fn adaptive_drafting_stops_while_a_prompt_waits_for_prefill_and_resumes_after() {
    // A pass costs 5 ms plus 100 µs a token: an extra token in a decode step is cheap, so a
    // lone decoding stream drafts; a long prompt arriving makes the steps compute-bound.
    let mut m = model();
    m.delay = std::time::Duration::from_millis(5);
    m.per_token = std::time::Duration::from_micros(100);
    let mut cfg = fake_config(&m, TS, 256);
    cfg.max_batch_tokens = 16;
    let mut h = Harness::new(m, tiny_tokenizer(), &cfg);
    let (pa, pb) = (prompt(21, 6), prompt(22, 120));
    let proposed = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let calls = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    struct Counting {
        inner: TestDrafter,
        calls: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    }
    impl Drafter for Counting {
        fn propose(&mut self, id: SeqId, tokens: &[u32], max: usize) -> Vec<u32> {
            self.calls
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            self.inner.propose(id, tokens, max)
        }
    }
    h.engine.set_speculation(Speculation {
        drafter: Box::new(Counting {
            inner: TestDrafter {
                // No known outputs: random drafts, mostly rejected (what is counted here is
                // whether the engine asks for drafts, not what they bring).
                rng: SplitMix64::new(9),
                truth: HashMap::new(),
                right_pct: 0,
                max_len: 3,
                proposed,
            },
            calls: calls.clone(),
        }),
        max_tokens: 3,
        adaptive: true,
    });
    let calls_now = || calls.load(std::sync::atomic::Ordering::Relaxed);
    let a = h.submit(greedy(pa.clone(), 200));
    // The lone stream measures its costs, then drafts.
    let mut guard = 0;
    while calls_now() == 0 {
        h.step();
        guard += 1;
        assert!(
            guard < 150,
            "a lone stream with cheap extra tokens never drafted"
        );
    }
    let b = h.submit(greedy(pb.clone(), 60));
    let mut waiting_steps = 0;
    while h.engine.scheduler().prefill_backlog() > 0 {
        let before = calls_now();
        h.step();
        assert_eq!(
            calls_now(),
            before,
            "drafted while a prompt waited for prefill"
        );
        waiting_steps += 1;
    }
    assert!(
        waiting_steps >= 2,
        "the long prompt took {waiting_steps} steps"
    );
    let resumed = calls_now();
    h.run();
    assert!(
        calls_now() > resumed,
        "drafting did not resume once the prompt was computed"
    );
    assert_eq!(
        h.outcome(a).tokens,
        solo(model, TS, &greedy(pa, 200)).tokens
    );
    assert_eq!(h.outcome(b).tokens, solo(model, TS, &greedy(pb, 60)).tokens);
}
