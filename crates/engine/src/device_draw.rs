//! Draws on the runner's side: a runner that samples where its logits are (`Runner::draws`, a
//! GPU runner) draws the next token of every sequence whose draw needs no state of the
//! engine's, and hands back token ids instead of logit rows. The others — a grammar, penalties,
//! log-probabilities, a draft, a prompt about to fork, prompt scoring — are drawn by the engine
//! from their rows, as on the CPU, in the same step.
//!
//! The engine's own sampler of a device-drawn sequence still accepts the token, so its state
//! (tokens seen) stays what it would be had the engine drawn it.

use runner::DrawParams;

use crate::engine::Engine;
use crate::runner::Runner;
use crate::scheduler::StepPlan;

impl<R: Runner> Engine<R> {
    /// For each chunk of `plan`: the settings its runner-side draw uses, or `None` when the
    /// engine draws it (or it draws nothing). Empty when the runner does not draw.
    pub(crate) fn device_draws(&self, plan: &StepPlan) -> Vec<Option<DrawParams>> {
        if !self.runner.draws() {
            return Vec::new();
        }
        plan.chunks
            .iter()
            .map(|c| {
                let seq = self.sched.get(c.seq)?;
                let r = self.reqs.get(&c.seq)?;
                let p = &r.req.sampling;
                let plain = r.req.constraint.is_none()
                    && r.req.logprobs.is_none()
                    && !seq.wants_prompt_logits
                    && r.req.max_tokens > 0
                    && p.repetition_penalty == 1.0
                    && p.presence_penalty == 0.0
                    && p.frequency_penalty == 0.0;
                let last_only = c.draft == 0 && c.logits.rows(c.len) == 1;
                let completes = c.start + c.len == seq.tokens.len();
                (plain && last_only && completes && !self.forks.waits_on(c.seq)).then(|| {
                    DrawParams {
                        temperature: p.temperature,
                        top_k: p.top_k,
                        top_p: p.top_p,
                        min_p: p.min_p,
                        logit_bias: p.logit_bias.clone(),
                        seed: p.seed.unwrap_or(c.seq.0),
                        drawn: seq.output().len() as u64,
                    }
                })
            })
            .collect()
    }
}

/// The tokens a runner drew, by chunk: `tokens` in the order of the chunks `draws` names.
pub(crate) fn by_chunk(draws: &[Option<DrawParams>], tokens: &[u32]) -> Vec<Option<u32>> {
    let mut next = tokens.iter();
    draws
        .iter()
        .map(|d| d.as_ref().and_then(|_| next.next().copied()))
        .collect()
}
