//! A request's life with the fake model: every way it can end (EOS, stop token, stop string,
//! max_tokens, context limit, abort, client gone), the events it gets, and that its tiles come
//! back at once.

mod common;

use common::*;
use engine::{EngineError, FinishReason, GenerateRequest, SeqId};

const TS: usize = 4;

/// A fake model that, after `start`, generates exactly `script` (then hashes again).
fn scripted(tok: &model::Tokenizer, start: u32, script: &[&str]) -> (FakeModel, Vec<u32>) {
    let mut m = FakeModel::new(Some(10));
    let ids: Vec<u32> = script
        .iter()
        .map(|p| tok.token_to_id(p).expect("piece in the tiny vocabulary"))
        .collect();
    let mut prev = start;
    for &id in &ids {
        assert!(m.next_of.insert(prev, id).is_none(), "script tokens repeat");
        prev = id;
    }
    (m, ids)
}

fn harness(m: FakeModel) -> Harness<FakeModel> {
    let cfg = fake_config(&m, TS, 256);
    Harness::new(m, tiny_tokenizer(), &cfg)
}

/// Runs one request until it finishes, checking its tiles are back the step it ends.
fn run_one(h: &mut Harness<FakeModel>, req: GenerateRequest) -> SeqId {
    let id = h.submit(req);
    while !h.is_done(id) {
        h.step();
        assert!(h.steps < 10_000);
    }
    let c = h.engine.scheduler().tile_counts();
    assert_eq!(c.in_use, 0, "tiles released the step the request ended");
    assert!(!h.engine.has_work());
    id
}

fn start_prompt(last: u32) -> Vec<u32> {
    let mut p = prompt(5, 9);
    p.push(last);
    p
}

#[test]
fn eos_ends_generation_with_stop() {
    let tok = tiny_tokenizer();
    let start = tok.token_to_id("▁tiny").expect("piece");
    let (mut m, script) = scripted(&tok, start, &["▁hello", "▁world"]);
    let (_, eos) = model::testing::tiny_bos_eos();
    m.next_of.insert(script[1], eos);
    let mut h = harness(m);
    let req = GenerateRequest {
        ignore_eos: false,
        ..greedy(start_prompt(start), 20)
    };
    let id = run_one(&mut h, req.clone());
    let o = h.outcome(id);
    assert_eq!(o.tokens, vec![script[0], script[1], eos]);
    assert_eq!(o.text, " hello world");
    let (reason, usage) = o.finish.expect("finished");
    assert_eq!(reason, FinishReason::Stop);
    assert_eq!(usage.completion_tokens, 3);
    assert_eq!(usage.prompt_tokens, 10);
    let t = usage.timings;
    let (queue, first) = (t.queue.expect("scheduled"), t.first_token.expect("a token"));
    assert!(queue <= first && first <= t.total, "{t:?}");
    assert_eq!(t.prefill(), Some(first - queue));
    assert_eq!(t.decode(), Some(t.total - first));

    // With ignore_eos it goes on to max_tokens.
    let id = run_one(&mut h, greedy(start_prompt(start), 20));
    assert_eq!(h.outcome(id).tokens.len(), 20);
    assert_eq!(
        h.outcome(id).finish.expect("finished").0,
        FinishReason::Length
    );
}

#[test]
fn a_stop_token_id_ends_generation() {
    let tok = tiny_tokenizer();
    let start = tok.token_to_id("▁tiny").expect("piece");
    let (m, script) = scripted(&tok, start, &["▁hello", "▁world", "▁the"]);
    let mut h = harness(m);
    let req = GenerateRequest {
        stop_token_ids: vec![script[1]],
        ..greedy(start_prompt(start), 20)
    };
    let id = run_one(&mut h, req);
    let o = h.outcome(id);
    assert_eq!(o.tokens, script[..2].to_vec());
    assert_eq!(o.text, " hello");
    assert_eq!(o.finish.expect("finished").0, FinishReason::Stop);
}

#[test]
fn a_stop_string_across_tokens_ends_generation_and_is_not_emitted() {
    let tok = tiny_tokenizer();
    let start = tok.token_to_id("▁tiny").expect("piece");
    // " the hello world": "lo wo" spans three tokens ("▁he" "llo" "▁wor" "ld").
    let (m, script) = scripted(&tok, start, &["▁the", "▁he", "llo", "▁wor", "ld", "▁model"]);
    let mut h = harness(m);
    let req = GenerateRequest {
        stop_strings: vec!["xyz".into(), "lo wo".into()],
        ..greedy(start_prompt(start), 20)
    };
    let id = run_one(&mut h, req);
    let o = h.outcome(id);
    assert_eq!(o.tokens, script[..4].to_vec());
    assert_eq!(o.text, " the hel");
    assert_eq!(o.finish.expect("finished").0, FinishReason::Stop);
}

#[test]
fn a_partial_stop_string_is_held_back_and_released_at_the_end() {
    let tok = tiny_tokenizer();
    let start = tok.token_to_id("▁tiny").expect("piece");
    let (m, script) = scripted(&tok, start, &["▁the", "▁he", "llo"]);
    let mut h = harness(m);
    // " the" and " the he" end in "he", a prefix of the stop string "help": it may not be sent
    // until it is clear it is not a stop string; at max_tokens it is sent with the last event.
    let req = GenerateRequest {
        stop_strings: vec!["help".into()],
        ..greedy(start_prompt(start), 2)
    };
    let id = h.submit(req);
    let mut sent_before_finish = String::new();
    while !h.is_done(id) {
        sent_before_finish = h.outcome(id).text.clone();
        h.step();
    }
    let o = h.outcome(id);
    assert_eq!(o.tokens, script[..2].to_vec());
    assert_eq!(sent_before_finish, " t");
    assert_eq!(o.text, " the he");
    assert_eq!(o.finish.expect("finished").0, FinishReason::Length);
}

