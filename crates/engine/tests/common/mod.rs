//! Shared helpers of the engine's integration tests: a fake model whose outputs depend on the
//! whole context *as read back from the KV pool*, a small real tokenizer, and a harness that
//! steps an `Engine` while checking the tile invariants after every step.
//!
//! The fake model writes each token's id and position into its K row of every group, and makes
//! the logits of a position a hash of every K row that position can see (its window, on a
//! windowed group). So a wrong tile table, a tile shared by mistake, a stale or overwritten tile
//! or a released tile still in view changes the generated tokens (or fails the forward pass),
//! while a correct engine gives the same tokens however it batches, chunks or preempts.
#![allow(dead_code)]

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::sync::Arc;

use engine::{
    kv_pool, Engine, EngineConfig, EngineError, EngineStats, Event, FinishReason, GenerateRequest,
    IntoRunner, KvSpec, Runner, RunnerFacts, SeqId, StartError, Usage,
};
use model::kv::{KvDtype, KvGroup};
use model::{Batch, KvLayout, KvPool, LogitsWanted, RunError, TileId, Tokenizer};
use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver};

/// The default model for end-to-end tests: see `test_support` (a missing model fails with
/// instructions, never a silent pass).
#[allow(unused_imports)] // each test binary uses its own part
pub use test_support::default_model_path;
/// The randomized tests' seeded generator.
#[allow(unused_imports)] // each test binary uses its own part
pub use test_support::SplitMix64;

/// The tokenizer of model's tiny test vocabulary (SentencePiece, 315 tokens, `</s>` = 2).
pub fn tiny_tokenizer() -> Tokenizer {
    let bytes = model::testing::tiny_model_gguf("llama", model::testing::TINY_SEED);
    let parsed = gguf::parse(&bytes).expect("tiny model parses");
    Tokenizer::from_metadata(&parsed.metadata).expect("tiny vocabulary builds")
}

pub const FAKE_KV_DIM: usize = 2;

/// See the module header.
pub struct FakeModel {
    pub vocab: usize,
    pub context: usize,
    /// Window of the windowed groups; `None` makes every group global.
    pub window: Option<usize>,
    /// Windowed groups (after the one global group).
    pub n_windowed: usize,
    /// "After token a comes token b": forces b as the greedy choice after a.
    pub next_of: HashMap<u32, u32>,
    /// Time each forward pass takes (for tests that watch the engine thread run).
    pub delay: std::time::Duration,
    /// More time per token of the batch (for tests that need prefill to cost per token).
    pub per_token: std::time::Duration,
    /// Tokens run through the model so far (shared with the test).
    pub tokens_run: Arc<AtomicUsize>,
    /// A pool of two, so every engine test draws its sequences' tokens in parallel as the real
    /// model's engine does.
    pub pool: model::Threads,
    /// Faults to inject: a forward pass over this token panics; idle work panics.
    pub panic_on_token: Option<u32>,
    pub panic_when_idle: bool,
}

impl FakeModel {
    pub fn new(window: Option<usize>) -> FakeModel {
        FakeModel {
            vocab: model::testing::tiny_vocab_size(),
            context: 256,
            window,
            n_windowed: 2,
            next_of: HashMap::new(),
            delay: std::time::Duration::ZERO,
            per_token: std::time::Duration::ZERO,
            tokens_run: Arc::new(AtomicUsize::new(0)),
            pool: model::Threads::new(2),
            panic_on_token: None,
            panic_when_idle: false,
        }
    }
}

fn mix(z: u64) -> u64 {
    SplitMix64::mix(z)
}

impl FakeModel {
    fn windows(&self) -> Vec<Option<usize>> {
        let mut w = vec![None];
        w.extend(std::iter::repeat_n(self.window, self.n_windowed));
        w
    }

