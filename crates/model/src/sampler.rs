//! Token sampling from logits, per sequence.
//!
//! Order of operations (as llama.cpp and vLLM do): logit bias and penalties on the raw logits,
//! then greedy if temperature is 0; otherwise temperature, top-k, top-p, min-p, and a draw from
//! the sequence's own seeded generator. Each sequence owns its `Sampler`, so a seeded request's
//! draws do not depend on what else runs in the batch.

use std::collections::HashMap;

/// What a request asks of sampling. `validate` is the single place ranges are checked.
#[derive(Clone, Debug, PartialEq)]
pub struct SamplingParams {
    /// 0 means greedy.
    pub temperature: f32,
    /// 0 means off.
    pub top_k: usize,
    /// 1 means off.
    pub top_p: f32,
    /// 0 means off.
    pub min_p: f32,
    /// 1 means off. Divides positive logits (multiplies negative ones) of seen tokens.
    pub repetition_penalty: f32,
    /// Subtracted once from the logit of every token already generated.
    pub presence_penalty: f32,
    /// Subtracted per occurrence of a generated token.
    pub frequency_penalty: f32,
    pub logit_bias: Vec<(u32, f32)>,
    pub seed: Option<u64>,
}

impl Default for SamplingParams {
    fn default() -> Self {
        SamplingParams {
            temperature: 0.0,
            top_k: 0,
            top_p: 1.0,
            min_p: 0.0,
            repetition_penalty: 1.0,
            presence_penalty: 0.0,
            frequency_penalty: 0.0,
            logit_bias: Vec::new(),
            seed: None,
        }
    }
}

impl SamplingParams {
    /// Checks ranges; the error names the offending field.
    pub fn validate(&self) -> Result<(), (&'static str, String)> {
        let finite = |v: f32| v.is_finite();
        if !finite(self.temperature) || self.temperature < 0.0 {
            return Err(("temperature", "must be >= 0".into()));
        }
        if !finite(self.top_p) || self.top_p <= 0.0 || self.top_p > 1.0 {
            return Err(("top_p", "must be in (0, 1]".into()));
        }
        if !finite(self.min_p) || !(0.0..=1.0).contains(&self.min_p) {
            return Err(("min_p", "must be in [0, 1]".into()));
        }
        if !finite(self.repetition_penalty) || self.repetition_penalty <= 0.0 {
            return Err(("repetition_penalty", "must be > 0".into()));
        }
        for (name, v) in [
            ("presence_penalty", self.presence_penalty),
            ("frequency_penalty", self.frequency_penalty),
        ] {
            if !finite(v) || !(-2.0..=2.0).contains(&v) {
                return Err((name, "must be in [-2, 2]".into()));
            }
        }
        if self.logit_bias.iter().any(|(_, b)| !finite(*b)) {
            return Err(("logit_bias", "values must be finite".into()));
        }
        Ok(())
    }
}

/// A small, fast, seedable generator (SplitMix64): good enough for sampling, no dependency.
#[derive(Clone, Debug)]
struct Rng(u64);

impl Rng {
    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1).
    fn next_f32(&mut self) -> f32 {
        (self.next_u64() >> 40) as f32 / (1u64 << 24) as f32
    }
}

/// Per-sequence sampling state.
#[derive(Clone, Debug)]
pub struct Sampler {
    params: SamplingParams,
    rng: Rng,
    /// Count of each generated token, for the penalties.
    counts: HashMap<u32, u32>,
    /// Candidate (id, logit) pairs, reused.
    cand: Vec<(u32, f32)>,
}

impl Sampler {
    /// `fallback_seed` is used when the request gave none (e.g. derived from the request id).
    pub fn new(params: SamplingParams, fallback_seed: u64) -> Sampler {
        let seed = params.seed.unwrap_or(fallback_seed);
        Sampler {
            params,
            rng: Rng(seed),
            counts: HashMap::new(),
            cand: Vec::new(),
        }
    }

    pub fn params(&self) -> &SamplingParams {
        &self.params
    }

    /// Records a token the sequence produced (for the penalties).
    pub fn accept(&mut self, token: u32) {
        *self.counts.entry(token).or_insert(0) += 1;
    }

