//! `EngineHandle` with the fake model: start-up errors reach the caller, events stream back,
//! dropping the stream or aborting frees the request's tiles within a step, and the default
//! configuration is valid.

mod common;

use std::sync::atomic::Ordering::Relaxed;
use std::time::{Duration, Instant};

use common::*;
use engine::{EngineConfig, EngineHandle, Event, FinishReason, GenerateRequest, RequestStream};

fn spawn(tiles: usize) -> EngineHandle {
    let mut m = FakeModel::new(Some(10));
    // Slow enough that the test sees a 200-token request running.
    m.delay = Duration::from_millis(2);
    let cfg = fake_config(&m, 4, tiles);
    EngineHandle::spawn(cfg, move || Ok((m, tiny_tokenizer()))).expect("engine starts")
}

/// Receives events until the last one (with a deadline so a hang fails).
fn collect(stream: &mut RequestStream) -> (Vec<u32>, Option<FinishReason>) {
    let mut tokens = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(20);
    while Instant::now() < deadline {
        match stream.events.try_recv() {
            Ok(Event::Token { id, .. }) => tokens.push(id),
            Ok(Event::Finished { reason, .. }) => return (tokens, Some(reason)),
            Ok(Event::Error(e)) => panic!("request failed: {e}"),
            Ok(Event::PromptLogprobs(_) | Event::Accepted) => {}
            Err(_) => std::thread::sleep(Duration::from_millis(1)),
        }
    }
    (tokens, None)
}

fn wait_until(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(2));
    }
}

#[test]
fn the_default_config_is_valid() {
    let cfg = EngineConfig::default();
    cfg.validate().expect("defaults validate");
    assert!(cfg.chunked_prefill && cfg.prefix_caching && cfg.release_window_tiles);
    assert!(cfg.max_batch_tokens >= cfg.max_seqs);
    let bad = EngineConfig {
        max_seqs: 0,
        ..EngineConfig::default()
    };
    assert!(bad.validate().is_err());
}

#[test]
fn spawn_returns_the_load_error() {
    let bad = std::env::temp_dir().join(format!("tessera-engine-bad-{}.gguf", std::process::id()));
    std::fs::write(&bad, b"this is not a gguf file").expect("temp file");
    let path = bad.clone();
    let res = EngineHandle::spawn(EngineConfig::default(), move || {
        model::load(&path, 1)
            .map(|m| (m.transformer, m.tokenizer))
            .map_err(Into::into)
    });
    let _ = std::fs::remove_file(&bad);
    let err = res.err().expect("a bad file fails to load");
    assert!(matches!(err, engine::StartError::Load(_)), "{err}");
    assert!(!err.to_string().is_empty());
    // A bad config is refused before any thread starts.
    let cfg = EngineConfig {
        tile_size: 0,
        ..EngineConfig::default()
    };
    let res = EngineHandle::spawn(cfg, || -> Result<(FakeModel, _), engine::LoadError> {
        panic!("must not load with a bad config")
    });
    assert!(res.is_err());
    // A KV type the model's rows cannot use is reported by spawn too (the fake rows hold 2
    // values; q8_0 needs blocks of 32).
    let m = FakeModel::new(Some(10));
    let cfg = EngineConfig {
        kv_dtype: model::KvDtype::Q8_0,
        ..fake_config(&m, 4, 64)
    };
    let err = EngineHandle::spawn(cfg, move || Ok((m, tiny_tokenizer())))
        .err()
        .expect("q8_0 refused");
    assert!(err.to_string().contains("q8_0"), "{err}");
    // So is a KV memory too small for anything.
    let m = FakeModel::new(Some(10));
    let cfg = EngineConfig {
        kv_bytes: 10,
        ..fake_config(&m, 4, 64)
    };
    let err = EngineHandle::spawn(cfg, move || Ok((m, tiny_tokenizer())))
        .err()
        .expect("a 10-byte pool is refused");
    assert!(err.to_string().contains("too small"), "{err}");
}

