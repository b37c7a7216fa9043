//! Embedding requests: whole inputs pooled into one vector each (or one score each, on a
//! reranker), on a model whose runner embeds (`RunnerFacts::embedding`).
//!
//! An input is never split across steps and keeps no KV: the runner computes each input of a
//! step whole, with attention over its own tokens, and returns its pooled row; nothing is left
//! behind when the step ends. A step takes the waiting inputs in order (priority, then
//! arrival) while they fit under `max_batch_tokens` and `max_seqs`: the first always (an input
//! longer than the budget runs alone), and it stops at the first that does not fit, so a long
//! input is never passed over for ever by shorter ones arriving after it.
//!
//! The inputs of one HTTP request share its event channel and its admission slot: each sends
//! `EmbedEvent::Embedded` with its index, and the slot is given back once all of them were
//! scheduled or ended. Dropping the receiver aborts every input still waiting.

use std::collections::VecDeque;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::{Duration, Instant};

use runner::RunError;
use tokio::sync::mpsc::UnboundedSender;

use crate::admission::WaitSlot;
use crate::engine::Engine;
use crate::request::EngineError;
use crate::runner::{EmbedBatch, Runner};
use crate::sequence::SeqId;

/// What the engine streams back for the inputs of one embedding request.
#[derive(Clone, Debug, PartialEq)]
pub enum EmbedEvent {
    /// Input `index`'s pooled vector (raw: the caller truncates and normalises), or its score
    /// on a reranker (one float).
    Embedded {
        index: usize,
        vector: Vec<f32>,
        /// The input's tokens.
        prompt_tokens: usize,
        /// Arrival to the end of the step that computed it.
        latency: Duration,
    },
    /// The request failed (an input was refused, or its step failed); the last event.
    Error(EngineError),
}

/// One input waiting for its step.
pub(crate) struct PendingInput {
    pub(crate) id: SeqId,
    pub(crate) index: usize,
    pub(crate) tokens: Vec<u32>,
    pub(crate) priority: i32,
    pub(crate) arrival: u64,
    pub(crate) arrived: Instant,
    pub(crate) events: UnboundedSender<EmbedEvent>,
    /// The request's admission slot, shared by its inputs (given back when the last drops it).
    pub(crate) slot: Option<Arc<WaitSlot>>,
}

/// The waiting inputs, in the order steps take them.
#[derive(Default)]
pub(crate) struct EmbedQueue {
    waiting: VecDeque<PendingInput>,
}

impl EmbedQueue {
    pub(crate) fn is_empty(&self) -> bool {
        self.waiting.is_empty()
    }

    pub(crate) fn len(&self) -> usize {
        self.waiting.len()
    }

    /// Queues an input behind those of its priority or better.
    pub(crate) fn push(&mut self, p: PendingInput) {
        let at = self
            .waiting
            .iter()
            .position(|q| (q.priority, q.arrival) > (p.priority, p.arrival))
            .unwrap_or(self.waiting.len());
        self.waiting.insert(at, p);
    }

    /// The inputs of the next step: in order while they fit under `max_tokens` and
    /// `max_inputs`, the first always, stopping at the first that does not fit.
    pub(crate) fn plan(&mut self, max_tokens: usize, max_inputs: usize) -> Vec<PendingInput> {
        let mut tokens = 0;
        let mut n = 0;
        for p in &self.waiting {
            if n > 0 && (n >= max_inputs || tokens + p.tokens.len() > max_tokens) {
                break;
            }
            tokens += p.tokens.len();
            n += 1;
        }
        self.waiting.drain(..n).collect()
    }

    /// Removes the inputs of request `id` (aborted), returning how many there were.
    pub(crate) fn remove(&mut self, id: SeqId) -> usize {
        let before = self.waiting.len();
        self.waiting.retain(|p| p.id != id);
        before - self.waiting.len()
    }

    /// Ids of requests whose receiver was dropped.
    pub(crate) fn disconnected(&self) -> Vec<SeqId> {
        let mut ids: Vec<SeqId> = self
            .waiting
            .iter()
            .filter(|p| p.events.is_closed())
            .map(|p| p.id)
            .collect();
        ids.dedup();
        ids
    }

