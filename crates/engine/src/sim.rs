//! Open-loop traffic played through the real engine and scheduler on a modelled clock.
//!
//! `SimRunner` computes nothing: each batch advances a `ManualClock` by what a step of that
//! many rows costs under a `StepModel` (fitted to a real model on a real CPU), and its logit
//! rows pick a fixed token. `simulate` submits requests at their arrival times on that clock,
//! steps the engine, and times every token as a client would see it. The scheduler, the step
//! costs it measures, the latency targets and every policy run exactly as in `tessera serve`;
//! only the forward pass is replaced. So a policy's TTFT and TPOT under a whole workload come
//! out in a moment, the same on every machine and however loaded it is: what the goodput
//! tests and `examples/goodput_sim.rs` use to compare scheduling policies.

use std::sync::Arc;
use std::time::Duration;

use model::kv::KvDtype;
use model::{Batch, LogitsWanted, RunError, TileId};
use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver};

use crate::clock::ManualClock;
use crate::config::EngineConfig;
use crate::engine::Engine;
use crate::error::StartError;
use crate::request::{Event, GenerateRequest};
use crate::runner::{minimal_layout, IntoRunner, KvSpec, Runner, RunnerFacts};
use crate::stats::EngineStats;
use crate::SeqId;

/// Seconds a step of `rows` batch rows takes: `fixed` (the weights read once), then
/// `per_row_small` per row up to `knee` rows (rows ride nearly free while the step waits on
/// memory) and `per_row_large` per row past it (compute-bound).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct StepModel {
    pub fixed: f64,
    pub knee: usize,
    pub per_row_small: f64,
    pub per_row_large: f64,
}

impl StepModel {
    pub fn secs(&self, rows: usize) -> f64 {
        let small = rows.min(self.knee) as f64;
        let large = rows.saturating_sub(self.knee) as f64;
        self.fixed + small * self.per_row_small + large * self.per_row_large
    }
}

/// One request of a workload.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SimRequest {
    /// Seconds from the start.
    pub arrival: f64,
    pub prompt_tokens: usize,
    pub output_tokens: usize,
}

/// What its client saw.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SimOutcome {
    /// Arrival to first token, seconds.
    pub ttft: f64,
    /// Average gap after the first token, seconds (0 for a single token).
    pub tpot: f64,
    pub tokens: usize,
}

impl SimOutcome {
    /// Whether it met both targets (seconds).
    pub fn meets(&self, ttft: f64, tpot: f64) -> bool {
        self.ttft <= ttft && self.tpot <= tpot
    }
}

/// A runner that models its step times (see the module header).
pub struct SimRunner {
    facts: RunnerFacts,
    clock: Arc<ManualClock>,
    model: StepModel,
    /// The token every logit row picks.
    token: u32,
}

/// Builds a `SimRunner` with a one-group KV layout over the spec's bytes.
pub struct SimModel {
    pub clock: Arc<ManualClock>,
    pub model: StepModel,
    pub vocab: usize,
    pub context: usize,
    pub token: u32,
}

impl IntoRunner for SimModel {
    type Runner = SimRunner;
    fn into_runner(self, spec: &KvSpec) -> Result<SimRunner, StartError> {
        let layout = minimal_layout(spec.tile_size, KvDtype::F16);
        // The tiny KV rows make the spec's bytes far more tiles than a real model gets; a pool
        // of 8192 tiles holds the workloads it plays.
        let n_tiles = (spec.bytes / layout.tile_bytes().max(1)).min(8192);
        Ok(SimRunner {
            facts: RunnerFacts {
                layout,
                n_tiles,
                vocab_size: self.vocab,
                context_length: self.context,
                embedding: None,
            },
            clock: self.clock,
            model: self.model,
            token: self.token,
        })
    }
}

impl Runner for SimRunner {
    fn facts(&self) -> &RunnerFacts {
        &self.facts
    }

    fn execute(&mut self, batch: &Batch, logits: &mut Vec<f32>) -> Result<(), RunError> {
        let secs = self.model.secs(batch.tokens.len());
        self.clock.advance(Duration::from_secs_f64(secs.max(0.0)));
        let rows: usize = batch
            .seqs
            .iter()
            .map(|s| match s.logits {
                LogitsWanted::None => 0,
                LogitsWanted::Last => 1,
                LogitsWanted::All => s.len,
            })
            .sum();
        let vocab = self.facts.vocab_size;
        logits.clear();
        logits.resize(rows * vocab, 0.0);
        for row in logits.chunks_mut(vocab) {
            row[self.token as usize] = 1.0;
        }
        Ok(())
    }

    fn copy_tiles(&mut self, _pairs: &[(TileId, TileId)]) {}

    fn export_tile(&self, _tile: TileId, out: &mut Vec<u8>) {
        out.clear();
    }

    fn import_tile(&mut self, _tile: TileId, _bytes: &[u8]) -> Result<(), RunError> {
        Ok(())
    }
}

/// A seeded SplitMix64 step (for prompts and arrivals).
fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Uniform in [0, 1) from `(seed, i)`.
fn unit(seed: u64, i: u64) -> f64 {
    (mix(seed ^ mix(i)) >> 11) as f64 / (1u64 << 53) as f64
}

/// `n` requests arriving as a Poisson process of `rate` per second, prompts drawn uniformly
/// from `prompts` (inclusive), `output` tokens each.
pub fn poisson(
    seed: u64,
    rate: f64,
    n: usize,
    prompts: (usize, usize),
    output: usize,
) -> Vec<SimRequest> {
    let span = (prompts.1 - prompts.0 + 1) as f64;
    poisson_with(seed, rate, n, |i| {
        let p = prompts.0 + (unit(seed, 2 * i + 1) * span) as usize;
        (p.min(prompts.1), output)
    })
}