#[test]
fn every_kv_type_the_model_allows_serves_requests() {
    for dtype in [model::KvDtype::F32, model::KvDtype::F16] {
        let m = FakeModel::new(Some(10));
        let cfg = EngineConfig {
            kv_dtype: dtype,
            ..fake_config(&m, 4, 64)
        };
        let h = EngineHandle::spawn(cfg, move || Ok((m, tiny_tokenizer()))).expect("starts");
        let req = greedy(prompt(9, 12), 6);
        let mut s = h.submit(req.clone()).expect("accepted");
        let (tokens, _) = collect(&mut s);
        assert_eq!(
            tokens,
            solo(|| FakeModel::new(Some(10)), 4, &req).tokens,
            "{dtype:?}"
        );
        h.shutdown(Duration::from_secs(1));
    }
}

#[test]
fn a_request_streams_its_tokens_and_finishes() {
    let h = spawn(256);
    let req = greedy(prompt(1, 17), 9);
    let mut s = h.submit(req.clone()).expect("accepted");
    let (tokens, reason) = collect(&mut s);
    assert_eq!(reason, Some(FinishReason::Length));
    assert_eq!(tokens, solo(|| FakeModel::new(Some(10)), 4, &req).tokens);
    wait_until("tiles back", || h.stats().tiles_in_use.load(Relaxed) == 0);
    h.shutdown(Duration::from_secs(1));
    assert!(h.submit(req).is_err(), "no requests after shutdown");
}

#[test]
fn dropping_the_stream_aborts_the_request_and_frees_its_tiles() {
    let h = spawn(256);
    let keep_req = greedy(prompt(2, 12), 8);
    let gone = h.submit(greedy(prompt(3, 40), 200)).expect("accepted");
    wait_until("the request to run", || {
        h.stats().tiles_in_use.load(Relaxed) > 0
    });
    drop(gone);
    wait_until("the abort", || h.stats().finished_abort.load(Relaxed) == 1);
    wait_until("tiles back", || h.stats().tiles_in_use.load(Relaxed) == 0);
    let mut keep = h.submit(keep_req).expect("accepted");
    assert_eq!(collect(&mut keep).1, Some(FinishReason::Length));
    h.shutdown(Duration::from_secs(1));
}

#[test]
fn an_explicit_abort_ends_the_stream_with_abort() {
    let h = spawn(256);
    let mut s = h.submit(greedy(prompt(4, 30), 200)).expect("accepted");
    wait_until("the request to run", || {
        h.stats().tiles_in_use.load(Relaxed) > 0
    });
    h.abort(s.id);
    let (_, reason) = collect(&mut s);
    assert_eq!(reason, Some(FinishReason::Abort));
    wait_until("tiles back", || h.stats().tiles_in_use.load(Relaxed) == 0);
    h.shutdown(Duration::from_secs(1));
}

#[test]
fn shutdown_aborts_what_is_left_after_the_grace_period() {
    let h = spawn(256);
    let mut s = h.submit(greedy(prompt(5, 30), 200)).expect("accepted");
    wait_until("the request to run", || {
        h.stats().tiles_in_use.load(Relaxed) > 0
    });
    h.shutdown(Duration::from_millis(0));
    let (_, reason) = collect(&mut s);
    assert_eq!(reason, Some(FinishReason::Abort));
    assert_eq!(h.stats().tiles_in_use.load(Relaxed), 0);
}

#[test]
fn refused_requests_do_not_count_as_waiting() {
    let m = FakeModel::new(Some(10));
    let cfg = EngineConfig {
        max_waiting: 2,
        ..fake_config(&m, 4, 64)
    };
    let h = EngineHandle::spawn(cfg, move || Ok((m, tiny_tokenizer()))).expect("engine starts");
    for _ in 0..3 {
        // Too long for the 64-tile pool: refused by the engine.
        let mut s = h.submit(greedy(prompt(6, 100), 100)).expect("queued");
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            match s.events.try_recv() {
                Ok(Event::Error(_)) => break,
                Ok(e) => panic!("expected a refusal, got {e:?}"),
                Err(_) => std::thread::sleep(Duration::from_millis(1)),
            }
            assert!(Instant::now() < deadline);
        }
    }
    wait_until("the waiting count to settle", || {
        h.stats().waiting.load(Relaxed) == 0
    });
    let mut s = h.submit(greedy(prompt(7, 10), 3)).expect("not overloaded");
    assert_eq!(collect(&mut s).1, Some(FinishReason::Length));
    h.shutdown(Duration::from_secs(1));
}

