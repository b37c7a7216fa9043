//! The engine: one step = plan → forward → sample → emit. It owns the model, the KV pool, the
//! scheduler and the per-request state, and runs on its own thread (see `handle.rs`).
//!
//! Every step it also notices aborted requests and clients that went away (their event receiver
//! was dropped) and frees their tiles at once.

use std::collections::HashMap;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use model::{Batch, KvDtype, KvLayout, KvPool, LogitsWanted, ModelError, SeqChunk};
use tokenizer::Tokenizer;
use tokio::sync::mpsc::UnboundedSender;

use crate::request::{
    EngineError, Event, FinishReason, GenerateRequest, RequestState, StopCheck, TokenLogprob, Usage,
};
use crate::scheduler::{AddError, ScheduledChunk, Scheduler, SchedulerConfig, StepPlan};
use crate::sequence::{SeqId, Sequence};
use crate::stats::EngineStats;
use crate::step_cost::StepCost;

/// What the engine needs of a model: one ragged batch against the KV tiles.
pub trait Model: Send + 'static {
    fn kv_layout(&self, tile_size: usize) -> KvLayout;
    fn vocab_size(&self) -> usize;
    fn context_length(&self) -> usize;
    fn forward(
        &mut self,
        batch: &Batch,
        kv: &mut KvPool,
        logits: &mut Vec<f32>,
    ) -> Result<(), ModelError>;
    /// A pool for the engine's per-sequence work after a step (the draws), when the model has
    /// one; `None` runs that work on the engine thread.
    fn threads(&self) -> Option<&model::Threads> {
        None
    }
}

impl Model for model::Transformer {
    fn threads(&self) -> Option<&model::Threads> {
        Some(model::Transformer::threads(self))
    }
    fn kv_layout(&self, tile_size: usize) -> KvLayout {
        KvLayout::new(self.config(), tile_size)
    }
    fn vocab_size(&self) -> usize {
        self.config().vocab_size
    }
    fn context_length(&self) -> usize {
        self.config().context_length
    }
    fn forward(
        &mut self,
        batch: &Batch,
        kv: &mut KvPool,
        logits: &mut Vec<f32>,
    ) -> Result<(), ModelError> {
        model::Transformer::forward(self, batch, kv, logits)
    }
}

/// A token drawn for a sequence and its logprobs, if asked for.
type Drawn = (u32, Option<TokenLogprob>);

/// Draws the next token from `row` and, when `top` asks for them, its logprobs with the `top`
/// most likely alternatives.
fn draw(
    sampler: &mut model::Sampler,
    row: &[f32],
    top: Option<usize>,
    scratch: &mut model::SampleScratch,
) -> Drawn {
    let token = sampler.sample(row, scratch);
    let logprob = top.map(|n| {
        let (logprob, top) = model::sampler::logprobs(row, token, n);
        TokenLogprob {
            token,
            logprob,
            top,
        }
    });
    (token, logprob)
}

/// A sequence's sampler handed to the pool's threads for one step's draws.
struct SamplerPtr(*mut model::Sampler);
// SAFETY: each pointer is dereferenced by exactly one job while the engine waits in
// `Threads::run` (see `draw_in_parallel`); `Sampler` is `Send`.
unsafe impl Sync for SamplerPtr {}
unsafe impl Send for SamplerPtr {}

/// Fewest prefill tokens a decoding step may carry, whatever the measured costs. Half a tile:
/// deep into a long prompt a full tile (16) alone took a step with eight streams to ~2.7 times
/// a decode-only one, past what `--max-itl-slowdown` asks.
const PREFILL_CAP_FLOOR: usize = 8;

/// The scheduler's view of a new request (checked: the prompt is shorter than the context).
fn new_sequence(id: SeqId, req: &GenerateRequest, arrival: u64, context: usize) -> Sequence {
    let max_new = req.max_tokens.min(context - req.prompt.len());
    let mut seq = Sequence::new(id, req.prompt.clone(), max_new, req.priority, arrival);
    seq.wants_prompt_logits = req.prompt_logprobs.is_some();
    seq
}

