//! With the fake model (see `common`), the engine must give every request the same tokens
//! however it is batched, chunked, cached, preempted or windowed: each comparison below runs the
//! same requests two ways.

mod common;

use common::*;
use engine::{FinishReason, GenerateRequest};
use model::SamplingParams;

const TS: usize = 4;
const WINDOW: usize = 10;

fn model() -> FakeModel {
    FakeModel::new(Some(WINDOW))
}

#[test]
fn the_fake_model_notices_a_wrong_context() {
    // Guards the other tests: different prompts (even in one early token) give different outputs.
    let a = prompt(1, 30);
    let mut b = a.clone();
    b[2] = if b[2] == 5 { 6 } else { 5 };
    let oa = solo(model, TS, &greedy(a, 12));
    let ob = solo(model, TS, &greedy(b, 12));
    assert_eq!(oa.tokens.len(), 12);
    assert_ne!(oa.tokens, ob.tokens);
}

#[test]
fn chunked_prefill_gives_the_same_tokens_as_whole_prefill() {
    let reqs: Vec<GenerateRequest> = (0..5)
        .map(|i| greedy(prompt(10 + i, 23 + 9 * i as usize), 10))
        .collect();
    let run = |chunked: bool, budget: usize| {
        let m = model();
        let mut cfg = fake_config(&m, TS, 512);
        cfg.chunked_prefill = chunked;
        cfg.max_batch_tokens = budget;
        cfg.max_seqs = 4;
        let mut h = Harness::new(m, tiny_tokenizer(), &cfg);
        let ids: Vec<_> = reqs.iter().map(|r| h.submit(r.clone())).collect();
        h.run();
        ids.iter()
            .map(|id| h.outcome(*id).tokens.clone())
            .collect::<Vec<_>>()
    };
    let whole = run(false, 64);
    for (r, t) in reqs.iter().zip(&whole) {
        assert_eq!(t, &solo(model, TS, r).tokens);
    }
    assert_eq!(run(true, 7), whole);
    assert_eq!(run(true, 5), whole);
}

#[test]
fn a_prefix_cache_hit_gives_the_same_tokens_as_a_miss() {
    let common_prefix = prompt(20, 26);
    let mut second = common_prefix.clone();
    second.extend(prompt(21, 5));
    let m = model();
    let cfg = fake_config(&m, TS, 512);
    let mut h = Harness::new(m, tiny_tokenizer(), &cfg);
    let first = h.submit(greedy(common_prefix.clone(), 8));
    h.run();
    let again = h.submit(greedy(common_prefix.clone(), 8));
    h.run();
    let longer = h.submit(greedy(second.clone(), 8));
    h.run();

    let usage = |id| h.outcome(id).finish.expect("finished").1;
    assert_eq!(usage(first).cached_tokens, 0);
    // The whole prompt but its last token (which must be computed) in full tiles: 24 of 26.
    assert_eq!(usage(again).cached_tokens, 24);
    assert!(usage(longer).cached_tokens >= 24);
    assert_eq!(h.outcome(again).tokens, h.outcome(first).tokens);
    assert_eq!(
        h.outcome(again).tokens,
        solo(model, TS, &greedy(common_prefix, 8)).tokens
    );
    assert_eq!(
        h.outcome(longer).tokens,
        solo(model, TS, &greedy(second, 8)).tokens
    );
}

#[test]
fn a_prefix_hit_on_a_concurrent_sequence_gives_the_same_tokens() {
    // The second request arrives while the first still decodes, so it adopts tiles in use.
    let p = prompt(30, 33);
    let m = model();
    let cfg = fake_config(&m, TS, 512);
    let mut h = Harness::new(m, tiny_tokenizer(), &cfg);
    let a = h.submit(greedy(p.clone(), 20));
    for _ in 0..3 {
        h.step();
    }
    let b = h.submit(greedy(p.clone(), 20));
    h.run();
    assert!(h.outcome(b).finish.expect("finished").1.cached_tokens > 0);
    assert_eq!(h.outcome(a).tokens, h.outcome(b).tokens);
    assert_eq!(h.outcome(a).tokens, solo(model, TS, &greedy(p, 20)).tokens);
}

#[test]
fn a_preempted_and_resumed_sequence_gives_the_same_tokens() {
    let reqs: Vec<GenerateRequest> = (0..6)
        .map(|i| greedy(prompt(40 + i, 15 + 3 * i as usize), 30))
        .collect();
    for caching in [true, false] {
        let m = model();
        // 40 tiles hold one request (at most 31 tiles) but not six.
        let mut cfg = fake_config(&m, TS, 40);
        cfg.prefix_caching = caching;
        cfg.max_batch_tokens = 16;
        let mut h = Harness::new(m, tiny_tokenizer(), &cfg);
        let ids: Vec<_> = reqs.iter().map(|r| h.submit(r.clone())).collect();
        h.run();
        let total = h.engine.scheduler().preemptions_total();
        assert!(total > 0);
        let mut reported = 0;
        for (id, r) in ids.iter().zip(&reqs) {
            let o = h.outcome(*id);
            assert_eq!(o.finish.map(|f| f.0), Some(FinishReason::Length), "{o:?}");
            assert_eq!(o.tokens, solo(model, TS, r).tokens, "caching {caching}");
            reported += u64::from(o.finish.expect("finished").1.preemptions);
        }
        assert_eq!(
            reported, total,
            "each preemption is reported in its request's usage"
        );
    }
}

