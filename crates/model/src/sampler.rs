//! Token sampling from logits, per sequence.
//!
//! Order of operations (as llama.cpp and vLLM do): the sequence's logits processors on the raw
//! logits (logit bias, penalties, then any other, see `crate::logits`), then greedy if
//! temperature is 0; otherwise temperature, top-k, top-p, min-p, and a draw from
//! the sequence's own seeded generator. (top-p and min-p each keep the most likely candidates
//! by the same probabilities, so the code may apply them in either order.) Each sequence owns
//! its `Sampler`, so a seeded request's draws do not depend on what else runs in the batch.

use crate::attention::exp_neg;
use crate::logits::{LogitBias, LogitsProcessor, Penalties, ProcessorChain};

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

/// Per-sequence sampling state: the logits processors (`crate::logits`), then the draw.
#[derive(Debug)]
pub struct Sampler {
    params: SamplingParams,
    rng: Rng,
    /// Logit bias and penalties from `params`, then any processor pushed since.
    chain: ProcessorChain,
}

/// The buffers of a draw, grown to the vocabulary and reused; one per engine (draws happen one
/// at a time), not one per sequence.
#[derive(Clone, Debug, Default)]
pub struct SampleScratch {
    /// The logits as the processors changed them, when one is active.
    row: Vec<f32>,
    /// Candidate (id, scaled logit) pairs; their probabilities once the softmax is applied.
    cand: Vec<(u32, f32)>,
    /// Nucleus candidates at its edge, the only ones that need sorting.
    edge: Vec<(u32, f32)>,
    /// Unnormalized probabilities of the whole vocabulary.
    weights: Vec<f32>,
    /// Sums of `weights` per `CHUNK`.
    chunk_sums: Vec<f32>,
    /// Weight and token count per histogram bucket.
    hist: Vec<(f32, u32)>,
}

/// Tokens per partial sum of the full-vocabulary draw.
const CHUNK: usize = 1024;

/// Histogram buckets over a weight's f32 bits (weights lie in [0, 1]; the key keeps the exponent
/// and three mantissa bits, so it is monotone in the weight).
const BUCKET_SHIFT: u32 = 20;
const BUCKETS: usize = (1.0f32.to_bits() >> BUCKET_SHIFT) as usize + 1;

impl Sampler {
    /// `fallback_seed` is used when the request gave none (e.g. derived from the request id).
    pub fn new(params: SamplingParams, fallback_seed: u64) -> Sampler {
        let seed = params.seed.unwrap_or(fallback_seed);
        let mut chain = ProcessorChain::default();
        chain.push(Box::new(LogitBias(params.logit_bias.clone())));
        chain.push(Box::new(Penalties::new(
            params.repetition_penalty,
            params.presence_penalty,
            params.frequency_penalty,
        )));
        Sampler {
            params,
            rng: Rng(seed),
            chain,
        }
    }

    /// Adds a processor at the end of the chain (after bias and penalties).
    pub fn push_processor(&mut self, p: Box<dyn LogitsProcessor>) {
        self.chain.push(p);
    }

    pub fn params(&self) -> &SamplingParams {
        &self.params
    }

    /// Lets the processors do their row-independent work for the next token now (see
    /// `LogitsProcessor::prepare`); `sample` does it anyway when it was not done.
    pub fn prepare(&mut self) {
        self.chain.prepare();
    }

    /// Records a token the sequence produced (for the penalties, or a grammar's state).
    pub fn accept(&mut self, token: u32) {
        self.chain.accept(token);
    }

    /// Picks the next token. `logits` stay as they are: when a processor of the chain would
    /// change them, they are copied into the scratch and changed there (most requests have no
    /// bias or penalty, and skip copying a vocabulary-wide row per token).
    pub fn sample(&mut self, logits: &[f32], scratch: &mut SampleScratch) -> u32 {
        self.chain.prepare();
        if self.chain.active() {
            let mut row = std::mem::take(&mut scratch.row);
            row.clear();
            row.extend_from_slice(logits);
            self.chain.apply(&mut row);
            let token = self.pick(&row, scratch);
            scratch.row = row;
            return token;
        }
        self.pick(logits, scratch)
    }