    /// Hash of every K row position `pos` sees, over all groups.
    fn context_hash(
        &self,
        kv: &KvPool,
        tables: &[Vec<TileId>],
        pos: usize,
    ) -> Result<u64, RunError> {
        let ts = kv.layout().tile_size;
        let mut h = 0x1234_5678u64;
        for (g, w) in self.windows().iter().enumerate() {
            let lo = w.map_or(0, |w| (pos + 1).saturating_sub(w));
            for q in lo..=pos {
                let tile = tables[g][q / ts];
                if tile == TileId::RELEASED {
                    return Err(RunError::BadBatch(format!(
                        "group {g}: position {q} is visible from {pos} but its tile was released"
                    )));
                }
                let n = q % ts + 1;
                let mut k = vec![0.0; n * FAKE_KV_DIM];
                kv.read_keys(tile, 0, n, &mut k);
                let row = &k[(n - 1) * FAKE_KV_DIM..];
                let (tok, p) = (row[0] as u64, row[1] as usize);
                if p != q % 2048 {
                    return Err(RunError::BadBatch(format!(
                        "group {g}: tile {} slot {} holds position {p}, expected {q}",
                        tile.0,
                        q % ts
                    )));
                }
                h = mix(h ^ mix(tok ^ ((g as u64) << 32) ^ ((q as u64) << 40)));
            }
        }
        Ok(h)
    }
}

/// The fake model as a runner: it owns its KV storage, a `KvPool` sized like the real one's.
pub struct FakeRunner {
    pub model: FakeModel,
    pub kv: KvPool,
    facts: RunnerFacts,
    /// Idle turns still fault the pool in, 4 KiB a turn (`KvSpec::warm`).
    warming: bool,
}

impl IntoRunner for FakeModel {
    type Runner = FakeRunner;
    fn into_runner(self, spec: &KvSpec) -> Result<FakeRunner, StartError> {
        let kv = kv_pool(self.kv_layout(spec.tile_size), spec)?;
        let facts = RunnerFacts {
            layout: kv.layout().clone(),
            n_tiles: kv.n_tiles(),
            vocab_size: self.vocab,
            context_length: self.context,
            embedding: None,
        };
        Ok(FakeRunner {
            model: self,
            kv,
            facts,
            warming: spec.warm,
        })
    }
}

impl Runner for FakeRunner {
    fn facts(&self) -> &RunnerFacts {
        &self.facts
    }

    fn execute(&mut self, batch: &Batch, logits: &mut Vec<f32>) -> Result<(), RunError> {
        self.model.forward(batch, &mut self.kv, logits)
    }

    fn copy_tiles(&mut self, pairs: &[(TileId, TileId)]) {
        for &(src, dst) in pairs {
            self.kv.copy_tile(src, dst);
        }
    }

    fn export_tile(&self, tile: TileId, out: &mut Vec<u8>) {
        self.kv.export_tile(tile, out);
    }

    fn import_tile(&mut self, tile: TileId, bytes: &[u8]) -> Result<(), RunError> {
        Ok(self.kv.import_tile(tile, bytes)?)
    }

    fn idle(&mut self) -> bool {
        assert!(
            !self.model.panic_when_idle,
            "injected fault: idle work panics"
        );
        self.warming = self.warming && self.kv.populate(1 << 12);
        self.warming
    }

    fn parallel(&self, n: usize, job: &(dyn Fn(usize, usize) + Sync)) {
        engine::cpu_runner::parallel_on(&self.model.pool, n, job);
    }

    fn workers(&self) -> usize {
        self.model.pool.n()
    }
}

impl FakeModel {
    pub fn kv_layout(&self, tile_size: usize) -> KvLayout {
        let groups: Vec<KvGroup> = self
            .windows()
            .into_iter()
            .enumerate()
            .map(|(i, window)| KvGroup {
                layers: vec![i],
                window,
            })
            .collect();
        KvLayout {
            tile_size,
            kv_dim: FAKE_KV_DIM,
            layer_slot: (0..groups.len()).map(|i| (i, 0)).collect(),
            groups,
            dtype: KvDtype::F16,
        }
    }

