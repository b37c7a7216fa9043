//! The scheduler: decides, every step, which sequences run and how many tokens each.
//!
//! Pure logic over `Sequence`s and the `KvManager` (which only it owns); the model never sees
//! it. One step's plan:
//! 1. every running sequence that decodes gets its next token (highest priority first);
//! 2. running sequences still prefilling get chunks, then waiting ones are admitted (adopting
//!    their longest cached prefix first), until `max_batch_tokens` or `max_seqs` is used up —
//!    and, in a step that decodes, until the prefill cap the engine sets from measured step
//!    times (so a prompt does not stall the decoders' next token); with chunked prefill off a
//!    prompt runs whole in one step. A waiting sequence whose next
//!    full tile a running one is about to compute waits for it instead (concurrent requests
//!    with one prompt compute it once).
//!
//! When the pool has no tile for a sequence, the running sequence that ranks last (highest
//! priority value, then latest arrival; the needy sequence included, and also one already planned
//! this step, whose chunk is then taken back) is preempted: its tiles are released and it goes
//! back to the front of the waiting line with the tokens it has, to be recomputed (reusing the
//! prefix cache) later. Nobody is admitted in a step that preempts, so a victim is not taken
//! straight back. A resumed sequence is protected from preemption until it produces a token
//! (unless nothing else could run). Waiting sequences age: every `aging_steps` steps waited
//! counts as one priority level, so none starves.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use model::{KvLayout, LogitsWanted, TileId};

use crate::kv_manager::KvManager;
use crate::sequence::{SeqId, SeqStatus, Sequence};
use crate::tiles::TileCounts;

/// Prompts with more uncomputed tokens than this count as long: under the prefill cap, shorter
/// ones are served first.
pub const LONG_PREFILL: usize = 256;

/// Scheduling limits, validated by the engine's config.
#[derive(Clone, Debug)]
pub struct SchedulerConfig {
    /// Tokens per step (decode tokens plus prefill chunks).
    pub max_batch_tokens: usize,
    /// Tokens of a step in which no sequence decodes (nobody waits for a next token, so only
    /// the prompts' own progress counts): a larger chunk runs the matmuls on more rows per
    /// weight read. Values under `max_batch_tokens` leave it as the limit.
    pub max_prefill_tokens: usize,
    /// Sequences per step.
    pub max_seqs: usize,
    pub chunked_prefill: bool,
    /// Steps of waiting worth one priority level.
    pub aging_steps: u64,
    /// Release windowed groups' tiles that no future query can see (off only to compare).
    pub release_window_tiles: bool,
}

/// One sequence's share of a step.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScheduledChunk {
    pub seq: SeqId,
    /// Position of the first token (= tokens already computed).
    pub start: usize,
    pub len: usize,
    pub logits: LogitsWanted,
    /// A decoder's next token (as opposed to a prefill chunk).
    pub decode: bool,
    /// Drafted tokens at the end of the chunk (a decoder's, to verify: then every position's
    /// logits are wanted).
    pub draft: usize,
}

/// What to run this step.
#[derive(Debug, Default)]
pub struct StepPlan {
    pub chunks: Vec<ScheduledChunk>,
    /// Sequences preempted while planning (for metrics and events).
    pub preempted: Vec<SeqId>,
}

impl StepPlan {
    pub fn n_tokens(&self) -> usize {
        self.chunks.iter().map(|c| c.len).sum()
    }

    /// Decode tokens (one per decoding sequence).
    pub fn decode_tokens(&self) -> usize {
        self.chunks.iter().filter(|c| c.decode).count()
    }

    /// Drafted tokens being verified.
    pub fn draft_tokens(&self) -> usize {
        self.chunks.iter().map(|c| c.draft).sum()
    }

    /// Prompt (or recompute) tokens.
    pub fn prefill_tokens(&self) -> usize {
        self.chunks
            .iter()
            .filter(|c| !c.decode)
            .map(|c| c.len)
            .sum()
    }
}

/// What the scheduler needs to tell a prompt that can still meet its first-token deadline
/// from one that cannot (`Scheduler::set_deadline_clock`).
#[derive(Clone, Copy, Debug)]
pub struct DeadlineClock {
    pub now: Instant,
    /// Estimated seconds per prompt token still to compute.
    pub per_token: f64,
}