    /// `sample` after the processors.
    fn pick(&mut self, logits: &[f32], s: &mut SampleScratch) -> u32 {
        let (inv_t, top) = match self.scale(logits) {
            Ok(v) => v,
            Err(token) => return token,
        };
        if self.params.top_k == 0 && self.params.top_p >= 1.0 {
            // Every token (above min_p) can be drawn: no ordering is needed, so draw from the
            // whole vocabulary in id order.
            return self.draw_all(logits, inv_t, top, s);
        }
        self.survivors(logits, inv_t, top, s);
        let total: f32 = s.cand.iter().map(|c| c.1).sum();
        let mut r = self.rng.next_f32() * total;
        for c in &s.cand {
            r -= c.1;
            if r < 0.0 {
                return c.0;
            }
        }
        s.cand[s.cand.len() - 1].0
    }

    /// `1 / temperature` and the largest scaled logit; `Err(token)` when the pick is the
    /// argmax (greedy, or no finite logit).
    fn scale(&self, logits: &[f32]) -> Result<(f32, f32), u32> {
        let temperature = self.params.temperature;
        if temperature == 0.0 {
            return Err(argmax(logits));
        }
        let inv_t = 1.0 / temperature;
        let max = finite_max(logits).ok_or_else(|| argmax(logits))?;
        // Multiplying by a positive constant keeps the order: the largest scaled logit.
        Ok((inv_t, max * inv_t))
    }

    /// The distribution `sample` draws from for `logits` (after the processors, temperature,
    /// top-k, top-p and min-p): (token, probability) pairs with a probability above 0, summing
    /// to 1; one token with probability 1 when the draw is greedy. The generator is not used.
    /// Speculative sampling compares a drafter's distribution with this one.
    pub fn distribution(&mut self, logits: &[f32], s: &mut SampleScratch) -> Vec<(u32, f32)> {
        self.chain.prepare();
        if self.chain.active() {
            let mut row = std::mem::take(&mut s.row);
            row.clear();
            row.extend_from_slice(logits);
            self.chain.apply(&mut row);
            let d = self.distribution_of(&row, s);
            s.row = row;
            return d;
        }
        self.distribution_of(logits, s)
    }

    /// `distribution` after the processors.
    fn distribution_of(&self, logits: &[f32], s: &mut SampleScratch) -> Vec<(u32, f32)> {
        let (inv_t, top) = match self.scale(logits) {
            Ok(v) => v,
            Err(token) => return vec![(token, 1.0)],
        };
        let mut d: Vec<(u32, f32)> = if self.params.top_k == 0 && self.params.top_p >= 1.0 {
            s.weights.resize(logits.len(), 0.0);
            fill_weights(logits, inv_t, top, self.params.min_p, &mut s.weights);
            let w = s.weights.iter().enumerate();
            w.filter(|(_, &w)| w > 0.0)
                .map(|(i, &w)| (i as u32, w))
                .collect()
        } else {
            self.survivors(logits, inv_t, top, s);
            s.cand.iter().copied().filter(|c| c.1 > 0.0).collect()
        };
        let total: f32 = d.iter().map(|c| c.1).sum();
        if d.is_empty() || total <= 0.0 || !total.is_finite() {
            return vec![(argmax(logits), 1.0)];
        }
        for c in &mut d {
            c.1 /= total;
        }
        d
    }

    /// Draws a token from `dist` ((token, weight) pairs, weights not necessarily normalized)
    /// with this sampler's generator; the first token when every weight is 0.
    pub fn draw_from(&mut self, dist: &[(u32, f32)]) -> u32 {
        let total: f32 = dist.iter().map(|c| c.1).sum();
        let mut r = self.rng.next_f32() * total;
        for c in dist {
            r -= c.1;
            if r < 0.0 {
                return c.0;
            }
        }
        // Rounding left a sliver: the last token that could be drawn.
        dist.iter()
            .rev()
            .find(|c| c.1 > 0.0)
            .or(dist.first())
            .map_or(0, |c| c.0)
    }

    /// A uniform draw in [0, 1) from this sampler's generator (speculative sampling's
    /// acceptance test).
    pub fn uniform(&mut self) -> f32 {
        self.rng.next_f32()
    }

