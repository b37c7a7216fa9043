//! Tests of `sampler`.
use super::*;

#[test]
fn greedy_picks_the_largest_logit() {
    let mut s = Sampler::new(SamplingParams::default(), 1);
    assert_eq!(
        s.sample(&[0.1, 3.0, -1.0, 2.9], &mut SampleScratch::default()),
        1
    );
}

#[test]
fn argmax_is_the_first_largest_in_any_block() {
    let n = 1000;
    for (at, tie) in [
        (0usize, None),
        (255, Some(256usize)),
        (256, None),
        (700, Some(999)),
        (999, None),
    ] {
        let mut l: Vec<f32> = (0..n).map(|i| (i % 13) as f32 * 0.1).collect();
        l[at] = 5.0;
        if let Some(t) = tie {
            l[t] = 5.0;
        }
        l[3] = f32::NAN;
        assert_eq!(argmax(&l), at as u32, "largest at {at}, tie {tie:?}");
    }
    assert_eq!(argmax(&[f32::NAN; 300]), 0);
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
            .map(|_| s.sample(&logits, &mut SampleScratch::default()))
            .collect::<Vec<_>>()
    };
    assert_eq!(draw(params.clone()), draw(params.clone()));
    let other = SamplingParams {
        seed: Some(43),
        ..params.clone()
    };
    assert_ne!(draw(params), draw(other));
}

/// The distribution the sampler must draw from (the plain definition: softmax of the
/// scaled logits, top-k, min-p relative to the top token, then the smallest prefix in
/// descending order reaching top-p), renormalized.
fn reference(logits: &[f32], p: &SamplingParams) -> Vec<f64> {
    let x: Vec<f64> = logits
        .iter()
        .map(|&l| f64::from(l / p.temperature))
        .collect();
    let mut order: Vec<usize> = (0..x.len()).collect();
    order.sort_by(|&a, &b| x[b].total_cmp(&x[a]).then(a.cmp(&b)));
    if p.top_k > 0 {
        order.truncate(p.top_k);
    }
    let w: Vec<f64> = order.iter().map(|&i| (x[i] - x[order[0]]).exp()).collect();
    let total: f64 = w.iter().sum();
    let mut keep = order.len();
    if p.min_p > 0.0 {
        keep = w
            .iter()
            .take_while(|&&v| v >= f64::from(p.min_p))
            .count()
            .max(1);
    }
    if p.top_p < 1.0 {
        let mut acc = 0.0;
        for (i, v) in w.iter().enumerate().take(keep) {
            acc += v / total;
            if acc >= f64::from(p.top_p) {
                keep = i + 1;
                break;
            }
        }
    }
    let kept: f64 = w[..keep].iter().sum();
    let mut out = vec![0.0; x.len()];
    for (j, &i) in order[..keep].iter().enumerate() {
        out[i] = w[j] / kept;
    }
    out
}

/// Draws `n` times and checks every token's frequency against `reference` (within five
/// standard deviations, and never a token of probability 0).
fn check_draws(logits: &[f32], p: SamplingParams, n: usize) {
    let want = reference(logits, &p);
    let mut s = Sampler::new(p.clone(), 7);
    let mut seen = vec![0usize; logits.len()];
    for _ in 0..n {
        seen[s.sample(logits, &mut SampleScratch::default()) as usize] += 1;
    }
    for (i, (&c, &q)) in seen.iter().zip(&want).enumerate() {
        let f = c as f64 / n as f64;
        let sd = (q * (1.0 - q) / n as f64).sqrt();
        assert!(
            (f - q).abs() <= 5.0 * sd + 1e-4 && (q > 0.0 || c == 0),
            "{p:?}: token {i} drawn {f:.4}, expected {q:.4}"
        );
    }
}