/// Which prompts get the step's prefill first, before the others.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Lane {
    /// Those with at most `LONG_PREFILL` tokens left (the prefill cap spreads long ones).
    Short,
    /// Those that can still meet their first-token deadline (`DeadlineClock`).
    OnTime,
}

/// Why a sequence cannot be added.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum AddError {
    #[error("{needed} tokens can never fit in the KV pool ({tiles} tiles of {tile_size})")]
    TooLong {
        needed: usize,
        tiles: usize,
        tile_size: usize,
    },
    #[error("empty prompt")]
    Empty,
}

pub struct Scheduler {
    cfg: SchedulerConfig,
    kv: KvManager,
    seqs: HashMap<SeqId, Sequence>,
    waiting: Vec<SeqId>,
    running: Vec<SeqId>,
    preemptions_total: u64,
    /// Prefill tokens allowed in a step that also decodes (set by the engine from measured step
    /// times, see `engine::StepCost`); `None` leaves only `max_batch_tokens`.
    prefill_cap: Option<usize>,
    /// Set with a TTFT target: prompts still on time go first (see `Lane::OnTime`).
    deadline_clock: Option<DeadlineClock>,
    /// Whether the step being planned decodes no sequence (`max_prefill_tokens` applies).
    prefill_only: bool,
}

impl Scheduler {
    pub fn new(cfg: SchedulerConfig, layout: &KvLayout, n_tiles: usize, caching: bool) -> Self {
        Scheduler {
            kv: KvManager::new(layout, n_tiles, caching)
                .with_window_release(cfg.release_window_tiles),
            seqs: HashMap::new(),
            waiting: Vec::new(),
            running: Vec::new(),
            preemptions_total: 0,
            prefill_cap: None,
            deadline_clock: None,
            prefill_only: false,
            cfg,
        }
    }

    /// What the pool holds of `tokens` (see `KvManager::probe`).
    pub fn probe_prefix(
        &self,
        tokens: &[u32],
        root: Option<crate::tiles::PrefixKey>,
    ) -> crate::kv_manager::PrefixProbe {
        self.kv.probe(tokens, root)
    }

    pub fn tile_size(&self) -> usize {
        self.kv.tile_size()
    }

    pub fn n_groups(&self) -> usize {
        self.kv.n_groups()
    }

    /// The KV manager, for the engine's tier imports and writes (which never change what a
    /// sequence holds).
    pub(crate) fn kv_mut(&mut self) -> &mut KvManager {
        &mut self.kv
    }

    /// Computes prefix keys with `f` (see `KvManager::with_key_fn`): for tests of colliding keys.
    #[doc(hidden)]
    pub fn set_prefix_key_fn(&mut self, f: crate::tiles::KeyFn) {
        self.kv.set_key_fn(f);
    }

    /// Caps the prefill tokens of steps that carry decode tokens (`None`: no cap; `Some(0)`: a
    /// decode-only step whenever anyone decodes). Ignored with chunked prefill off, where a
    /// prompt runs whole.
    pub fn set_prefill_cap(&mut self, cap: Option<usize>) {
        self.prefill_cap = cap;
    }

    /// Plans the next steps with first-token deadlines (`Sequence::ttft_deadline`): prompts
    /// that can still meet theirs at `per_token` seconds per remaining token get the prefill
    /// budget before those that cannot. `None` plans without them.
    pub fn set_deadline_clock(&mut self, clock: Option<DeadlineClock>) {
        self.deadline_clock = clock;
    }

    /// Whether sequence `s` belongs in `lane`.
    fn in_lane(&self, s: &Sequence, lane: Lane) -> bool {
        match lane {
            Lane::Short => s.uncomputed() <= LONG_PREFILL,
            Lane::OnTime => {
                let (Some(clock), Some(deadline)) = (self.deadline_clock, s.ttft_deadline) else {
                    return true;
                };
                // A resumed stream sent its first token long ago: no deadline left to miss.
                if !s.output().is_empty() {
                    return true;
                }
                let secs = s.uncomputed() as f64 * clock.per_token.max(0.0);
                let done = Duration::try_from_secs_f64(secs).unwrap_or(Duration::MAX);
                clock.now.checked_add(done).is_some_and(|t| t <= deadline)
            }
        }
    }

