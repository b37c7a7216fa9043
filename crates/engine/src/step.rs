//! A step's compute and what follows it: the plan becomes one ragged batch for the runner (while
//! it computes, another thread computes the grammar masks of constrained sequences), and the
//! logit rows that come back become draws, prompt log-probabilities, forks and events.
//!
//! For each chunk of the plan, in order:
//! - prompt log-probabilities, when its request asked for them and the chunk covers prompt;
//! - a chunk that did not reach its sequence's last known token only commits its positions;
//! - the first member of an `n` > 1 request whose prompt is now computed forks its choices,
//!   which draw their first token from the same row;
//! - otherwise the sequence's draws (`draw::verify`, run for all sequences in parallel before
//!   this walk) are committed — the positions computed for accepted tokens, the accepted
//!   tokens — and sent one by one until one ends the request.

use std::sync::atomic::Ordering::Relaxed;
use std::sync::Mutex;

use model::{Batch, LogitsWanted, SeqChunk};
use runner::RunError;

use crate::draw::{run_jobs, verify, DrawJob, Drawn};
use crate::emit::Lengths;
use crate::engine::{contain, Engine};
use crate::request::{Event, FinishReason, TokenLogprob};
use crate::runner::Runner;
use crate::scheduler::{ScheduledChunk, StepPlan};
use crate::sequence::SeqId;

impl<R: Runner> Engine<R> {
    /// Runs the plan's chunks as one ragged batch; the logit rows land in `self.logits`.
    pub(crate) fn execute(&mut self, plan: &StepPlan) -> Result<(), RunError> {
        let draws = self.device_draws(plan);
        let mut tokens = Vec::with_capacity(plan.n_tokens());
        let mut chunks = Vec::with_capacity(plan.chunks.len());
        // The adapters of every chunk, in chunk order (copied: the request states are
        // borrowed mutably while the batch runs).
        let mut adapters = Vec::new();
        let mut ranges = Vec::with_capacity(plan.chunks.len());
        for c in &plan.chunks {
            let start = adapters.len();
            if let Some(r) = self.reqs.get(&c.seq) {
                adapters.extend_from_slice(&r.loras);
            }
            ranges.push(start..adapters.len());
        }
        for (ci, c) in plan.chunks.iter().enumerate() {
            let s = self
                .sched
                .get(c.seq)
                .expect("planned sequence exists: this is a bug");
            chunks.push(SeqChunk {
                start_pos: c.start,
                first_token: tokens.len(),
                len: c.len,
                tile_tables: s.tiles.tables.as_slice(),
                loras: &adapters[ranges[ci].clone()],
                // A chunk the runner draws for gives back a token, not a row.
                logits: match draws.get(ci) {
                    Some(Some(_)) => LogitsWanted::None,
                    _ => c.logits,
                },
            });
            tokens.extend(s.fed(c.start, c.len));
        }
        let batch = Batch {
            tokens: &tokens,
            seqs: &chunks,
        };
        // The grammar masks of constrained sequences depend only on the tokens they accepted,
        // so they are computed on a thread of their own while the forward pass runs; the draws
        // then find them ready (`LogitsProcessor::prepare`). A panic there is left for the
        // draw, which computes the mask again and fails that request alone.
        let masked: Vec<&mut model::Sampler> = self
            .reqs
            .values_mut()
            .filter(|r| r.req.constraint.is_some())
            .map(|r| &mut r.sampler)
            .collect();
        let mut drawn = Vec::new();
        let (runner, logits) = (&mut self.runner, &mut self.logits);
        let run = |runner: &mut R, logits: &mut Vec<f32>, drawn: &mut Vec<u32>| {
            if draws.iter().any(Option::is_some) {
                runner.execute_drawing(&batch, &draws, logits, drawn)
            } else {
                runner.execute(&batch, logits)
            }
        };
        if masked.is_empty() {
            run(runner, logits, &mut drawn)?;
        } else {
            std::thread::scope(|s| {
                s.spawn(move || {
                    for sampler in masked {
                        let _ = contain(|| sampler.prepare());
                    }
                });
                run(runner, logits, &mut drawn)
            })?;
        }
        let asked = draws.iter().filter(|d| d.is_some()).count();
        if drawn.len() != asked {
            return Err(RunError::BadBatch(format!(
                "the runner drew {} tokens for {asked} draws",
                drawn.len()
            )));
        }
        self.device_tokens = crate::device_draw::by_chunk(&draws, &drawn);
        Ok(())
    }

    /// Logit rows chunk `ci` got back: none when the runner drew its token.
    fn rows_of(&self, ci: usize, c: &ScheduledChunk) -> usize {
        match self.device_tokens.get(ci) {
            Some(Some(_)) => 0,
            _ => c.logits.rows(c.len),
        }
    }