fn add_error(e: AddError) -> EngineError {
    let msg = match e {
        AddError::TooLong { .. } => format!("prompt plus max_tokens: {e}"),
        AddError::Empty => "the prompt is empty".into(),
    };
    EngineError::InvalidRequest(msg)
}

/// Engine settings (validated by `EngineConfig::validate`).
#[derive(Clone, Debug)]
pub struct EngineConfig {
    pub tile_size: usize,
    /// Bytes of KV memory for the pool.
    pub kv_bytes: usize,
    pub max_batch_tokens: usize,
    pub max_seqs: usize,
    pub chunked_prefill: bool,
    pub prefix_caching: bool,
    /// Requests allowed to wait; beyond it submissions are refused as overloaded.
    pub max_waiting: usize,
    pub aging_steps: u64,
    /// Release sliding-window tiles no future query can see (default). Off keeps every tile,
    /// to compare against and to measure what release saves.
    pub release_window_tiles: bool,
    /// How K and V are stored in the pool.
    pub kv_dtype: KvDtype,
    /// A step that carries prefill alongside decode tokens may take about this many times a
    /// decode-only step (the prefill cap follows from measured step times, see `step_cost`);
    /// 0 turns the cap off, leaving `max_batch_tokens` as the only limit.
    pub itl_slowdown: f64,
    /// Fault the KV pool in while idle (`Engine::warm_kv`). Off leaves its pages to be faulted
    /// in as tiles are first written: for a pool larger than the memory there is to back it.
    pub warm_kv: bool,
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            tile_size: 16,
            kv_bytes: 512 << 20,
            max_batch_tokens: 512,
            max_seqs: 64,
            chunked_prefill: true,
            prefix_caching: true,
            max_waiting: 1024,
            aging_steps: 200,
            release_window_tiles: true,
            kv_dtype: KvDtype::F16,
            itl_slowdown: 1.5,
            warm_kv: true,
        }
    }
}

impl EngineConfig {
    pub fn validate(&self) -> Result<(), String> {
        if self.tile_size == 0 || self.tile_size > 1024 {
            return Err("tile size must be in 1..=1024".into());
        }
        if self.max_seqs == 0 {
            return Err("max-seqs must be at least 1".into());
        }
        if !(self.itl_slowdown == 0.0 || self.itl_slowdown >= 1.0) || !self.itl_slowdown.is_finite()
        {
            return Err("max-itl-slowdown must be 0 (off) or at least 1".into());
        }
        if self.max_batch_tokens < self.max_seqs {
            return Err(
                "max-batch-tokens must be at least max-seqs (every decoder needs a slot)".into(),
            );
        }
        Ok(())
    }
}

/// The engine proper (single-threaded; `handle.rs` puts it on a thread).
pub struct Engine<M: Model> {
    model: M,
    pool: KvPool,
    sched: Scheduler,
    tokenizer: Tokenizer,
    reqs: HashMap<SeqId, RequestState>,
    stats: Arc<EngineStats>,
    logits: Vec<f32>,
    /// The buffers of a draw (one draw at a time), reused across tokens and sequences.
    sample_scratch: model::sampler::SampleScratch,
    /// The same per pool thread, for the draws of a step run in parallel.
    draw_scratch: Vec<Mutex<model::sampler::SampleScratch>>,
    context_length: usize,
    arrivals: u64,
    cost: StepCost,
    /// Choices of an `n` > 1 request waiting for their first member's prompt, by that member.
    forks: HashMap<SeqId, Vec<SeqId>>,
    /// Whether idle turns still fault the KV pool in (`EngineConfig::warm_kv`, until done).
    warming: bool,
}