    /// Running sequences whose next step is a decode token.
    pub fn decoders(&self) -> usize {
        self.running
            .iter()
            .filter(|id| self.seqs.get(id).is_some_and(|s| s.is_decoding()))
            .count()
    }

    /// The running sequences whose next step is a decode token.
    pub fn decoding_ids(&self) -> Vec<SeqId> {
        self.running
            .iter()
            .filter(|id| self.seqs.get(id).is_some_and(|s| s.is_decoding()))
            .copied()
            .collect()
    }

    /// Sequences whose prompt (or recomputation) could advance now: the running ones still
    /// prefilling, and as many waiting ones as there are free seats. Waiting requests that could
    /// not be admitted anyway do not count, so a long queue under sustained overload does not
    /// lift the prefill cap.
    pub fn prefill_backlog(&self) -> usize {
        let prefilling = self
            .running
            .iter()
            .filter(|id| self.seqs.get(id).is_some_and(|s| !s.is_decoding()))
            .count();
        let seats = self.cfg.max_seqs.max(1).saturating_sub(self.running.len());
        prefilling + self.waiting.len().min(seats)
    }

    /// Tokens per step (`SchedulerConfig::max_batch_tokens`, at least 1).
    pub fn max_batch_tokens(&self) -> usize {
        self.cfg.max_batch_tokens.max(1)
    }

    /// Sequences per step (`SchedulerConfig::max_seqs`, at least 1).
    pub fn max_seqs(&self) -> usize {
        self.cfg.max_seqs.max(1)
    }

    /// Tokens of the step being planned: `max_batch_tokens`, or `max_prefill_tokens` if larger
    /// when no sequence decodes in it.
    fn step_tokens(&self) -> usize {
        match self.prefill_only {
            true => self.max_batch_tokens().max(self.cfg.max_prefill_tokens),
            false => self.max_batch_tokens(),
        }
    }

    /// Tokens a piece may still take: the step's budget, and for prefill pieces in a step that
    /// decodes, what is left of the prefill cap.
    fn budget_left(&self, plan: &StepPlan, decoding: bool) -> usize {
        let total = self.step_tokens().saturating_sub(plan.n_tokens());
        match self.prefill_cap {
            Some(cap) if !decoding && self.cfg.chunked_prefill && plan.decode_tokens() > 0 => {
                total.min(cap.saturating_sub(plan.prefill_tokens()))
            }
            _ => total,
        }
    }

    /// Largest prefill piece every sequence may get in one step (what `check_fits` plans for).
    fn chunk_limit(&self) -> usize {
        self.max_batch_tokens()
    }

    /// Largest prefill piece sequence `s` gets in this step: the step's tokens, unless a piece
    /// that long could keep it from ever fitting the pool (a windowed layer holds the window
    /// plus the piece), then `chunk_limit`.
    fn piece_limit(&self, s: &Sequence) -> usize {
        let step = self.step_tokens();
        match step > self.chunk_limit() && !self.kv.fits_pool(s.max_total_len, step) {
            true => self.chunk_limit(),
            false => step,
        }
    }

    /// Whether a sequence of at most `max_total_len` tokens could ever fit the pool.
    pub fn check_fits(&self, max_total_len: usize) -> Result<(), AddError> {
        let chunk = if self.cfg.chunked_prefill {
            self.chunk_limit()
        } else {
            max_total_len
        };
        if self.kv.fits_pool(max_total_len, chunk) {
            return Ok(());
        }
        Err(AddError::TooLong {
            needed: max_total_len,
            tiles: self.kv.counts().total,
            tile_size: self.kv.tile_size(),
        })
    }

    /// The longest sequence, at most `cap` tokens, that `check_fits` accepts (0 if none).
    ///
    /// The tiles a sequence needs never shrink as it grows, so the accepted lengths are a
    /// prefix of `0..=cap` and a binary search finds its end.
    pub fn max_fitting_len(&self, cap: usize) -> usize {
        let (mut lo, mut hi) = (0, cap);
        while lo < hi {
            let mid = lo + (hi - lo).div_ceil(2);
            if self.check_fits(mid).is_ok() {
                lo = mid;
            } else {
                hi = mid - 1;
            }
        }
        lo
    }