    /// Draws, commits, and emits events for every chunk of the step.
    pub(crate) fn postprocess(&mut self, plan: &StepPlan) {
        let vocab = self.vocab_size;
        let logits = std::mem::take(&mut self.logits);
        let mut drawn = self.draw_all(plan, &logits);
        let mut row = 0;
        for (ci, c) in plan.chunks.iter().enumerate() {
            let n_rows = self.rows_of(ci, c);
            let rows = &logits[row * vocab..(row + n_rows) * vocab];
            row += n_rows;
            if let Some(Some(token)) = self.device_tokens.get(ci).copied() {
                // Drawn by the runner; the engine's sampler still sees the token.
                if let Some(r) = self.reqs.get_mut(&c.seq) {
                    r.sampler.accept(token);
                }
                self.accept_and_emit(c.seq, c.len, vec![(token, None)]);
                continue;
            }
            let Some(seq) = self.sched.get(c.seq) else {
                continue;
            };
            if seq.wants_prompt_logits && c.start < seq.prompt_len {
                self.collect_prompt_logprobs(c.seq, c.start, c.len, rows);
            }
            if !self.completes(c) || n_rows == 0 {
                self.sched.commit(c.seq, c.len, &[]);
                continue;
            }
            let last = &rows[(n_rows - 1) * vocab..];
            if self.forks.waits_on(c.seq) {
                // The prompt of an `n` > 1 request is computed: fork its other choices first.
                self.sched.commit(c.seq, c.len, &[]);
                self.fork_children(c.seq, last);
                self.draw_and_emit(c.seq, 0, last);
                continue;
            }
            match drawn.get_mut(ci).and_then(Option::take) {
                Some(Some(d)) => {
                    self.record_draft(c.seq, c.draft, d.len() - 1);
                    self.accept_and_emit(c.seq, c.len - c.draft, d)
                }
                Some(None) => self.fail_one(c.seq, "sampling panicked"),
                // Prompt scoring only (echo with max_tokens 0).
                None => {
                    self.sched.commit(c.seq, c.len, &[]);
                    self.finish(c.seq, FinishReason::Length);
                }
            }
        }
        self.logits = logits;
    }

    /// Whether chunk `c` computes its sequence's last known token, so the step draws the next
    /// one (a prompt's last chunk, or a decode); false for a sequence gone since the plan.
    fn completes(&self, c: &ScheduledChunk) -> bool {
        self.sched
            .get(c.seq)
            .is_some_and(|seq| c.start + c.len == seq.tokens.len() + c.draft)
    }

    /// The draws of every chunk that completes its sequence's tokens (`None` for the others,
    /// for a first member about to fork, which draws after forking, and for prompt scoring).
    fn draw_all(&mut self, plan: &StepPlan, logits: &[f32]) -> Vec<Option<Option<Vec<Drawn>>>> {
        let vocab = self.vocab_size;
        // (chunk index, its rows) of the sequences that draw this step.
        let mut wanted = std::collections::HashMap::new();
        let mut row = 0;
        for (ci, c) in plan.chunks.iter().enumerate() {
            let n_rows = self.rows_of(ci, c);
            row += n_rows;
            if n_rows == 0 || !self.completes(c) || self.forks.waits_on(c.seq) {
                continue;
            }
            // The rows of the last known token and of its draft.
            wanted.insert(c.seq, (ci, (row - 1 - c.draft) * vocab..row * vocab));
        }
        let mut jobs = Vec::with_capacity(wanted.len());
        // Each request's sampler, borrowed apart from the others'.
        for (id, r) in self.reqs.iter_mut() {
            let Some((ci, rows)) = wanted.remove(id) else {
                continue;
            };
            if r.req.max_tokens == 0 {
                continue;
            }
            let draft = self.sched.get(*id).map_or(&[][..], |s| &s.draft[..]);
            jobs.push(Mutex::new(DrawJob {
                chunk: ci,
                sampler: &mut r.sampler,
                rows,
                draft,
                q: self.drafts.dists.get(id).map(Vec::as_slice),
                top: r.req.logprobs,
                out: None,
            }));
        }
        run_jobs(&self.runner, &jobs, logits, vocab, &self.scratch);
        let mut out = vec![None; plan.chunks.len()];
        for job in jobs {
            let job = job.into_inner().unwrap_or_else(|e| e.into_inner());
            out[job.chunk] = Some(job.out);
        }
        out
    }

