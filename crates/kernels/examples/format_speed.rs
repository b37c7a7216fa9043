//! Row-major (unpacked) matmuls of any supported weight type at one shape, timed by minimum over
//! many runs (robust on a shared machine), at 1 and 16 activation rows.
//!
//! `cargo run --release -p tessera-kernels --example format_speed -- [THREADS] [RUNS] [ROWSxCOLS] [TYPE...]`
//!
//! Defaults: 2 threads, 100 runs, 2048x2048, and every type the kernels support. The weights
//! are random bytes with finite scales of a realistic size (4 to 8 MB of weights at the default
//! shape: more than L2, so a run reads them from L3 or memory). `TESSERA_ISA=avx2` or `scalar`
//! caps the instruction set.

use std::time::Instant;

use kernels::quant::f32_to_f16;
use kernels::{matmul, Format, GgmlType, MatmulScratch, Threads, Weights};

const TYPES: [GgmlType; 16] = [
    GgmlType::F32,
    GgmlType::F16,
    GgmlType::BF16,
    GgmlType::Q8_0,
    GgmlType::Q4_0,
    GgmlType::Q4_1,
    GgmlType::Q5_0,
    GgmlType::Q5_1,
    GgmlType::MXFP4,
    GgmlType::IQ4_NL,
    GgmlType::Q2_K,
    GgmlType::Q3_K,
    GgmlType::Q4_K,
    GgmlType::Q5_K,
    GgmlType::Q6_K,
    GgmlType::IQ4_XS,
];

/// Deterministic pseudo-random blocks (xorshift) with finite scales.
fn weights(f: Format, rows: usize, cols: usize) -> Vec<u8> {
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
    let h = f32_to_f16(0.001);
    for b in data.chunks_exact_mut(bb) {
        match f {
            Format::F32 => b.copy_from_slice(&0.01f32.to_le_bytes()),
            Format::F16 => b.copy_from_slice(&f32_to_f16(0.01)),
            Format::BF16 => b.copy_from_slice(&[0x24, 0x3c]),
            Format::MXFP4 => b[0] = 120,
            Format::Q6_K => b[208..210].copy_from_slice(&h),
            Format::Q2_K => b[80..84].copy_from_slice(&[h[0], h[1], h[0], h[1]]),
            Format::Q3_K => b[108..110].copy_from_slice(&h),
            _ => {
                b[..2].copy_from_slice(&h);
                if matches!(f, Format::Q4_1 | Format::Q5_1 | Format::Q4_K | Format::Q5_K) {
                    b[2..4].copy_from_slice(&h);
                }
            }
        }
    }
    data
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let num = |i: usize, default: usize| {
        args.get(i).map_or(default, |s| {
            s.parse().expect("THREADS and RUNS are numbers")
        })
    };
    let threads = Threads::new(num(0, 2));
    let runs = num(1, 100).max(1);
    let (rows, cols) = args.get(2).map_or((2048, 2048), |s| {
        let (r, c) = s.split_once('x').expect("shape is ROWSxCOLS");
        (
            r.parse().expect("ROWS is a number"),
            c.parse().expect("COLS is a number"),
        )
    });
    let only: Vec<&str> = args.iter().skip(3).map(String::as_str).collect();
    println!("isa {:?}", kernels::isa());
    for ty in TYPES {
        if !only.is_empty() && !only.contains(&ty.name()) {
            continue;
        }
        let f = Format::from_ggml(ty).expect("listed types are supported");
        let data = weights(f, rows, cols);
        let w = Weights::new(ty, &data, rows, cols).expect("valid weights");
        let mut scratch = MatmulScratch::new();
        for m in [1usize, 16] {
            let x: Vec<f32> = (0..m * cols)
                .map(|i| ((i * 7919) % 1000) as f32 / 500.0 - 1.0)
                .collect();
            let mut out = vec![0f32; m * rows];
            let mut t: Vec<f64> = (0..runs)
                .map(|_| {
                    let s = Instant::now();
                    matmul(&threads, &w, &x, m, &mut out, &mut scratch);
                    s.elapsed().as_secs_f64() * 1e6
                })
                .collect();
            t.sort_by(f64::total_cmp);
            println!(
                "{:<6} {rows}x{cols} m{m:<2} t{}: {:6.2} MB  min {:8.1} us  median {:8.1} us",
                ty.name(),
                threads.n(),
                data.len() as f64 / 1e6,
                t[0],
                t[runs / 2]
            );
        }
    }
}