    /// Queues a sequence; refuses one that could never fit the pool.
    pub fn add(&mut self, mut seq: Sequence) -> Result<(), AddError> {
        if seq.tokens.is_empty() {
            return Err(AddError::Empty);
        }
        self.check_fits(seq.max_total_len)?;
        seq.status = SeqStatus::Waiting;
        self.waiting.push(seq.id);
        self.seqs.insert(seq.id, seq);
        Ok(())
    }

    pub fn get(&self, id: SeqId) -> Option<&Sequence> {
        self.seqs.get(&id)
    }

    pub fn tile_tables(&self, id: SeqId) -> Option<&[Vec<TileId>]> {
        self.seqs.get(&id).map(|s| s.tiles.tables.as_slice())
    }

    pub fn num_waiting(&self) -> usize {
        self.waiting.len()
    }

    pub fn num_running(&self) -> usize {
        self.running.len()
    }

    pub fn is_idle(&self) -> bool {
        self.waiting.is_empty() && self.running.is_empty()
    }

    pub fn tile_counts(&self) -> TileCounts {
        self.kv.counts()
    }

    pub fn preemptions_total(&self) -> u64 {
        self.preemptions_total
    }

    pub fn check_invariants(&self) -> Result<(), String> {
        self.kv.check()
    }

    /// Plans the next step.
    pub fn plan(&mut self) -> StepPlan {
        let mut plan = StepPlan::default();
        let max_seqs = self.cfg.max_seqs.max(1);
        self.prefill_only = self.decoders() == 0;

        let seqs = &self.seqs;
        self.running
            .sort_by_key(|id| seqs.get(id).map(|s| (s.priority, s.arrival)));
        // Decoders first, then running sequences still prefilling, each in priority order.
        let (dec, pre): (Vec<SeqId>, Vec<SeqId>) = self
            .running
            .iter()
            .partition(|id| self.seqs[id].is_decoding());
        self.schedule_running(dec, &mut plan, max_seqs);
        // With first-token deadlines, prompts still on time go first. Otherwise, with the
        // prefill cap in force, short prompts (running or waiting) go before long ones, so a
        // request of a few dozen tokens does not queue behind a 2,000-token prompt that the cap
        // spreads over many steps (vLLM's long-prefill threshold, in spirit).
        let lane = if self.deadline_clock.is_some() {
            Some(Lane::OnTime)
        } else {
            let short_first =
                self.prefill_cap.is_some() && self.cfg.chunked_prefill && plan.decode_tokens() > 0;
            short_first.then_some(Lane::Short)
        };
        let (first, second): (Vec<SeqId>, Vec<SeqId>) = match lane {
            Some(l) => pre
                .into_iter()
                .partition(|id| self.in_lane(&self.seqs[id], l)),
            None => (pre, Vec::new()),
        };
        self.schedule_running(first, &mut plan, max_seqs);
        // A sequence preempted now would be admitted right back, recomputing what it just
        // gave up (vLLM also admits nothing in a step that preempts).
        let admit = |this: &mut Self, plan: &mut StepPlan, lane: Option<Lane>| {
            if plan.preempted.is_empty() {
                let budget = this.budget_left(plan, false);
                let seats = max_seqs.saturating_sub(plan.chunks.len());
                this.admit_waiting(plan, budget, seats, lane);
            }
        };
        if lane.is_some() {
            admit(self, &mut plan, lane);
            self.schedule_running(second, &mut plan, max_seqs);
        }
        admit(self, &mut plan, None);
        self.age_waiting();
        // A draft lives for one step: one that found no room in this plan is dropped.
        for id in &self.running {
            if !plan.chunks.iter().any(|c| c.seq == *id) {
                if let Some(s) = self.seqs.get_mut(id) {
                    s.draft.clear();
                }
            }
        }
        plan
    }