#[test]
fn sliding_window_release_gives_the_same_tokens_as_keeping_every_tile() {
    let reqs: Vec<GenerateRequest> = (0..3)
        .map(|i| greedy(prompt(50 + i, 40 + 7 * i as usize), 40))
        .collect();
    let run = |release: bool| {
        let m = model();
        let mut cfg = fake_config(&m, TS, 512);
        cfg.release_window_tiles = release;
        cfg.max_batch_tokens = 9;
        let mut h = Harness::new(m, tiny_tokenizer(), &cfg);
        let ids: Vec<_> = reqs.iter().map(|r| h.submit(r.clone())).collect();
        h.run();
        let toks: Vec<_> = ids.iter().map(|id| h.outcome(*id).tokens.clone()).collect();
        (toks, h.peak_in_use)
    };
    let (kept, peak_kept) = run(false);
    let (released, peak_released) = run(true);
    assert_eq!(released, kept);
    // Windowed groups hold ~4 tiles each instead of ~25: far less memory at the peak.
    assert!(
        peak_released * 2 < peak_kept,
        "{peak_released} vs {peak_kept}"
    );
}

#[test]
fn a_prefix_hit_with_released_window_tiles_gives_the_same_tokens() {
    // The first request's early windowed tiles are released (and stay cached); the second
    // adopts the global tiles and only the windowed tiles its first new token can see.
    let p = prompt(60, 61);
    let m = model();
    let cfg = fake_config(&m, TS, 512);
    let mut h = Harness::new(m, tiny_tokenizer(), &cfg);
    let a = h.submit(greedy(p.clone(), 6));
    h.run();
    let b = h.submit(greedy(p.clone(), 6));
    h.run();
    assert_eq!(h.outcome(b).finish.expect("finished").1.cached_tokens, 60);
    assert_eq!(h.outcome(a).tokens, h.outcome(b).tokens);
}

#[test]
fn sequences_join_and_leave_at_any_step() {
    let mut reqs = Vec::new();
    for i in 0..24u64 {
        let arrive = (i * 7) % 31;
        let r = greedy(
            prompt(70 + i, 1 + (i as usize * 5) % 29),
            1 + (i as usize * 3) % 17,
        );
        reqs.push((arrive as usize, r));
    }
    let m = model();
    let mut cfg = fake_config(&m, TS, 200);
    cfg.max_batch_tokens = 24;
    cfg.max_seqs = 6;
    let mut h = Harness::new(m, tiny_tokenizer(), &cfg);
    let mut ids = Vec::new();
    let mut step = 0;
    while ids.len() < reqs.len() || h.engine.has_work() {
        for (arrive, r) in &reqs {
            if *arrive == step {
                ids.push((h.submit(r.clone()), r.clone()));
            }
        }
        h.step();
        step += 1;
        assert!(step < 10_000);
    }
    assert_eq!(h.engine.scheduler().tile_counts().in_use, 0);
    for (id, r) in ids {
        let o = h.outcome(id);
        assert_eq!(o.tokens.len(), r.max_tokens);
        assert_eq!(o.tokens, solo(model, TS, &r).tokens);
        assert_eq!(o.late_events, 0);
    }
}

#[test]
fn seeded_sampling_is_independent_of_what_else_runs() {
    let sampled = |seed: u64| GenerateRequest {
        sampling: SamplingParams {
            temperature: 0.9,
            top_k: 40,
            seed: Some(seed),
            ..SamplingParams::default()
        },
        ..greedy(prompt(80, 19), 24)
    };
    let alone: Vec<_> = (0..4)
        .map(|s| solo(model, TS, &sampled(s)).tokens)
        .collect();
    // Different seeds do sample differently (else this test could not fail).
    assert_ne!(alone[0], alone[1]);
    let m = model();
    let mut cfg = fake_config(&m, TS, 60);
    cfg.max_batch_tokens = 12;
    let mut h = Harness::new(m, tiny_tokenizer(), &cfg);
    let mut ids = Vec::new();
    for i in 0..12u64 {
        h.submit(greedy(prompt(90 + i, 11), 9));
        if i % 3 == 0 {
            ids.push(h.submit(sampled(i / 3)));
        }
        h.step();
    }
    h.run();
    for (s, id) in ids.iter().enumerate() {
        assert_eq!(h.outcome(*id).tokens, alone[s], "seed {s}");
    }
}