    /// Picks the next token. `logits` is modified (bias and penalties applied in place).
    pub fn sample(&mut self, logits: &mut [f32]) -> u32 {
        self.apply_bias_and_penalties(logits);
        let p = &self.params;
        if p.temperature == 0.0 {
            return argmax(logits);
        }
        let inv_t = 1.0 / p.temperature;
        self.cand.clear();
        self.cand.extend(
            logits
                .iter()
                .enumerate()
                .filter(|(_, l)| l.is_finite())
                .map(|(i, &l)| (i as u32, l * inv_t)),
        );
        if self.cand.is_empty() {
            return argmax(logits);
        }
        let by_logit_desc =
            |a: &(u32, f32), b: &(u32, f32)| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0));
        let k = if p.top_k > 0 {
            p.top_k.min(self.cand.len())
        } else {
            self.cand.len()
        };
        if k < self.cand.len() {
            self.cand.select_nth_unstable_by(k - 1, by_logit_desc);
            self.cand.truncate(k);
        }
        self.cand.sort_unstable_by(by_logit_desc);
        // Softmax over the survivors.
        let max = self.cand[0].1;
        let mut sum = 0.0f32;
        for c in self.cand.iter_mut() {
            c.1 = (c.1 - max).exp();
            sum += c.1;
        }
        for c in self.cand.iter_mut() {
            c.1 /= sum;
        }
        if p.min_p > 0.0 {
            let floor = p.min_p * self.cand[0].1;
            let keep = self.cand.iter().take_while(|c| c.1 >= floor).count().max(1);
            self.cand.truncate(keep);
        }
        if p.top_p < 1.0 {
            let mut acc = 0.0;
            let mut keep = self.cand.len();
            for (i, c) in self.cand.iter().enumerate() {
                acc += c.1;
                if acc >= p.top_p {
                    keep = i + 1;
                    break;
                }
            }
            self.cand.truncate(keep);
        }
        let total: f32 = self.cand.iter().map(|c| c.1).sum();
        let mut r = self.rng.next_f32() * total;
        for c in &self.cand {
            r -= c.1;
            if r < 0.0 {
                return c.0;
            }
        }
        self.cand[self.cand.len() - 1].0
    }

    fn apply_bias_and_penalties(&self, logits: &mut [f32]) {
        let p = &self.params;
        for &(id, b) in &p.logit_bias {
            if let Some(l) = logits.get_mut(id as usize) {
                *l += b;
            }
        }
        for (&id, &n) in &self.counts {
            let Some(l) = logits.get_mut(id as usize) else {
                continue;
            };
            if p.repetition_penalty != 1.0 {
                *l = if *l > 0.0 {
                    *l / p.repetition_penalty
                } else {
                    *l * p.repetition_penalty
                };
            }
            *l -= p.presence_penalty + p.frequency_penalty * n as f32;
        }
    }
}

/// Index of the largest logit (the first on ties).
pub fn argmax(logits: &[f32]) -> u32 {
    let mut best = 0;
    for (i, &l) in logits.iter().enumerate() {
        if l > logits[best] {
            best = i;
        }
    }
    best as u32
}

/// log-softmax value of `token` and the `n` most likely (id, logprob) pairs.
pub fn logprobs(logits: &[f32], token: u32, n: usize) -> (f32, Vec<(u32, f32)>) {
    let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let lse = max + logits.iter().map(|l| (l - max).exp()).sum::<f32>().ln();
    let mut top: Vec<(u32, f32)> = Vec::with_capacity(n + 1);
    if n > 0 {
        for (i, &l) in logits.iter().enumerate() {
            if top.len() < n || l > top[top.len() - 1].1 {
                let at = top.partition_point(|&(_, v)| v >= l);
                top.insert(at, (i as u32, l));
                top.truncate(n);
            }
        }
    }
    let chosen = logits
        .get(token as usize)
        .map_or(f32::NEG_INFINITY, |l| l - lse);
    (chosen, top.into_iter().map(|(i, l)| (i, l - lse)).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn greedy_picks_the_largest_logit() {
        let mut s = Sampler::new(SamplingParams::default(), 1);
        assert_eq!(s.sample(&mut [0.1, 3.0, -1.0, 2.9]), 1);
    }

    #[test]
    fn same_seed_gives_same_draws_and_different_seed_differs() {
        let params = SamplingParams {
            temperature: 1.0,
            seed: Some(42),
            ..Default::default()
        };
        let logits: Vec<f32> = (0..100).map(|i| (i % 7) as f32 * 0.3).collect();
        let draw = |p: SamplingParams| {
            let mut s = Sampler::new(p, 0);
            (0..50)
                .map(|_| s.sample(&mut logits.clone()))
                .collect::<Vec<_>>()
        };
        assert_eq!(draw(params.clone()), draw(params.clone()));
        let other = SamplingParams {
            seed: Some(43),
            ..params.clone()
        };
        assert_ne!(draw(params), draw(other));
    }

    #[test]
    fn top_k_one_is_greedy() {
        let mut s = Sampler::new(
            SamplingParams {
                temperature: 5.0,
                top_k: 1,
                ..Default::default()
            },
            9,
        );
        for _ in 0..20 {
            assert_eq!(s.sample(&mut [0.0, 1.0, 0.5]), 1);
        }
    }

    #[test]
    fn min_p_drops_unlikely_tokens() {
        let mut s = Sampler::new(
            SamplingParams {
                temperature: 1.0,
                min_p: 0.5,
                ..Default::default()
            },
            3,
        );
        for _ in 0..50 {
            // exp(-10) is far below half of the top probability.
            assert_ne!(s.sample(&mut [5.0, 5.0, -5.0]), 2);
        }
    }

    #[test]
    fn presence_penalty_steers_away_from_seen_tokens() {
        let mut s = Sampler::new(
            SamplingParams {
                presence_penalty: 2.0,
                ..Default::default()
            },
            1,
        );
        s.accept(0);
        assert_eq!(s.sample(&mut [1.0, 0.5]), 1);
    }

    #[test]
    fn logprobs_are_normalized_and_sorted() {
        let logits = [1.0f32, 2.0, 3.0];
        let (lp, top) = logprobs(&logits, 2, 2);
        let total: f32 = logits.iter().map(|l| (l - 3.0f32).exp()).sum();
        assert!((lp - (1.0 / total).ln()).abs() < 1e-6);
        assert_eq!(top.iter().map(|t| t.0).collect::<Vec<_>>(), vec![2, 1]);
    }

    #[test]
    fn validation_names_the_bad_field() {
        let p = SamplingParams {
            top_p: 0.0,
            ..Default::default()
        };
        assert_eq!(p.validate().map_err(|e| e.0), Err("top_p"));
        let p = SamplingParams {
            temperature: -1.0,
            ..Default::default()
        };
        assert_eq!(p.validate().map_err(|e| e.0), Err("temperature"));
    }
}