impl<M: Model> Engine<M> {
    pub fn new(
        model: M,
        tokenizer: Tokenizer,
        cfg: &EngineConfig,
        stats: Arc<EngineStats>,
    ) -> Result<Self, String> {
        let layout = model.kv_layout(cfg.tile_size).with_dtype(cfg.kv_dtype)?;
        // A pool that cannot hold one tile per group would refuse every request: say so now.
        let min_bytes = layout.groups.len() * layout.tile_bytes();
        if cfg.kv_bytes < min_bytes {
            return Err(format!(
                "KV memory of {} bytes is too small: one tile per KV group needs {min_bytes}",
                cfg.kv_bytes
            ));
        }
        let pool = KvPool::with_bytes(layout.clone(), cfg.kv_bytes);
        let sched_cfg = SchedulerConfig {
            max_batch_tokens: cfg.max_batch_tokens,
            max_seqs: cfg.max_seqs,
            chunked_prefill: cfg.chunked_prefill,
            aging_steps: cfg.aging_steps,
            release_window_tiles: cfg.release_window_tiles,
        };
        let sched = Scheduler::new(sched_cfg, &layout, pool.n_tiles(), cfg.prefix_caching);
        stats.tiles_total.store(pool.n_tiles() as u64, Relaxed);
        let context_length = model.context_length();
        Ok(Engine {
            model,
            pool,
            sched,
            tokenizer,
            reqs: HashMap::new(),
            stats,
            logits: Vec::new(),
            sample_scratch: model::sampler::SampleScratch::default(),
            draw_scratch: Vec::new(),
            context_length,
            arrivals: 0,
            cost: StepCost::new(cfg.itl_slowdown),
            forks: HashMap::new(),
            warming: cfg.warm_kv,
        })
    }

    pub fn scheduler(&self) -> &Scheduler {
        &self.sched
    }

    pub fn context_length(&self) -> usize {
        self.context_length
    }

    pub fn vocab_size(&self) -> usize {
        self.model.vocab_size()
    }

    /// Fails every request with an internal error and frees its tiles.
    pub fn fail_all(&mut self, msg: &str) {
        self.forks.clear();
        let ids: Vec<SeqId> = self.reqs.keys().copied().collect();
        for id in ids {
            self.sched.remove(id);
            if let Some(r) = self.reqs.remove(&id) {
                let _ = r
                    .events
                    .send(Event::Error(EngineError::Internal(msg.to_string())));
            }
        }
        self.publish_counts();
    }

    pub fn has_work(&self) -> bool {
        !self.sched.is_idle()
    }

    /// Idle-time work: faults in up to `bytes` more of the KV pool (`KvPool::populate`), so
    /// that serving does not pay for the kernel clearing fresh pages. True while some is left
    /// (never when `EngineConfig::warm_kv` is off).
    pub fn warm_kv(&mut self, bytes: usize) -> bool {
        self.warming = self.warming && self.pool.populate(bytes);
        self.warming
    }

    /// Whether idle turns still have KV pool to warm (`warm_kv`).
    pub fn warming(&self) -> bool {
        self.warming
    }

    /// Queues a request; refusals are sent as an `Event::Error` on its channel.
    pub fn submit(&mut self, id: SeqId, req: GenerateRequest, events: UnboundedSender<Event>) {
        self.queue(id, req, events);
        self.publish_counts();
    }

    /// `submit` without publishing the counts.
    fn queue(&mut self, id: SeqId, req: GenerateRequest, events: UnboundedSender<Event>) {
        if let Err(e) = self.check(&req) {
            let _ = events.send(Event::Error(e));
            return;
        }
        let arrival = self.next_arrival();
        let seq = new_sequence(id, &req, arrival, self.context_length);
        if let Err(e) = self.sched.add(seq) {
            let _ = events.send(Event::Error(add_error(e)));
            return;
        }
        let _ = events.send(Event::Accepted);
        let state = self.new_state(id, req, events, arrival);
        self.reqs.insert(id, state);
    }