    /// Leaves in `s.cand` the tokens top-k / top-p / min-p keep, each with its probability
    /// before those cuts (a draw takes them in proportion to these).
    fn survivors(&self, logits: &[f32], inv_t: f32, top: f32, s: &mut SampleScratch) {
        let (top_k, top_p, min_p) = (self.params.top_k, self.params.top_p, self.params.min_p);
        // The candidates: every token that can be in the top k or the nucleus (found through a
        // histogram of the weights). For top k they are all sorted; for the nucleus only the
        // edge ones (`candidates`), the rest being in whatever the order.
        let norm = self.candidates(logits, inv_t, top, s);
        let by_logit_desc =
            |a: &(u32, f32), b: &(u32, f32)| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0));
        // Leading candidates that are in the nucleus whatever the rounding of the walk below.
        let mut sure = 0;
        if top_k > 0 {
            let k = top_k.min(s.cand.len());
            if k < s.cand.len() {
                s.cand.select_nth_unstable_by(k - 1, by_logit_desc);
                s.cand.truncate(k);
            }
            s.cand.sort_unstable_by(by_logit_desc);
        } else {
            sure = s.cand.len();
            s.edge.sort_unstable_by(by_logit_desc);
            s.cand.extend_from_slice(&s.edge);
        }
        // Softmax over the survivors: `candidates` left each token's `exp_neg(l / t - top)` in
        // `weights` (`top` being the largest scaled logit), so it is looked up, not recomputed.
        let mut sum = 0.0f32;
        for c in s.cand.iter_mut() {
            c.1 = s.weights[c.0 as usize];
            sum += c.1;
        }
        if let Some(total) = norm {
            // Tokens left out of `cand` are below top_p's reach, but their mass still counts.
            sum = total;
        }
        for c in s.cand.iter_mut() {
            c.1 /= sum;
        }
        if min_p > 0.0 {
            // The top token has probability 1 / sum relative to the others' exp(l - max).
            let floor = min_p * (1.0 / sum);
            // With min_p <= 1 the top token (probability 1 / sum) always stays; `best` only
            // guards against a degenerate sum (0 or NaN).
            let best = s.cand.iter().copied().min_by(by_logit_desc);
            sure = s.cand[..sure].iter().filter(|c| c.1 >= floor).count();
            s.cand.retain(|c| c.1 >= floor);
            if s.cand.is_empty() {
                s.cand.extend(best);
            }
        }
        if top_p < 1.0 {
            let mut acc = 0.0;
            let mut keep = s.cand.len();
            for (i, c) in s.cand.iter().enumerate() {
                acc += c.1;
                // The sure candidates hold less than top_p of the mass by the histogram's sums;
                // summed here in id order the rounding may differ, and must not cut them.
                if acc >= top_p && i + 1 >= sure {
                    keep = i + 1;
                    break;
                }
            }
            s.cand.truncate(keep);
        }
    }

    /// Fills `cand` with (id, scaled logit) of every finite token that may be among the `top_k`
    /// (when set) or in the `top_p` nucleus: the tokens of the highest weight buckets that hold
    /// `top_k` tokens, or `top_p` of the whole mass, and one more bucket against rounding.
    /// For the nucleus, the tokens of the crossing bucket and that one more go to `edge`
    /// instead: only they need ordering (a flat distribution puts tens of thousands of tokens
    /// in the nucleus, and sorting them all cost 1.6-3 ms per draw). `weights` is left holding
    /// every token's `exp_neg(l / t - top)`.
    /// Returns the whole vocabulary's weight when the softmax must be normalized by it (top_p
    /// alone: tokens left out still count).
    fn candidates(
        &self,
        logits: &[f32],
        inv_t: f32,
        top: f32,
        s: &mut SampleScratch,
    ) -> Option<f32> {
        let (top_k, top_p) = (self.params.top_k, self.params.top_p);
        s.weights.resize(logits.len(), 0.0);
        fill_weights(logits, inv_t, top, 0.0, &mut s.weights);
        let total = lane_sum(&s.weights);
        let key = |w: f32| (w.to_bits() >> BUCKET_SHIFT) as usize;
        s.hist.clear();
        s.hist.resize(BUCKETS, (0.0, 0));
        for &w in &s.weights {
            let h = &mut s.hist[key(w).min(BUCKETS - 1)];
            h.0 += w;
            h.1 += 1;
        }
        let (mut mass, mut count, mut reached) = (0.0f32, 0usize, false);
        let (mut lowest, mut crossing) = (0, 0);
        for b in (0..BUCKETS).rev() {
            let (m, c) = s.hist[b];
            if c == 0 {
                continue;
            }
            lowest = b;
            if reached {
                break;
            }
            crossing = b;
            mass += m;
            count += c as usize;
            reached = if top_k > 0 {
                count >= top_k
            } else {
                mass >= top_p * total
            };
        }
        // For the nucleus, tokens above the bucket where the mass crosses top_p are in it
        // whatever their order; those of that bucket and the next are the edge, which the caller
        // sorts. (For top k every candidate goes to `cand`.)
        let edge_below = if top_k > 0 { 0 } else { crossing + 1 };
        s.cand.clear();
        s.edge.clear();
        for (i, (&l, &w)) in logits.iter().zip(&s.weights).enumerate() {
            let b = key(w);
            if l.is_finite() && b >= lowest {
                let c = (i as u32, l * inv_t);
                if b >= edge_below {
                    s.cand.push(c);
                } else {
                    s.edge.push(c);
                }
            }
        }
        (top_k == 0).then_some(total)
    }

    /// Draws from every token whose weight is at least `min_p` of the top one's, in id order:
    /// weights into `s.weights`, their sums per `CHUNK`, then the chunk and the token.
    fn draw_all(&mut self, logits: &[f32], inv_t: f32, top: f32, s: &mut SampleScratch) -> u32 {
        let n = logits.len();
        s.weights.resize(n, 0.0);
        let min_p = self.params.min_p;
        fill_weights(logits, inv_t, top, min_p, &mut s.weights);
        s.chunk_sums.clear();
        s.chunk_sums.extend(s.weights.chunks(CHUNK).map(lane_sum));
        let total: f32 = s.chunk_sums.iter().sum();
        let mut r = self.rng.next_f32() * total;
        for (c, &cs) in s.chunk_sums.iter().enumerate() {
            if r >= cs {
                r -= cs;
                continue;
            }
            for (i, &w) in s.weights[c * CHUNK..n.min((c + 1) * CHUNK)]
                .iter()
                .enumerate()
            {
                r -= w;
                if r < 0.0 {
                    return (c * CHUNK + i) as u32;
                }
            }
        }
        // Rounding left a sliver: the last token that could be drawn.
        s.weights.iter().rposition(|&w| w > 0.0).unwrap_or(0) as u32
    }
}

