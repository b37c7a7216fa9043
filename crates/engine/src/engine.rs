//! The engine: one step = plan → execute → draw → emit. It owns the runner (which owns the KV
//! storage), the scheduler and the per-request state, and runs on its own thread (see
//! `handle.rs`).
//!
//! This file is the request lifecycle: submission and validation, the step's phases in order,
//! and the end of a request (finish, abort, disconnect). What happens to a step's logit rows —
//! draws, drafts verified, prompt log-probabilities, forks, events — is `step.rs`.
//!
//! Every step it also notices aborted requests and clients that went away (their event receiver
//! was dropped) and frees their tiles at once.

use std::collections::HashMap;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use model::SampleScratch;
use runner::RunError;
use tokenizer::Tokenizer;
use tokio::sync::mpsc::UnboundedSender;

use crate::admission::WaitSlot;
use crate::clock::{Clock, SystemClock};
use crate::config::{EngineConfig, SpeculativeConfig};
use crate::draft_model::DraftModel;
use crate::embed::EmbedQueue;
use crate::emit::RequestState;
use crate::error::StartError;
use crate::forks::Forks;
use crate::kv_events::{KvEvent, KvEventSink, KvIndexSnapshot};
use crate::lora::LoraRegistry;
use crate::ngram::NgramDrafter;
use crate::request::{EngineError, Event, FinishReason, GenerateRequest, Timings, Usage};
use crate::runner::{EmbedFacts, KvSpec, Runner};
use crate::scheduler::{AddError, Scheduler, StepPlan};
use crate::sequence::{SeqId, Sequence};
use crate::slo::{SloTargets, Starvation};
use crate::speculate::{DraftState, Speculation};
use crate::stats::EngineStats;
use crate::step_cost::StepCost;
use crate::tiering::{self, Tiering};
use crate::tiles::PrefixKey;

/// Fewest prefill tokens a decoding step may carry, whatever the measured costs. Half a tile:
/// deep into a long prompt a full tile (16) alone took a step with eight streams to ~2.7 times
/// a decode-only one, past what `--max-itl-slowdown` asks.
const PREFILL_CAP_FLOOR: usize = 8;

/// One member of a submission: its id, request and event channel.
pub type Member = (SeqId, GenerateRequest, UnboundedSender<Event>);

/// The scheduler's view of a new request (checked: the prompt is shorter than the context).
fn new_sequence(
    id: SeqId,
    req: &GenerateRequest,
    arrival: u64,
    context: usize,
    (deadline, lora_key): (Option<Instant>, Option<PrefixKey>),
) -> Sequence {
    let max_new = req.max_tokens.min(context - req.prompt.len());
    let mut seq = Sequence::new(id, req.prompt.clone(), max_new, req.priority, arrival);
    seq.wants_prompt_logits = req.prompt_logprobs.is_some();
    seq.ttft_deadline = deadline;
    seq.lora_key = lora_key;
    seq
}

/// Runs `f`, turning a panic into `Err` (the panic message is logged by the panic hook): for
/// work done for one request, whose failure must not end the others.
pub(crate) fn contain<T>(f: impl FnOnce() -> T) -> Result<T, ()> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).map_err(|_| ())
}

/// The drafter `sp` asks for: a draft model (its runner built by the loader the binary gave,
/// its KV storage in the runner's tile size and storage type) or prompt lookup.
fn speculation(
    sp: &SpeculativeConfig,
    kv: &KvSpec,
    vocab: usize,
) -> Result<Speculation, StartError> {
    let drafter: Box<dyn crate::speculate::Drafter> = match &sp.draft_model {
        Some(dm) => {
            let kv = KvSpec {
                bytes: dm.kv_bytes,
                warm: false,
                ..*kv
            };
            let runner = dm.load.build(&kv)?;
            let n = runner.facts().vocab_size;
            if n != vocab {
                return Err(StartError::Draft(format!(
                    "{} has {n} tokens; the served model has {vocab}",
                    dm.load.name
                )));
            }
            Box::new(DraftModel::new(runner)?)
        }
        None => Box::new(NgramDrafter {
            min_n: sp.min_n,
            max_n: sp.max_n,
        }),
    };
    Ok(Speculation {
        drafter,
        max_tokens: sp.tokens,
        adaptive: true,
    })
}