    /// Queues the `n` choices of one prompt (the first member's prompt and prompt
    /// log-probability setting shared by all; sampling and limits may differ). The
    /// first is prefilled; the others fork from it when its prompt is computed, sharing its full
    /// tiles and a copy of the last partial one, and sample their first token from the same
    /// logits. A member that differs, or one that cannot fork then, runs as a request of its own
    /// (still adopting the prompt's full tiles from the prefix cache).
    pub fn submit_group(&mut self, members: Vec<(SeqId, GenerateRequest, UnboundedSender<Event>)>) {
        let mut members = members.into_iter();
        let Some((parent, first, events)) = members.next() else {
            return;
        };
        let key = (first.prompt.clone(), first.prompt_logprobs);
        self.queue(parent, first, events);
        let parent_queued = self.reqs.contains_key(&parent);
        for (id, req, events) in members {
            if !parent_queued || (&req.prompt, req.prompt_logprobs) != (&key.0, key.1) {
                self.queue(id, req, events);
                continue;
            }
            if let Err(e) = self.check(&req) {
                let _ = events.send(Event::Error(e));
                continue;
            }
            // Refused now if it could never fit the pool, as a request of its own would be.
            let len = req.prompt.len() + req.max_tokens.min(self.context_length - req.prompt.len());
            if let Err(e) = self.sched.check_fits(len) {
                let _ = events.send(Event::Error(add_error(e)));
                continue;
            }
            let _ = events.send(Event::Accepted);
            // The choice's place in line is its arrival, not the moment it forks.
            let arrival = self.next_arrival();
            let state = self.new_state(id, req, events, arrival);
            self.reqs.insert(id, state);
            self.forks.entry(parent).or_default().push(id);
        }
        self.publish_counts();
    }

    fn next_arrival(&mut self) -> u64 {
        self.arrivals += 1;
        self.arrivals
    }

    fn new_state(
        &self,
        id: SeqId,
        req: GenerateRequest,
        events: UnboundedSender<Event>,
        arrival: u64,
    ) -> RequestState {
        RequestState {
            arrival,
            decoder: self.tokenizer.incremental_decoder(true),
            sampler: model::Sampler::new(req.sampling.clone(), id.0),
            req,
            held: String::new(),
            stopped_by_string: false,
            events,
            arrived: Instant::now(),
            scheduled_at: None,
            first_token_at: None,
            last_token_at: None,
            prompt_logprobs: Vec::new(),
            prompt_logprobs_sent: false,
        }
    }

    /// Starts the choices waiting on `parent`, whose prompt was just computed, from the logits
    /// of its last position (`logits`).
    fn fork_children(&mut self, parent: SeqId, logits: &[f32]) {
        let Some(children) = self.forks.remove(&parent) else {
            return;
        };
        let prompt_logprobs = self
            .reqs
            .get(&parent)
            .filter(|r| r.prompt_logprobs_sent)
            .map(|r| r.prompt_logprobs.clone());
        for id in children {
            let Some(seq) = self.pending_sequence(id) else {
                continue;
            };
            match self.sched.fork(parent, seq) {
                Ok(copies) => {
                    for (src, dst) in copies {
                        self.pool.copy_tile(src, dst);
                    }
                    if let Some(r) = self.reqs.get_mut(&id) {
                        let now = Instant::now();
                        r.scheduled_at = Some(now);
                        self.stats
                            .queue_time
                            .observe((now - r.arrived).as_secs_f64());
                        if let Some(lp) = &prompt_logprobs {
                            r.prompt_logprobs = lp.clone();
                            r.prompt_logprobs_sent = true;
                            let _ = r.events.send(Event::PromptLogprobs(lp.clone()));
                        }
                    }
                    self.sample_and_emit(id, 0, logits, None);
                }
                Err(seq) => self.enqueue(*seq),
            }
        }
    }

    /// The scheduler's view of a choice that waited to fork.
    fn pending_sequence(&self, id: SeqId) -> Option<Sequence> {
        let r = self.reqs.get(&id)?;
        Some(new_sequence(id, &r.req, r.arrival, self.context_length))
    }

