//! Online estimate of what a step costs, from which the engine caps the prefill tokens of steps
//! that also decode.
//!
//! A prefill chunk riding along with decode tokens delays every decoder's next token by its own
//! cost; the inter-token latency of running streams then swings between a decode-only step and a
//! step with a full chunk. The engine keeps two moving averages over measured steps — the time of
//! a decode-only step, and the extra time per prefill token — and allows a decoding step at most
//! `(slowdown - 1) * decode_step / per_token` prefill tokens, so such a step takes about
//! `slowdown` times a decode-only one. The estimate follows the machine, the model and the
//! context (attention makes late chunks of long prompts dearer) without a per-machine constant.
//!
//! The slowdown is what each decoder pays so that the requests still in prefill advance. It
//! holds only while the decoders are at least as many as the requests waiting for their first
//! token (the steady state, and a long prompt arriving among running streams). When the backlog
//! outnumbers them (a burst of arrivals, a server that has just started, a load whose prompts
//! are long beside its outputs), holding the many back to spare the few keeps the decode batch
//! small: prompts then get in one at a time while each step reads the weights for a handful of
//! next tokens, and the batch never fills. Such a step carries prefill up to the step budget
//! instead, until the decoders are the majority again. (A cap that only grew in proportion to
//! `backlog / decoders` settled, on 16 clients with 530-token prompts and 128-token outputs, at
//! four to seven decoders.)

/// Moving-average step costs (seconds) and the cap they imply.
#[derive(Debug, Clone)]
pub struct StepCost {
    slowdown: f64,
    /// Time of a decode-only step, and the number of decoders it was measured with.
    decode_step: Option<(f64, usize)>,
    /// Moving averages of `x * y` and `x * x` over steps that carried `x` prefill tokens and
    /// took `y` seconds more than the baseline: their ratio is the per-token cost fitted by
    /// least squares, which large chunks dominate.
    prefill_fit: Option<(f64, f64)>,
    /// The same fit over steps that verified drafted tokens: `x` drafted tokens, `y` seconds
    /// over the baseline (and over the prefill tokens the step also carried). A handful of
    /// drafted tokens beside the decoders cost far less each than a prefill chunk's tokens (the
    /// weights are read once either way), so drafting plans with this once it is measured.
    draft_fit: Option<(f64, f64)>,
    /// The same steps' extra time fitted as `intercept + slope * x` (`AffineFit`): what the
    /// latency targets plan with (`cap_within`), since the first prefill token of a decoding
    /// step costs far more than the next ones (the batch leaves the few-row kernels).
    prefill_affine: AffineFit,
    /// Decoding steps that carried prefill since the last decode-only one.
    since_decode_only: u32,
}

/// A moving least-squares line `y = intercept + slope * x`, kept as moving averages of `x`,
/// `y`, `x * y` and `x * x`. While the points' `x` barely vary the intercept cannot be told
/// from the slope, and the line goes through the origin instead (the cost of a chunk larger
/// than those seen is then overestimated, never under).
#[derive(Debug, Clone, Copy, Default)]
pub struct AffineFit {
    /// Moving averages of x, y, xy, xx; `None` before the first point.
    m: Option<[f64; 4]>,
}

impl AffineFit {
    /// Folds in the point (`x`, `y`).
    pub fn observe(&mut self, x: f64, y: f64) {
        let new = [x, y, x * y, x * x];
        self.m = Some(match self.m {
            None => new,
            Some(old) => std::array::from_fn(|i| old[i] + ALPHA * (new[i] - old[i])),
        });
    }

    /// `(intercept, slope)`, both at least 0; `None` before any point with `x > 0`.
    pub fn line(&self) -> Option<(f64, f64)> {
        let [x, y, xy, xx] = self.m?;
        if xx <= 0.0 {
            return None;
        }
        let var = xx - x * x;
        let through_origin = Some((0.0, (xy / xx).max(0.0)));
        // Relative spread of x under 10%: the slope is not determined.
        if var <= 0.01 * xx {
            return through_origin;
        }
        let slope = (xy - x * y) / var;
        let intercept = y - slope * x;
        if slope <= 0.0 || intercept < 0.0 {
            return through_origin;
        }
        Some((intercept, slope))
    }
}

