//! Embedding requests through the engine, with a fake embedding runner whose row for an input
//! depends on that input alone (its length, the sum and the first of its tokens) and which
//! records the inputs of every call: whole inputs batched under the token budget, never split,
//! refusals, aborts, and no KV kept.

use std::sync::{Arc, Mutex};

use engine::runner::minimal_layout;
use engine::{
    EmbedBatch, EmbedEvent, EmbedFacts, Engine, EngineConfig, EngineError, EngineHandle,
    EngineStats, GenerateRequest, IntoRunner, KvSpec, Runner, RunnerFacts, SeqId, StartError,
};
use model::kv::KvDtype;
use model::{Batch, RunError, TileId, Tokenizer};
use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver};

const DIM: usize = 3;

/// Input lengths of every `embed` call, shared with the test.
type Calls = Arc<Mutex<Vec<Vec<usize>>>>;

struct FakeEmbedder {
    calls: Calls,
}

struct FakeEmbedRunner {
    facts: RunnerFacts,
    calls: Calls,
}

fn tokenizer() -> Tokenizer {
    let bytes = model::testing::tiny_model_gguf("llama", model::testing::TINY_SEED);
    let parsed = gguf::parse(&bytes).expect("tiny model parses");
    Tokenizer::from_metadata(&parsed.metadata).expect("tiny vocabulary builds")
}

impl IntoRunner for FakeEmbedder {
    type Runner = FakeEmbedRunner;
    fn into_runner(self, spec: &KvSpec) -> Result<FakeEmbedRunner, StartError> {
        // An embedding runner keeps no KV: a one-tile layout satisfies the engine's planning.
        let layout = minimal_layout(spec.tile_size, KvDtype::F16);
        Ok(FakeEmbedRunner {
            facts: RunnerFacts {
                layout,
                n_tiles: 1,
                vocab_size: model::testing::tiny_vocab_size(),
                context_length: 64,
                embedding: Some(EmbedFacts {
                    dim: DIM,
                    scores: false,
                }),
            },
            calls: self.calls,
        })
    }
}

fn row_of(input: &[u32]) -> [f32; DIM] {
    let sum: u32 = input.iter().sum();
    [input.len() as f32, sum as f32, input[0] as f32]
}

impl Runner for FakeEmbedRunner {
    fn facts(&self) -> &RunnerFacts {
        &self.facts
    }
    fn execute(&mut self, _: &Batch, _: &mut Vec<f32>) -> Result<(), RunError> {
        Err(RunError::BadBatch("an embedder does not generate".into()))
    }
    fn embed(&mut self, batch: &EmbedBatch, out: &mut Vec<f32>) -> Result<(), RunError> {
        self.calls
            .lock()
            .expect("calls lock")
            .push(batch.inputs.iter().map(|i| i.len()).collect());
        for input in batch.inputs {
            out.extend(row_of(input));
        }
        Ok(())
    }
    fn copy_tiles(&mut self, _: &[(TileId, TileId)]) {}
    fn export_tile(&self, _: TileId, _: &mut Vec<u8>) {}
    fn import_tile(&mut self, _: TileId, _: &[u8]) -> Result<(), RunError> {
        Ok(())
    }
}

fn config(max_batch_tokens: usize) -> EngineConfig {
    EngineConfig {
        max_batch_tokens,
        max_seqs: 8,
        kv_bytes: 1 << 20,
        ..EngineConfig::default()
    }
}

fn engine(max_batch_tokens: usize) -> (Engine<FakeEmbedRunner>, Calls) {
    let calls = Calls::default();
    let cfg = config(max_batch_tokens);
    let runner = FakeEmbedder {
        calls: calls.clone(),
    }
    .into_runner(&cfg.kv_spec())
    .expect("runner");
    let e =
        Engine::new(runner, tokenizer(), &cfg, Arc::new(EngineStats::default())).expect("engine");
    (e, calls)
}

fn input(len: usize, first: u32) -> Vec<u32> {
    (0..len as u32).map(|i| first + i % 7).collect()
}

/// Every event of a request until its channel is empty.
fn drain(rx: &mut UnboundedReceiver<EmbedEvent>) -> Vec<EmbedEvent> {
    let mut out = Vec::new();
    while let Ok(ev) = rx.try_recv() {
        out.push(ev);
    }
    out
}