    /// Adds a sequence whose request state exists to the scheduler (a choice that could not
    /// fork); a refusal ends the request with an error.
    fn enqueue(&mut self, seq: Sequence) {
        let id = seq.id;
        if let Err(e) = self.sched.add(seq) {
            if let Some(r) = self.reqs.remove(&id) {
                let _ = r.events.send(Event::Error(add_error(e)));
            }
        }
    }

    fn check(&self, req: &GenerateRequest) -> Result<(), EngineError> {
        let bad = |m: String| Err(EngineError::InvalidRequest(m));
        if req.prompt.is_empty() {
            return bad("the prompt is empty".into());
        }
        if let Some(t) = req
            .prompt
            .iter()
            .find(|&&t| t as usize >= self.model.vocab_size())
        {
            return bad(format!("token id {t} is outside the vocabulary"));
        }
        if req.prompt.len() >= self.context_length {
            return bad(format!(
                "the prompt has {} tokens; the context length is {}",
                req.prompt.len(),
                self.context_length
            ));
        }
        if req.max_tokens == 0 && req.prompt_logprobs.is_none() {
            return bad("max_tokens must be at least 1".into());
        }
        // An empty stop string would match before the first token and end every request.
        if req.stop_strings.iter().any(String::is_empty) {
            return bad("stop strings must not be empty".into());
        }
        req.sampling
            .validate()
            .or_else(|(field, msg)| bad(format!("{field} {msg}")))
    }

    /// Aborts a request (explicitly, or because its client went away).
    pub fn abort(&mut self, id: SeqId) {
        self.finish(id, FinishReason::Abort);
    }

    /// Aborts every request whose client dropped its receiver.
    pub fn reap_disconnected(&mut self) {
        let gone: Vec<SeqId> = self
            .reqs
            .iter()
            .filter(|(_, r)| r.events.is_closed())
            .map(|(&id, _)| id)
            .collect();
        for id in gone {
            self.abort(id);
        }
    }

    /// Runs one step. Returns the number of tokens processed (0 when idle).
    pub fn step(&mut self) -> Result<usize, ModelError> {
        // A few prefill tokens per decoding step at least (but for the occasional decode-only
        // step that measures the baseline), so a prompt always progresses.
        let cap = self.cost.cap(
            self.sched.decoders(),
            self.sched.prefill_backlog(),
            PREFILL_CAP_FLOOR,
            self.sched.max_batch_tokens(),
        );
        self.sched.set_prefill_cap(cap);
        let plan = self.sched.plan();
        self.stats
            .preemptions
            .fetch_add(plan.preempted.len() as u64, Relaxed);
        if plan.chunks.is_empty() {
            self.publish_counts();
            return Ok(0);
        }
        self.note_scheduled(&plan);
        let t0 = Instant::now();
        self.run_forward(&plan)?;
        self.postprocess(&plan);
        let secs = t0.elapsed().as_secs_f64();
        self.cost
            .observe(plan.decode_tokens(), plan.prefill_tokens(), secs);
        tracing::trace!(
            decode = plan.decode_tokens(),
            prefill = plan.prefill_tokens(),
            ms = secs * 1e3,
            cap = ?cap,
            "step"
        );
        self.stats.steps.fetch_add(1, Relaxed);
        self.stats.tokens_per_step.observe(plan.n_tokens() as f64);
        self.publish_counts();
        Ok(plan.n_tokens())
    }

    /// Records queue time for requests scheduled for the first time.
    fn note_scheduled(&mut self, plan: &StepPlan) {
        let now = Instant::now();
        for c in &plan.chunks {
            if let Some(r) = self.reqs.get_mut(&c.seq) {
                if r.scheduled_at.is_none() {
                    r.scheduled_at = Some(now);
                    self.stats
                        .queue_time
                        .observe((now - r.arrived).as_secs_f64());
                }
            }
        }
    }

