//! `n` > 1: the choices of one prompt are submitted as a group; the prompt is computed once and
//! the choices fork from it, sharing its full tiles and copying the partly filled last one. The
//! fake model (see `common`) hashes every K row a position sees, so a choice whose copied tile
//! or shared table were wrong would generate different tokens than the same request run alone.

mod common;

use std::sync::atomic::Ordering::Relaxed;

use common::*;
use engine::{FinishReason, GenerateRequest};
use model::SamplingParams;

const TS: usize = 4;
const WINDOW: usize = 10;
/// Not a multiple of the tile size: the last prompt tile is partly filled when the choices fork.
const PROMPT: usize = 23;
const MAX: usize = 10;

fn model() -> FakeModel {
    FakeModel::new(Some(WINDOW))
}

fn choice(j: u64, prompt_logprobs: Option<usize>) -> GenerateRequest {
    GenerateRequest {
        sampling: SamplingParams {
            temperature: 1.0,
            seed: Some(100 + j),
            ..SamplingParams::default()
        },
        prompt_logprobs,
        ..greedy(prompt(7, PROMPT), MAX)
    }
}

fn harness(
    max_seqs: usize,
    budget: usize,
) -> (
    Harness<FakeModel>,
    std::sync::Arc<std::sync::atomic::AtomicUsize>,
) {
    let m = model();
    let counter = m.tokens_run.clone();
    let mut cfg = fake_config(&m, TS, 512);
    cfg.max_seqs = max_seqs;
    cfg.max_batch_tokens = budget;
    (Harness::new(m, tiny_tokenizer(), &cfg), counter)
}

#[test]
fn the_prompt_is_computed_once_and_every_choice_matches_its_solo_run() {
    let (mut h, run) = harness(4, 64);
    let reqs: Vec<_> = (0..4).map(|j| choice(j, None)).collect();
    let ids = h.submit_group(reqs.clone());
    h.run();
    // The prompt once, then every choice's decode steps (its first token came from the prompt).
    assert_eq!(run.load(Relaxed), PROMPT + 4 * (MAX - 1));
    let mut outputs = Vec::new();
    for (id, req) in ids.iter().zip(&reqs) {
        let o = h.outcome(*id);
        assert_eq!(o.tokens, solo(model, TS, req).tokens, "choice {id:?}");
        let (reason, usage) = o.finish.expect("finished");
        assert_eq!(reason, FinishReason::Length);
        assert_eq!(
            (usage.prompt_tokens, usage.completion_tokens),
            (PROMPT, MAX)
        );
        outputs.push(o.tokens.clone());
    }
    outputs.dedup();
    assert!(
        outputs.len() > 1,
        "different seeds gave the same output: the test is blind"
    );
}

#[test]
fn choices_without_a_seat_run_as_requests_of_their_own() {
    // Two seats: the first choice and one fork run, the other two wait and adopt the prompt's
    // full tiles from the prefix cache.
    let (mut h, run) = harness(2, 64);
    let reqs: Vec<_> = (0..4).map(|j| choice(j, None)).collect();
    let ids = h.submit_group(reqs.clone());
    h.run();
    for (id, req) in ids.iter().zip(&reqs) {
        assert_eq!(h.outcome(*id).tokens, solo(model, TS, req).tokens);
    }
    let n = run.load(Relaxed);
    assert!(
        n > PROMPT + 4 * (MAX - 1) && n < 2 * PROMPT + 4 * (MAX - 1),
        "{n} tokens run"
    );
}

#[test]
fn the_others_run_on_when_the_first_choice_goes_away_during_its_prompt() {
    // A budget of 8 spreads the prompt over three steps; the first choice's client leaves after
    // the first.
    let (mut h, _) = harness(4, 8);
    let reqs: Vec<_> = (0..3).map(|j| choice(j, None)).collect();
    let ids = h.submit_group(reqs.clone());
    h.step();
    h.disconnect(ids[0]);
    h.run();
    for (id, req) in ids.iter().zip(&reqs).skip(1) {
        assert_eq!(h.outcome(*id).tokens, solo(model, TS, req).tokens);
    }
    assert_eq!(h.stats.finished_abort.load(Relaxed), 1);
}

#[test]
fn aborting_one_choice_leaves_the_others() {
    let (mut h, _) = harness(4, 64);
    let reqs: Vec<_> = (0..3).map(|j| choice(j, None)).collect();
    let ids = h.submit_group(reqs.clone());
    while h.outcome(ids[1]).tokens.len() < 3 {
        h.step();
    }
    h.engine.abort(ids[1]);
    h.run();
    let (reason, _) = h.outcome(ids[1]).finish.expect("finished");
    assert_eq!(reason, FinishReason::Abort);
    assert_eq!(h.outcome(ids[1]).tokens.len(), 3);
    for j in [0, 2] {
        assert_eq!(h.outcome(ids[j]).tokens, solo(model, TS, &reqs[j]).tokens);
    }
}

