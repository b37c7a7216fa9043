//! Seeded continuous distributions on top of [`SplitMix64`]: standard normal, lognormal, gamma.
//!
//! Design: written here rather than taken from a crate so that the streams are stable across
//! builds and machines (a benchmark's arrivals and lengths are part of its definition) and so the
//! crate needs no `rand`. Normal deviates come from the Box–Muller transform (one of the pair is
//! used, so every call consumes exactly two uniforms); gamma deviates from Marsaglia and Tsang's
//! squeeze method ("A simple method for generating gamma variables", ACM TOMS 26(3), 2000), with
//! the usual boost `Gamma(a) = Gamma(a + 1) · U^(1/a)` for shapes below one.
//!
//! Invariants: every function returns a finite value for valid parameters (positive, finite
//! shape and scale); the same generator state always gives the same value.

use crate::prompt::SplitMix64;

/// A uniform in (0, 1]: never zero, so its logarithm is finite.
fn open_unit(rng: &mut SplitMix64) -> f64 {
    1.0 - rng.next_f64()
}

/// A standard normal deviate (mean 0, variance 1).
pub fn normal(rng: &mut SplitMix64) -> f64 {
    let (u1, u2) = (open_unit(rng), rng.next_f64());
    (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
}

/// A lognormal deviate: `exp(mu + sigma · N(0, 1))`; its median is `exp(mu)`.
pub fn lognormal(rng: &mut SplitMix64, mu: f64, sigma: f64) -> f64 {
    (mu + sigma * normal(rng)).exp()
}

/// A gamma deviate with `shape` (k) and `scale` (θ): mean kθ, variance kθ². Both must be
/// positive and finite.
pub fn gamma(rng: &mut SplitMix64, shape: f64, scale: f64) -> f64 {
    if shape < 1.0 {
        // Gamma(a) = Gamma(a + 1) * U^(1/a) for 0 < a < 1.
        let boost = open_unit(rng).powf(1.0 / shape);
        return gamma(rng, shape + 1.0, scale) * boost;
    }
    let d = shape - 1.0 / 3.0;
    let c = 1.0 / (9.0 * d).sqrt();
    loop {
        let x = normal(rng);
        let v = 1.0 + c * x;
        if v <= 0.0 {
            continue;
        }
        let v = v * v * v;
        let u = open_unit(rng);
        // The cheap squeeze first, then the exact acceptance test.
        if u < 1.0 - 0.0331 * x.powi(4) || u.ln() < 0.5 * x * x + d * (1.0 - v + v.ln()) {
            return d * v * scale;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mean_var(xs: &[f64]) -> (f64, f64) {
        let n = xs.len() as f64;
        let mean = xs.iter().sum::<f64>() / n;
        let var = xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1.0);
        (mean, var)
    }

    #[test]
    fn gamma_sample_mean_and_variance_match_shape_and_scale() {
        // n = 200k: the standard error of the mean is sqrt(k θ² / n), under 0.3% of k θ for
        // k >= 0.25, so 2% bounds are > 6 standard errors and fail only on a wrong sampler.
        for (seed, shape, scale) in [(1, 1.0, 0.5), (2, 0.25, 4.0), (3, 2.5, 0.2), (4, 9.0, 1.0)] {
            let mut rng = SplitMix64::new(seed);
            let xs: Vec<f64> = (0..200_000)
                .map(|_| gamma(&mut rng, shape, scale))
                .collect();
            let (mean, var) = mean_var(&xs);
            let (want_mean, want_var) = (shape * scale, shape * scale * scale);
            assert!(
                (mean / want_mean - 1.0).abs() < 0.02,
                "shape {shape}: mean {mean} want {want_mean}"
            );
            assert!(
                (var / want_var - 1.0).abs() < 0.06,
                "shape {shape}: variance {var} want {want_var}"
            );
            assert!(xs.iter().all(|x| x.is_finite() && *x >= 0.0));
        }
    }

    #[test]
    fn normal_has_zero_mean_and_unit_variance() {
        let mut rng = SplitMix64::new(9);
        let xs: Vec<f64> = (0..200_000).map(|_| normal(&mut rng)).collect();
        let (mean, var) = mean_var(&xs);
        assert!(
            mean.abs() < 0.01 && (var - 1.0).abs() < 0.02,
            "{mean} {var}"
        );
    }

    #[test]
    fn lognormal_median_is_exp_mu() {
        let mut rng = SplitMix64::new(5);
        let mut xs: Vec<f64> = (0..100_001)
            .map(|_| lognormal(&mut rng, 5.0, 1.0))
            .collect();
        xs.sort_by(f64::total_cmp);
        let median = xs[50_000];
        assert!((median / 5f64.exp() - 1.0).abs() < 0.02, "{median}");
    }

    #[test]
    fn same_seed_gives_the_same_stream() {
        let (mut a, mut b) = (SplitMix64::new(77), SplitMix64::new(77));
        for _ in 0..100 {
            assert_eq!(
                gamma(&mut a, 0.5, 1.0).to_bits(),
                gamma(&mut b, 0.5, 1.0).to_bits()
            );
        }
    }
}