#[test]
fn max_tokens_ends_generation_with_length() {
    let mut h = harness(FakeModel::new(Some(10)));
    for n in [1, 2, 7] {
        let id = run_one(&mut h, greedy(prompt(3, 13), n));
        let o = h.outcome(id);
        assert_eq!(o.tokens.len(), n);
        let (reason, usage) = o.finish.expect("finished");
        assert_eq!(reason, FinishReason::Length);
        assert_eq!(usage.completion_tokens, n);
    }
}

#[test]
fn the_context_limit_ends_generation_with_length() {
    let mut m = FakeModel::new(Some(10));
    m.context = 40;
    let mut h = harness(m);
    let id = run_one(&mut h, greedy(prompt(4, 30), 100));
    let o = h.outcome(id);
    // Prompt plus output fill the context exactly.
    assert_eq!(o.tokens.len(), 10);
    assert_eq!(o.finish.expect("finished").0, FinishReason::Length);
    // A prompt that fills the context is refused.
    let id = h.submit(greedy(prompt(4, 40), 1));
    assert!(matches!(
        h.outcome(id).error,
        Some(EngineError::InvalidRequest(_))
    ));
}

#[test]
fn an_explicit_abort_is_noticed_within_one_step_and_frees_the_tiles() {
    let mut h = harness(FakeModel::new(Some(10)));
    let keep = h.submit(greedy(prompt(6, 21), 40));
    let gone = h.submit(greedy(prompt(7, 35), 40));
    for _ in 0..4 {
        h.step();
    }
    let before = h.engine.scheduler().tile_counts().in_use;
    h.engine.abort(gone);
    h.drain();
    let o = h.outcome(gone);
    assert_eq!(o.finish.map(|f| f.0), Some(FinishReason::Abort));
    let n_tokens = o.tokens.len();
    assert!(h.engine.scheduler().tile_counts().in_use < before);
    h.step();
    assert_eq!(h.outcome(gone).tokens.len(), n_tokens);
    h.run();
    assert_eq!(h.outcome(keep).tokens.len(), 40);
    assert_eq!(h.outcome(gone).late_events, 0);
}

#[test]
fn a_dropped_receiver_aborts_the_request_within_one_step() {
    let mut h = harness(FakeModel::new(Some(10)));
    let keep = h.submit(greedy(prompt(8, 21), 30));
    let gone = h.submit(greedy(prompt(9, 35), 30));
    for _ in 0..3 {
        h.step();
    }
    h.disconnect(gone);
    h.step();
    assert!(
        h.engine.scheduler().get(gone).is_none(),
        "gone after one step"
    );
    assert_eq!(
        h.stats
            .finished_abort
            .load(std::sync::atomic::Ordering::Relaxed),
        1
    );
    h.run();
    assert_eq!(h.outcome(keep).tokens.len(), 30);
    // Waiting requests are reaped too.
    let m = FakeModel::new(Some(10));
    let mut cfg = fake_config(&m, TS, 256);
    cfg.max_seqs = 1;
    let mut h = Harness::new(m, tiny_tokenizer(), &cfg);
    let first = h.submit(greedy(prompt(10, 8), 10));
    let waiting = h.submit(greedy(prompt(11, 8), 10));
    h.step();
    h.disconnect(waiting);
    h.step();
    assert!(h.engine.scheduler().get(waiting).is_none());
    h.run();
    assert_eq!(h.outcome(first).tokens.len(), 10);
}

#[test]
fn invalid_requests_are_refused_with_a_reason() {
    let mut h = harness(FakeModel::new(Some(10)));
    let vocab = model::testing::tiny_vocab_size() as u32;
    let cases = [
        greedy(vec![], 4),
        greedy(vec![5, vocab], 4),
        greedy(prompt(1, 5), 0),
        GenerateRequest {
            stop_strings: vec!["ok".into(), String::new()],
            ..greedy(prompt(1, 5), 4)
        },
    ];
    for req in cases {
        let id = h.submit(req);
        assert!(matches!(
            h.outcome(id).error,
            Some(EngineError::InvalidRequest(_))
        ));
        assert!(
            !h.outcome(id).accepted,
            "a refused request is not accepted first"
        );
    }
    assert!(!h.engine.has_work());
    // A valid one is accepted at once, before any step.
    let id = h.submit(greedy(prompt(1, 5), 4));
    assert!(h.outcome(id).accepted);
}

#[test]
fn warming_the_kv_pool_ends_leaves_requests_unchanged_and_can_be_turned_off() {
    let warmed = |warm_kv: bool| {
        let m = FakeModel::new(Some(10));
        // Thousands of tiles: many 4 KiB turns of warming (the fake runner's idle work) where
        // the OS supports it.
        let cfg = engine::EngineConfig {
            warm_kv,
            ..fake_config(&m, TS, 4096)
        };
        let mut h = Harness::new(m, tiny_tokenizer(), &cfg);
        let mut turns = 0;
        while h.engine.idle() {
            turns += 1;
            assert!(turns < 1_000_000, "warming ends");
        }
        assert!(!h.engine.idle(), "done stays done");
        let id = run_one(&mut h, greedy(start_prompt(7), 6));
        (turns, h.outcome(id).tokens.clone())
    };
    let (turns_on, on) = warmed(true);
    let (turns_off, off) = warmed(false);
    assert_eq!(turns_off, 0, "off: nothing to do from the start");
    assert_eq!(on, off);
    assert_eq!(on.len(), 6);
    if cfg!(target_os = "linux") && turns_on == 0 {
        eprintln!("this kernel refuses MADV_POPULATE_WRITE: warming was a no-op");
    }
}