#[test]
fn draws_follow_the_filtered_softmax() {
    let small = [2.0f32, 1.5, 1.0, 0.0, -1.0, -3.0];
    // A vocabulary over several draw chunks and many histogram buckets, with a long tail.
    let large: Vec<f32> = (0..5000)
        .map(|i| {
            if i % 997 == 3 {
                6.0 - i as f32 / 1000.0
            } else {
                -((i % 37) as f32) / 4.0
            }
        })
        .collect();
    let base = SamplingParams {
        temperature: 1.0,
        ..Default::default()
    };
    for logits in [&small[..], &large[..]] {
        for p in [
            base.clone(),
            SamplingParams {
                temperature: 0.7,
                ..base.clone()
            },
            SamplingParams {
                top_p: 0.8,
                ..base.clone()
            },
            SamplingParams {
                top_p: 0.3,
                temperature: 1.5,
                ..base.clone()
            },
            SamplingParams {
                top_k: 3,
                ..base.clone()
            },
            SamplingParams {
                top_k: 4,
                top_p: 0.9,
                ..base.clone()
            },
            SamplingParams {
                min_p: 0.2,
                ..base.clone()
            },
            SamplingParams {
                min_p: 0.05,
                top_p: 0.95,
                ..base.clone()
            },
        ] {
            check_draws(logits, p, 20_000);
        }
    }
}

#[test]
fn the_nucleus_is_a_most_likely_prefix_at_bucket_boundaries() {
    // Vocabularies the size of the default model's, and top_p just above the mass of each
    // of the top histogram buckets: there the walk's own sum (in id order over the tokens
    // above the edge) and the histogram's may disagree by rounding.
    let n = 262_144;
    let mut seed = 12_345u64;
    let mut rnd = move || {
        seed = seed
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (seed >> 40) as f32 / (1u64 << 24) as f32
    };
    let key = |w: f32| (w.to_bits() >> BUCKET_SHIFT) as usize;
    let mut scratch = SampleScratch::default();
    let mut tried = 0;
    for spread in [5.0f32, 7.5, 9.0, 11.0, 13.5, 16.0, 19.0, 24.0] {
        let logits: Vec<f32> = (0..n).map(|_| rnd() * spread).collect();
        let top = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        let w: Vec<f32> = logits.iter().map(|&l| exp_neg(l - top)).collect();
        // The boundaries as `candidates` sums them.
        let total = lane_sum(&w);
        let mut mass = vec![0.0f32; BUCKETS];
        for &x in &w {
            mass[key(x)] += x;
        }
        let mut cum = 0.0f32;
        let mut boundaries = Vec::new();
        for b in (0..BUCKETS).rev() {
            if mass[b] > 0.0 {
                cum += mass[b];
                boundaries.push(cum / total);
            }
        }
        for &p in boundaries.iter().filter(|&&p| p < 0.99) {
            for k in 1..6 {
                let top_p = p + k as f32 * 2e-6 * p;
                let mut s = Sampler::new(
                    SamplingParams {
                        temperature: 1.0,
                        top_p,
                        ..Default::default()
                    },
                    3,
                );
                s.sample(&logits, &mut scratch);
                let mut kept = vec![false; n];
                for c in &scratch.cand {
                    kept[c.0 as usize] = true;
                }
                let (mut kept_min, mut left_max) = (f32::INFINITY, f32::NEG_INFINITY);
                for (i, &l) in logits.iter().enumerate() {
                    if kept[i] {
                        kept_min = kept_min.min(l);
                    } else {
                        left_max = left_max.max(l);
                    }
                }
                assert!(
                    kept_min >= left_max,
                    "spread {spread}, top_p {top_p}: kept down to {kept_min}, left out {left_max}"
                );
                tried += 1;
            }
        }
    }
    assert!(tried >= 60, "only {tried} cases tried");
}

