//! A runner that draws tokens itself (`Runner::draws`, as a GPU runner samples on the device):
//! the engine hands it the draws that need none of its state and takes its tokens, draws the
//! others from their rows, and every request gets what it gets from a runner that does not draw.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::sync::Arc;

use common::*;
use engine::{
    DrawParams, EmbedBatch, GenerateRequest, IntoRunner, KvSpec, Runner, RunnerFacts, StartError,
};
use model::{Batch, LogitsWanted, RunError, SamplingParams, SeqChunk, TileId};

/// The fake model on a runner that draws: the argmax when greedy, else a token chosen from
/// the request's seed and draw count only (its own generator, not the engine's).
struct Drawing {
    inner: common::FakeRunner,
    /// Tokens this runner drew.
    drew: Arc<AtomicUsize>,
}

struct DrawingModel(FakeModel, Arc<AtomicUsize>);

impl IntoRunner for DrawingModel {
    type Runner = Drawing;
    fn into_runner(self, kv: &KvSpec) -> Result<Drawing, StartError> {
        Ok(Drawing {
            inner: self.0.into_runner(kv)?,
            drew: self.1,
        })
    }
}

fn argmax(row: &[f32]) -> u32 {
    let mut best = 0;
    for (i, &v) in row.iter().enumerate() {
        if v > row[best] {
            best = i;
        }
    }
    best as u32
}

impl Runner for Drawing {
    fn facts(&self) -> &RunnerFacts {
        self.inner.facts()
    }
    fn execute(&mut self, batch: &Batch, logits: &mut Vec<f32>) -> Result<(), RunError> {
        self.inner.execute(batch, logits)
    }
    fn draws(&self) -> bool {
        true
    }
    fn execute_drawing(
        &mut self,
        batch: &Batch,
        draws: &[Option<DrawParams>],
        logits: &mut Vec<f32>,
        tokens: &mut Vec<u32>,
    ) -> Result<(), RunError> {
        // "On the device": every last row is computed, the drawn ones never leave.
        let seqs: Vec<SeqChunk> = batch
            .seqs
            .iter()
            .zip(draws)
            .map(|(c, d)| {
                assert!(
                    d.is_none() || c.logits == LogitsWanted::None,
                    "a drawn chunk asked for a row"
                );
                SeqChunk {
                    logits: if d.is_some() {
                        LogitsWanted::Last
                    } else {
                        c.logits
                    },
                    ..c.clone()
                }
            })
            .collect();
        let mut all = Vec::new();
        self.inner.execute(
            &Batch {
                tokens: batch.tokens,
                seqs: &seqs,
            },
            &mut all,
        )?;
        let vocab = self.facts().vocab_size;
        logits.clear();
        let mut row = 0;
        for (c, d) in seqs.iter().zip(draws) {
            let n = c.logits.rows(c.len);
            let rows = &all[row * vocab..(row + n) * vocab];
            row += n;
            match d {
                Some(p) if p.temperature == 0.0 => tokens.push(argmax(rows)),
                Some(p) => {
                    let h = p.seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ p.drawn;
                    tokens.push((3 + h % (vocab as u64 - 3)) as u32);
                }
                None => logits.extend_from_slice(rows),
            }
            if d.is_some() {
                self.drew.fetch_add(1, Relaxed);
            }
        }
        Ok(())
    }
    fn copy_tiles(&mut self, pairs: &[(TileId, TileId)]) {
        self.inner.copy_tiles(pairs)
    }
    fn export_tile(&self, tile: TileId, out: &mut Vec<u8>) {
        self.inner.export_tile(tile, out)
    }
    fn import_tile(&mut self, tile: TileId, bytes: &[u8]) -> Result<(), RunError> {
        self.inner.import_tile(tile, bytes)
    }
    fn embed(&mut self, batch: &EmbedBatch, out: &mut Vec<f32>) -> Result<(), RunError> {
        self.inner.embed(batch, out)
    }
}

/// Greedy requests, some asking for log-probabilities (drawn by the engine from rows), one with
/// a repetition penalty (the engine's too), the rest drawn by the runner.
fn mixed() -> Vec<GenerateRequest> {
    (0..6)
        .map(|i| {
            let mut r = greedy(prompt(70 + i, 5 + 3 * i as usize), 12);
            match i {
                1 | 4 => r.logprobs = Some(2),
                3 => r.sampling.repetition_penalty = 1.3,
                _ => {}
            }
            r
        })
        .collect()
}

#[test]
fn greedy_requests_drawn_by_the_runner_get_the_tokens_the_engine_would_draw() {
    let reqs = mixed();
    let m = FakeModel::new(None);
    let cfg = fake_config(&m, 4, 512);
    let mut plain = Harness::new(m, tiny_tokenizer(), &cfg);
    let want = drive(&mut plain, &reqs);
    let drew = Arc::new(AtomicUsize::new(0));
    let mut h = Harness::new(
        DrawingModel(FakeModel::new(None), drew.clone()),
        tiny_tokenizer(),
        &cfg,
    );
    let got = drive(&mut h, &reqs);
    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
        assert_eq!(g.tokens, w.tokens, "request {i}");
        assert_eq!(g.logprobs.len(), w.logprobs.len(), "request {i}");
        assert!(g.finish.is_some(), "request {i}");
    }
    // Requests 0, 2 and 5 draw all 12 tokens on the runner's side; the others none.
    assert_eq!(drew.load(Relaxed), 3 * 12);
    assert!(got[1].logprobs.iter().all(Option::is_some));
}

#[test]
fn a_sampled_request_drawn_by_the_runner_gets_the_same_tokens_alone_and_batched() {
    let sampled = |seed: u64| GenerateRequest {
        sampling: SamplingParams {
            temperature: 0.9,
            seed: Some(seed),
            ..SamplingParams::default()
        },
        ..greedy(prompt(90 + seed, 9), 10)
    };
    let m = FakeModel::new(None);
    let cfg = fake_config(&m, 4, 512);
    let run = |reqs: &[GenerateRequest]| {
        let drew = Arc::new(AtomicUsize::new(0));
        let mut h = Harness::new(
            DrawingModel(FakeModel::new(None), drew.clone()),
            tiny_tokenizer(),
            &cfg,
        );
        (drive(&mut h, reqs), drew.load(Relaxed))
    };
    let (alone, drew) = run(&[sampled(5)]);
    assert_eq!(drew, 10);
    let batch: Vec<GenerateRequest> = (1..=6).map(sampled).collect();
    let (together, _) = run(&batch);
    assert_eq!(together[4].tokens, alone[0].tokens);
    // The runner's generator, not the engine's: its tokens follow its own rule.
    let vocab = model::testing::tiny_vocab_size() as u64;
    let rule: Vec<u32> = (0..10u64)
        .map(|n| (3 + (5u64.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ n) % (vocab - 3)) as u32)
        .collect();
    assert_eq!(alone[0].tokens, rule);
}