fn add_error(e: AddError) -> EngineError {
    let msg = match e {
        AddError::TooLong { .. } => format!("prompt plus max_tokens: {e}"),
        AddError::Empty => "the prompt is empty".into(),
    };
    EngineError::InvalidRequest(msg)
}

/// The engine proper (single-threaded; `handle.rs` puts it on a thread).
pub struct Engine<R: Runner> {
    pub(crate) runner: R,
    pub(crate) sched: Scheduler,
    pub(crate) tokenizer: Tokenizer,
    pub(crate) reqs: HashMap<SeqId, RequestState>,
    pub(crate) stats: Arc<EngineStats>,
    /// The step's logit rows, reused.
    pub(crate) logits: Vec<f32>,
    /// The buffers of a draw, one per runner worker (index 0 also for draws on this thread).
    pub(crate) scratch: Vec<Mutex<SampleScratch>>,
    pub(crate) context_length: usize,
    pub(crate) vocab_size: usize,
    arrivals: u64,
    pub(crate) cost: StepCost,
    /// Latency targets, and the count of prefill-less steps they caused (`slo`).
    pub(crate) slo: SloTargets,
    pub(crate) starvation: Starvation,
    /// Where the time is read (`clock`).
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) forks: Forks,
    pub(crate) spec: Option<Speculation>,
    /// This step's sampled drafts and the drafter's measured cost (`speculate`).
    pub(crate) drafts: DraftState,
    /// The tokens the runner drew this step, by chunk (`device_draw`).
    pub(crate) device_tokens: Vec<Option<u32>>,
    /// KV tiers, when configured.
    pub(crate) tiers: Option<Tiering>,
    /// Whether idle turns still have work for the runner (`Runner::idle`).
    warming: bool,
    /// Where each step's prefix index changes go, when they are published.
    kv_events: Option<KvEventSink>,
    /// What the runner embeds, when it is an embedding model (`embed`); it then generates
    /// nothing.
    pub(crate) embedding: Option<EmbedFacts>,
    /// Embedding inputs waiting for a step.
    pub(crate) embeds: EmbedQueue,
    /// The LoRA adapters requests may name, and which the runner holds (`lora`).
    pub(crate) loras: LoraRegistry,
}

impl<R: Runner> Engine<R> {
    pub fn new(
        runner: R,
        tokenizer: Tokenizer,
        cfg: &EngineConfig,
        stats: Arc<EngineStats>,
    ) -> Result<Self, StartError> {
        cfg.validate()?;
        let facts = runner.facts().clone();
        let groups = facts.layout.groups.len();
        if facts.n_tiles < groups {
            return Err(StartError::TooFewTiles {
                tiles: facts.n_tiles,
                groups,
            });
        }
        let mut sched = Scheduler::new(
            cfg.scheduler(),
            &facts.layout,
            facts.n_tiles,
            cfg.prefix_caching,
        );
        let tiers = match &cfg.kv_tiers {
            Some(tc) if cfg.prefix_caching => {
                let t = Tiering::start(tc, &facts)?;
                let _ = stats.tiers.set(t.stats().clone());
                sched.kv_mut().set_tier_writes(tiering::tier_writes(tc));
                Some(t)
            }
            _ => None,
        };
        stats.tiles_total.store(facts.n_tiles as u64, Relaxed);
        if let Some(sink) = &cfg.kv_events {
            sched.kv_mut().set_events(true);
            let _ = stats.kv_events.set(sink.stats().clone());
            // Subscribers that knew an earlier pool at this endpoint start over.
            sink.send(vec![KvEvent::AllCleared]);
        }
        let spec = match &cfg.speculative {
            Some(sp) => Some(speculation(sp, &cfg.kv_spec(), facts.vocab_size)?),
            None => None,
        };
        let scratch = (0..runner.workers().max(1))
            .map(|_| Mutex::new(SampleScratch::default()))
            .collect();
        let mut runner = runner;
        let mut loras = LoraRegistry::new(cfg.max_loras);
        for (name, path) in &cfg.loras {
            let none = Default::default();
            loras
                .register(&mut runner, name, path, &none)
                .map_err(|e| StartError::Lora {
                    name: name.clone(),
                    msg: e.to_string(),
                })?;
        }
        Ok(Engine {
            runner,
            sched,
            tokenizer,
            reqs: HashMap::new(),
            stats,
            logits: Vec::new(),
            scratch,
            context_length: facts.context_length,
            vocab_size: facts.vocab_size,
            arrivals: 0,
            cost: StepCost::new(cfg.itl_slowdown),
            slo: cfg.slo,
            starvation: Starvation::default(),
            clock: Arc::new(SystemClock),
            forks: Forks::default(),
            spec,
            drafts: DraftState::default(),
            device_tokens: Vec::new(),
            tiers,
            warming: true,
            kv_events: cfg.kv_events.clone(),
            embedding: facts.embedding,
            embeds: EmbedQueue::default(),
            loras,
        })
    }

