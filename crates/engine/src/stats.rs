//! Counters, gauges and histograms the engine thread updates and the server renders
//! (Prometheus text). Lock-free atomics: the engine never waits on a metrics reader.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, OnceLock};

use crate::kv_events::KvEventStats;
use crate::tier::TierStats;

/// A fixed-bucket histogram (cumulative buckets are computed when rendering).
pub struct Histogram {
    pub bounds: &'static [f64],
    counts: Vec<AtomicU64>,
    /// Sum of observations, in micro-units, to stay atomic.
    sum_micros: AtomicU64,
    count: AtomicU64,
}

impl Histogram {
    pub fn new(bounds: &'static [f64]) -> Histogram {
        Histogram {
            bounds,
            counts: (0..=bounds.len()).map(|_| AtomicU64::new(0)).collect(),
            sum_micros: AtomicU64::new(0),
            count: AtomicU64::new(0),
        }
    }

    pub fn observe(&self, v: f64) {
        let i = self.bounds.partition_point(|&b| b < v);
        self.counts[i].fetch_add(1, Relaxed);
        self.sum_micros
            .fetch_add((v.max(0.0) * 1e6) as u64, Relaxed);
        self.count.fetch_add(1, Relaxed);
    }

    /// (upper bound, cumulative count) pairs, the last bound being +Inf; then sum and count.
    pub fn snapshot(&self) -> (Vec<(f64, u64)>, f64, u64) {
        let mut acc = 0;
        let mut out = Vec::with_capacity(self.counts.len());
        for (i, c) in self.counts.iter().enumerate() {
            acc += c.load(Relaxed);
            out.push((self.bounds.get(i).copied().unwrap_or(f64::INFINITY), acc));
        }
        (
            out,
            self.sum_micros.load(Relaxed) as f64 / 1e6,
            self.count.load(Relaxed),
        )
    }
}

const LATENCY_BOUNDS: &[f64] = &[
    0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0,
    40.0, 80.0,
];
const RATIO_BOUNDS: &[f64] = &[0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0];
const TOKENS_BOUNDS: &[f64] = &[
    1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0, 1024.0, 2048.0,
];

/// Everything exported as metrics.
pub struct EngineStats {
    pub running: AtomicU64,
    pub waiting: AtomicU64,
    pub tiles_total: AtomicU64,
    pub tiles_in_use: AtomicU64,
    pub tiles_cached: AtomicU64,
    pub preemptions: AtomicU64,
    pub prompt_tokens: AtomicU64,
    pub generation_tokens: AtomicU64,
    pub prefix_queried_tokens: AtomicU64,
    pub prefix_hit_tokens: AtomicU64,
    pub finished_stop: AtomicU64,
    pub finished_length: AtomicU64,
    pub finished_abort: AtomicU64,
    pub steps: AtomicU64,
    /// Embedding inputs computed.
    pub embedded_inputs: AtomicU64,
    /// Drafts proposed (one per sequence and step that fed a draft), their tokens, and the
    /// drafted tokens accepted.
    pub spec_drafts: AtomicU64,
    pub spec_draft_tokens: AtomicU64,
    pub spec_accepted_tokens: AtomicU64,
    /// Time spent drafting (a draft model's forward passes, prompt lookup's scans), in
    /// microseconds.
    pub spec_draft_micros: AtomicU64,
    /// Per finished request that fed drafts: accepted / drafted tokens.
    pub spec_acceptance: Histogram,
    pub ttft: Histogram,
    pub itl: Histogram,
    pub e2e: Histogram,
    pub queue_time: Histogram,
    pub tokens_per_step: Histogram,
    /// The KV tiers' counters, once the engine has started them.
    pub tiers: OnceLock<Arc<TierStats>>,
    /// The KV event stream's counters, when events are published.
    pub kv_events: OnceLock<Arc<KvEventStats>>,
}

impl Default for EngineStats {
    fn default() -> Self {
        let z = || AtomicU64::new(0);
        EngineStats {
            running: z(),
            waiting: z(),
            tiles_total: z(),
            tiles_in_use: z(),
            tiles_cached: z(),
            preemptions: z(),
            prompt_tokens: z(),
            generation_tokens: z(),
            prefix_queried_tokens: z(),
            prefix_hit_tokens: z(),
            finished_stop: z(),
            finished_length: z(),
            finished_abort: z(),
            steps: z(),
            embedded_inputs: z(),
            spec_drafts: z(),
            spec_draft_tokens: z(),
            spec_accepted_tokens: z(),
            spec_draft_micros: z(),
            spec_acceptance: Histogram::new(RATIO_BOUNDS),
            ttft: Histogram::new(LATENCY_BOUNDS),
            itl: Histogram::new(LATENCY_BOUNDS),
            e2e: Histogram::new(LATENCY_BOUNDS),
            queue_time: Histogram::new(LATENCY_BOUNDS),
            tokens_per_step: Histogram::new(TOKENS_BOUNDS),
            tiers: OnceLock::new(),
            kv_events: OnceLock::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histogram_buckets_are_cumulative() {
        let h = Histogram::new(&[1.0, 2.0]);
        h.observe(0.5);
        h.observe(1.5);
        h.observe(9.0);
        let (b, sum, n) = h.snapshot();
        assert_eq!(b.iter().map(|x| x.1).collect::<Vec<_>>(), vec![1, 2, 3]);
        assert_eq!(n, 3);
        assert!((sum - 11.0).abs() < 1e-6);
    }
}
