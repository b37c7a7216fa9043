//! Logits processors: what changes a sequence's logit row before the draw.
//!
//! Each sequence's `Sampler` holds an ordered chain of them. Before a draw, every processor
//! that is `active` changes a copy of the row, in order; then the draw (greedy, or temperature /
//! top-k / top-p / min-p) picks from the result. After the draw every processor is told the
//! token the sequence produced (`accept`), which is how penalties count and how a grammar would
//! advance. The chain built from a request's `SamplingParams` is logit bias, then the
//! repetition / presence / frequency penalties, as llama.cpp and vLLM apply them; a request may
//! add more (e.g. a grammar's mask, or a ban on some tokens) with `Sampler::push_processor`.
//!
//! A processor that would change nothing (no bias, no penalty yet) says so with `active`, so
//! the common request skips copying a vocabulary-wide row per token. A processor whose `apply`
//! needs work that depends only on the tokens accepted so far (a grammar's token mask) does it
//! in `prepare`, which the sampler calls before `apply` and which the engine may call earlier,
//! on another thread, while the forward pass computes the row.

use std::collections::HashMap;

/// One step of the chain.
pub trait LogitsProcessor: Send + std::fmt::Debug {
    /// Whether `apply` would change a row now.
    fn active(&self) -> bool;

    /// Does the work `apply` needs that does not depend on the row (e.g. a grammar's token
    /// mask for the next position); idempotent until the next `accept`.
    fn prepare(&mut self) {}

    /// Changes the logits of the sequence's next token (`row[id]` for every token id). Called
    /// after `prepare`.
    fn apply(&self, row: &mut [f32]);

    /// The sequence produced `token` (drawn from the row this chain processed).
    fn accept(&mut self, _token: u32) {}
}

/// Adds a fixed bias to some tokens' logits (OpenAI's `logit_bias`).
#[derive(Clone, Debug)]
pub struct LogitBias(pub Vec<(u32, f32)>);

impl LogitsProcessor for LogitBias {
    fn active(&self) -> bool {
        !self.0.is_empty()
    }

    fn apply(&self, row: &mut [f32]) {
        for &(id, b) in &self.0 {
            if let Some(l) = row.get_mut(id as usize) {
                *l += b;
            }
        }
    }
}

/// Penalties on the tokens the sequence generated: the repetition penalty divides a positive
/// logit (multiplies a negative one), then the presence penalty is subtracted once and the
/// frequency penalty once per occurrence.
#[derive(Clone, Debug)]
pub struct Penalties {
    /// 1 means off.
    pub repetition: f32,
    pub presence: f32,
    pub frequency: f32,
    /// Count of each generated token.
    counts: HashMap<u32, u32>,
}

impl Penalties {
    pub fn new(repetition: f32, presence: f32, frequency: f32) -> Penalties {
        Penalties {
            repetition,
            presence,
            frequency,
            counts: HashMap::new(),
        }
    }

    fn any(&self) -> bool {
        self.repetition != 1.0 || self.presence != 0.0 || self.frequency != 0.0
    }
}

impl LogitsProcessor for Penalties {
    fn active(&self) -> bool {
        self.any() && !self.counts.is_empty()
    }

    fn apply(&self, row: &mut [f32]) {
        for (&id, &n) in &self.counts {
            let Some(l) = row.get_mut(id as usize) else {
                continue;
            };
            if self.repetition != 1.0 {
                *l = if *l > 0.0 {
                    *l / self.repetition
                } else {
                    *l * self.repetition
                };
            }
            *l -= self.presence + self.frequency * n as f32;
        }
    }

    fn accept(&mut self, token: u32) {
        if self.any() {
            *self.counts.entry(token).or_insert(0) += 1;
        }
    }
}

/// Bans some tokens, or allows only some (forcing one token is allowing only it): the logits of
/// the tokens it rules out become −∞, so no draw can pick them.
#[derive(Clone, Debug)]
pub enum TokenFilter {
    Ban(Vec<u32>),
    Only(Vec<u32>),
}

impl LogitsProcessor for TokenFilter {
    fn active(&self) -> bool {
        true
    }

    fn apply(&self, row: &mut [f32]) {
        match self {
            TokenFilter::Ban(ids) => {
                for &id in ids {
                    if let Some(l) = row.get_mut(id as usize) {
                        *l = f32::NEG_INFINITY;
                    }
                }
            }
            TokenFilter::Only(ids) => {
                let kept: Vec<(u32, f32)> = ids
                    .iter()
                    .filter_map(|&id| row.get(id as usize).map(|&l| (id, l)))
                    .collect();
                row.fill(f32::NEG_INFINITY);
                for (id, l) in kept {
                    row[id as usize] = l;
                }
            }
        }
    }
}

/// An ordered chain of processors (see the module docs).
#[derive(Debug, Default)]
pub struct ProcessorChain(Vec<Box<dyn LogitsProcessor>>);

impl ProcessorChain {
    pub fn push(&mut self, p: Box<dyn LogitsProcessor>) {
        self.0.push(p);
    }

    /// Whether any processor would change a row now.
    pub fn active(&self) -> bool {
        self.0.iter().any(|p| p.active())
    }

    /// Lets every processor do its row-independent work for the next position.
    pub fn prepare(&mut self) {
        self.0.iter_mut().for_each(|p| p.prepare());
    }

    /// Applies the active processors to `row`, in order (after `prepare`).
    pub fn apply(&self, row: &mut [f32]) {
        for p in self.0.iter().filter(|p| p.active()) {
            p.apply(row);
        }
    }

    pub fn accept(&mut self, token: u32) {
        self.0.iter_mut().for_each(|p| p.accept(token));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bias_then_penalties_in_the_order_of_the_chain() {
        let mut chain = ProcessorChain::default();
        chain.push(Box::new(LogitBias(vec![(0, 1.0), (9, 5.0)])));
        chain.push(Box::new(Penalties::new(2.0, 0.5, 0.25)));
        assert!(chain.active(), "a bias is always active");
        chain.accept(0);
        chain.accept(0);
        chain.accept(1);
        let mut row = vec![3.0, -1.0, 2.0];
        chain.apply(&mut row);
        // token 0: (3 + 1) / 2 - 0.5 - 2 * 0.25; token 1: -1 * 2 - 0.5 - 0.25; token 9 is
        // outside the row and ignored.
        assert_eq!(row, vec![1.0, -2.75, 2.0]);
    }

    #[test]
    fn penalties_are_idle_until_a_token_is_produced_and_when_off() {
        let mut p = Penalties::new(1.3, 0.0, 0.0);
        assert!(!p.active());
        p.accept(4);
        assert!(p.active());
        let mut off = Penalties::new(1.0, 0.0, 0.0);
        off.accept(4);
        assert!(!off.active(), "no penalty set: nothing to apply");
        assert!(!LogitBias(Vec::new()).active());
    }

    #[test]
    fn a_filter_bans_or_forces_tokens() {
        let mut row = vec![1.0, 2.0, 3.0, 4.0];
        TokenFilter::Ban(vec![3, 17]).apply(&mut row);
        assert_eq!(row, vec![1.0, 2.0, 3.0, f32::NEG_INFINITY]);
        let mut row = vec![1.0, 2.0, 3.0, 4.0];
        TokenFilter::Only(vec![1, 17]).apply(&mut row);
        let inf = f32::NEG_INFINITY;
        assert_eq!(row, vec![inf, 2.0, inf, inf]);
    }
}