#[test]
fn submissions_beyond_max_waiting_are_refused_as_overloaded() {
    let mut m = FakeModel::new(Some(10));
    m.delay = Duration::from_millis(5);
    let cfg = EngineConfig {
        max_waiting: 2,
        max_seqs: 1,
        max_batch_tokens: 16,
        ..fake_config(&m, 4, 256)
    };
    let h = EngineHandle::spawn(cfg, move || Ok((m, tiny_tokenizer()))).expect("engine starts");
    let mut accepted = Vec::new();
    let mut overloaded = 0;
    for i in 0..8 {
        match h.submit(greedy(prompt(20 + i, 8), 20)) {
            Ok(s) => accepted.push(s),
            Err(engine::EngineError::Overloaded(_)) => overloaded += 1,
            Err(e) => panic!("unexpected refusal: {e}"),
        }
    }
    assert!(overloaded > 0 && accepted.len() >= 2);
    for s in &mut accepted {
        assert_eq!(collect(s).1, Some(FinishReason::Length));
    }
    wait_until("tiles back", || h.stats().tiles_in_use.load(Relaxed) == 0);
    h.shutdown(Duration::from_secs(1));
}

#[test]
fn a_group_streams_every_choice_and_counts_against_the_waiting_limit() {
    let h = spawn(512);
    let req = greedy(prompt(3, 21), 6);
    let mut streams = h
        .submit_group(vec![req.clone(), req.clone(), req.clone()])
        .expect("group accepted");
    assert_eq!(streams.len(), 3);
    let outs: Vec<_> = streams.iter_mut().map(collect).collect();
    for (tokens, reason) in &outs {
        assert_eq!(reason, &Some(FinishReason::Length));
        assert_eq!(tokens, &outs[0].0, "greedy choices of one prompt agree");
        assert_eq!(tokens.len(), 6);
    }
    wait_until("the tiles to be freed", || {
        h.stats().tiles_in_use.load(Relaxed) == 0
    });
    h.shutdown(Duration::from_secs(1));

    // A group larger than the waiting line is refused whole.
    let mut m = FakeModel::new(Some(10));
    m.delay = Duration::from_millis(2);
    let cfg = EngineConfig {
        max_waiting: 2,
        ..fake_config(&m, 4, 64)
    };
    let small = EngineHandle::spawn(cfg, move || Ok((m, tiny_tokenizer()))).expect("starts");
    let refused = small.submit_group(vec![req.clone(), req.clone(), req]);
    assert!(matches!(refused, Err(engine::EngineError::Overloaded(_))));
    small.shutdown(Duration::from_secs(1));
}

#[test]
fn a_panicking_step_fails_its_requests_and_the_engine_serves_on() {
    let mut m = FakeModel::new(Some(10));
    m.panic_on_token = Some(7);
    let h = EngineHandle::spawn(fake_config(&m, 4, 64), move || Ok((m, tiny_tokenizer())))
        .expect("engine starts");
    let mut poisoned = prompt(3, 9);
    poisoned[4] = 7;
    let mut bad = h.submit(greedy(poisoned, 4)).expect("accepted");
    let mut saw_error = false;
    while let Some(ev) = bad.events.blocking_recv() {
        if let Event::Error(e) = ev {
            saw_error = true;
            assert!(e.to_string().contains("internal"), "{e}");
        }
    }
    assert!(saw_error, "the failed request gets an error");
    let good = greedy(prompt(4, 6).into_iter().filter(|&t| t != 7).collect(), 5);
    let mut s = h.submit(good.clone()).expect("accepted");
    let (tokens, finish) = collect(&mut s);
    assert_eq!(finish, Some(FinishReason::Length));
    assert_eq!(tokens.len(), 5);
    assert!(h.is_alive());
    assert_eq!(
        h.stats()
            .tiles_in_use
            .load(std::sync::atomic::Ordering::Relaxed),
        0
    );
    h.shutdown(Duration::from_secs(1));
    assert!(!h.is_alive(), "a stopped engine is not alive");
}

