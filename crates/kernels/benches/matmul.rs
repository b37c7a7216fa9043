//! Matmul throughput per weight format at the default model's shapes (Gemma 3 270M), for decode
//! (m = 1) and batched prefill (m = 16, 64), on a pool of 2 threads; and Q4_K / Q6_K at the
//! shapes of Qwen2.5-Coder-1.5B (hidden 1536, MLP 8960), the largest K-quant model the project
//! benchmarks, at m = 1 and 16 (decode of one and of sixteen sequences).
//! Throughput is reported in multiply-accumulates per second (elements = rows * cols * m).
//!
//! Also nomic-embed-text's F16 `ffn_up` at an encoder step of 512 tokens, in f32 and in BF16
//! numerics (`kernels::bf16dot`).
//!
//! `TESSERA_BENCH_THREADS` overrides the thread count.

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use kernels::bf16dot::{matmul_bf16, Bf16Path, Bf16Rows, Bf16Scratch};
use kernels::{matmul, Format, GgmlType, MatmulScratch, Threads, Weights};
use std::time::Duration;

/// Deterministic pseudo-random bytes with sane f16 scales (xorshift; benches need no quality).
fn weights(ty: GgmlType, rows: usize, cols: usize) -> Vec<u8> {
    let f = Format::from_ggml(ty).expect("bench uses supported types");
    let bb = f.block_bytes();
    let mut s = 0x2545_F491_4F6C_DD1Du64;
    let mut data: Vec<u8> = (0..rows * cols / f.block_size() * bb)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            s as u8
        })
        .collect();
    let scale = kernels::quant::f32_to_f16(0.01);
    for b in data.chunks_exact_mut(bb) {
        match f {
            Format::F32 => b.copy_from_slice(&0.01f32.to_le_bytes()),
            Format::F16 | Format::BF16 => b[1] &= 0x3F,
            Format::Q6_K => b[208..210].copy_from_slice(&scale),
            Format::Q4_K | Format::Q5_K => {
                b[..2].copy_from_slice(&scale);
                b[2..4].copy_from_slice(&scale);
            }
            Format::Q4_1 | Format::Q5_1 => {
                b[..2].copy_from_slice(&scale);
                b[2..4].copy_from_slice(&kernels::quant::f32_to_f16(-0.08));
            }
            _ => b[..2].copy_from_slice(&scale),
        }
    }
    data
}

fn bench_shape(
    c: &mut Criterion,
    threads: &Threads,
    ty: GgmlType,
    rows: usize,
    cols: usize,
    ms: &[usize],
) {
    let data = weights(ty, rows, cols);
    let packed = kernels::pack(ty, &data, rows, cols);
    let w = match &packed {
        Some(p) if packed_wanted() => {
            Weights::packed(ty, p.as_bytes(), rows, cols).expect("valid packed weights")
        }
        _ => Weights::new(ty, &data, rows, cols).expect("valid bench weights"),
    };
    let layout = if w.layout == kernels::Layout::X16 {
        "x16"
    } else {
        "rows"
    };
    let name = format!("matmul/{ty:?}/{rows}x{cols}/{layout}");
    let mut scratch = MatmulScratch::new();
    bench_ms(c, name, (rows, cols), ms, |x, m, out| {
        matmul(threads, &w, x, m, out, &mut scratch)
    });
}

/// One benchmark per activation count `m` of `ms` in group `name`: `run(x, m, out)` multiplies
/// `m` rows of `cols` activations into `m * rows` outputs.
fn bench_ms(
    c: &mut Criterion,
    name: String,
    (rows, cols): (usize, usize),
    ms: &[usize],
    mut run: impl FnMut(&[f32], usize, &mut [f32]),
) {
    let mut group = c.benchmark_group(name);
    for &m in ms {
        let x: Vec<f32> = (0..m * cols)
            .map(|i| ((i * 7919) % 1000) as f32 / 500.0 - 1.0)
            .collect();
        let mut out = vec![0f32; m * rows];
        group.throughput(Throughput::Elements((rows * cols * m) as u64));
        group.bench_with_input(BenchmarkId::from_parameter(format!("m{m}")), &m, |b, &m| {
            b.iter(|| run(&x, m, &mut out));
        });
    }
    group.finish();
}