/// `n` requests arriving as a Poisson process of `rate` per second, request `i`'s (prompt,
/// output) lengths `lengths(i)` (say `tessera bench`'s `Workload::spec`, so that a simulation
/// plays the bench's lengths).
pub fn poisson_with(
    seed: u64,
    rate: f64,
    n: usize,
    lengths: impl Fn(u64) -> (usize, usize),
) -> Vec<SimRequest> {
    let mut t = 0.0;
    (0..n as u64)
        .map(|i| {
            t += -(1.0 - unit(seed, 2 * i)).ln() / rate;
            let (prompt_tokens, output_tokens) = lengths(i);
            SimRequest {
                arrival: t,
                prompt_tokens,
                output_tokens,
            }
        })
        .collect()
}

/// A request being played: its arrival, receiver and token times.
struct Live {
    arrival: f64,
    rx: UnboundedReceiver<Event>,
    first: Option<f64>,
    last: f64,
    tokens: usize,
}

/// Plays `reqs` (in arrival order) through an engine with `cfg` whose steps cost what
/// `model` says; returns what each request's client saw, in the same order. Errors if the
/// engine cannot start or a request fails.
pub fn simulate(
    cfg: &EngineConfig,
    model: StepModel,
    reqs: &[SimRequest],
) -> Result<Vec<SimOutcome>, String> {
    let clock = Arc::new(ManualClock::new());
    let bytes = model::testing::tiny_model_gguf("llama", model::testing::TINY_SEED);
    let parsed = gguf::parse(&bytes).map_err(|e| e.to_string())?;
    let tokenizer =
        tokenizer::Tokenizer::from_metadata(&parsed.metadata).map_err(|e| e.to_string())?;
    let vocab = model::testing::tiny_vocab_size();
    let sim = SimModel {
        clock: clock.clone(),
        model,
        vocab,
        context: 1 << 16,
        token: 10,
    };
    let runner = sim.into_runner(&cfg.kv_spec()).map_err(|e| e.to_string())?;
    let mut engine = Engine::new(runner, tokenizer, cfg, Arc::new(EngineStats::default()))
        .map_err(|e| e.to_string())?;
    engine.set_clock(clock.clone());
    let mut live: Vec<Live> = Vec::with_capacity(reqs.len());
    let mut done: Vec<Option<SimOutcome>> = vec![None; reqs.len()];
    let now = |c: &ManualClock| c.elapsed().as_secs_f64();
    while done.iter().any(Option::is_none) {
        while live.len() < reqs.len() && reqs[live.len()].arrival <= now(&clock) {
            let r = reqs[live.len()];
            let (tx, rx) = unbounded_channel();
            let prompt = (0..r.prompt_tokens as u64)
                .map(|i| 3 + (mix(live.len() as u64 * 1_000_003 + i) % (vocab as u64 - 3)) as u32)
                .collect();
            let req = GenerateRequest {
                prompt,
                max_tokens: r.output_tokens,
                ignore_eos: true,
                ..GenerateRequest::default()
            };
            engine.submit(SeqId(live.len() as u64), req, tx);
            live.push(Live {
                arrival: r.arrival,
                rx,
                first: None,
                last: 0.0,
                tokens: 0,
            });
        }
        if !engine.has_work() {
            match reqs.get(live.len()) {
                Some(next) => {
                    // Rounded up to the nanosecond, or the clock could stop just short of it.
                    let wait = (next.arrival - now(&clock)).max(0.0);
                    clock.advance(Duration::from_secs_f64(wait) + Duration::from_nanos(1));
                    continue;
                }
                None => break,
            }
        }
        if engine.step().map_err(|e| e.to_string())? == 0 {
            // Nothing could run (nothing does here, but never spin): let time pass.
            clock.advance(Duration::from_millis(1));
        }
        let t = now(&clock);
        for (i, l) in live.iter_mut().enumerate() {
            while let Ok(ev) = l.rx.try_recv() {
                match ev {
                    Event::Token { .. } => {
                        l.first.get_or_insert(t);
                        l.last = t;
                        l.tokens += 1;
                    }
                    Event::Finished { .. } => {
                        let first = l.first.unwrap_or(t);
                        let gaps = l.tokens.saturating_sub(1).max(1) as f64;
                        done[i] = Some(SimOutcome {
                            ttft: first - l.arrival,
                            tpot: (l.last - first) / gaps,
                            tokens: l.tokens,
                        });
                    }
                    Event::Error(e) => return Err(format!("request {i}: {e}")),
                    Event::Accepted | Event::PromptLogprobs(_) => {}
                }
            }
        }
    }
    done.into_iter()
        .enumerate()
        .map(|(i, o)| o.ok_or_else(|| format!("request {i} never finished")))
        .collect()
}

/// Share of `outcomes` that met both targets (seconds).
pub fn attainment(outcomes: &[SimOutcome], ttft: f64, tpot: f64) -> f64 {
    if outcomes.is_empty() {
        return 0.0;
    }
    let good = outcomes.iter().filter(|o| o.meets(ttft, tpot)).count();
    good as f64 / outcomes.len() as f64
}

/// The `q` quantile (0..=1) of `xs` (nearest rank).
pub fn quantile(xs: impl IntoIterator<Item = f64>, q: f64) -> f64 {
    let mut v: Vec<f64> = xs.into_iter().collect();
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    let k = ((q * v.len() as f64).ceil() as usize).clamp(1, v.len());
    v[k - 1]
}