#[test]
fn every_choice_gets_the_prompt_logprobs() {
    let (mut h, run) = harness(4, 64);
    let reqs: Vec<_> = (0..3).map(|j| choice(j, Some(2))).collect();
    let ids = h.submit_group(reqs.clone());
    h.run();
    assert_eq!(run.load(Relaxed), PROMPT + 3 * (MAX - 1));
    for (id, req) in ids.iter().zip(&reqs) {
        let alone = solo(model, TS, req);
        let o = h.outcome(*id);
        assert_eq!(o.tokens, alone.tokens);
        assert_eq!(o.prompt_logprobs, alone.prompt_logprobs);
        assert_eq!(o.prompt_logprobs.as_ref().map(Vec::len), Some(PROMPT));
    }
}

#[test]
fn a_prompt_of_whole_tiles_forks_without_a_copy() {
    let (mut h, run) = harness(4, 64);
    let reqs: Vec<_> = (0..3)
        .map(|j| GenerateRequest {
            prompt: prompt(9, 6 * TS),
            ..choice(j, None)
        })
        .collect();
    let ids = h.submit_group(reqs.clone());
    h.run();
    assert_eq!(run.load(Relaxed), 6 * TS + 3 * (MAX - 1));
    for (id, req) in ids.iter().zip(&reqs) {
        assert_eq!(h.outcome(*id).tokens, solo(model, TS, req).tokens);
    }
}

#[test]
fn a_choice_aborted_while_it_waits_to_fork_ends_and_the_others_fork() {
    let (mut h, run) = harness(4, 8);
    let reqs: Vec<_> = (0..3).map(|j| choice(j, None)).collect();
    let ids = h.submit_group(reqs.clone());
    h.step();
    h.engine.abort(ids[1]);
    h.run();
    let o = h.outcome(ids[1]);
    assert_eq!(o.finish.map(|f| f.0), Some(FinishReason::Abort));
    assert!(o.tokens.is_empty());
    for j in [0, 2] {
        assert_eq!(h.outcome(ids[j]).tokens, solo(model, TS, &reqs[j]).tokens);
    }
    assert_eq!(run.load(Relaxed), PROMPT + 2 * (MAX - 1));
}

#[test]
fn the_others_go_on_when_the_first_choice_stops_at_its_first_token() {
    let (mut h, _) = harness(4, 64);
    let mut first = choice(0, None);
    first.stop_token_ids = (0..model::testing::tiny_vocab_size() as u32).collect();
    let reqs = vec![first, choice(1, None), choice(2, None)];
    let ids = h.submit_group(reqs.clone());
    h.run();
    let o = h.outcome(ids[0]);
    assert_eq!(o.finish.map(|f| f.0), Some(FinishReason::Stop));
    assert_eq!(o.tokens.len(), 1);
    for j in [1, 2] {
        assert_eq!(h.outcome(ids[j]).tokens, solo(model, TS, &reqs[j]).tokens);
    }
}

#[test]
fn members_with_another_prompt_run_apart_and_other_limits_still_fork() {
    // A different prompt cannot share the first member's computation; a different token limit
    // can.
    let (mut h, run) = harness(4, 64);
    let mut other = choice(1, None);
    other.prompt = prompt(8, PROMPT);
    let mut longer = choice(2, None);
    longer.max_tokens = MAX + 3;
    let reqs = vec![choice(0, None), other, longer];
    let ids = h.submit_group(reqs.clone());
    h.run();
    for (id, req) in ids.iter().zip(&reqs) {
        assert_eq!(h.outcome(*id).tokens, solo(model, TS, req).tokens);
    }
    assert_eq!(h.outcome(ids[2]).tokens.len(), MAX + 3);
    // Both prompts computed once each; the longer member forked from the first.
    let decode = 2 * (MAX - 1) + (MAX + 3 - 1);
    assert_eq!(run.load(Relaxed), 2 * PROMPT + decode);
    assert_eq!(
        h.stats.prefix_queried_tokens.load(Relaxed),
        2 * PROMPT as u64
    );
}

#[test]
fn a_choice_that_could_never_fit_the_pool_is_refused_at_once() {
    let m = model();
    let mut cfg = fake_config(&m, TS, 60);
    cfg.max_seqs = 4;
    let mut h = Harness::new(m, tiny_tokenizer(), &cfg);
    let mut huge = choice(1, None);
    huge.max_tokens = 10_000; // the whole context: more tiles than the pool holds
    let reqs = vec![choice(0, None), huge, choice(2, None)];
    let ids = h.submit_group(reqs.clone());
    let refused = h.outcome(ids[1]);
    assert!(matches!(
        refused.error,
        Some(engine::EngineError::InvalidRequest(_))
    ));
    assert!(!refused.accepted);
    h.run();
    for j in [0, 2] {
        assert_eq!(h.outcome(ids[j]).tokens, solo(model, TS, &reqs[j]).tokens);
    }
}
