//! The prefill cap of decoding steps (set by the engine from measured step times): with decoders
//! in the step, prefill pieces stop at the cap; without decoders the whole budget is used;
//! `Some(0)` makes a decode-only step; chunked prefill off ignores the cap; a step that decodes
//! no sequence may prefill up to `max_prefill_tokens`.

mod common;

use common::FakeModel;
use engine::scheduler::{Scheduler, SchedulerConfig, StepPlan};
use engine::sequence::Sequence;
use engine::SeqId;

/// Chunked prefill, 16 sequences a step, `max_batch_tokens` and `max_prefill_tokens` as given.
fn config(max_batch_tokens: usize, max_prefill_tokens: usize) -> SchedulerConfig {
    SchedulerConfig {
        max_batch_tokens,
        max_prefill_tokens,
        max_seqs: 16,
        chunked_prefill: true,
        aging_steps: 100,
        release_window_tiles: true,
    }
}

fn scheduler(chunked: bool) -> Scheduler {
    let m = FakeModel::new(None);
    let cfg = SchedulerConfig {
        chunked_prefill: chunked,
        ..config(256, 0)
    };
    Scheduler::new(cfg, &m.kv_layout(4), 4096, false)
}

/// Commits a plan as the engine would: every chunk computed, a token sampled where a prompt is
/// finished.
fn commit(s: &mut Scheduler, plan: &StepPlan) {
    for c in &plan.chunks {
        let done = s
            .get(c.seq)
            .is_some_and(|q| c.start + c.len >= q.tokens.len());
        s.commit(c.seq, c.len, if done { &[7] } else { &[] });
    }
}

fn add(s: &mut Scheduler, id: u64, prompt_len: usize) {
    let prompt: Vec<u32> = (0..prompt_len as u32).map(|t| 10 + t % 50).collect();
    s.add(Sequence::new(SeqId(id), prompt, 64, 0, id))
        .expect("fits");
}

/// Two decoders running, then a prompt of `len` tokens arrives.
fn decoders_and_a_prompt(s: &mut Scheduler, len: usize) {
    add(s, 1, 8);
    add(s, 2, 8);
    let p = s.plan();
    commit(s, &p);
    assert_eq!(s.decoders(), 2);
    add(s, 3, len);
}

#[test]
fn decoding_steps_carry_at_most_the_cap_of_prefill() {
    let mut s = scheduler(true);
    decoders_and_a_prompt(&mut s, 1000);
    s.set_prefill_cap(Some(24));
    for _ in 0..5 {
        let p = s.plan();
        assert_eq!(p.decode_tokens(), 2);
        assert_eq!(p.prefill_tokens(), 24, "capped");
        commit(&mut s, &p);
    }
    s.set_prefill_cap(None);
    let p = s.plan();
    assert_eq!(p.prefill_tokens(), 254, "uncapped: the rest of the budget");
}

#[test]
fn a_zero_cap_makes_a_decode_only_step_and_prefill_alone_is_never_capped() {
    let mut s = scheduler(true);
    decoders_and_a_prompt(&mut s, 1000);
    s.set_prefill_cap(Some(0));
    let p = s.plan();
    assert_eq!((p.decode_tokens(), p.prefill_tokens()), (2, 0));
    // Nobody decoding: the cap does not apply.
    let mut s = scheduler(true);
    add(&mut s, 1, 1000);
    s.set_prefill_cap(Some(0));
    let p = s.plan();
    assert_eq!((p.decode_tokens(), p.prefill_tokens()), (0, 256));
}

#[test]
fn a_step_that_decodes_nobody_prefills_up_to_max_prefill_tokens() {
    let m = FakeModel::new(None);
    let mut s = Scheduler::new(config(128, 1024), &m.kv_layout(4), 4096, false);
    add(&mut s, 1, 700);
    add(&mut s, 2, 600);
    // Nobody decodes: the first prompt whole, the second up to the larger budget.
    let p = s.plan();
    let lens: Vec<usize> = p.chunks.iter().map(|c| c.len).collect();
    assert_eq!((p.decode_tokens(), lens), (0, vec![700, 324]));
    commit(&mut s, &p);
    // Sequence 1 now decodes: back to max_batch_tokens (its token and 127 of prefill).
    assert_eq!(s.decoders(), 1);
    let p = s.plan();
    assert_eq!((p.decode_tokens(), p.prefill_tokens()), (1, 127));
    // A value under max_batch_tokens leaves that as the limit.
    let mut s = Scheduler::new(config(128, 64), &m.kv_layout(4), 4096, false);
    add(&mut s, 1, 700);
    assert_eq!(s.plan().prefill_tokens(), 128);
    // Windowed layers hold their window plus the piece: where a 1024-token piece could keep a
    // sequence (600 + 64 tokens, 16-token tiles, window 32) from fitting an 80-tile pool
    // (42 global tiles, and 11 rather than 42 per windowed group), it gets max_batch_tokens.
    let windowed = FakeModel::new(Some(32));
    for (tiles, piece) in [(80, 128), (200, 600)] {
        let mut s = Scheduler::new(config(128, 1024), &windowed.kv_layout(16), tiles, false);
        add(&mut s, 1, 600);
        assert_eq!(s.plan().prefill_tokens(), piece, "{tiles} tiles");
    }
}