    /// Every waiting input, removed (shutdown or failure).
    pub(crate) fn drain(&mut self) -> Vec<PendingInput> {
        self.waiting.drain(..).collect()
    }
}

impl<R: Runner> Engine<R> {
    /// Queues the inputs of one embedding request under one id; a refused input fails the
    /// whole request (nothing of it is queued).
    pub fn submit_embed(
        &mut self,
        id: SeqId,
        inputs: Vec<Vec<u32>>,
        priority: i32,
        events: UnboundedSender<EmbedEvent>,
        slot: Option<WaitSlot>,
    ) {
        if let Err(e) = self.check_embed(&inputs) {
            let _ = events.send(EmbedEvent::Error(e));
            return;
        }
        let slot = slot.map(Arc::new);
        let arrived = self.clock.now();
        for (index, tokens) in inputs.into_iter().enumerate() {
            let arrival = self.next_arrival();
            self.embeds.push(PendingInput {
                id,
                index,
                tokens,
                priority,
                arrival,
                arrived,
                events: events.clone(),
                slot: slot.clone(),
            });
        }
        self.publish_counts();
    }

    fn check_embed(&self, inputs: &[Vec<u32>]) -> Result<(), EngineError> {
        let bad = |m: String| Err(EngineError::InvalidRequest(m));
        if self.embedding.is_none() {
            return bad(
                "this model generates text and computes no embeddings: serve an \
                        embedding model (such as nomic-embed-text-v1.5) for /v1/embeddings"
                    .into(),
            );
        }
        if inputs.is_empty() {
            return bad("no input to embed".into());
        }
        for (i, input) in inputs.iter().enumerate() {
            if input.is_empty() {
                return bad(format!("input {i} has no tokens"));
            }
            if let Some(t) = input.iter().find(|&&t| t as usize >= self.vocab_size) {
                return bad(format!("input {i}: token id {t} is outside the vocabulary"));
            }
            if input.len() > self.context_length {
                return bad(format!(
                    "input {i} has {} tokens; the model's context is {}",
                    input.len(),
                    self.context_length
                ));
            }
        }
        Ok(())
    }

    /// Aborts the waiting inputs of embedding request `id`; true if it had any.
    pub(crate) fn abort_embed(&mut self, id: SeqId) -> bool {
        let n = self.embeds.remove(id);
        self.stats
            .finished_abort
            .fetch_add(n.min(1) as u64, Relaxed);
        n > 0
    }

    /// Fails every waiting input with `err` (each request hears once).
    pub(crate) fn fail_embeds(&mut self, err: EngineError) {
        let mut told = Vec::new();
        for p in self.embeds.drain() {
            if !told.contains(&p.id) {
                told.push(p.id);
                let _ = p.events.send(EmbedEvent::Error(err.clone()));
            }
        }
    }

    /// One step of embeddings: the planned inputs, whole, in one runner call.
    pub(crate) fn embed_step(&mut self) -> Result<usize, RunError> {
        let max_tokens = self.sched.max_batch_tokens();
        let max_inputs = self.sched.max_seqs();
        let mut step = self.embeds.plan(max_tokens, max_inputs);
        let t0 = self.clock.now();
        for p in &mut step {
            // Scheduled: the request's place in the waiting line is given back (by the last of
            // its inputs), before any of its rows is sent.
            p.slot = None;
            self.stats
                .queue_time
                .observe((t0 - p.arrived).as_secs_f64());
        }
        let inputs: Vec<&[u32]> = step.iter().map(|p| p.tokens.as_slice()).collect();
        let mut out = std::mem::take(&mut self.logits);
        out.clear();
        let result = self.runner.embed(&EmbedBatch { inputs: &inputs }, &mut out);
        let dim = self.embedding.map_or(0, |e| e.dim);
        let n_tokens: usize = inputs.iter().map(|t| t.len()).sum();
        match result {
            Ok(()) if out.len() == dim * step.len() => {
                let now = self.clock.now();
                for (p, row) in step.iter().zip(out.chunks_exact(dim.max(1))) {
                    let _ = p.events.send(EmbedEvent::Embedded {
                        index: p.index,
                        vector: row.to_vec(),
                        prompt_tokens: p.tokens.len(),
                        latency: now - p.arrived,
                    });
                    self.stats.e2e.observe((now - p.arrived).as_secs_f64());
                }
                self.stats.prompt_tokens.fetch_add(n_tokens as u64, Relaxed);
                self.stats
                    .embedded_inputs
                    .fetch_add(step.len() as u64, Relaxed);
            }
            Ok(()) => {
                let msg = format!(
                    "the runner returned {} floats for {} inputs of {dim}",
                    out.len(),
                    step.len()
                );
                self.fail_step_inputs(&step, &msg);
            }
            Err(e) => {
                self.logits = out;
                self.fail_step_inputs(&step, &e.to_string());
                return Err(e);
            }
        }
        self.logits = out;
        self.stats.steps.fetch_add(1, Relaxed);
        self.stats.tokens_per_step.observe(n_tokens as f64);
        self.publish_counts();
        Ok(n_tokens)
    }

