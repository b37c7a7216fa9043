//! Element-wise kernels at the default model's sizes (hidden 640, FFN 2048, head 256), and
//! activation quantization: `cargo bench -p tessera-kernels --bench ops`.

use std::time::Duration;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use kernels::quant::{kquants, legacy, ActQ8_0, BlockQ8K, QK8_0, QK_K};

fn data(n: usize, seed: u32) -> Vec<f32> {
    (0..n)
        .map(|i| {
            ((i as u32).wrapping_mul(2_654_435_761).wrapping_add(seed) % 2000) as f32 / 1000.0 - 1.0
        })
        .collect()
}

fn ops(c: &mut Criterion) {
    // A decode step of 16 sequences and a 128-token prefill chunk.
    for rows in [16usize, 128] {
        let mut g = c.benchmark_group(format!("ops/rows{rows}"));
        let hidden = data(rows * 640, 1);
        let w = data(640, 2);
        let mut out = vec![0f32; rows * 640];
        g.throughput(Throughput::Elements((rows * 640) as u64));
        g.bench_function(BenchmarkId::new("rms_norm", 640), |b| {
            b.iter(|| {
                for (x, o) in hidden.chunks_exact(640).zip(out.chunks_exact_mut(640)) {
                    kernels::rms_norm(x, &w, 1e-6, o);
                }
            })
        });
        g.bench_function(BenchmarkId::new("rms_norm_rows", 640), |b| {
            b.iter(|| kernels::rms_norm_rows(&hidden, &w, 1e-6, &mut out))
        });
        let ffn = data(rows * 2048, 3);
        let other = data(rows * 2048, 4);
        g.throughput(Throughput::Elements((rows * 2048) as u64));
        for (name, f) in [
            ("gelu_tanh", kernels::gelu_tanh as fn(&mut [f32])),
            ("gelu_tanh_exact", kernels::gelu_tanh_exact),
            ("silu", kernels::silu),
            ("softmax", kernels::softmax),
        ] {
            g.bench_function(BenchmarkId::new(name, 2048), |b| {
                b.iter_batched_ref(
                    || ffn.clone(),
                    |x| {
                        for r in x.chunks_exact_mut(2048) {
                            f(r)
                        }
                    },
                    criterion::BatchSize::LargeInput,
                )
            });
        }
        g.bench_function(BenchmarkId::new("mul", 2048), |b| {
            b.iter_batched_ref(
                || ffn.clone(),
                |x| kernels::mul(x, &other),
                criterion::BatchSize::LargeInput,
            )
        });
        g.bench_function(BenchmarkId::new("add", 2048), |b| {
            b.iter_batched_ref(
                || ffn.clone(),
                |x| kernels::add(x, &other),
                criterion::BatchSize::LargeInput,
            )
        });
        let mut h = vec![0u16; rows * 2048];
        g.bench_function(BenchmarkId::new("f32_to_f16_row", 2048), |b| {
            b.iter(|| kernels::f32_to_f16_row(&ffn, &mut h))
        });
        let mut back = vec![0f32; rows * 2048];
        g.bench_function(BenchmarkId::new("f16_to_f32_row", 2048), |b| {
            b.iter(|| kernels::f16_to_f32_row(&h, &mut back))
        });
        let mut q8 = vec![ActQ8_0::default(); rows * 2048 / QK8_0];
        g.bench_function(BenchmarkId::new("quantize_act_q8_0", 2048), |b| {
            b.iter(|| legacy::quantize_act_q8_0(&ffn, &mut q8))
        });
        let mut q8k = vec![BlockQ8K::default(); rows * 2048 / QK_K];
        g.bench_function(BenchmarkId::new("quantize_row_q8_k", 2048), |b| {
            b.iter(|| kquants::quantize_row_q8_k(&ffn, &mut q8k))
        });
        // Attention inner products against cached f16 keys (head dim 256).
        let keys = &h[..256 * rows.min(16)];
        let q = &ffn[..256];
        g.throughput(Throughput::Elements(keys.len() as u64));
        g.bench_function(BenchmarkId::new("dot_f16_f32", 256), |b| {
            b.iter(|| {
                keys.chunks_exact(256)
                    .map(|k| kernels::dot_f16_f32(k, q))
                    .sum::<f32>()
            })
        });
        g.finish();
    }
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .sample_size(10)
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(1));
    targets = ops
}
criterion_main!(benches);