/// Weight of the newest observation.
const ALPHA: f64 = 0.2;

/// Under sustained load nearly every step carries prefill; one decode-only step in this many
/// keeps the baseline fresh (about 3% of the prefill rate).
const REFRESH_STEPS: u32 = 32;

fn ema(old: Option<f64>, new: f64) -> f64 {
    old.map_or(new, |o| o + ALPHA * (new - o))
}

/// Folds the point (`x` tokens, `y` seconds) into a moving least-squares fit through the
/// origin, kept as the averages of `x * y` and `x * x`.
fn fold(fit: Option<(f64, f64)>, x: f64, y: f64) -> Option<(f64, f64)> {
    Some((ema(fit.map(|f| f.0), x * y), ema(fit.map(|f| f.1), x * x)))
}

/// The slope of a `fold`ed fit: seconds per token.
fn slope(fit: Option<(f64, f64)>) -> Option<f64> {
    fit.and_then(|(xy, xx)| (xx > 0.0).then_some(xy / xx))
}

impl StepCost {
    /// `slowdown` <= 0 turns the cap off.
    pub fn new(slowdown: f64) -> StepCost {
        StepCost {
            slowdown,
            decode_step: None,
            prefill_fit: None,
            draft_fit: None,
            prefill_affine: AffineFit::default(),
            since_decode_only: 0,
        }
    }

    /// Records a step of `decode` decode tokens and `prefill` prefill tokens that took `secs`.
    pub fn observe(&mut self, decode: usize, prefill: usize, secs: f64) {
        if !secs.is_finite() || secs < 0.0 {
            return;
        }
        if prefill == 0 {
            if decode > 0 {
                // A different batch is a different baseline: restart the average.
                let old = self.baseline(decode);
                self.decode_step = Some((ema(old, secs), decode));
                self.since_decode_only = 0;
            }
            return;
        }
        let base = if decode > 0 {
            self.since_decode_only = self.since_decode_only.saturating_add(1);
            match self.baseline(decode) {
                Some(t) => t,
                None => return, // no baseline for this batch to take off
            }
        } else {
            0.0
        };
        let extra = (secs - base).max(0.0);
        self.prefill_fit = fold(self.prefill_fit, prefill as f64, extra);
        if decode > 0 {
            // A step without decoders has no baseline to take off: its whole time is not the
            // extra a decoding step pays.
            self.prefill_affine.observe(prefill as f64, extra);
        }
    }

    /// Records a step of `decode` decode tokens that also verified `draft` drafted tokens and
    /// carried `prefill` prefill tokens, and took `secs`. Skipped without a baseline for that
    /// many decoders (or a prefill estimate, when it carried prefill).
    pub fn observe_draft(&mut self, decode: usize, draft: usize, prefill: usize, secs: f64) {
        if !secs.is_finite() || secs < 0.0 || draft == 0 || decode == 0 {
            return;
        }
        let Some(base) = self.baseline(decode) else {
            return;
        };
        let prefill_secs = match (prefill, self.per_prefill_token()) {
            (0, _) => 0.0,
            (n, Some(p)) => n as f64 * p,
            (_, None) => return,
        };
        let y = (secs - base - prefill_secs).max(0.0);
        self.draft_fit = fold(self.draft_fit, draft as f64, y);
    }

    /// Seconds per drafted token verified beside the decoders (`observe_draft`).
    pub fn per_draft_token(&self) -> Option<f64> {
        slope(self.draft_fit)
    }

    /// Seconds per prefill token: the least-squares slope of extra step time on prefill tokens
    /// over recent steps. Averaging each step's own ratio instead let the many small chunks
    /// (cheap per token while a small batch still waits on memory) hide what the large ones
    /// cost, and steps at the cap ran well over `slowdown`.
    pub fn per_prefill_token(&self) -> Option<f64> {
        slope(self.prefill_fit)
    }

    /// Seconds of the decode-only step baseline, if one was measured with about `decoders`
    /// decoders.
    fn baseline(&self, decoders: usize) -> Option<f64> {
        self.decode_step
            .filter(|&(_, d)| !self.stale_for(d, decoders))
            .map(|(t, _)| t)
    }