    fn run_forward(&mut self, plan: &StepPlan) -> Result<(), ModelError> {
        let mut tokens = Vec::with_capacity(plan.n_tokens());
        let mut chunks = Vec::with_capacity(plan.chunks.len());
        for c in &plan.chunks {
            let s = self
                .sched
                .get(c.seq)
                .expect("planned sequence exists: this is a bug");
            chunks.push(SeqChunk {
                start_pos: c.start,
                first_token: tokens.len(),
                len: c.len,
                tile_tables: self
                    .sched
                    .tile_tables(c.seq)
                    .expect("planned sequence exists: this is a bug"),
                logits: c.logits,
            });
            tokens.extend_from_slice(&s.tokens[c.start..c.start + c.len]);
        }
        let batch = Batch {
            tokens: &tokens,
            seqs: &chunks,
        };
        self.model.forward(&batch, &mut self.pool, &mut self.logits)
    }

    /// Samples, commits, and emits events for every chunk of the step.
    fn postprocess(&mut self, plan: &StepPlan) {
        let vocab = self.model.vocab_size();
        let mut row = 0;
        let logits = std::mem::take(&mut self.logits);
        let mut drawn = self.draw_in_parallel(plan, &logits);
        for (ci, c) in plan.chunks.iter().enumerate() {
            let n_rows = c.logits.rows(c.len);
            let rows = &logits[row * vocab..(row + n_rows) * vocab];
            row += n_rows;
            if self.sched.get(c.seq).is_none() {
                continue;
            }
            if c.logits == LogitsWanted::All {
                self.collect_prompt_logprobs(c.seq, c.start, c.len, rows);
            }
            if !self.completes(c) || n_rows == 0 {
                self.sched.commit(c.seq, c.len, None);
                continue;
            }
            let last = &rows[(n_rows - 1) * vocab..n_rows * vocab];
            if self.forks.contains_key(&c.seq) {
                // The prompt of an `n` > 1 request is computed: fork its other choices first.
                self.sched.commit(c.seq, c.len, None);
                self.fork_children(c.seq, last);
                self.sample_and_emit(c.seq, 0, last, None);
                continue;
            }
            let pre = drawn.get_mut(ci).and_then(Option::take);
            self.sample_and_emit(c.seq, c.len, last, pre);
        }
        self.logits = logits;
    }

    /// Whether chunk `c` computes its sequence's last known token, so the step draws the next
    /// one (a prompt's last chunk, or a decode); false for a sequence gone since the plan.
    fn completes(&self, c: &ScheduledChunk) -> bool {
        self.sched
            .get(c.seq)
            .is_some_and(|seq| c.start + c.len == seq.tokens.len())
    }

    /// Draws the next token (and its logprobs) of every chunk that completes its sequence's
    /// tokens this step, on the model's pool when it has one and there are two draws or more:
    /// each sequence has its own sampler, so the draws are independent and the same as one by
    /// one. Chunks of a request about to fork draw later, on this thread (`None` here).
    fn draw_in_parallel(&mut self, plan: &StepPlan, logits: &[f32]) -> Vec<Option<Drawn>> {
        let vocab = self.model.vocab_size();
        let mut out: Vec<Option<Drawn>> = vec![None; plan.chunks.len()];
        let Some(threads) = self.model.threads() else {
            return out;
        };
        // (chunk index, sampler, logits row, top logprobs wanted)
        let mut jobs: Vec<(usize, SamplerPtr, std::ops::Range<usize>, Option<usize>)> = Vec::new();
        let mut row = 0;
        for (ci, c) in plan.chunks.iter().enumerate() {
            let n_rows = c.logits.rows(c.len);
            row += n_rows;
            if n_rows == 0 || !self.completes(c) || self.forks.contains_key(&c.seq) {
                continue;
            }
            let Some(r) = self.reqs.get_mut(&c.seq) else {
                continue;
            };
            if r.req.max_tokens == 0 {
                continue;
            }
            let range = (row - 1) * vocab..row * vocab;
            jobs.push((ci, SamplerPtr(&mut r.sampler), range, r.req.logprobs));
        }
        if jobs.len() < 2 || threads.n() < 2 {
            return out;
        }
        while self.draw_scratch.len() < threads.n() {
            self.draw_scratch.push(Mutex::new(Default::default()));
        }
        let results: Vec<Mutex<Option<Drawn>>> = jobs.iter().map(|_| Mutex::new(None)).collect();
        let next = std::sync::atomic::AtomicUsize::new(0);
        let scratch = &self.draw_scratch;
        threads.run(&|t| {
            let mut s = scratch[t].lock().unwrap_or_else(|e| e.into_inner());
            loop {
                let i = next.fetch_add(1, Relaxed);
                let Some((_, sampler, range, top)) = jobs.get(i) else {
                    break;
                };
                // SAFETY: each job's sampler belongs to a different request (only the chunk
                // that completes a sequence's tokens draws), each job index is claimed once,
                // and `self.reqs` is not touched until `run` returns.
                let sampler = unsafe { &mut *sampler.0 };
                let drawn = draw(sampler, &logits[range.clone()], *top, &mut s);
                *results[i].lock().unwrap_or_else(|e| e.into_inner()) = Some(drawn);
            }
        });
        for ((ci, ..), r) in jobs.iter().zip(results) {
            out[*ci] = r.into_inner().unwrap_or_else(|e| e.into_inner());
        }
        out
    }