#[test]
fn non_finite_logits_are_never_drawn() {
    let logits = [f32::NEG_INFINITY, 1.0, f32::NAN, 0.5, f32::INFINITY];
    for top_p in [1.0, 0.9] {
        let mut s = Sampler::new(
            SamplingParams {
                temperature: 1.0,
                top_p,
                ..Default::default()
            },
            5,
        );
        for _ in 0..200 {
            let t = s.sample(&logits, &mut SampleScratch::default());
            assert!(t == 1 || t == 3, "drew {t}");
        }
    }
    assert_eq!(argmax(&[f32::NAN, 1.0, 3.0, 3.0, f32::NAN]), 2);
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
        assert_eq!(s.sample(&[0.0, 1.0, 0.5], &mut SampleScratch::default()), 1);
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
        assert_ne!(
            s.sample(&[5.0, 5.0, -5.0], &mut SampleScratch::default()),
            2
        );
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
    assert_eq!(s.sample(&[1.0, 0.5], &mut SampleScratch::default()), 1);
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
fn logprobs_of_a_large_vocabulary_match_a_plain_computation() {
    let logits: Vec<f32> = (0..3000)
        .map(|i| ((i * 7919) % 1009) as f32 / 100.0 - 5.0 + if i == 2900 { 9.0 } else { 0.0 })
        .collect();
    let lse = {
        let m = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        f64::from(m)
            + logits
                .iter()
                .map(|&l| f64::from(l - m).exp())
                .sum::<f64>()
                .ln()
    };
    let mut order: Vec<usize> = (0..logits.len()).collect();
    order.sort_by(|&a, &b| logits[b].total_cmp(&logits[a]).then(a.cmp(&b)));
    let (lp, top) = logprobs(&logits, 17, 7);
    assert!((f64::from(lp) - (f64::from(logits[17]) - lse)).abs() < 1e-5);
    assert_eq!(
        top.iter().map(|t| t.0 as usize).collect::<Vec<_>>(),
        order[..7].to_vec()
    );
    for (id, v) in top {
        assert!((f64::from(v) - (f64::from(logits[id as usize]) - lse)).abs() < 1e-5);
    }
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

#[test]
fn distribution_is_what_sample_draws_from() {
    let logits: Vec<f32> = (0..12)
        .map(|i| ((i * 7) % 5) as f32 * 0.6 - 0.2 * i as f32)
        .collect();
    let cases = [
        SamplingParams {
            temperature: 0.9,
            ..Default::default()
        },
        SamplingParams {
            temperature: 1.2,
            top_k: 4,
            ..Default::default()
        },
        SamplingParams {
            temperature: 0.7,
            top_p: 0.8,
            ..Default::default()
        },
        SamplingParams {
            temperature: 1.0,
            min_p: 0.2,
            logit_bias: vec![(3, 2.0)],
            ..Default::default()
        },
    ];
    let mut scratch = SampleScratch::default();
    for params in cases {
        let dist = Sampler::new(params.clone(), 0).distribution(&logits, &mut scratch);
        let total: f32 = dist.iter().map(|c| c.1).sum();
        assert!((total - 1.0).abs() < 1e-5, "{params:?}: sums to {total}");
        let n = 20_000u64;
        let mut counts = [0u64; 12];
        let mut s = Sampler::new(params.clone(), 5);
        for _ in 0..n {
            counts[s.sample(&logits, &mut scratch) as usize] += 1;
        }
        let mut chi2 = 0.0;
        for (t, &c) in counts.iter().enumerate() {
            let p = dist.iter().find(|d| d.0 == t as u32).map_or(0.0, |d| d.1);
            if p == 0.0 {
                assert_eq!(c, 0, "{params:?}: token {t} is outside the distribution");
                continue;
            }
            let e = n as f64 * f64::from(p);
            chi2 += (c as f64 - e).powi(2) / e;
        }
        // At most 11 degrees of freedom: 35 is beyond p = 0.0003 (fixed seeds: deterministic).
        assert!(
            chi2 < 35.0,
            "{params:?}: chi2 {chi2:.1}, {counts:?} vs {dist:?}"
        );
    }
    let greedy = Sampler::new(SamplingParams::default(), 0).distribution(&logits, &mut scratch);
    assert_eq!(greedy, vec![(argmax(&logits), 1.0)]);
}