    fn collect_prompt_logprobs(&mut self, id: SeqId, start: usize, len: usize, rows: &[f32]) {
        let vocab = self.vocab_size;
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
            let row = &rows[i * vocab..(i + 1) * vocab];
            r.prompt_logprobs
                .push(Some(TokenLogprob::of(row, token, top_n)));
        }
        if r.prompt_logprobs.len() >= seq.prompt_len && !r.prompt_logprobs_sent {
            r.prompt_logprobs_sent = true;
            let _ = r
                .events
                .send(Event::PromptLogprobs(r.prompt_logprobs.clone()));
        }
    }

    /// Starts the choices waiting on `parent`, whose prompt was just computed, from the logits
    /// of its last position (`logits`).
    fn fork_children(&mut self, parent: SeqId, logits: &[f32]) {
        let prompt_logprobs = self
            .reqs
            .get(&parent)
            .filter(|r| r.prompt_logprobs_sent)
            .map(|r| r.prompt_logprobs.clone());
        for id in self.forks.take(parent) {
            let Some(seq) = self.pending_sequence(id) else {
                continue;
            };
            match self.sched.fork(parent, seq) {
                Ok(copies) => {
                    self.flush_tier_writes(); // tiles the fork evicted, before the copies
                    self.runner.copy_tiles(&copies);
                    if let Some(r) = self.reqs.get_mut(&id) {
                        let now = self.clock.now();
                        r.scheduled_at = Some(now);
                        r.admission = None;
                        self.stats
                            .queue_time
                            .observe((now - r.arrived).as_secs_f64());
                        if let Some(lp) = &prompt_logprobs {
                            r.prompt_logprobs = lp.clone();
                            r.prompt_logprobs_sent = true;
                            let _ = r.events.send(Event::PromptLogprobs(lp.clone()));
                        }
                    }
                    self.draw_and_emit(id, 0, logits);
                }
                Err(seq) => self.enqueue(*seq),
            }
        }
    }

    /// Draws one token for `id` from `row` on this thread, then commits and sends it
    /// (`computed` positions of the step's chunk are committed with it).
    fn draw_and_emit(&mut self, id: SeqId, computed: usize, row: &[f32]) {
        let Some(r) = self.reqs.get_mut(&id) else {
            return;
        };
        if r.req.max_tokens == 0 {
            // Prompt scoring only (echo with max_tokens 0).
            self.sched.commit(id, computed, &[]);
            self.finish(id, FinishReason::Length);
            return;
        }
        let mut s = self.scratch[0].lock().unwrap_or_else(|e| e.into_inner());
        let (sampler, top) = (&mut r.sampler, r.req.logprobs);
        let d = contain(|| verify(sampler, row, row.len(), &[], top, &mut s));
        drop(s);
        match d {
            Ok(d) => self.accept_and_emit(id, computed, d),
            Err(()) => self.fail_one(id, "sampling panicked"),
        }
    }

    /// Counts a step's draft of `drafted` tokens of which `accepted` agreed.
    fn record_draft(&mut self, id: SeqId, drafted: usize, accepted: usize) {
        if drafted == 0 {
            return;
        }
        let st = &self.stats;
        st.spec_drafts.fetch_add(1, Relaxed);
        st.spec_draft_tokens.fetch_add(drafted as u64, Relaxed);
        st.spec_accepted_tokens.fetch_add(accepted as u64, Relaxed);
        if let Some(r) = self.reqs.get_mut(&id) {
            r.spec.record(drafted, accepted);
        }
    }

    /// Commits a sequence's draws — `computed` positions of known tokens plus one per accepted
    /// drafted token, and the drawn tokens — and sends them until one ends the request.
    fn accept_and_emit(&mut self, id: SeqId, computed: usize, drawn: Vec<Drawn>) {
        let Some(seq) = self.sched.get(id) else {
            return;
        };
        let (out_len, total_len, max_total) =
            (seq.output().len(), seq.tokens.len(), seq.max_total_len);
        let tokens: Vec<u32> = drawn.iter().map(|d| d.0).collect();
        // Send them in order until one ends the request: the tokens after it are not kept.
        let mut end = None;
        for (i, (token, logprob)) in drawn.into_iter().enumerate() {
            let Some(r) = self.reqs.get_mut(&id) else {
                return;
            };
            let now = self.clock.now();
            match r.last_token_at {
                None => {
                    r.first_token_at = Some(now);
                    self.stats.ttft.observe((now - r.arrived).as_secs_f64());
                }
                Some(t) => self.stats.itl.observe((now - t).as_secs_f64()),
            }
            r.last_token_at = Some(now);
            self.stats.generation_tokens.fetch_add(1, Relaxed);
            let len = Lengths {
                output: out_len + i + 1,
                total: total_len + i + 1,
                max_total,
            };
            let is_eog = self.tokenizer.is_eog(token);
            match contain(|| r.emit(token, logprob, is_eog, len)) {
                Ok(None) => {}
                Ok(Some(reason)) => {
                    end = Some((i + 1, Ok(reason)));
                    break;
                }
                Err(()) => {
                    end = Some((i + 1, Err(())));
                    break;
                }
            }
        }
        let kept = end.as_ref().map_or(tokens.len(), |e| e.0);
        // Every kept token but the last was a drafted token the step computed.
        self.sched.commit(id, computed + kept - 1, &tokens[..kept]);
        match end {
            None => {}
            Some((_, Ok(reason))) => self.finish(id, reason),
            Some((_, Err(()))) => self.fail_one(id, "detokenizing panicked"),
        }
    }
}