/// Index of the largest logit (the first on ties; NaN never wins; 0 if there is no number).
pub fn argmax(logits: &[f32]) -> u32 {
    // Two passes that vectorize: the maximum (order-free), then where it first occurs, found
    // block by block (a test over a whole block vectorizes; an element-wise search with an early
    // exit does not, and cost 0.26 ms when the maximum came late in the vocabulary).
    let max = lanes_fold(logits, f32::NEG_INFINITY, f32::max);
    const BLOCK: usize = 256;
    for (b, block) in logits.chunks(BLOCK).enumerate() {
        if block.iter().fold(false, |found, &l| found | (l == max)) {
            let i = block.iter().position(|&l| l == max).unwrap_or(0);
            return (b * BLOCK + i) as u32;
        }
    }
    0
}

/// The largest finite logit, if any.
fn finite_max(logits: &[f32]) -> Option<f32> {
    let max = lanes_fold(logits, f32::NEG_INFINITY, |m, l| {
        if l.is_finite() {
            m.max(l)
        } else {
            m
        }
    });
    max.is_finite().then_some(max)
}

/// `f` folded over `x` in eight interleaved lanes, then over the lanes: for order-free folds
/// (max), written so the compiler can vectorize them.
fn lanes_fold(x: &[f32], init: f32, f: impl Fn(f32, f32) -> f32) -> f32 {
    let mut lanes = [init; 8];
    let (chunks, tail) = x.as_chunks::<8>();
    for c in chunks {
        for j in 0..8 {
            lanes[j] = f(lanes[j], c[j]);
        }
    }
    let v = lanes.into_iter().fold(init, &f);
    tail.iter().fold(v, |a, &b| f(a, b))
}

/// `sum(e^(l - max))` over `logits` (every `l <= max`), in f64 over eight lanes.
fn exp_total(logits: &[f32], max: f32) -> f64 {
    #[cfg(target_arch = "x86_64")]
    if kernels::isa() >= kernels::Isa::Avx2 {
        // SAFETY: the features were just detected.
        return unsafe { exp_total_avx2(logits, max) };
    }
    exp_total_body(logits, max)
}

