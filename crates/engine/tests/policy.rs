//! Scheduling policy with the fake model: priorities order the waiting line and the choice of
//! whom to preempt, waiting requests age so none starves, a resumed sequence is not preempted
//! again before it makes progress, and a request that can never fit is refused up front.

mod common;

use std::collections::HashMap;

use common::*;
use engine::{EngineError, FinishReason, GenerateRequest, SeqId};

const TS: usize = 4;

fn with_priority(req: GenerateRequest, priority: i32) -> GenerateRequest {
    GenerateRequest { priority, ..req }
}

/// The step at which each request got its first token.
fn first_token_steps(h: &Harness<FakeModel>, ids: &[SeqId], seen: &mut HashMap<SeqId, usize>) {
    for &id in ids {
        if !h.outcome(id).tokens.is_empty() {
            seen.entry(id).or_insert(h.steps);
        }
    }
}

#[test]
fn priorities_order_the_waiting_line() {
    let m = FakeModel::new(Some(10));
    let mut cfg = fake_config(&m, TS, 256);
    cfg.max_seqs = 1;
    cfg.aging_steps = 1_000_000;
    let mut h = Harness::new(m, tiny_tokenizer(), &cfg);
    let busy = h.submit(greedy(prompt(1, 6), 5));
    h.step();
    let low = h.submit(with_priority(greedy(prompt(2, 6), 3), 5));
    let mid = h.submit(greedy(prompt(3, 6), 3));
    let high = h.submit(with_priority(greedy(prompt(4, 6), 3), -2));
    let mid2 = h.submit(greedy(prompt(5, 6), 3));
    let ids = [busy, low, mid, high, mid2];
    let mut seen = HashMap::new();
    while h.engine.has_work() {
        h.step();
        first_token_steps(&h, &ids, &mut seen);
    }
    // Lower priority values first, arrival order among equals.
    let mut order = ids.to_vec();
    order.sort_by_key(|id| seen[id]);
    assert_eq!(order, vec![busy, high, mid, mid2, low]);
}

#[test]
fn the_lowest_priority_latest_arrival_is_preempted_first() {
    let m = FakeModel::new(None);
    // Three requests of 10 + 30 tokens need 3 groups x 10 tiles each at the end: 60 tiles
    // hold two of them, not three.
    let mut cfg = fake_config(&m, TS, 60);
    cfg.aging_steps = 1_000_000;
    let mut h = Harness::new(m, tiny_tokenizer(), &cfg);
    let a = h.submit(with_priority(greedy(prompt(1, 10), 30), 1));
    let b = h.submit(with_priority(greedy(prompt(2, 10), 30), 0));
    let c = h.submit(with_priority(greedy(prompt(3, 10), 30), 1));
    let n = run_tracking_preemptions(&mut h, &[a, b, c]);
    assert_eq!(n.get(&a).copied().unwrap_or(0), 0, "{n:?}");
    assert_eq!(n.get(&b).copied().unwrap_or(0), 0, "{n:?}");
    assert!(n.get(&c).copied().unwrap_or(0) > 0, "{n:?}");
    for id in [a, b, c] {
        assert_eq!(h.outcome(id).tokens.len(), 30);
    }
}

/// Steps the harness to completion, recording each request's preemptions, and checks that no
/// sequence is preempted twice without producing a token in between.
fn run_tracking_preemptions(h: &mut Harness<FakeModel>, ids: &[SeqId]) -> HashMap<SeqId, u32> {
    let mut count: HashMap<SeqId, u32> = HashMap::new();
    let mut out_at_preemption: HashMap<SeqId, usize> = HashMap::new();
    while h.engine.has_work() {
        h.step();
        for &id in ids {
            let Some(s) = h.engine.scheduler().get(id) else {
                continue;
            };
            let c = count.entry(id).or_insert(0);
            if s.preemptions > *c {
                assert_eq!(s.preemptions, *c + 1, "preempted twice in one step");
                let out = s.output().len();
                if let Some(prev) = out_at_preemption.insert(id, out) {
                    assert!(
                        out > prev,
                        "{id:?} preempted again at {out} tokens before making progress"
                    );
                }
                *c = s.preemptions;
            }
        }
    }
    count
}