#[test]
fn prompt_logprobs_are_the_same_chunked_or_whole_and_complete() {
    let p = prompt(95, 37);
    let req = GenerateRequest {
        prompt_logprobs: Some(2),
        logprobs: Some(1),
        ..greedy(p.clone(), 5)
    };
    let run = |chunked: bool, budget: usize, reqs: &[GenerateRequest]| {
        let m = model();
        let mut cfg = fake_config(&m, TS, 512);
        cfg.chunked_prefill = chunked;
        cfg.max_batch_tokens = budget;
        let mut h = Harness::new(m, tiny_tokenizer(), &cfg);
        let ids: Vec<_> = reqs.iter().map(|r| h.submit(r.clone())).collect();
        h.run();
        ids.iter()
            .map(|id| h.outcome(*id).clone())
            .collect::<Vec<_>>()
    };
    // The plain request first: its tiles are cached, yet the scoring one computes every position.
    let plain = greedy(p.clone(), 5);
    let whole = run(false, 64, &[plain.clone(), req.clone()]);
    let chunked = run(true, 6, &[plain, req.clone()]);
    let lp = whole[1]
        .prompt_logprobs
        .clone()
        .expect("prompt logprobs sent");
    assert_eq!(lp.len(), p.len());
    assert!(lp[0].is_none());
    for (i, e) in lp.iter().enumerate().skip(1) {
        let e = e.as_ref().expect("every later position scored");
        assert_eq!(e.token, p[i]);
        assert!(e.logprob <= 0.0 && e.top.len() == 2);
    }
    assert_eq!(chunked[1].prompt_logprobs, whole[1].prompt_logprobs);
    assert_eq!(whole[1].finish.expect("finished").1.cached_tokens, 0);
    // Scoring changes nothing about what is generated.
    assert_eq!(whole[1].tokens, whole[0].tokens);
    assert_eq!(chunked[1].tokens, whole[0].tokens);
    assert_eq!(whole[1].logprobs.len(), 5);
    assert!(whole[1].logprobs.iter().all(|l| l.is_some()));
    // max_tokens 0 scores the prompt only.
    let score_only = GenerateRequest {
        max_tokens: 0,
        ..req
    };
    let o = &run(true, 6, &[score_only])[0];
    assert!(o.tokens.is_empty());
    assert_eq!(o.prompt_logprobs.as_ref().map(Vec::len), Some(p.len()));
    assert_eq!(o.finish.map(|f| f.0), Some(FinishReason::Length));
}

#[test]
fn requests_with_one_prompt_arriving_together_compute_it_once() {
    // Like the `n` choices of one request: same prompt, different seeds.
    let p = prompt(99, 41);
    let child = |seed: u64| GenerateRequest {
        sampling: SamplingParams {
            temperature: 1.0,
            seed: Some(seed),
            ..SamplingParams::default()
        },
        ..greedy(p.clone(), 6)
    };
    let m = model();
    let cfg = fake_config(&m, TS, 512);
    let mut h = Harness::new(m, tiny_tokenizer(), &cfg);
    let ids: Vec<_> = (0..4).map(|s| h.submit(child(s))).collect();
    h.run();
    for (s, id) in ids.iter().enumerate() {
        let o = h.outcome(*id);
        let cached = o.finish.expect("finished").1.cached_tokens;
        assert_eq!(cached, if s == 0 { 0 } else { 40 }, "child {s}");
        assert_eq!(o.tokens, solo(model, TS, &child(s as u64)).tokens);
    }
    // The prompt ran once, plus the one uncached token of each other child and the decodes.
    let (_, tokens_run, _) = h.stats.tokens_per_step.snapshot();
    assert_eq!(tokens_run as usize, 41 + 3 + 4 * 5);
}

#[test]
fn with_colliding_prefix_keys_a_hit_is_still_only_the_same_prefix() {
    // Every tile's key is its first token mod 3 (parents ignored): keys collide constantly, and
    // a tile found by key alone would often belong to another prefix.
    fn colliding(_: Option<u128>, tokens: &[u32]) -> u128 {
        u128::from(tokens[0] % 3)
    }
    let bases: Vec<Vec<u32>> = (0..3).map(|i| prompt(500 + i, 17)).collect();
    let mut reqs = Vec::new();
    for i in 0..30u64 {
        let mut p = bases[(i % 3) as usize][..(i as usize % 17) + 1].to_vec();
        p.extend(prompt(600 + i, 2 + (i as usize * 7) % 13));
        reqs.push(greedy(p, 6));
    }
    let m = model();
    let cfg = fake_config(&m, TS, 256);
    let mut h = Harness::new(m, tiny_tokenizer(), &cfg);
    h.engine.set_prefix_key_fn(colliding);
    let mut ids = Vec::new();
    for r in &reqs {
        ids.push(h.submit(r.clone()));
        h.step();
    }
    h.run();
    let mut cached = 0;
    for (id, r) in ids.iter().zip(&reqs) {
        let o = h.outcome(*id);
        cached += o.finish.expect("finished").1.cached_tokens;
        assert_eq!(o.tokens, solo(model, TS, r).tokens);
    }
    assert!(cached > 0, "shared prefixes still hit");
}
