//! One draw from a 262,144-token vocabulary (the default model's) per sampling setting, on a
//! flat distribution (logits spread evenly over [-10, 10], so a nucleus holds tens of thousands
//! of tokens) and a peaked one (30 tokens well above the rest).
//! `cargo bench -p tessera-model --bench sampler`.

use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion};
use model::sampler::{SampleScratch, Sampler, SamplingParams};

const VOCAB: usize = 262_144;

fn flat() -> Vec<f32> {
    (0..VOCAB)
        .map(|i| ((i * 7919) % 10_007) as f32 / 10_007.0 * 20.0 - 10.0)
        .collect()
}

fn peaked() -> Vec<f32> {
    let mut l = flat();
    for j in 0..30 {
        l[(j * 7717) % VOCAB] = 12.0 + j as f32 * 0.2;
    }
    l
}

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("sample");
    let mut scratch = SampleScratch::default();
    for (name, logits) in [("flat", flat()), ("peaked", peaked())] {
        for (label, temperature, top_p, top_k) in [
            ("greedy", 0.0, 1.0, 0),
            ("t0.8", 0.8, 1.0, 0),
            ("t0.8_top_p0.95", 0.8, 0.95, 0),
            ("t1_top_p0.9", 1.0, 0.9, 0),
            ("t0.8_top_k40", 0.8, 1.0, 40),
        ] {
            let params = SamplingParams {
                temperature,
                top_p,
                top_k,
                ..Default::default()
            };
            let mut s = Sampler::new(params, 1);
            g.bench_function(format!("{name}/{label}"), |b| {
                b.iter(|| s.sample(&logits, &mut scratch))
            });
        }
    }
    g.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .sample_size(20)
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(1));
    targets = bench
}
criterion_main!(benches);