#[test]
fn a_low_priority_decoder_short_of_tiles_does_not_preempt_a_higher_priority_prefill() {
    // `low` decodes while `high` (later, higher priority) prefills a long prompt in chunks.
    // When `low` needs a tile and the pool is short, it must give way itself.
    let m = FakeModel::new(None);
    let mut cfg = fake_config(&m, TS, 36);
    cfg.max_batch_tokens = 4;
    cfg.max_seqs = 2;
    cfg.aging_steps = 1_000_000;
    let mut h = Harness::new(m, tiny_tokenizer(), &cfg);
    let low = h.submit(with_priority(greedy(prompt(1, 3), 20), 5));
    for _ in 0..2 {
        h.step();
    }
    let high = h.submit(greedy(prompt(2, 40), 4));
    let n = run_tracking_preemptions(&mut h, &[low, high]);
    assert_eq!(n.get(&high).copied().unwrap_or(0), 0, "{n:?}");
    assert!(n.get(&low).copied().unwrap_or(0) > 0, "{n:?}");
    assert_eq!(
        h.outcome(low).tokens,
        solo(
            || FakeModel::new(None),
            TS,
            &with_priority(greedy(prompt(1, 3), 20), 5)
        )
        .tokens
    );
    assert_eq!(h.outcome(high).tokens.len(), 4);
}

#[test]
fn resumed_sequences_are_not_preempted_again_before_making_progress() {
    for seed in 0..6u64 {
        let m = FakeModel::new(Some(10));
        let mut cfg = fake_config(&m, TS, 48);
        cfg.max_batch_tokens = 8 + seed as usize;
        cfg.max_seqs = 6;
        let mut h = Harness::new(m, tiny_tokenizer(), &cfg);
        let ids: Vec<SeqId> = (0..8u64)
            .map(|i| {
                let p = prompt(seed * 100 + i, 4 + ((seed + i) as usize * 7) % 20);
                h.submit(with_priority(greedy(p, 14), (i % 3) as i32))
            })
            .collect();
        let n = run_tracking_preemptions(&mut h, &ids);
        assert!(n.values().sum::<u32>() > 0, "seed {seed}: no preemption");
        for id in ids {
            assert_eq!(h.outcome(id).tokens.len(), 14);
        }
    }
}

#[test]
fn aging_keeps_a_low_priority_request_from_starving() {
    let run = |aging_steps: u64| {
        let m = FakeModel::new(Some(10));
        let mut cfg = fake_config(&m, TS, 256);
        cfg.max_seqs = 1;
        cfg.aging_steps = aging_steps;
        let mut h = Harness::new(m, tiny_tokenizer(), &cfg);
        let low = h.submit(with_priority(greedy(prompt(1, 5), 2), 4));
        // A high-priority request arrives every step, more than one seat can serve.
        for i in 0..300u64 {
            h.submit(greedy(prompt(100 + i, 3), 2));
            h.step();
            if h.is_done(low) {
                return Some(h.steps);
            }
        }
        None
    };
    assert_eq!(run(u64::MAX), None, "without aging the stream starves it");
    let done_at = run(5).expect("with aging it runs");
    assert!(done_at < 120, "{done_at}");
}

#[test]
fn a_request_that_can_never_fit_the_pool_is_refused_up_front() {
    let m = FakeModel::new(None);
    // All three groups global: a sequence of n tokens holds 3 * ceil(n / 4) tiles; 30 tiles
    // hold 40 tokens.
    let cfg = fake_config(&m, TS, 30);
    let mut h = Harness::new(m, tiny_tokenizer(), &cfg);
    let too_long = h.submit(greedy(prompt(1, 20), 21));
    match &h.outcome(too_long).error {
        Some(EngineError::InvalidRequest(msg)) => {
            assert!(msg.contains("never fit"), "{msg}");
            assert!(msg.contains("41"), "{msg}");
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
    // The largest request that fits is accepted and completes, even behind others.
    let other = h.submit(greedy(prompt(2, 10), 10));
    let fits = h.submit(greedy(prompt(3, 20), 20));
    h.run();
    assert_eq!(h.outcome(fits).tokens.len(), 20);
    assert_eq!(
        h.outcome(fits).finish.map(|f| f.0),
        Some(FinishReason::Length)
    );
    assert_eq!(h.outcome(other).tokens.len(), 10);
}