/// # Safety
/// The CPU must support AVX2 and FMA (`exp_total` calls this only when `kernels::isa()` is at least
/// `Avx2`, which detection grants only with both).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn exp_total_avx2(logits: &[f32], max: f32) -> f64 {
    exp_total_body(logits, max)
}

/// Blocks of 256: the exponentials into a buffer (a map loop, which vectorizes), then summed
/// into eight f64 lanes.
#[inline(always)]
fn exp_total_body(logits: &[f32], max: f32) -> f64 {
    let mut lanes = [0.0f64; 8];
    let mut e = [0.0f32; 256];
    for block in logits.chunks(256) {
        let e = &mut e[..block.len()];
        for (o, &l) in e.iter_mut().zip(block) {
            *o = exp_neg(l - max);
        }
        let (chunks, tail) = e.as_chunks::<8>();
        for c in chunks {
            for j in 0..8 {
                lanes[j] += f64::from(c[j]);
            }
        }
        for (j, &v) in tail.iter().enumerate() {
            lanes[j] += f64::from(v);
        }
    }
    lanes.iter().sum::<f64>()
}

/// The sum of `x` over eight lanes, then the lanes, then the tail.
fn lane_sum(x: &[f32]) -> f32 {
    lanes_fold(x, 0.0, |a, b| a + b)
}

/// `w[i] = e^(l[i] * inv_t - top)` for finite logits with a result of at least `min_p`, else 0.
fn fill_weights(logits: &[f32], inv_t: f32, top: f32, min_p: f32, w: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if kernels::isa() >= kernels::Isa::Avx2 {
        // SAFETY: the features were just detected.
        unsafe { fill_weights_avx2(logits, inv_t, top, min_p, w) };
        return;
    }
    fill_weights_body(logits, inv_t, top, min_p, w);
}

/// # Safety
/// The CPU must support AVX2 and FMA (`fill_weights` calls this only when `kernels::isa()` is at
/// least `Avx2`, which detection grants only with both).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn fill_weights_avx2(logits: &[f32], inv_t: f32, top: f32, min_p: f32, w: &mut [f32]) {
    fill_weights_body(logits, inv_t, top, min_p, w);
}

/// The loop of `fill_weights`, plain arithmetic so it vectorizes in the AVX2 entry point (the
/// same operations per element either way: `exp_neg` is written with `mul_add`).
#[inline(always)]
fn fill_weights_body(logits: &[f32], inv_t: f32, top: f32, min_p: f32, w: &mut [f32]) {
    for (o, &l) in w.iter_mut().zip(logits) {
        let e = exp_neg(l * inv_t - top);
        *o = if l.is_finite() && e >= min_p { e } else { 0.0 };
    }
}

/// log-softmax value of `token` and the `n` most likely (id, logprob) pairs.
pub fn logprobs(logits: &[f32], token: u32, n: usize) -> (f32, Vec<(u32, f32)>) {
    let max = lanes_fold(logits, f32::NEG_INFINITY, f32::max);
    let lse = max + (exp_total(logits, max).ln() as f32);
    let mut top: Vec<(u32, f32)> = Vec::with_capacity(n + 1);
    if n > 0 {
        // Blocks whose largest value cannot enter a full list are skipped whole (the block
        // maxima are a vectorized fold), so nearly every element is read once.
        for (b, block) in logits.chunks(256).enumerate() {
            if top.len() == n && lanes_fold(block, f32::NEG_INFINITY, f32::max) <= top[n - 1].1 {
                continue;
            }
            for (j, &l) in block.iter().enumerate() {
                if top.len() < n || l > top[top.len() - 1].1 {
                    let at = top.partition_point(|&(_, v)| v >= l);
                    top.insert(at, ((b * 256 + j) as u32, l));
                    top.truncate(n);
                }
            }
        }
    }
    let chosen = logits
        .get(token as usize)
        .map_or(f32::NEG_INFINITY, |l| l - lse);
    (chosen, top.into_iter().map(|(i, l)| (i, l - lse)).collect())
}

#[cfg(test)]
#[path = "sampler_tests.rs"]
mod tests;