    /// Whether a baseline measured with `measured` decoders does not describe `now` decoders.
    fn stale_for(&self, measured: usize, now: usize) -> bool {
        now * 4 > measured * 5 + 4 || now * 5 + 4 < measured * 4
    }

    /// Prefill tokens allowed in the next step if it decodes for `decoders` sequences while
    /// `backlog` requests wait for their first token, within `min..=max` (`max` while the backlog
    /// outnumbers the decoders). `Some(0)` asks for a decode-only step to measure the baseline
    /// (none yet, an old one, or one measured with a rather different number of decoders);
    /// `None` when off.
    pub fn cap(&self, decoders: usize, backlog: usize, min: usize, max: usize) -> Option<usize> {
        if self.slowdown <= 0.0 {
            return None;
        }
        if backlog > decoders {
            return Some(max);
        }
        let fresh = self.decode_step.filter(|&(_, d)| {
            !self.stale_for(d, decoders) && self.since_decode_only < REFRESH_STEPS
        });
        let Some((d, _)) = fresh else {
            return Some(0);
        };
        let Some(p) = self.per_prefill_token() else {
            return Some(min.min(max));
        };
        let tokens = (self.slowdown - 1.0).max(0.0) * d / p.max(1e-9);
        let tokens = if tokens.is_finite() && tokens < max as f64 {
            tokens.round() as usize
        } else {
            max
        };
        Some(tokens.clamp(min.min(max), max))
    }

    /// Prefill tokens a step with `decoders` decoders can carry and still take at most
    /// `budget` seconds, within `min..=max`, from the affine fit of what prefill adds to a
    /// decoding step: 0 when even the first prefill token would overrun it (the step then
    /// decodes only, and the streams gain the time it saves). 0 also asks for a decode-only
    /// step to measure the baseline, as `cap` does. `min` applies once the budget leaves room
    /// for any prefill (small chunks pay the intercept for little progress).
    pub fn cap_within(&self, decoders: usize, budget: f64, min: usize, max: usize) -> usize {
        let fresh = self.decode_step.filter(|&(_, d)| {
            !self.stale_for(d, decoders) && self.since_decode_only < REFRESH_STEPS
        });
        let Some((d, _)) = fresh else {
            return 0;
        };
        let left = budget - d;
        let Some((intercept, slope)) = self.prefill_affine.line() else {
            return if left > 0.0 { min.min(max) } else { 0 };
        };
        if left <= intercept {
            return 0;
        }
        let tokens = (left - intercept) / slope.max(1e-9);
        let tokens = if tokens.is_finite() && tokens < max as f64 {
            tokens.floor() as usize
        } else {
            max
        };
        tokens.clamp(min.min(max), max)
    }

    /// Whether a step with `decoders` decoders would have no fresh decode-only baseline to
    /// compare with (then a decode-only step should measure one).
    pub fn wants_baseline(&self, decoders: usize) -> bool {
        !self.decode_step.is_some_and(|(_, d)| {
            !self.stale_for(d, decoders) && self.since_decode_only < REFRESH_STEPS
        })
    }

    /// What one more token in a step with `decoders` decoders costs, as a share of the tokens
    /// that step produces per unit of time: (seconds per extra token: per drafted token once
    /// measured, else per prefill token) × decoders / (seconds per decode-only step). A drafted
    /// token is worth feeding when the chance that it is accepted exceeds this. `None` without
    /// a fresh baseline or a per-token estimate.
    pub fn extra_token_share(&self, decoders: usize) -> Option<f64> {
        if self.wants_baseline(decoders) {
            return None;
        }
        let (t, _) = self.decode_step?;
        let p = self
            .per_draft_token()
            .or_else(|| self.per_prefill_token())?;
        (t > 0.0).then(|| p * decoders.max(1) as f64 / t)
    }