    fn forward(
        &mut self,
        batch: &Batch,
        kv: &mut KvPool,
        logits: &mut Vec<f32>,
    ) -> Result<(), RunError> {
        let ts = kv.layout().tile_size;
        std::thread::sleep(self.delay + self.per_token * batch.tokens.len() as u32);
        if let Some(t) = self.panic_on_token {
            assert!(
                !batch.tokens.contains(&t),
                "injected fault: token {t} in a batch"
            );
        }
        self.tokens_run.fetch_add(batch.tokens.len(), Relaxed);
        logits.clear();
        for s in batch.seqs {
            for t in 0..s.len {
                let pos = s.start_pos + t;
                let tok = batch.tokens[s.first_token + t];
                let row = [tok as f32, (pos % 2048) as f32];
                for table in s.tile_tables {
                    let tile = table[pos / ts];
                    if tile == TileId::RELEASED {
                        return Err(RunError::BadBatch("writing a released tile".into()));
                    }
                    kv.store(tile, 0, pos % ts, &row, &row);
                }
            }
            for t in 0..s.len {
                let wanted = match s.logits {
                    LogitsWanted::None => false,
                    LogitsWanted::Last => t + 1 == s.len,
                    LogitsWanted::All => true,
                };
                if !wanted {
                    continue;
                }
                let pos = s.start_pos + t;
                let h = self.context_hash(kv, s.tile_tables, pos)?;
                let start = logits.len();
                logits.extend((0..self.vocab as u64).map(|j| {
                    let r = mix(h ^ j.wrapping_mul(0xA24B_AED4_963E_E407));
                    (r >> 40) as f32 / (1u64 << 24) as f32 * 8.0 - 4.0
                }));
                let tok = batch.tokens[s.first_token + t];
                if let Some(&b) = self.next_of.get(&tok) {
                    logits[start + b as usize] = 100.0;
                }
            }
        }
        Ok(())
    }
}

/// Engine settings for the fake model: `n_tiles` tiles of `tile_size` tokens.
pub fn fake_config(model: &FakeModel, tile_size: usize, n_tiles: usize) -> EngineConfig {
    let layout = model.kv_layout(tile_size);
    EngineConfig {
        tile_size,
        kv_bytes: n_tiles * layout.tile_bytes(),
        max_batch_tokens: 64,
        max_seqs: 4,
        // Step composition must not depend on timing here (tests/prefill_cap.rs covers the cap).
        itl_slowdown: 0.0,
        ..EngineConfig::default()
    }
}

/// Everything one request got back.
#[derive(Clone, Debug, Default)]
pub struct Outcome {
    pub tokens: Vec<u32>,
    pub text: String,
    pub finish: Option<(FinishReason, Usage)>,
    pub error: Option<EngineError>,
    /// Events received after the last one (must stay 0).
    pub late_events: usize,
    pub prompt_logprobs: Option<Vec<Option<engine::TokenLogprob>>>,
    /// Log-probability events of generated tokens.
    pub logprobs: Vec<Option<engine::TokenLogprob>>,
    /// `Event::Accepted` came (first, once).
    pub accepted: bool,
}

/// Steps an engine, collecting every request's events and checking the tile invariants after
/// every step.
pub struct Harness<M: IntoRunner> {
    pub engine: Engine<M::Runner>,
    pub stats: Arc<EngineStats>,
    rx: HashMap<SeqId, UnboundedReceiver<Event>>,
    pub out: HashMap<SeqId, Outcome>,
    next: u64,
    pub steps: usize,
    /// Most tiles in use after any step.
    pub peak_in_use: usize,
}

impl<M: IntoRunner> Harness<M> {
    pub fn new(model: M, tokenizer: Tokenizer, cfg: &EngineConfig) -> Self {
        cfg.validate().expect("test config is valid");
        let stats = Arc::new(EngineStats::default());
        let runner = model.into_runner(&cfg.kv_spec()).expect("runner starts");
        Harness {
            engine: Engine::new(runner, tokenizer, cfg, stats.clone()).expect("engine starts"),
            stats,
            rx: HashMap::new(),
            out: HashMap::new(),
            next: 1,
            steps: 0,
            peak_in_use: 0,
        }
    }

    pub fn submit(&mut self, req: GenerateRequest) -> SeqId {
        let id = SeqId(self.next);
        self.next += 1;
        let (tx, rx) = unbounded_channel();
        self.engine.submit(id, req, tx);
        self.rx.insert(id, rx);
        self.out.insert(id, Outcome::default());
        self.drain();
        id
    }

    /// Submits the choices of one prompt as a group (see `Engine::submit_group`).
    pub fn submit_group(&mut self, reqs: Vec<GenerateRequest>) -> Vec<SeqId> {
        let mut members = Vec::new();
        for req in reqs {
            let id = SeqId(self.next);
            self.next += 1;
            let (tx, rx) = unbounded_channel();
            members.push((id, req, tx));
            self.rx.insert(id, rx);
            self.out.insert(id, Outcome::default());
        }
        let ids = members.iter().map(|m| m.0).collect();
        self.engine.submit_group(members);
        self.drain();
        ids
    }