    /// Gives each of `ids` (running, in order) its piece of this step while budget and seats last.
    fn schedule_running(&mut self, ids: Vec<SeqId>, plan: &mut StepPlan, max_seqs: usize) {
        for id in ids {
            if !self.running.contains(&id) {
                continue; // preempted earlier in this step
            }
            // Recomputed each time: preempting a scheduled sequence gives its share back.
            let decoding = self.seqs[&id].is_decoding();
            let budget = self.budget_left(plan, decoding);
            if plan.chunks.len() >= max_seqs {
                break;
            }
            if budget == 0 {
                continue; // a prefill piece over the cap; decoders may still fit
            }
            let want = self.piece(id, budget, plan.chunks.is_empty());
            if want == 0 {
                continue;
            }
            if !self.make_room(id, want, plan) {
                continue;
            }
            if let Some(s) = self.seqs.get_mut(&id).filter(|s| s.is_decoding()) {
                s.draft.truncate(want - 1); // what the budget left no room for
            }
            plan.chunks.push(self.chunk(id, want));
        }
    }

    /// Tokens sequence `id` runs this step given the budget left. A decoder runs its next
    /// token and as much of its draft as the budget leaves room for.
    fn piece(&self, id: SeqId, budget: usize, batch_empty: bool) -> usize {
        let s = &self.seqs[&id];
        if s.is_decoding() {
            return budget.min(1 + s.draft.len());
        }
        let need = s.uncomputed();
        if self.cfg.chunked_prefill {
            need.min(budget).min(self.piece_limit(s))
        } else if need <= budget || batch_empty {
            need
        } else {
            0
        }
    }

    fn chunk(&self, id: SeqId, len: usize) -> ScheduledChunk {
        let s = &self.seqs[&id];
        let end = s.num_computed + len;
        let draft = if s.is_decoding() { len - 1 } else { 0 };
        let logits = if draft > 0 || (s.wants_prompt_logits && s.num_computed < s.prompt_len) {
            LogitsWanted::All
        } else if end == s.tokens.len() {
            LogitsWanted::Last
        } else {
            LogitsWanted::None
        };
        ScheduledChunk {
            seq: id,
            start: s.num_computed,
            len,
            logits,
            decode: s.is_decoding(),
            draft,
        }
    }

    /// Releases out-of-window tiles and grows `id` by `want` tokens, preempting lower-ranked
    /// sequences (taking back their chunk if already scheduled) or, when it ranks last, `id`
    /// itself, when the pool is short. Returns whether `id` can run.
    fn make_room(&mut self, id: SeqId, want: usize, plan: &mut StepPlan) -> bool {
        loop {
            let s = self
                .seqs
                .get_mut(&id)
                .expect("running sequence exists: this is a bug");
            self.kv.release_out_of_window(&mut s.tiles, s.num_computed);
            let new_len = s.num_computed + want;
            if self.kv.grow(&mut s.tiles, new_len).is_ok() {
                return true;
            }
            let allow_protected = plan.chunks.is_empty();
            match self.pick_victim(id, allow_protected) {
                Some(v) => {
                    self.preempt(v);
                    plan.preempted.push(v);
                    plan.chunks.retain(|c| c.seq != v);
                    if v == id {
                        return false;
                    }
                }
                None => return false,
            }
        }
    }

    /// The running sequence to preempt so that `id` can grow: the lowest priority, then the
    /// latest arrival, `id` included (it gives way itself when it ranks last), whether or not
    /// already scheduled this step (decoders are planned first, whatever their rank). Never
    /// one that ranks above `id`: then `id` waits (`None`).
    /// Protected (resumed, no progress yet) sequences are spared, unless `allow_protected`
    /// (nothing is scheduled yet, so someone must go or the step would stall) and no
    /// unprotected sequence qualifies. With first-token deadlines, a prompt that can no longer
    /// make its deadline ranks after every one still on time of its priority: it is late
    /// whatever happens, while the others can still be saved.
    fn pick_victim(&self, id: SeqId, allow_protected: bool) -> Option<SeqId> {
        let rank = |r: &SeqId| {
            let s = &self.seqs[r];
            (s.priority, !self.in_lane(s, Lane::OnTime), s.arrival)
        };
        let worst = |spare_protected: bool| {
            self.running
                .iter()
                .filter(|r| !(spare_protected && self.seqs[r].protected))
                .max_by_key(|r| rank(r))
                .filter(|v| rank(v) >= rank(&id))
                .copied()
        };
        worst(true).or_else(|| if allow_protected { worst(false) } else { None })
    }