    /// Drafts for decoding sequences from now on (speculative decoding), replacing the
    /// configured drafter if any.
    pub fn set_speculation(&mut self, spec: Speculation) {
        self.spec = Some(spec);
    }

    /// Drafts the most tokens every step from now on, whatever the measured costs say (the
    /// adaptive rule reads the clock, so tests that must draft turn it off).
    pub fn set_fixed_draft_length(&mut self) {
        if let Some(spec) = &mut self.spec {
            spec.adaptive = false;
        }
    }

    /// Reads the time from `clock` from now on (a simulation's `ManualClock`). Call before
    /// submitting anything.
    pub fn set_clock(&mut self, clock: Arc<dyn Clock>) {
        self.clock = clock;
    }

    /// Computes prefix keys with `f` (see `KvManager::with_key_fn`): for tests of colliding
    /// keys. Call before submitting anything.
    #[doc(hidden)]
    pub fn set_prefix_key_fn(&mut self, f: crate::tiles::KeyFn) {
        self.sched.set_prefix_key_fn(f);
    }

    pub fn scheduler(&self) -> &Scheduler {
        &self.sched
    }

    pub fn runner(&self) -> &R {
        &self.runner
    }

    pub fn context_length(&self) -> usize {
        self.context_length
    }

    pub fn vocab_size(&self) -> usize {
        self.vocab_size
    }

    /// What the runner embeds, when the model is an embedding model.
    pub fn embedding(&self) -> Option<EmbedFacts> {
        self.embedding
    }

    /// Fails every request with an internal error and frees its tiles.
    pub fn fail_all(&mut self, msg: &str) {
        self.forks.clear();
        let ids: Vec<SeqId> = self.reqs.keys().copied().collect();
        for id in ids {
            self.fail_one(id, msg);
        }
        self.fail_embeds(EngineError::Internal(msg.to_string()));
    }

    /// Fails one request with an internal error naming it (a fault contained to it: the
    /// others go on), and frees its tiles.
    pub(crate) fn fail_one(&mut self, id: SeqId, msg: &str) {
        tracing::error!(request = id.0, "{msg}");
        self.sched.remove(id);
        self.release_draft(id);
        if let Some(t) = self.tiers.as_mut() {
            t.unpark(id);
        }
        self.leave_group(id);
        if let Some(r) = self.reqs.remove(&id) {
            let msg = format!("{msg} (request {})", id.0);
            let _ = r.events.send(Event::Error(EngineError::Internal(msg)));
        }
        self.publish_counts();
    }

    pub fn has_work(&self) -> bool {
        !self.sched.is_idle()
            || !self.embeds.is_empty()
            || self.tiers.as_ref().is_some_and(|t| t.parked() > 0)
    }

    /// One slice of the runner's idle-time work (`Runner::idle`); true while some is left.
    pub fn idle(&mut self) -> bool {
        self.warming = self.warming && self.runner.idle();
        self.warming
    }

    /// Whether idle turns still have work for the runner (`idle`).
    pub fn warming(&self) -> bool {
        self.warming
    }

    /// Queues a request; refusals are sent as an `Event::Error` on its channel.
    pub fn submit(&mut self, id: SeqId, req: GenerateRequest, events: UnboundedSender<Event>) {
        self.submit_admitted(vec![(id, req, events)], Vec::new());
    }

    /// Queues the `n` choices of one prompt (see `submit_admitted`).
    pub fn submit_group(&mut self, members: Vec<Member>) {
        self.submit_admitted(members, Vec::new());
    }