    /// Fails the requests of a step's inputs, and drops their other waiting inputs.
    fn fail_step_inputs(&mut self, step: &[PendingInput], msg: &str) {
        tracing::error!("embedding step failed: {msg}");
        let mut told = Vec::new();
        for p in step {
            if !told.contains(&p.id) {
                told.push(p.id);
                self.embeds.remove(p.id);
                let err = EngineError::Internal(msg.to_string());
                let _ = p.events.send(EmbedEvent::Error(err));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::sync::mpsc::unbounded_channel;

    fn input(id: u64, len: usize, priority: i32, arrival: u64) -> PendingInput {
        let (tx, _rx) = unbounded_channel();
        PendingInput {
            id: SeqId(id),
            index: 0,
            tokens: vec![1; len],
            priority,
            arrival,
            arrived: Instant::now(),
            events: tx,
            slot: None,
        }
    }

    fn ids(step: &[PendingInput]) -> Vec<u64> {
        step.iter().map(|p| p.id.0).collect()
    }

    #[test]
    fn a_step_takes_whole_inputs_in_order_under_the_token_budget_and_stops_at_the_first_misfit() {
        let mut q = EmbedQueue::default();
        for (i, len) in [(1, 40), (2, 50), (3, 30), (4, 5)] {
            q.push(input(i, len, 0, i));
        }
        // 40 + 50 fit in 100; 30 more would not, and the 5 behind it waits its turn.
        assert_eq!(ids(&q.plan(100, 64)), vec![1, 2]);
        assert_eq!(ids(&q.plan(100, 64)), vec![3, 4]);
        assert!(q.is_empty());
    }

    #[test]
    fn an_input_longer_than_the_budget_runs_alone_and_whole() {
        let mut q = EmbedQueue::default();
        q.push(input(1, 300, 0, 1));
        q.push(input(2, 10, 0, 2));
        let step = q.plan(128, 64);
        assert_eq!(ids(&step), vec![1]);
        assert_eq!(step[0].tokens.len(), 300);
        assert_eq!(ids(&q.plan(128, 64)), vec![2]);
    }

    #[test]
    fn the_input_count_is_capped_and_priority_goes_before_arrival() {
        let mut q = EmbedQueue::default();
        q.push(input(1, 1, 0, 1));
        q.push(input(2, 1, 0, 2));
        q.push(input(3, 1, -1, 3));
        q.push(input(4, 1, 0, 4));
        assert_eq!(ids(&q.plan(1000, 2)), vec![3, 1]);
        assert_eq!(ids(&q.plan(1000, 2)), vec![2, 4]);
    }

    #[test]
    fn removing_a_request_drops_all_its_inputs() {
        let mut q = EmbedQueue::default();
        q.push(input(1, 3, 0, 1));
        q.push(input(2, 3, 0, 2));
        q.push(input(1, 3, 0, 3));
        assert_eq!(q.remove(SeqId(1)), 2);
        assert_eq!(q.len(), 1);
        assert_eq!(ids(&q.plan(100, 64)), vec![2]);
    }
}