/// The BF16 matmul (`kernels::bf16dot`) of F16 weights, on this CPU's fastest path.
fn bench_bf16(c: &mut Criterion, threads: &Threads, rows: usize, cols: usize, ms: &[usize]) {
    let data = weights(GgmlType::F16, rows, cols);
    let w = Bf16Rows::from_float(GgmlType::F16, &data, rows, cols).expect("bf16 shape");
    let path = Bf16Path::detect();
    let name = format!("matmul_bf16/{path:?}/{rows}x{cols}");
    let mut scratch = Bf16Scratch::default();
    bench_ms(c, name, (rows, cols), ms, |x, m, out| {
        matmul_bf16(threads, &w, x, m, out, &mut scratch)
    });
}

/// Packed (x16) weights where the format allows and the CPU has AVX2, as the model loads them;
/// `TESSERA_BENCH_PACK=0` benches the row-major kernels instead. `TESSERA_ISA=avx2` selects the
/// AVX2 kernels (packed or not) on an AVX-512 machine.
fn packed_wanted() -> bool {
    kernels::isa() >= kernels::Isa::Avx2
        && std::env::var("TESSERA_BENCH_PACK").as_deref() != Ok("0")
}

fn matmuls(c: &mut Criterion) {
    let n = std::env::var("TESSERA_BENCH_THREADS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2);
    let threads = Threads::new(n);
    let ms = [1, 16, 64];
    // (rows, cols): ffn_gate/up 2048x640, attn_q 1024x640, ffn_down 640x2048, attn_output 640x1024.
    for ty in [
        GgmlType::Q5_0,
        GgmlType::Q8_0,
        GgmlType::Q4_0,
        GgmlType::Q4_1,
        GgmlType::Q5_1,
        GgmlType::F16,
    ] {
        bench_shape(c, &threads, ty, 2048, 640, &ms);
        bench_shape(c, &threads, ty, 1024, 640, &ms);
    }
    for ty in [GgmlType::Q4_K, GgmlType::Q6_K, GgmlType::Q5_K] {
        bench_shape(c, &threads, ty, 640, 2048, &ms);
        bench_shape(c, &threads, ty, 640, 1024, &ms);
    }
    // Qwen2.5-Coder-1.5B: ffn_gate / ffn_up (Q4_K), ffn_down (Q6_K or Q4_K), attn_q / attn_output.
    bench_shape(c, &threads, GgmlType::Q4_K, 8960, 1536, &[1, 16]);
    bench_shape(c, &threads, GgmlType::Q6_K, 1536, 8960, &[1, 16]);
    bench_shape(c, &threads, GgmlType::Q4_K, 1536, 8960, &[1, 16]);
    bench_shape(c, &threads, GgmlType::Q4_K, 1536, 1536, &[1, 16]);
    bench_shape(c, &threads, GgmlType::F32, 640, 2048, &[1, 16]);
    // Qwen2.5-Coder-0.5B Q4_K_M over a 512-token prefill step: ffn_gate / ffn_up (Q5_0, as 896
    // columns are no whole K-quant superblocks), ffn_down (Q6_K).
    bench_shape(c, &threads, GgmlType::Q5_0, 4864, 896, &[512]);
    bench_shape(c, &threads, GgmlType::Q6_K, 896, 4864, &[512]);
    // nomic-embed-text-v1.5 (F16): ffn_up / ffn_gate over an encoder step of 512 tokens.
    bench_shape(c, &threads, GgmlType::F16, 3072, 768, &[512]);
    bench_bf16(c, &threads, 3072, 768, &[16, 512]);
    // Tied output projection (vocabulary 262144), the largest matmul of the default model.
    bench_shape(c, &threads, GgmlType::Q8_0, 262_144, 640, &[1, 16, 64]);
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .sample_size(10)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2));
    targets = matmuls
}
criterion_main!(benches);