#[test]
fn an_engine_thread_that_dies_says_so_and_refuses_requests() {
    let mut m = FakeModel::new(Some(10));
    m.panic_when_idle = true;
    let h = EngineHandle::spawn(fake_config(&m, 4, 64), move || Ok((m, tiny_tokenizer())))
        .expect("engine starts");
    wait_until("the engine thread dies", || !h.is_alive());
    assert!(h.submit(greedy(prompt(1, 4), 2)).is_err());
}

/// The first event of a submitted request: `Accepted`, or the refusal.
fn first_event(h: &EngineHandle, req: GenerateRequest) -> Event {
    let mut s = h.submit(req).expect("queued");
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        match s.events.try_recv() {
            Ok(ev) => return ev,
            Err(_) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(1)),
            Err(_) => panic!("no event within the deadline"),
        }
    }
}

#[test]
fn max_seq_len_is_the_longest_sequence_the_pool_accepts() {
    // Global groups only: a sequence of n tokens holds 3 * ceil(n / 4) tiles, so 30 tiles hold
    // 40 tokens.
    let m = FakeModel::new(None);
    let h = EngineHandle::spawn(fake_config(&m, 4, 30), move || Ok((m, tiny_tokenizer())))
        .expect("starts");
    assert_eq!(h.info().max_seq_len, 40);
    assert_eq!(h.info().context_length, 256);
    // With sliding windows the windowed groups stop growing: the global one limits, and the
    // exact bound is what `check_fits` accepts, one more token is refused.
    let m = FakeModel::new(Some(8));
    let h = EngineHandle::spawn(fake_config(&m, 4, 60), move || Ok((m, tiny_tokenizer())))
        .expect("starts");
    let max = h.info().max_seq_len;
    assert!(max > 20 && max < 256, "{max}");
    let fits = greedy(prompt(1, 10), max - 10);
    assert!(matches!(first_event(&h, fits), Event::Accepted));
    let too_long = greedy(prompt(2, 10), max - 9);
    assert!(
        matches!(first_event(&h, too_long), Event::Error(_)),
        "{max} + 1 tokens must be refused"
    );
    // A pool roomy enough for a whole context reports the context length.
    let m = FakeModel::new(Some(8));
    let h = EngineHandle::spawn(fake_config(&m, 4, 4096), move || Ok((m, tiny_tokenizer())))
        .expect("starts");
    assert_eq!(h.info().max_seq_len, 256);
}

#[test]
fn a_constrained_request_gives_one_of_its_choices_and_leaves_its_neighbour_unchanged() {
    let h = spawn(512);
    let tok = h.tokenizer().clone();
    // Two texts the tiny vocabulary spells with single tokens.
    let words: Vec<String> = (3..tok.vocab_size() as u32)
        .map(|id| tok.decode(&[id], true))
        .filter(|w| w.len() >= 2 && w.chars().all(|c| c.is_ascii_alphabetic()))
        .take(2)
        .collect();
    assert_eq!(words.len(), 2, "the tiny vocabulary has words");
    let choice = engine::constraint::Constraint::Choice(words.clone());
    let compiled = h.compile(&choice).expect("a choice compiles");
    let plain = GenerateRequest {
        ignore_eos: false,
        ..greedy(prompt(3, 12), 24)
    };
    let mut alone = h.submit(plain.clone()).expect("submitted");
    let alone = collect(&mut alone);
    let constrained = GenerateRequest {
        constraint: Some(compiled),
        ignore_eos: false,
        ..greedy(prompt(4, 9), 24)
    };
    let mut c = h.submit(constrained).expect("submitted");
    let mut p = h.submit(plain).expect("submitted");
    let (c_tokens, c_reason) = collect(&mut c);
    assert_eq!(
        collect(&mut p),
        alone,
        "the neighbour's output is unchanged"
    );
    assert_eq!(c_reason, Some(FinishReason::Stop));
    let text = tok.decode(&c_tokens, true);
    assert!(words.contains(&text), "{text:?} is not one of {words:?}");
    let bad = engine::constraint::Constraint::Regex("(".into());
    assert!(matches!(
        h.compile(&bad),
        Err(engine::EngineError::InvalidRequest(_))
    ));
}
