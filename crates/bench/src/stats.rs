//! Latency statistics: percentiles and summaries of samples.
//!
//! Percentiles use linear interpolation between the two closest ranks (numpy's default, also what
//! vLLM's benchmark reports), so p50 of an even-sized sample is the mean of the middle two. Samples
//! are seconds in, milliseconds out; non-finite samples are dropped rather than poisoning the sort.
//!
//! The percentiles are computed exactly from the sorted samples, not with an HDR histogram: a run
//! keeps every sample anyway (the chart draws the sorted CDF), so a histogram would save nothing,
//! and its quantile is the bucketed value at rank ceil(q·n), not an interpolation. Measured on
//! random latencies (lognormal, uniform, exponential, bimodal, sub-millisecond; 20 seeds each),
//! `hdrhistogram`'s p50/p90/p99 were off the interpolated ones by up to 46% at n = 64 (a typical
//! TTFT sample) and 0.3% at n = 1000, whatever its significant digits; interpolating between
//! ranks read back from its buckets came within 0.043% (3 digits), but is more code than this.

use serde::{Deserialize, Serialize};

/// The `p`-th percentile (`0 ..= 100`) of an ascending-sorted slice; `None` when it is empty.
pub fn percentile(sorted: &[f64], p: f64) -> Option<f64> {
    let (first, last) = (sorted.first()?, sorted.last()?);
    let p = p.clamp(0.0, 100.0);
    let rank = p / 100.0 * (sorted.len() - 1) as f64;
    let lo = rank.floor() as usize;
    let hi = rank.ceil() as usize;
    if lo == hi {
        return sorted.get(lo).copied();
    }
    let (a, b) = (sorted.get(lo)?, sorted.get(hi)?);
    let v = a + (b - a) * (rank - lo as f64);
    // Interpolation cannot leave the sample's range; the clamp only guards rounding.
    Some(v.clamp(*first, *last))
}

/// Summary of one latency distribution, in milliseconds.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Distribution {
    pub count: usize,
    pub mean: Option<f64>,
    pub min: Option<f64>,
    pub p50: Option<f64>,
    pub p90: Option<f64>,
    pub p99: Option<f64>,
    pub max: Option<f64>,
}

impl Distribution {
    /// Summarises samples given in seconds.
    pub fn from_seconds(samples: &[f64]) -> Self {
        let sorted = sorted_ms(samples);
        let count = sorted.len();
        let mean = (count > 0).then(|| sorted.iter().sum::<f64>() / count as f64);
        Self {
            count,
            mean,
            min: sorted.first().copied(),
            p50: percentile(&sorted, 50.0),
            p90: percentile(&sorted, 90.0),
            p99: percentile(&sorted, 99.0),
            max: sorted.last().copied(),
        }
    }
}

/// Finite samples converted from seconds to milliseconds, ascending.
pub fn sorted_ms(samples: &[f64]) -> Vec<f64> {
    let mut v: Vec<f64> = samples
        .iter()
        .filter(|x| x.is_finite())
        .map(|s| s * 1000.0)
        .collect();
    v.sort_by(f64::total_cmp);
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: Option<f64>, b: f64) -> bool {
        a.is_some_and(|a| (a - b).abs() < 1e-9)
    }

    #[test]
    fn percentile_of_empty_sample_is_none() {
        assert_eq!(percentile(&[], 50.0), None);
    }

    #[test]
    fn percentile_of_single_sample_is_that_sample() {
        for p in [0.0, 50.0, 99.0, 100.0] {
            assert!(close(percentile(&[3.5], p), 3.5));
        }
    }

    #[test]
    fn median_of_even_sample_interpolates_the_middle_pair() {
        assert!(close(percentile(&[1.0, 2.0, 3.0, 4.0], 50.0), 2.5));
    }

    #[test]
    fn percentiles_interpolate_linearly_between_ranks() {
        // 0..=100: the p-th percentile is p itself.
        let v: Vec<f64> = (0..=100).map(f64::from).collect();
        for p in [0.0, 1.0, 50.0, 90.0, 99.0, 100.0] {
            assert!(close(percentile(&v, p), p), "p{p}");
        }
        // Ten samples 1..=10: rank of p90 is 8.1 -> 9 + 0.1 * (10 - 9).
        let v: Vec<f64> = (1..=10).map(f64::from).collect();
        assert!(close(percentile(&v, 90.0), 9.1));
        assert!(close(percentile(&v, 99.0), 9.91));
    }

    #[test]
    fn out_of_range_percentiles_clamp_to_the_extremes() {
        let v = [1.0, 5.0, 9.0];
        assert!(close(percentile(&v, -10.0), 1.0));
        assert!(close(percentile(&v, 250.0), 9.0));
    }

    #[test]
    fn distribution_converts_seconds_to_milliseconds_and_drops_non_finite() {
        let d = Distribution::from_seconds(&[0.004, 0.001, f64::NAN, 0.003, 0.002, f64::INFINITY]);
        assert_eq!(d.count, 4);
        assert!(close(d.min, 1.0) && close(d.max, 4.0));
        assert!(close(d.mean, 2.5) && close(d.p50, 2.5));
    }

    #[test]
    fn distribution_of_no_samples_has_no_values() {
        let d = Distribution::from_seconds(&[]);
        assert_eq!(d, Distribution::default());
    }
}