    pub fn decode_step_secs(&self) -> Option<f64> {
        self.decode_step.map(|(t, _)| t)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `rounds` pairs of steps with `decoders` decoders: a decode-only one of `decode` seconds,
    /// and one carrying `prefill` tokens at `per_token` seconds each.
    fn train(
        c: &mut StepCost,
        rounds: usize,
        decoders: usize,
        decode: f64,
        prefill: usize,
        per_token: f64,
    ) {
        for _ in 0..rounds {
            c.observe(decoders, 0, decode);
            c.observe(decoders, prefill, decode + prefill as f64 * per_token);
        }
    }

    #[test]
    fn asks_for_a_decode_only_step_first_and_is_none_when_off() {
        let mut c = StepCost::new(2.0);
        assert_eq!(c.cap(8, 1, 16, 512), Some(0), "no baseline yet");
        c.observe(8, 0, 0.030);
        assert_eq!(
            c.cap(8, 1, 16, 512),
            Some(16),
            "baseline but no prefill cost: the floor"
        );
        c.observe(8, 30, 0.090);
        assert!(c.cap(8, 1, 16, 512).is_some_and(|t| t > 0));
        let mut off = StepCost::new(0.0);
        assert_eq!(off.cap(8, 1, 16, 512), None);
        off.observe(8, 0, 0.030);
        off.observe(8, 30, 0.090);
        assert_eq!(off.cap(8, 1, 16, 512), None);
    }

    #[test]
    fn a_backlog_that_outnumbers_the_decoders_lifts_the_cap_to_the_step_budget() {
        // Decode-only 30 ms, 2 ms per prefill token, slowdown 2: 15 tokens while the backlog is
        // at most the decoders; one more waiting than decoding: the whole step budget.
        let mut c = StepCost::new(2.0);
        train(&mut c, 50, 4, 0.030, 20, 0.002);
        assert_eq!(c.cap(4, 0, 1, 512), Some(15));
        assert_eq!(c.cap(4, 4, 1, 512), Some(15));
        assert_eq!(c.cap(4, 5, 1, 512), Some(512));
        assert_eq!(c.cap(4, 5, 1, 96), Some(96), "bounded by the step budget");
        assert_eq!(
            StepCost::new(2.0).cap(4, 5, 1, 96),
            Some(96),
            "no baseline needed: the cap does not use it"
        );
    }

    #[test]
    fn cap_makes_a_mixed_step_cost_about_slowdown_times_a_decode_step() {
        // Decode-only step 30 ms, 2 ms per prefill token: at slowdown 2 the cap is 15 tokens
        // (30 ms of prefill), at 3 it is 30.
        for (slowdown, want) in [(2.0, 15), (3.0, 30)] {
            let mut c = StepCost::new(slowdown);
            train(&mut c, 50, 8, 0.030, 20, 0.002);
            assert_eq!(c.cap(8, 1, 1, 512), Some(want), "slowdown {slowdown}");
        }
    }

    #[test]
    fn baseline_is_refreshed_under_sustained_prefill_and_when_the_batch_changes() {
        let mut c = StepCost::new(2.0);
        c.observe(8, 0, 0.030);
        for _ in 0..REFRESH_STEPS - 1 {
            c.observe(8, 20, 0.070);
            assert!(c.cap(8, 1, 1, 512).is_some_and(|t| t > 0));
        }
        c.observe(8, 20, 0.070);
        assert_eq!(
            c.cap(8, 1, 1, 512),
            Some(0),
            "stale after {REFRESH_STEPS} mixed steps"
        );
        c.observe(8, 0, 0.030);
        assert!(c.cap(8, 1, 1, 512).is_some_and(|t| t > 0), "fresh again");
        assert_eq!(
            c.cap(16, 1, 1, 512),
            Some(0),
            "twice the decoders: measure again"
        );
        assert!(
            c.cap(9, 1, 1, 512).is_some_and(|t| t > 0),
            "a few more: same baseline"
        );
    }

    #[test]
    fn cap_stays_within_bounds_and_garbage_is_ignored() {
        let mut c = StepCost::new(2.0);
        c.observe(0, 100, 10.0); // 100 ms per token: the formula gives 0
        c.observe(4, 0, 0.010);
        assert_eq!(c.cap(4, 1, 16, 512), Some(16), "floor");
        let mut fast = StepCost::new(10.0);
        fast.observe(0, 100, 0.0001);
        fast.observe(4, 0, 0.5);
        assert_eq!(fast.cap(4, 1, 16, 512), Some(512), "ceiling");
        fast.observe(4, 0, f64::NAN);
        fast.observe(4, 10, -1.0);
        assert_eq!(fast.decode_step_secs(), Some(0.5));
    }

    #[test]
    fn large_chunks_set_the_per_token_cost() {
        // Small chunks ride nearly free on a step still waiting on memory (0.1 ms a token);
        // large ones pay 2 ms a token. Averaging each step's own ratio (about 1 ms) would let a
        // capped step run to twice its budget; the least-squares slope stays near 2 ms.
        let mut c = StepCost::new(2.0);
        for _ in 0..20 {
            c.observe(8, 0, 0.030);
            c.observe(8, 2, 0.030 + 2.0 * 0.0001);
            c.observe(8, 30, 0.030 + 30.0 * 0.002);
        }
        let cap = c.cap(8, 1, 1, 512).unwrap_or(0);
        assert!(
            (15..=16).contains(&cap),
            "cap {cap}: 30 ms of budget at ~2 ms a token"
        );
    }

    #[test]
    fn estimates_follow_a_change_in_cost() {
        let mut c = StepCost::new(2.0);
        train(&mut c, 30, 8, 0.030, 10, 0.001);
        let before = c.cap(8, 1, 1, 512).unwrap_or(0);
        // Prefill tokens get dearer (a long context): the cap falls.
        train(&mut c, 30, 8, 0.030, 10, 0.003);
        let after = c.cap(8, 1, 1, 512).unwrap_or(0);
        assert!(after < before / 2, "cap {before} -> {after}");
    }

    #[test]
    fn drafted_tokens_once_measured_set_the_extra_token_share() {
        // Decode-only 40 ms for 1 decoder, prefill 5 ms a token; drafted tokens 2 ms each.
        let mut c = StepCost::new(2.0);
        train(&mut c, 20, 1, 0.040, 100, 0.005);
        let before = c.extra_token_share(1).expect("share");
        assert!((before - 0.125).abs() < 1e-6, "{before}");
        for k in [1usize, 3, 5, 2, 4].iter().cycle().take(40) {
            c.observe_draft(1, *k, 0, 0.040 + *k as f64 * 0.002);
        }
        let after = c.extra_token_share(1).expect("share");
        assert!((after - 0.05).abs() < 1e-6, "{after}");
        // A draft step that also carried prefill: the prefill's own cost is taken off.
        c.observe_draft(1, 2, 10, 0.040 + 2.0 * 0.002 + 10.0 * 0.005);
        assert!((c.extra_token_share(1).expect("share") - 0.05).abs() < 1e-6);
        // No baseline for 8 decoders: not recorded.
        c.observe_draft(8, 4, 0, 1.0);
        assert!((c.extra_token_share(1).expect("share") - 0.05).abs() < 1e-6);
    }

    #[test]
    fn the_affine_fit_recovers_a_steps_fixed_and_per_token_prefill_cost() {
        // Prefill adds 20 ms plus 1.5 ms a token to a 40 ms decode-only step.
        let mut c = StepCost::new(1.5);
        for x in [8usize, 40, 16, 64, 24].iter().cycle().take(60) {
            c.observe(8, 0, 0.040);
            c.observe(8, *x, 0.040 + 0.020 + 0.0015 * *x as f64);
        }
        let (a, b) = c.prefill_affine.line().expect("fitted");
        assert!(
            (a - 0.020).abs() < 1e-6 && (b - 0.0015).abs() < 1e-8,
            "{a} {b}"
        );
        // 100 ms of budget: 60 ms left after decoding, 40 after the fixed part: 26 tokens.
        assert_eq!(c.cap_within(8, 0.100, 4, 512), 26);
        // Under the fixed part: decode only; no baseline for 16 decoders: decode only.
        assert_eq!(c.cap_within(8, 0.055, 4, 512), 0);
        assert_eq!(c.cap_within(16, 1.0, 4, 512), 0);
        assert_eq!(
            c.cap_within(8, 10.0, 4, 512),
            512,
            "bounded by the step's tokens"
        );
    }

    #[test]
    fn chunks_all_of_one_size_fit_a_line_through_the_origin() {
        let mut c = StepCost::new(1.5);
        for _ in 0..20 {
            c.observe(4, 0, 0.030);
            c.observe(4, 10, 0.030 + 0.030);
        }
        assert_eq!(c.prefill_affine.line(), Some((0.0, 0.003)));
    }
}