#[test]
fn inputs_run_whole_batched_under_the_token_budget_and_each_gets_its_own_row() {
    let (mut e, calls) = engine(40);
    let requests = [
        vec![input(10, 5), input(20, 9), input(3, 11)],
        vec![input(50, 4)], // longer than the budget: alone, whole
        vec![input(12, 30), input(1, 2), input(25, 8)],
    ];
    let mut rxs = Vec::new();
    for (i, inputs) in requests.iter().enumerate() {
        let (tx, rx) = unbounded_channel();
        e.submit_embed(SeqId(i as u64 + 1), inputs.clone(), 0, tx, None);
        rxs.push(rx);
    }
    let mut steps = 0;
    while e.has_work() {
        e.step().expect("step");
        steps += 1;
        assert!(steps < 20, "the engine does not finish");
    }
    let calls = calls.lock().expect("calls").clone();
    assert_eq!(
        calls,
        vec![vec![10, 20, 3], vec![50], vec![12, 1, 25]],
        "whole inputs, in order, under 40 tokens a step unless alone"
    );
    for (inputs, rx) in requests.iter().zip(&mut rxs) {
        let events = drain(rx);
        assert_eq!(events.len(), inputs.len());
        for ev in events {
            let EmbedEvent::Embedded {
                index,
                vector,
                prompt_tokens,
                ..
            } = ev
            else {
                panic!("unexpected event {ev:?}");
            };
            assert_eq!(vector, row_of(&inputs[index]).to_vec());
            assert_eq!(prompt_tokens, inputs[index].len());
        }
    }
    assert_eq!(e.scheduler().tile_counts().in_use, 0, "no KV is kept");
}

#[test]
fn a_bad_input_refuses_the_whole_request_naming_the_input() {
    let (mut e, calls) = engine(40);
    let cases: [(Vec<Vec<u32>>, &str); 4] = [
        (vec![input(3, 1), vec![]], "input 1 has no tokens"),
        (vec![input(65, 1)], "input 0 has 65 tokens"),
        (vec![vec![1, 100_000]], "outside the vocabulary"),
        (vec![], "no input"),
    ];
    for (inputs, want) in cases {
        let (tx, mut rx) = unbounded_channel();
        e.submit_embed(SeqId(1), inputs, 0, tx, None);
        match drain(&mut rx).as_slice() {
            [EmbedEvent::Error(EngineError::InvalidRequest(m))] => {
                assert!(m.contains(want), "{m:?} should say {want:?}")
            }
            other => panic!("expected one refusal, got {other:?}"),
        }
        assert!(!e.has_work(), "nothing of a refused request is queued");
    }
    assert!(calls.lock().expect("calls").is_empty());
}

#[test]
fn a_generation_request_on_an_embedding_model_is_refused_saying_why() {
    let (mut e, _) = engine(40);
    let (tx, mut rx) = unbounded_channel();
    let req = GenerateRequest {
        prompt: vec![1, 2, 3],
        max_tokens: 4,
        ..GenerateRequest::default()
    };
    e.submit(SeqId(1), req, tx);
    match rx.try_recv() {
        Ok(engine::Event::Error(EngineError::InvalidRequest(m))) => {
            assert!(m.contains("computes embeddings"), "{m}")
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
    assert!(!e.has_work());
}

#[test]
fn a_request_whose_client_left_loses_its_waiting_inputs_and_the_others_go_on() {
    let (mut e, calls) = engine(10);
    let (tx1, rx1) = unbounded_channel();
    let (tx2, mut rx2) = unbounded_channel();
    e.submit_embed(
        SeqId(1),
        vec![input(8, 1), input(8, 2), input(8, 3)],
        0,
        tx1,
        None,
    );
    e.submit_embed(SeqId(2), vec![input(4, 1)], 0, tx2, None);
    e.step().expect("step");
    drop(rx1);
    e.reap_disconnected();
    while e.has_work() {
        e.step().expect("step");
    }
    assert_eq!(
        calls.lock().expect("calls").clone(),
        vec![vec![8], vec![4]],
        "the gone request's last two inputs never ran"
    );
    assert_eq!(drain(&mut rx2).len(), 1);
}

#[test]
fn through_the_handle_a_batch_of_256_inputs_comes_back_whole_and_the_waiting_place_is_returned() {
    let calls = Calls::default();
    let model_calls = calls.clone();
    let cfg = EngineConfig {
        max_waiting: 1,
        ..config(64)
    };
    let handle = EngineHandle::spawn(cfg, move || {
        Ok((FakeEmbedder { calls: model_calls }, tokenizer()))
    })
    .expect("engine starts");
    assert_eq!(
        handle.info().embedding,
        Some(EmbedFacts {
            dim: DIM,
            scores: false
        })
    );
    let inputs: Vec<Vec<u32>> = (0..256)
        .map(|i| input(1 + i % 17, 1 + i as u32 % 50))
        .collect();
    for _ in 0..2 {
        // One place in the waiting line (max_waiting 1) serves the whole request, and is given
        // back when it ends: the second round would be refused otherwise.
        let mut stream = handle.embed(inputs.clone(), 0).expect("accepted");
        assert_eq!(stream.inputs, 256);
        let mut rows = vec![None; 256];
        for _ in 0..256 {
            match stream.events.blocking_recv() {
                Some(EmbedEvent::Embedded { index, vector, .. }) => rows[index] = Some(vector),
                other => panic!("unexpected {other:?}"),
            }
        }
        for (i, row) in rows.iter().enumerate() {
            assert_eq!(row.as_deref(), Some(&row_of(&inputs[i])[..]), "input {i}");
        }
    }
    let calls = calls.lock().expect("calls").clone();
    assert!(calls
        .iter()
        .all(|c| c.len() <= 8 && (c.len() == 1 || c.iter().sum::<usize>() <= 64)));
    handle.shutdown(std::time::Duration::from_secs(5));
}