#[test]
fn without_chunked_prefill_the_cap_is_ignored() {
    let mut s = scheduler(false);
    decoders_and_a_prompt(&mut s, 200);
    s.set_prefill_cap(Some(16));
    let p = s.plan();
    assert_eq!(p.prefill_tokens(), 200, "a prompt runs whole");
}

#[test]
fn under_the_cap_a_short_prompt_goes_before_a_long_one_already_prefilling() {
    let mut s = scheduler(true);
    decoders_and_a_prompt(&mut s, 1000);
    s.set_prefill_cap(Some(24));
    let p = s.plan();
    commit(&mut s, &p);
    add(&mut s, 4, 20);
    let p = s.plan();
    let piece = |id: u64| {
        p.chunks
            .iter()
            .find(|c| c.seq == SeqId(id))
            .map_or(0, |c| c.len)
    };
    assert_eq!(
        (piece(4), piece(3)),
        (20, 4),
        "short prompt whole, long one the rest"
    );
    // Without the cap, first come first served: the long prompt takes the budget.
    let mut s = scheduler(true);
    decoders_and_a_prompt(&mut s, 1000);
    let p = s.plan();
    commit(&mut s, &p);
    add(&mut s, 4, 20);
    let p = s.plan();
    assert!(
        p.chunks.iter().all(|c| c.seq != SeqId(4)),
        "FCFS: {:?}",
        p.chunks
    );
}

#[test]
fn the_backlog_counts_prompts_in_progress_and_waiting_requests_that_have_a_seat() {
    let m = FakeModel::new(None);
    let cfg = SchedulerConfig {
        max_seqs: 4,
        ..config(256, 0)
    };
    let mut s = Scheduler::new(cfg, &m.kv_layout(4), 4096, false);
    add(&mut s, 1, 8);
    add(&mut s, 2, 8);
    let p = s.plan();
    commit(&mut s, &p);
    assert_eq!((s.decoders(), s.prefill_backlog()), (2, 0));
    // A long prompt starts (cap of 16 tokens a step) and five more wait: two seats are left.
    s.set_prefill_cap(Some(16));
    add(&mut s, 3, 400);
    let p = s.plan();
    commit(&mut s, &p);
    for id in 4..9 {
        add(&mut s, id, 50);
    }
    assert_eq!(s.num_running(), 3);
    assert_eq!(
        s.prefill_backlog(),
        1 + 1,
        "the running prompt, and one waiting per free seat"
    );
}

#[test]
fn with_first_token_deadlines_prompts_still_on_time_are_prefilled_before_late_ones() {
    use engine::scheduler::DeadlineClock;
    use std::time::{Duration, Instant};
    let now = Instant::now();
    let mut s = scheduler(true);
    // Request 1 arrived long ago and cannot make its deadline; request 2 can.
    let late = |id: u64, deadline: Instant| {
        let prompt: Vec<u32> = (0..200u32).map(|t| 10 + (t + id as u32) % 50).collect();
        let mut q = Sequence::new(SeqId(id), prompt, 64, 0, id);
        q.ttft_deadline = Some(deadline);
        q
    };
    s.add(late(1, now - Duration::from_secs(1))).expect("fits");
    s.add(late(2, now + Duration::from_secs(2))).expect("fits");
    s.set_deadline_clock(Some(DeadlineClock {
        now,
        per_token: 0.001,
    }));
    let p = s.plan();
    assert_eq!(
        p.chunks[0].seq,
        SeqId(2),
        "the one on time first: {:?}",
        p.chunks
    );
    assert_eq!(p.chunks[0].len, 200);
    // Without deadlines, arrival order.
    let mut s = scheduler(true);
    s.add(late(1, now - Duration::from_secs(1))).expect("fits");
    s.add(late(2, now + Duration::from_secs(2))).expect("fits");
    let p = s.plan();
    assert_eq!(p.chunks[0].seq, SeqId(1));
}

#[test]
fn with_first_token_deadlines_a_late_prompt_is_preempted_before_one_on_time() {
    use engine::scheduler::DeadlineClock;
    use std::time::{Duration, Instant};
    let now = Instant::now();
    let m = FakeModel::new(None);
    let cfg = config(64, 0);
    // 3 groups (one global, two windowed) of 16-token tiles: 24 tiles hold 128 tokens of one
    // sequence; two 96-token prompts cannot both finish.
    let mut s = Scheduler::new(cfg, &m.kv_layout(16), 24, false);
    let seq = |id: u64, deadline: Instant| {
        let prompt: Vec<u32> = (0..96u32).map(|t| 10 + (t + 7 * id as u32) % 50).collect();
        let mut q = Sequence::new(SeqId(id), prompt, 8, 0, id);
        q.ttft_deadline = Some(deadline);
        q
    };
    // The first to arrive is already late; the second is on time.
    s.add(seq(1, now - Duration::from_secs(1))).expect("fits");
    s.add(seq(2, now + Duration::from_secs(10))).expect("fits");
    s.set_deadline_clock(Some(DeadlineClock {
        now,
        per_token: 0.001,
    }));
    let mut preempted = Vec::new();
    for _ in 0..8 {
        let p = s.plan();
        preempted.extend(p.preempted.iter().copied());
        commit(&mut s, &p);
        if s.get(SeqId(2)).is_some_and(|q| !q.output().is_empty()) {
            break;
        }
    }
    assert!(
        s.get(SeqId(2)).is_some_and(|q| !q.output().is_empty()),
        "the prompt on time got its first token"
    );
    assert!(!preempted.contains(&SeqId(2)), "preempted {preempted:?}");
}