    /// Queues the `n` choices of one prompt (the first member's prompt and prompt
    /// log-probability setting shared by all; sampling and limits may differ), each with its
    /// admission slot if it has one (`slots[i]` for `members[i]`). The first is prefilled; the
    /// others fork from it when its prompt is computed, sharing its full tiles and a copy of the
    /// last partial one, and sample their first token from the same logits. A member that
    /// differs, or one that cannot fork then, runs as a request of its own (still adopting the
    /// prompt's full tiles from the prefix cache).
    pub fn submit_admitted(&mut self, members: Vec<Member>, slots: Vec<WaitSlot>) {
        let mut slots = slots.into_iter();
        let mut members = members.into_iter();
        let Some((parent, first, events)) = members.next() else {
            return;
        };
        let key = (
            first.prompt.clone(),
            first.prompt_logprobs,
            first.loras.clone(),
        );
        self.queue(parent, first, events, slots.next());
        let parent_queued = self.reqs.contains_key(&parent);
        for (id, req, events) in members {
            let slot = slots.next();
            let same = (&req.prompt, req.prompt_logprobs, &req.loras) == (&key.0, key.1, &key.2);
            if !parent_queued || !same {
                self.queue(id, req, events, slot);
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
            let adapters = self
                .reqs
                .get(&parent)
                .map(|p| (p.loras.clone(), p.lora_key));
            self.insert_state(id, req, events, arrival, slot);
            if let (Some(r), Some((loras, key))) = (self.reqs.get_mut(&id), adapters) {
                (r.loras, r.lora_key) = (loras, key);
            }
            self.forks.add(parent, id);
        }
        self.publish_counts();
    }

    fn queue(
        &mut self,
        id: SeqId,
        req: GenerateRequest,
        events: UnboundedSender<Event>,
        slot: Option<WaitSlot>,
    ) {
        if let Err(e) = self.check(&req) {
            let _ = events.send(Event::Error(e));
            return;
        }
        let in_use = self.loras_in_use();
        let (loras, lora_key) = match self.loras.resolve(&mut self.runner, &req.loras, &in_use) {
            Ok(v) => v,
            Err(e) => {
                let _ = events.send(Event::Error(e));
                return;
            }
        };
        if let (Some(key), Some(tag)) = (lora_key, self.loras.tag(&req.loras)) {
            self.tag_lora_root(key, tag);
        }
        let arrival = self.next_arrival();
        let deadline = self.slo.deadline(self.clock.now());
        let seq = new_sequence(id, &req, arrival, self.context_length, (deadline, lora_key));
        if let Err(e) = self.add_via_tiers(seq) {
            let _ = events.send(Event::Error(add_error(e)));
            return;
        }
        let _ = events.send(Event::Accepted);
        self.insert_state(id, req, events, arrival, slot);
        if let Some(r) = self.reqs.get_mut(&id) {
            (r.loras, r.lora_key) = (loras, lora_key);
        }
    }

    pub(crate) fn next_arrival(&mut self) -> u64 {
        self.arrivals += 1;
        self.arrivals
    }

    fn insert_state(
        &mut self,
        id: SeqId,
        req: GenerateRequest,
        events: UnboundedSender<Event>,
        arrival: u64,
        slot: Option<WaitSlot>,
    ) {
        let mut sampler = model::Sampler::new(req.sampling.clone(), id.0);
        if let Some(c) = &req.constraint {
            sampler.push_processor(Box::new(c.processor()));
        }
        let decoder = self.tokenizer.incremental_decoder(true);
        let arrived = self.clock.now();
        let mut state = RequestState::new(req, sampler, decoder, events, arrival, arrived);
        state.admission = slot;
        self.reqs.insert(id, state);
    }

    /// The scheduler's view of a choice that waited to fork.
    pub(crate) fn pending_sequence(&self, id: SeqId) -> Option<Sequence> {
        let r = self.reqs.get(&id)?;
        let deadline = self.slo.deadline(r.arrived);
        Some(new_sequence(
            id,
            &r.req,
            r.arrival,
            self.context_length,
            (deadline, r.lora_key),
        ))
    }

    /// `id` ends: it leaves any `n` > 1 group it waits in, and the choices waiting on it run as
    /// requests of their own.
    fn leave_group(&mut self, id: SeqId) {
        for child in self.forks.leave(id) {
            if let Some(seq) = self.pending_sequence(child) {
                self.enqueue(seq);
            }
        }
    }

    /// Adds a sequence whose request state exists to the scheduler (a choice that could not
    /// fork); a refusal ends the request with an error.
    pub(crate) fn enqueue(&mut self, seq: Sequence) {
        let id = seq.id;
        if let Err(e) = self.sched.add(seq) {
            if let Some(r) = self.reqs.remove(&id) {
                let _ = r.events.send(Event::Error(add_error(e)));
            }
        }
    }

    fn check(&self, req: &GenerateRequest) -> Result<(), EngineError> {
        let bad = |m: String| Err(EngineError::InvalidRequest(m));
        if self.embedding.is_some() {
            return bad("this model computes embeddings and generates no text: use \
                        /v1/embeddings (or /rerank on a reranker)"
                .into());
        }
        if req.prompt.is_empty() {
            return bad("the prompt is empty".into());
        }
        if let Some(t) = req.prompt.iter().find(|&&t| t as usize >= self.vocab_size) {
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
        // A complete grammar allows only end-of-generation tokens: there is nothing to go on with.
        if req.ignore_eos && req.constraint.is_some() {
            return bad("ignore_eos cannot be combined with a constrained output".into());
        }
        req.sampling
            .validate()
            .or_else(|(field, msg)| bad(format!("{field} {msg}")))
    }

    /// Aborts a request (explicitly, or because its client went away).
    pub fn abort(&mut self, id: SeqId) {
        if self.abort_embed(id) {
            self.publish_counts();
            return;
        }
        self.finish(id, FinishReason::Abort);
    }

    /// Aborts every request whose client dropped its receiver.
    pub fn reap_disconnected(&mut self) {
        let gone: Vec<SeqId> = self
            .reqs
            .iter()
            .filter(|(_, r)| r.events.is_closed())
            .map(|(&id, _)| id)
            .chain(self.embeds.disconnected())
            .collect();
        for id in gone {
            self.abort(id);
        }
    }

    /// The prefill cap of the next step if it decodes: from the streams' pace with a TPOT
    /// target (`slo`), else a few prefill tokens at least (but for the occasional decode-only
    /// step that measures the baseline), so a prompt always progresses.
    fn prefill_cap(&mut self) -> Option<usize> {
        let floor = PREFILL_CAP_FLOOR;
        let max = self.sched.max_batch_tokens();
        let Some(tpot) = self.slo.tpot else {
            let backlog = self.sched.prefill_backlog();
            return self.cost.cap(self.sched.decoders(), backlog, floor, max);
        };
        let now = self.clock.now();
        let ids = self.sched.decoding_ids();
        let backlog = self.sched.prefill_backlog();
        let paces = ids.iter().filter_map(|id| {
            let since_first = now - self.reqs.get(id)?.first_token_at?;
            let s = self.sched.get(*id)?;
            Some(crate::slo::Pace {
                sent: s.output().len().max(1),
                since_first: since_first.as_secs_f64(),
                remaining: s.max_total_len.saturating_sub(s.tokens.len()),
            })
        });
        let decode_step = self.cost.decode_step_secs();
        let Some(budget) = crate::slo::step_budget(tpot, decode_step, paces) else {
            // No stream left that a plan could keep on target (or none decodes): as without
            // a target.
            return self.cost.cap(ids.len(), backlog, floor, max);
        };
        let cap = self.cost.cap_within(ids.len(), budget, floor, max);
        Some(self.starvation.cap(cap, floor, backlog > 0))
    }

    /// What the scheduler orders prompts by with a TTFT target (`Scheduler::set_deadline_clock`).
    fn deadline_clock(&self) -> Option<crate::scheduler::DeadlineClock> {
        self.slo.ttft?;
        Some(crate::scheduler::DeadlineClock {
            now: self.clock.now(),
            per_token: self.cost.per_prefill_token().unwrap_or(0.0),
        })
    }

    /// Runs one step. Returns the number of tokens processed (0 when idle).
    pub fn step(&mut self) -> Result<usize, RunError> {
        if !self.embeds.is_empty() {
            return self.embed_step();
        }
        let cap = self.prefill_cap();
        self.sched.set_prefill_cap(cap);
        self.sched.set_deadline_clock(self.deadline_clock());
        self.poll_tiers();
        self.sweep_loras();
        self.propose_drafts();
        let plan = self.sched.plan();
        self.flush_tier_writes();
        self.stats
            .preemptions
            .fetch_add(plan.preempted.len() as u64, Relaxed);
        for &id in &plan.preempted {
            self.release_draft(id);
        }
        if plan.chunks.is_empty() {
            self.publish_counts();
            self.flush_kv_events();
            return Ok(0);
        }
        self.note_scheduled(&plan);
        let t0 = self.clock.now();
        self.execute(&plan)?;
        self.postprocess(&plan);
        let secs = (self.clock.now() - t0).as_secs_f64();
        // A step that verified drafts is neither a decode-only baseline nor a prefill sample.
        if plan.draft_tokens() == 0 {
            self.cost
                .observe(plan.decode_tokens(), plan.prefill_tokens(), secs);
        } else {
            self.cost.observe_draft(
                plan.decode_tokens(),
                plan.draft_tokens(),
                plan.prefill_tokens(),
                secs,
            );
        }
        tracing::trace!(
            decode = plan.decode_tokens(),
            prefill = plan.prefill_tokens(),
            draft = plan.draft_tokens(),
            ms = secs * 1e3,
            cap = ?cap,
            "step"
        );
        self.flush_tier_writes();
        self.stats.steps.fetch_add(1, Relaxed);
        self.stats.tokens_per_step.observe(plan.n_tokens() as f64);
        self.publish_counts();
        self.flush_kv_events();
        Ok(plan.n_tokens())
    }

    /// Hands the prefix index changes noted since the last call to the publisher, as one batch
    /// (none when nothing changed).
    fn flush_kv_events(&mut self) {
        if let Some(sink) = &self.kv_events {
            let events = self.sched.kv_mut().take_events();
            if !events.is_empty() {
                sink.send(events);
            }
        }
    }

    /// The prefix index now, after every change was handed to the publisher: a subscriber
    /// that applied the batches up to `last_seq` holds exactly these tiles.
    pub fn kv_index(&mut self) -> KvIndexSnapshot {
        self.flush_kv_events();
        KvIndexSnapshot {
            last_seq: self.kv_events.as_ref().and_then(KvEventSink::last_seq),
            tile_size: self.sched.tile_size(),
            tiles: self.sched.kv_mut().registered(),
        }
    }

    /// Records queue time for requests scheduled for the first time.
    fn note_scheduled(&mut self, plan: &StepPlan) {
        let now = self.clock.now();
        for c in &plan.chunks {
            if let Some(r) = self.reqs.get_mut(&c.seq) {
                if r.scheduled_at.is_none() {
                    r.scheduled_at = Some(now);
                    r.admission = None;
                    self.stats
                        .queue_time
                        .observe((now - r.arrived).as_secs_f64());
                }
            }
        }
    }

    /// Ends a request: frees its tiles now and sends its last event.
    pub(crate) fn finish(&mut self, id: SeqId, reason: FinishReason) {
        let parked = self.tiers.as_mut().and_then(|t| t.unpark(id));
        let seq = self.sched.remove(id).or(parked);
        self.release_draft(id);
        // A choice still waiting to fork leaves its group; the choices waiting on a first
        // member that ends before its prompt is computed run as requests of their own.
        self.leave_group(id);
        let Some(mut r) = self.reqs.remove(&id) else {
            return;
        };
        let now = self.clock.now();
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
        let text = r.final_text(reason);
        let usage = Usage {
            prompt_tokens,
            completion_tokens,
            cached_tokens,
            preemptions: seq.as_ref().map_or(0, |s| s.preemptions),
            timings: Timings::until_now(now, r.arrived, r.scheduled_at, r.first_token_at),
        };
        self.sweep_loras();
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
        st.e2e.observe((now - r.arrived).as_secs_f64());
        if r.spec.drafted > 0 {
            st.spec_acceptance
                .observe(r.spec.accepted as f64 / r.spec.drafted as f64);
        }
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
        self.fail_embeds(EngineError::Stopped);
    }

    pub(crate) fn publish_counts(&self) {
        let c = self.sched.tile_counts();
        let st = &self.stats;
        st.running.store(self.sched.num_running() as u64, Relaxed);
        let parked = self.tiers.as_ref().map_or(0, |t| t.parked());
        let waiting = self.sched.num_waiting() + self.forks.waiting() + parked + self.embeds.len();
        st.waiting.store(waiting as u64, Relaxed);
        st.tiles_in_use.store(c.in_use as u64, Relaxed);
        st.tiles_cached.store(c.cached as u64, Relaxed);
    }
}