    /// Sends a running sequence back to the front of the waiting line, freeing its tiles.
    fn preempt(&mut self, id: SeqId) {
        let s = self
            .seqs
            .get_mut(&id)
            .expect("victim exists: this is a bug");
        self.kv.free(&mut s.tiles);
        s.num_computed = 0;
        s.draft.clear();
        s.status = SeqStatus::Waiting;
        s.preemptions += 1;
        s.protected = true;
        self.preemptions_total += 1;
        self.running.retain(|&r| r != id);
        self.waiting.insert(0, id);
        tracing::debug!(seq = id.0, "preempted");
    }

    /// Effective priority of a waiting sequence (lower runs sooner).
    fn effective_priority(&self, s: &Sequence) -> i64 {
        let aged = s.waited_steps / self.cfg.aging_steps.max(1);
        s.priority as i64 - aged as i64
    }

    /// Admits waiting sequences in order while budget, seats and tiles last; with a `lane`,
    /// only those in it (the others are skipped, not blocking).
    fn admit_waiting(
        &mut self,
        plan: &mut StepPlan,
        mut budget: usize,
        mut seats: usize,
        lane: Option<Lane>,
    ) {
        let mut order = self.waiting.clone();
        // Preempted sequences first (they were running), then by aged priority and arrival.
        order.sort_by_key(|id| {
            let s = &self.seqs[id];
            (s.preemptions == 0, self.effective_priority(s), s.arrival)
        });
        let mut blocked = false;
        for id in order {
            if blocked || seats == 0 || budget == 0 {
                break;
            }
            if lane.is_some_and(|l| !self.in_lane(&self.seqs[&id], l)) {
                continue;
            }
            let n_groups = self.kv.n_groups();
            let s = self
                .seqs
                .get_mut(&id)
                .expect("waiting sequence exists: this is a bug");
            if s.tiles.is_empty() && s.num_computed == 0 && !s.wants_prompt_logits {
                let (tiles, hit) = self.kv.adopt_prefix(&s.tokens, s.lora_key);
                s.tiles = tiles;
                s.num_computed = hit;
                if s.preemptions == 0 {
                    s.cached_prompt_tokens = hit.min(s.prompt_len);
                }
            } else if s.tiles.is_empty() {
                s.tiles.tables = vec![Vec::new(); n_groups];
            }
            if self.prefix_in_flight(id) {
                // Wait for the tiles another sequence is computing rather than compute them twice.
                let s = self
                    .seqs
                    .get_mut(&id)
                    .expect("waiting sequence exists: this is a bug");
                self.kv.free(&mut s.tiles);
                s.num_computed = 0;
                continue;
            }
            let want = self.piece(id, budget, plan.chunks.is_empty());
            let s = self
                .seqs
                .get_mut(&id)
                .expect("waiting sequence exists: this is a bug");
            self.kv.release_out_of_window(&mut s.tiles, s.num_computed);
            if want == 0 || self.kv.grow(&mut s.tiles, s.num_computed + want).is_err() {
                // Not now: give the adopted tiles back so they stay evictable, keep the order.
                self.kv.free(&mut s.tiles);
                s.num_computed = 0;
                blocked = true;
                continue;
            }
            s.status = SeqStatus::Running;
            self.waiting.retain(|&w| w != id);
            self.running.push(id);
            plan.chunks.push(self.chunk(id, want));
            budget -= want.min(budget);
            seats -= 1;
        }
    }

    fn age_waiting(&mut self) {
        for id in &self.waiting {
            if let Some(s) = self.seqs.get_mut(id) {
                s.waited_steps += 1;
            }
        }
    }

