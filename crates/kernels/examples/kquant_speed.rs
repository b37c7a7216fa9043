//! Packed Q4_K / Q6_K matmuls at the shapes of Qwen2.5-Coder-1.5B, timed by minimum over many
//! runs (robust on a shared machine where criterion's means drift with the load).
//!
//! `cargo run --release -p tessera-kernels --example kquant_speed -- [THREADS] [RUNS] [model | TYPE:M]`
//!
//! - Without `model`: each shape (the MLP's 8960x1536 and 1536x8960, attention's 1536x1536 and
//!   256x1536) at 1 and 16 activation rows: minimum, first quartile and median of `RUNS` calls.
//!   Repeated calls find a matrix in cache (L2 or L3), so these measure the kernels' work.
//! - With `model`: one decode step's matmuls of the whole model (28 layers, ffn_down Q6_K in
//!   every other layer, the Q6_K output projection; 981 MB, more than the caches) at 1 and 16
//!   activation rows, each run followed by a plain read of the same bytes on the same threads:
//!   the matmuls against the memory's rate at that moment.
//!
//! - With `TYPE:M` (say `Q4_K:16`): only that type's shapes at `M` rows (twice), for a profiler;
//!   `Q5_0`, `Q5_1` and `Q8_0` (at Gemma 3 270M's shapes) only this way.
//! - `MXFP4:M` and `IQ4_NL:M`: gpt-oss-20b's expert shapes (down 2880x2880, gate and up together
//!   5760x2880) at `M` rows, packed against the row-major kernels, one call of each in turn per
//!   run: the minimum of each and their ratio.
//!
//! `TESSERA_ISA=avx512` compares the VNNI passes with the AMX ones on a CPU that has both.

use std::time::Instant;

use kernels::{matmul, pack, Format, GgmlType, MatmulScratch, PackedBytes, Threads, Weights};

/// Deterministic pseudo-random blocks with sane f16 scales (xorshift).
fn weights(ty: GgmlType, rows: usize, cols: usize) -> Vec<u8> {
    let f = Format::from_ggml(ty).expect("the listed types are supported");
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
        if f == Format::MXFP4 {
            // Exponent byte: steps of 2^-8 (the table's values are doubled).
            b[0] = 120;
        } else if f == Format::Q6_K {
            b[208..210].copy_from_slice(&scale);
        } else {
            b[..2].copy_from_slice(&scale);
            b[2..4].copy_from_slice(&scale);
        }
    }
    data
}

fn packed(ty: GgmlType, rows: usize, cols: usize) -> PackedBytes {
    pack(ty, &weights(ty, rows, cols), rows, cols).expect("the shapes are packable")
}

fn sorted(mut t: Vec<f64>) -> Vec<f64> {
    t.sort_by(f64::total_cmp);
    t
}

fn shapes(threads: &Threads, runs: usize, only: Option<&str>) {
    // `only` = `TYPE:M` (say `Q4_K:16`) keeps that type's shapes at that many rows.
    let only = only.and_then(|o| o.split_once(':'));
    for (ty, rows, cols) in [
        (GgmlType::Q4_K, 8960, 1536),
        (GgmlType::Q6_K, 1536, 8960),
        (GgmlType::Q4_K, 1536, 1536),
        (GgmlType::Q6_K, 256, 1536),
        // Legacy formats at Gemma 3 270M's MLP shape and a slice of its Q8_0 output projection
        // (only when asked for by `TYPE:M`).
        (GgmlType::Q5_0, 2048, 640),
        (GgmlType::Q5_1, 2048, 640),
        (GgmlType::Q8_0, 16384, 640),
        // gpt-oss-20b's experts (only when asked for by `TYPE:M`, against the row-major kernels).
        (GgmlType::MXFP4, 2880, 2880),
        (GgmlType::MXFP4, 5760, 2880),
        (GgmlType::IQ4_NL, 2880, 2880),
        (GgmlType::IQ4_NL, 5760, 2880),
    ] {
        let k_quant = matches!(ty, GgmlType::Q4_K | GgmlType::Q6_K);
        if only.map_or(!k_quant, |(t, _)| t != format!("{ty:?}")) {
            continue;
        }
        if let (Some((_, m)), GgmlType::MXFP4 | GgmlType::IQ4_NL) = (only, ty) {
            let m = m.parse().expect("M is a number");
            versus_row_major(threads, runs, ty, rows, cols, m);
            continue;
        }
        let p = packed(ty, rows, cols);
        let w = Weights::packed(ty, p.as_bytes(), rows, cols).expect("valid packed weights");
        let mut scratch = MatmulScratch::new();
        for m in [1usize, 16] {
            let m = only.map_or(m, |(_, m)| m.parse().expect("M is a number"));
            let x: Vec<f32> = (0..m * cols)
                .map(|i| ((i * 7919) % 1000) as f32 / 500.0 - 1.0)
                .collect();
            let mut out = vec![0f32; m * rows];
            let t = sorted(
                (0..runs)
                    .map(|_| {
                        let s = Instant::now();
                        matmul(threads, &w, &x, m, &mut out, &mut scratch);
                        s.elapsed().as_secs_f64() * 1e6
                    })
                    .collect(),
            );
            println!(
                "{ty:?} {rows}x{cols} m{m:<2} t{}: min {:8.1} us  p25 {:8.1}  median {:8.1} us",
                threads.n(),
                t[0],
                t[runs / 4],
                t[runs / 2]
            );
        }
    }
}

