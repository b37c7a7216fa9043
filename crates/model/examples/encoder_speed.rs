//! Encoder forward-pass timing (no server): `Encoder::embed_batch` over synthetic inputs.
//!
//! `cargo run --release -p tessera-model --example encoder_speed -- MODEL.gguf [--threads 2]
//!  [--inputs 16] [--tokens 128] [--rounds 3] [--dtype auto|float32|bfloat16]`
//!
//! Each round embeds `--inputs` inputs of `--tokens` token ids (deterministic ids spread over
//! the vocabulary, [CLS] first) in one call and prints its wall time and tokens per second; the
//! first call (buffers growing, pages faulting in) is run once untimed. Tokens per CPU-second
//! (all threads) say more than the wall clock on a shared machine. With `TESSERA_ISA=scalar`
//! (or `avx2`) the kernels are capped, for comparisons within one machine state.

use std::time::Instant;

use model::{load_encoder, Dtype, Pooling};

fn main() {
    let mut args = std::env::args().skip(1);
    let mut model = None;
    let (mut threads, mut inputs, mut tokens, mut rounds) = (2usize, 16usize, 128usize, 3usize);
    let mut dtype = Dtype::Auto;
    while let Some(a) = args.next() {
        let mut num = |what: &str| -> usize {
            args.next()
                .and_then(|v| v.parse().ok())
                .unwrap_or_else(|| panic!("{what} takes a number"))
        };
        match a.as_str() {
            "--threads" => threads = num("--threads"),
            "--inputs" => inputs = num("--inputs"),
            "--tokens" => tokens = num("--tokens"),
            "--rounds" => rounds = num("--rounds"),
            "--dtype" => {
                let v = args.next().unwrap_or_default();
                dtype = Dtype::from_name(&v)
                    .unwrap_or_else(|| panic!("--dtype takes auto, float32 or bfloat16"));
            }
            _ => model = Some(a),
        }
    }
    if model.as_deref() == Some("--matmul") {
        return matmul_only(threads, inputs * tokens, rounds);
    }
    let model = model.expect(
        "usage: encoder_speed MODEL.gguf [--threads N] [--inputs N] [--tokens N] [--rounds N] \
         [--dtype D]",
    );
    let mut m = load_encoder(std::path::Path::new(&model), threads, dtype)
        .unwrap_or_else(|e| panic!("{model}: {e}"));
    let vocab = m.encoder.config().vocab_size as u64;
    let ids: Vec<Vec<u32>> = (0..inputs as u64)
        .map(|i| {
            (0..tokens as u64)
                .map(|t| {
                    if t == 0 {
                        101
                    } else {
                        (1000 + (i * 7919 + t * 104_729) % (vocab - 1000)) as u32
                    }
                })
                .collect()
        })
        .collect();
    let refs: Vec<&[u32]> = ids.iter().map(Vec::as_slice).collect();
    let run = |m: &mut model::LoadedEncoder| {
        m.encoder
            .embed_batch(&refs, Pooling::Mean, true)
            .unwrap_or_else(|e| panic!("embed_batch: {e}"))
    };
    run(&mut m);
    let n = (inputs * tokens) as f64;
    for r in 0..rounds {
        let (t, c) = (Instant::now(), cpu_seconds());
        let out = run(&mut m);
        let (s, c) = (t.elapsed().as_secs_f64(), cpu_seconds() - c);
        println!(
            "round {r}: {inputs} x {tokens} tokens in {:.1} ms: {:.0} tok/s wall, {:.0} tokens per \
             CPU-second; first value {:.6}",
            s * 1e3,
            n / s,
            n / c,
            out[0][0]
        );
    }
}

/// CPU time of this process (all threads, user + system) from `/proc/self/stat`, in seconds
/// (clock ticks of 1/100 s); on a loaded machine it tells work done better than the wall clock.
fn cpu_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // Fields after the command name (which ends with the last ')'): utime and stime are the
    // 12th and 13th.
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<&str> = rest.split_whitespace().collect();
    let tick = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok());
    tick(11)
        .zip(tick(12))
        .map_or(f64::NAN, |(u, s)| (u + s) / 100.0)
}

/// The five F16 matmul shapes of one nomic-bert layer (qkv, out, up, gate, down) over `m` rows.
fn matmul_only(threads: usize, m: usize, rounds: usize) {
    let th = kernels::Threads::new(threads);
    let mut mm = kernels::MatmulScratch::new();
    let (d, ff) = (768, 3072);
    for (name, rows, cols) in [
        ("qkv", 3 * d, d),
        ("out", d, d),
        ("up", ff, d),
        ("down", d, ff),
    ] {
        let data: Vec<u8> = (0..rows * cols)
            .flat_map(|i| kernels::quant::f32_to_f16(((i * 7919) % 1000) as f32 / 5e4 - 0.01))
            .collect();
        let w = kernels::Weights::new(kernels::GgmlType::F16, &data, rows, cols).expect("weights");
        let x: Vec<f32> = (0..m * cols)
            .map(|i| ((i * 31) % 97) as f32 / 97.0 - 0.5)
            .collect();
        let mut out = vec![0f32; m * rows];
        kernels::matmul(&th, &w, &x, m, &mut out, &mut mm);
        for _ in 0..rounds {
            let (t, c) = (Instant::now(), cpu_seconds());
            kernels::matmul(&th, &w, &x, m, &mut out, &mut mm);
            let (s, c) = (t.elapsed().as_secs_f64(), cpu_seconds() - c);
            let gflop = 2.0 * (rows * cols * m) as f64 / 1e9;
            println!(
                "{name} {rows}x{cols} m={m}: {:.1} ms, {:.1} GFLOP/s wall, {:.1} GFLOP per CPU-second",
                s * 1e3,
                gflop / s,
                gflop / c
            );
        }
    }
}