    /// Whether a running sequence still prefilling will compute the next full tile of waiting
    /// sequence `id` (same tokens up to its end): then `id` does better to wait a step or two
    /// and adopt it from the prefix cache. This is how concurrent requests with one prompt (or
    /// the `n` choices of one request) share the prompt's tiles.
    fn prefix_in_flight(&self, id: SeqId) -> bool {
        let w = &self.seqs[&id];
        let next = w.num_computed + self.kv.tile_size();
        if !self.kv.caching() || w.wants_prompt_logits || next >= w.tokens.len() {
            return false;
        }
        self.running.iter().any(|r| {
            let r = &self.seqs[r];
            r.num_computed < next
                && r.tokens.len() >= next
                && r.tokens[w.num_computed..next] == w.tokens[w.num_computed..next]
                && r.tokens[..w.num_computed] == w.tokens[..w.num_computed]
        })
    }

    /// Proposes `draft` as the next tokens of decoding sequence `id`, to be fed after its last
    /// token in the next step and verified there (cut to what its length limit allows; ignored
    /// for a sequence that is not decoding). Replaces any earlier draft.
    pub fn set_draft(&mut self, id: SeqId, mut draft: Vec<u32>) {
        let Some(s) = self.seqs.get_mut(&id) else {
            return;
        };
        if s.status != SeqStatus::Running || !s.is_decoding() {
            return;
        }
        // A step adds at most 1 + draft.len() tokens.
        draft.truncate(s.max_total_len.saturating_sub(s.tokens.len() + 1));
        s.draft = draft;
    }

    /// Records that a chunk ran: `computed` of its positions now hold K/V of known tokens, and
    /// `sampled` are the tokens drawn from its logits (for a decoder that verified a draft:
    /// the agreeing prefix of the draft, then the first token that disagreed or followed it).
    /// The rest of the draft is dropped, and the tiles taken for it alone are freed; tiles are
    /// registered for prefix reuse only when full of computed, accepted tokens.
    pub fn commit(&mut self, id: SeqId, computed: usize, sampled: &[u32]) {
        let Some(s) = self.seqs.get_mut(&id) else {
            return;
        };
        s.num_computed += computed;
        s.draft.clear();
        s.tokens.extend_from_slice(sampled);
        debug_assert!(
            s.num_computed <= s.tokens.len(),
            "computed a token not yet known"
        );
        self.kv
            .register_full(&mut s.tiles, &s.tokens, s.num_computed, s.lora_key);
        self.kv.truncate(&mut s.tiles, s.tokens.len());
        if !sampled.is_empty() {
            s.protected = false;
        }
    }

    /// Starts `child` as a copy of running sequence `parent`, whose tokens are all computed and
    /// equal the child's (an `n` > 1 request forked after its prompt): the child shares the
    /// parent's full tiles and gets its own copy of a partly filled last tile, and decodes from
    /// the next step on. Returns the (source, copy) tile pairs whose contents the caller must
    /// copy in the KV pool. Gives the child back when it cannot fork (no seat, no free tile, not
    /// a copy, or a length that could never fit the pool), for the caller to `add` it as a
    /// request of its own.
    pub fn fork(
        &mut self,
        parent: SeqId,
        mut child: Sequence,
    ) -> Result<Vec<(TileId, TileId)>, Box<Sequence>> {
        let Some(p) = self.seqs.get(&parent) else {
            return Err(Box::new(child));
        };
        let forkable = p.status == SeqStatus::Running
            && p.num_computed == p.tokens.len()
            && child.tokens == p.tokens
            && !self.seqs.contains_key(&child.id)
            && self.running.len() < self.cfg.max_seqs.max(1)
            && self.check_fits(child.max_total_len).is_ok();
        if !forkable {
            return Err(Box::new(child));
        }
        let Ok((tiles, copies)) = self.kv.fork(&p.tiles, p.num_computed) else {
            return Err(Box::new(child));
        };
        child.tiles = tiles;
        child.num_computed = p.num_computed;
        child.cached_prompt_tokens = p.cached_prompt_tokens;
        child.forked = true;
        child.status = SeqStatus::Running;
        self.running.push(child.id);
        self.seqs.insert(child.id, child);
        Ok(copies)
    }

    /// Removes a sequence (finished or aborted) and frees its tiles at once.
    pub fn remove(&mut self, id: SeqId) -> Option<Sequence> {
        let mut s = self.seqs.remove(&id)?;
        self.kv.free(&mut s.tiles);
        s.status = SeqStatus::Finished;
        self.running.retain(|&r| r != id);
        self.waiting.retain(|&w| w != id);
        Some(s)
    }
}