/// One matmul of `ty` at `rows` x `cols` and `m` rows, packed and row-major in turn, `runs`
/// times: the minimum of each (microseconds) and packed / row-major.
fn versus_row_major(
    threads: &Threads,
    runs: usize,
    ty: GgmlType,
    rows: usize,
    cols: usize,
    m: usize,
) {
    let data = weights(ty, rows, cols);
    let p = pack(ty, &data, rows, cols).expect("the shapes are packable");
    let packed = Weights::packed(ty, p.as_bytes(), rows, cols).expect("valid packed weights");
    let row_major = Weights::new(ty, &data, rows, cols).expect("valid weights");
    let x: Vec<f32> = (0..m * cols)
        .map(|i| ((i * 7919) % 1000) as f32 / 500.0 - 1.0)
        .collect();
    let mut out = vec![0f32; m * rows];
    let mut scratch = MatmulScratch::new();
    let mut time = |w: &Weights| {
        let s = Instant::now();
        matmul(threads, w, &x, m, &mut out, &mut scratch);
        s.elapsed().as_secs_f64() * 1e6
    };
    let (mut tp, mut tr) = (f64::INFINITY, f64::INFINITY);
    for _ in 0..runs {
        tp = tp.min(time(&packed));
        tr = tr.min(time(&row_major));
    }
    println!(
        "{ty:?} {rows}x{cols} m{m:<2} t{}: packed min {tp:8.1} us  row-major min {tr:8.1} us  \
         packed / row-major {:.2}",
        threads.n(),
        tp / tr
    );
}

/// Reads every byte of `bufs` on the pool's threads (a sum of one word per cache line).
fn read_all(threads: &Threads, bufs: &[&[u8]]) -> u64 {
    let total = std::sync::atomic::AtomicU64::new(0);
    let n = threads.n();
    threads.for_each_range(n, 1, &|_, part| {
        let mut s = 0u64;
        for t in part {
            for b in bufs {
                let len = b.len() / n;
                for line in b[t * len..(t + 1) * len].chunks_exact(64) {
                    s = s.wrapping_add(line[0] as u64 ^ line[63] as u64);
                }
            }
        }
        total.fetch_add(s, std::sync::atomic::Ordering::Relaxed);
    });
    total.into_inner()
}

fn model(threads: &Threads, runs: usize) {
    let mut mats = Vec::new();
    for layer in 0..28 {
        let down = if layer % 2 == 0 {
            GgmlType::Q6_K
        } else {
            GgmlType::Q4_K
        };
        for (ty, rows, cols) in [
            (GgmlType::Q4_K, 1536, 1536),
            (GgmlType::Q4_K, 256, 1536),
            (GgmlType::Q6_K, 256, 1536),
            (GgmlType::Q4_K, 1536, 1536),
            (GgmlType::Q4_K, 8960, 1536),
            (GgmlType::Q4_K, 8960, 1536),
            (down, 1536, 8960),
        ] {
            mats.push((ty, rows, cols, packed(ty, rows, cols)));
        }
    }
    mats.push((
        GgmlType::Q6_K,
        151_936,
        1536,
        packed(GgmlType::Q6_K, 151_936, 1536),
    ));
    let bytes: usize = mats.iter().map(|m| m.3.as_bytes().len()).sum();
    let all: Vec<&[u8]> = mats.iter().map(|m| m.3.as_bytes()).collect();
    let mut scratch = MatmulScratch::new();
    for m in [1usize, 2, 4, 16] {
        let x: Vec<f32> = (0..m * 8960)
            .map(|i| ((i * 7919) % 1000) as f32 / 500.0 - 1.0)
            .collect();
        let mut out = vec![0f32; m * 151_936];
        let (mut tk, mut tr) = (Vec::new(), Vec::new());
        for _ in 0..runs {
            let s = Instant::now();
            for (ty, rows, cols, p) in &mats {
                let w = Weights::packed(*ty, p.as_bytes(), *rows, *cols).expect("valid packed");
                let (xs, os) = (&x[..m * cols], &mut out[..m * rows]);
                matmul(threads, &w, xs, m, os, &mut scratch);
            }
            tk.push(s.elapsed().as_secs_f64() * 1e3);
            let s = Instant::now();
            std::hint::black_box(read_all(threads, &all));
            tr.push(s.elapsed().as_secs_f64() * 1e3);
        }
        let ratios = sorted(tk.iter().zip(&tr).map(|(k, r)| k / r).collect());
        let (tk, tr) = (sorted(tk), sorted(tr));
        println!(
            "model m{m:<2} t{}: {:.1} MB; matmuls min {:.1} ms, median {:.1} ms; plain read min \
             {:.1} ms; matmuls / read of the same run, median {:.2}",
            threads.n(),
            bytes as f64 / 1e6,
            tk[0],
            tk[runs / 2],
            tr[0],
            ratios[runs / 2]
        );
    }
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
    println!("isa {:?}", kernels::isa());
    match args.get(2).map(String::as_str) {
        Some("model") => model(&threads, runs),
        only => shapes(&threads, runs, only),
    }
}