    /// Drops a request's receiver, as a client that goes away does.
    pub fn disconnect(&mut self, id: SeqId) {
        self.rx.remove(&id);
    }

    pub fn drain(&mut self) {
        for (id, rx) in self.rx.iter_mut() {
            let o = self.out.get_mut(id).expect("outcome exists");
            while let Ok(ev) = rx.try_recv() {
                if o.finish.is_some() || o.error.is_some() {
                    o.late_events += 1;
                }
                match ev {
                    Event::Accepted => {
                        assert!(
                            !o.accepted && o.tokens.is_empty() && o.finish.is_none(),
                            "Accepted must come first, once"
                        );
                        o.accepted = true;
                    }
                    Event::Token { id, text, logprob } => {
                        assert!(o.accepted, "a token before Accepted");
                        o.tokens.push(id);
                        o.text.push_str(&text);
                        o.logprobs.push(logprob);
                    }
                    Event::Finished {
                        reason,
                        text,
                        usage,
                    } => {
                        assert!(o.accepted, "Finished without Accepted");
                        o.text.push_str(&text);
                        o.finish = Some((reason, usage));
                    }
                    Event::Error(e) => o.error = Some(e),
                    Event::PromptLogprobs(lp) => {
                        assert!(o.prompt_logprobs.is_none(), "prompt logprobs sent twice");
                        o.prompt_logprobs = Some(lp);
                    }
                }
            }
        }
    }

    pub fn is_done(&self, id: SeqId) -> bool {
        let o = &self.out[&id];
        o.finish.is_some() || o.error.is_some()
    }

    /// One engine step as the engine thread runs it, then the invariant checks.
    pub fn step(&mut self) -> usize {
        self.engine.reap_disconnected();
        let n = self.engine.step().expect("forward pass succeeds");
        self.steps += 1;
        self.drain();
        let sched = self.engine.scheduler();
        sched.check_invariants().expect("tile invariants hold");
        let c = sched.tile_counts();
        assert_eq!(c.total, c.free + c.cached + c.in_use);
        self.peak_in_use = self.peak_in_use.max(c.in_use);
        n
    }

    /// Steps until no request is left (with a bound, so a livelock fails instead of hanging).
    pub fn run(&mut self) {
        let mut guard = 0;
        while self.engine.has_work() {
            self.step();
            guard += 1;
            assert!(guard < 100_000, "engine did not finish its work");
        }
        assert_eq!(self.engine.scheduler().tile_counts().in_use, 0);
    }

    pub fn outcome(&self, id: SeqId) -> &Outcome {
        &self.out[&id]
    }
}

/// A greedy request for `max_tokens` tokens that ignores end-of-generation tokens.
pub fn greedy(prompt: Vec<u32>, max_tokens: usize) -> GenerateRequest {
    GenerateRequest {
        prompt,
        max_tokens,
        ignore_eos: true,
        ..GenerateRequest::default()
    }
}

/// `n` deterministic pseudo-random token ids above the control tokens (3..vocab).
pub fn prompt(seed: u64, n: usize) -> Vec<u32> {
    let vocab = model::testing::tiny_vocab_size() as u64;
    (0..n as u64)
        .map(|i| (3 + mix(seed.wrapping_mul(1000).wrapping_add(i)) % (vocab - 3)) as u32)
        .collect()
}

/// Runs each request alone in a fresh, roomy engine and returns its tokens.
pub fn solo(model: impl Fn() -> FakeModel, tile_size: usize, req: &GenerateRequest) -> Outcome {
    let m = model();
    let cfg = fake_config(&m, tile_size, 4096);
    let mut h = Harness::new(m, tiny_tokenizer(), &cfg);
    let id = h.submit(req.clone());
    h.run();
    h.outcome(id).clone()
}

/// Runs `reqs` to the end on `h`.
pub fn drive<M: IntoRunner>(h: &mut Harness<M>, reqs: &[engine::GenerateRequest]) -> Vec<Outcome> {
    let ids: Vec<_> = reqs.iter().map(|r| h.submit(r.clone())).collect();
    let t0 = std::time::Instant::now();
    while h.engine.has_work() {
        h.step();
        assert!(
            t0.elapsed() < std::time::Duration::from_secs(60),
            "engine did not finish"
        );
    }
    ids.iter().map(|id| h.outcome(*id).clone()).collect()
}