    fn collect_prompt_logprobs(&mut self, id: SeqId, start: usize, len: usize, rows: &[f32]) {
        let vocab = self.model.vocab_size();
        let (Some(seq), Some(r)) = (self.sched.get(id), self.reqs.get_mut(&id)) else {
            return;
        };
        let top_n = r.req.prompt_logprobs.unwrap_or(0);
        if r.prompt_logprobs.is_empty() {
            r.prompt_logprobs.push(None);
        }
        // Row i predicts the token at position start + i + 1.
        for i in 0..len {
            let pos = start + i + 1;
            if pos >= seq.prompt_len || pos < r.prompt_logprobs.len() {
                continue;
            }
            let token = seq.tokens[pos];
            let (lp, top) =
                model::sampler::logprobs(&rows[i * vocab..(i + 1) * vocab], token, top_n);
            r.prompt_logprobs.push(Some(TokenLogprob {
                token,
                logprob: lp,
                top,
            }));
        }
        if r.prompt_logprobs.len() >= seq.prompt_len && !r.prompt_logprobs_sent {
            r.prompt_logprobs_sent = true;
            let _ = r
                .events
                .send(Event::PromptLogprobs(r.prompt_logprobs.clone()));
        }
    }

    /// `pre`: the token and logprobs already drawn for this step (`draw_in_parallel`).
    fn sample_and_emit(&mut self, id: SeqId, computed: usize, logits: &[f32], pre: Option<Drawn>) {
        let Some(seq) = self.sched.get(id) else {
            return;
        };
        let (out_len, total_len, max_total) =
            (seq.output().len(), seq.tokens.len(), seq.max_total_len);
        let Some(r) = self.reqs.get_mut(&id) else {
            return;
        };
        if r.req.max_tokens == 0 {
            // Prompt scoring only (echo with max_tokens 0).
            self.sched.commit(id, computed, None);
            self.finish(id, FinishReason::Length);
            return;
        }
        let (token, logprob) = match pre {
            Some(d) => d,
            None => draw(
                &mut r.sampler,
                logits,
                r.req.logprobs,
                &mut self.sample_scratch,
            ),
        };
        r.sampler.accept(token);
        self.sched.commit(id, computed, Some(token));
        let now = Instant::now();
        match r.last_token_at {
            None => {
                r.first_token_at = Some(now);
                self.stats.ttft.observe((now - r.arrived).as_secs_f64());
            }
            Some(t) => self.stats.itl.observe((now - t).as_secs_f64()),
        }
        r.last_token_at = Some(now);
        self.stats.generation_tokens.fetch_add(1, Relaxed);

        let is_eog = !r.req.ignore_eos && self.tokenizer.is_eog(token);
        let is_stop_id = r.req.stop_token_ids.contains(&token);
        if is_eog || is_stop_id {
            let _ = r.events.send(Event::Token {
                id: token,
                text: String::new(),
                logprob,
            });
            self.finish(id, FinishReason::Stop);
            return;
        }
        let delta = r.decoder.push(token);
        match r.filter_stop(&delta) {
            StopCheck::Stop(text) => {
                let _ = r.events.send(Event::Token {
                    id: token,
                    text,
                    logprob,
                });
                self.finish(id, FinishReason::Stop);
            }
            StopCheck::Emit(text) => {
                let _ = r.events.send(Event::Token {
                    id: token,
                    text,
                    logprob,
                });
                if out_len + 1 >= r.req.max_tokens || total_len + 1 >= max_total {
                    self.finish(id, FinishReason::Length);
                }
            }
        }
    }

    /// Ends a request: frees its tiles now and sends its last event.
    fn finish(&mut self, id: SeqId, reason: FinishReason) {
        let seq = self.sched.remove(id);
        // A choice still waiting to fork leaves its group; the choices waiting on a first
        // member that ends before its prompt is computed run as requests of their own.
        self.forks.values_mut().for_each(|c| c.retain(|&c| c != id));
        if let Some(children) = self.forks.remove(&id) {
            for child in children {
                if let Some(seq) = self.pending_sequence(child) {
                    self.enqueue(seq);
                }
            }
        }
        let Some(mut r) = self.reqs.remove(&id) else {
            return;
        };
        let (prompt_tokens, completion_tokens, cached_tokens) =
            seq.as_ref().map_or((0, 0, 0), |s| {
                (s.prompt_len, s.output().len(), s.cached_prompt_tokens)
            });
        // A forked choice's prompt was never looked up in the prefix cache.
        let queried = if seq.as_ref().is_some_and(|s| s.forked) {
            0
        } else {
            prompt_tokens
        };
        // What is left to send: the held-back text and any bytes the decoder still holds, cut
        // at a stop string they complete. Nothing after a stop string, nothing on abort.
        let mut text = String::new();
        if reason != FinishReason::Abort && !r.stopped_by_string {
            let tail = r.decoder.flush();
            text = match r.filter_stop(&tail) {
                StopCheck::Stop(t) => t,
                StopCheck::Emit(t) => t + &std::mem::take(&mut r.held),
            };
        }
        let usage = Usage {
            prompt_tokens,
            completion_tokens,
            cached_tokens,
        };
        let st = &self.stats;
        st.prompt_tokens.fetch_add(prompt_tokens as u64, Relaxed);
        st.prefix_queried_tokens.fetch_add(queried as u64, Relaxed);
        st.prefix_hit_tokens
            .fetch_add(cached_tokens.min(queried) as u64, Relaxed);
        match reason {
            FinishReason::Stop => st.finished_stop.fetch_add(1, Relaxed),
            FinishReason::Length => st.finished_length.fetch_add(1, Relaxed),
            FinishReason::Abort => st.finished_abort.fetch_add(1, Relaxed),
        };
        st.e2e.observe(r.arrived.elapsed().as_secs_f64());
        let _ = r.events.send(Event::Finished {
            reason,
            text,
            usage,
        });
        self.publish_counts();
    }

    /// Aborts everything (shutdown), freeing all tiles.
    pub fn abort_all(&mut self) {
        let ids: Vec<SeqId> = self.reqs.keys().copied().collect();
        for id in ids {
            self.abort(id);
        }
    }

    fn publish_counts(&self) {
        let c = self.sched.tile_counts();
        let st = &self.stats;
        st.running.store(self.sched.num_running() as u64, Relaxed);
        let forking: usize = self.forks.values().map(Vec::len).sum();
        st.waiting
            .store((self.sched.num_waiting() + forking) as u64, Relaxed);
        st.tiles_in_use.store(c.in_use as u64, Relaxed);
        st.tiles_cached.store(c.cached as u64, Relaxed);
    }
}
