//! Writes a full-size random-weight mixture-of-experts GGUF at a real model's shape, for
//! benchmarks outside CI (see `model::testing::fullsize` for the layout and the weights):
//!
//!     write_full_size_moe SHAPE OUT.gguf [--router uniform|zipf] [--layers N] [--seed S]
//!         [--tokenizer-from FILE] [--shrink]
//!
//! SHAPE is `qwen3-30b-a3b` (Q4_K_M mix, about 17 GiB), `gpt-oss-20b` (MXFP4 experts, Q8_0
//! elsewhere, about 11.5 GiB) or `olmoe-1b-7b` (Q4_K_M mix, about 3.9 GiB). The tokenizer is
//! copied from FILE, by default from `$TESSERA_MODELS_DIR` (else `./models`):
//! `qwen2.5-coder-0.5b-instruct-q4_k_m.gguf` for qwen3-30b-a3b and olmoe-1b-7b (cut to OLMoE's
//! 50304 tokens), `gpt-oss-o200k-vocab.gguf` for gpt-oss-20b. `--layers N` writes only the first
//! N layers; `--shrink` the same layout at test widths. The file is streamed: memory stays a few
//! MB. Prints the file's size, the time taken, and the router's measured expert usage (share of
//! modelled hidden states routed to each expert, by rank) in its first and last layer.

use std::io::BufWriter;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use model::testing::fullsize::{self, router, MoeShape, Options, Router, SHAPES};

const USAGE: &str = "usage: write_full_size_moe SHAPE OUT.gguf [--router uniform|zipf] \
                     [--layers N] [--seed S] [--tokenizer-from FILE] [--shrink]";

struct Args {
    shape: MoeShape,
    out: PathBuf,
    opts: Options,
    layers: Option<usize>,
    tokenizer: Option<PathBuf>,
}

fn parse_args() -> Result<Args, String> {
    let mut args = std::env::args().skip(1);
    let (Some(name), Some(out)) = (args.next(), args.next()) else {
        return Err(USAGE.into());
    };
    let mut shape = MoeShape::named(&name).ok_or_else(|| {
        let names: Vec<_> = SHAPES.iter().map(|s| s.name).collect();
        format!("unknown shape {name:?} (have: {})", names.join(", "))
    })?;
    let mut opts = Options {
        router: Router::Uniform,
        seed: 1,
    };
    let (mut layers, mut tokenizer) = (None, None);
    while let Some(flag) = args.next() {
        if flag == "--shrink" {
            shape = shape.shrunk();
            continue;
        }
        let value = args.next().ok_or_else(|| format!("{flag} needs a value"))?;
        let number = || {
            value
                .parse::<u64>()
                .map_err(|_| format!("{flag}: not a number: {value}"))
        };
        match flag.as_str() {
            "--router" => {
                opts.router = match value.as_str() {
                    "uniform" => Router::Uniform,
                    "zipf" => Router::Zipf,
                    _ => return Err(format!("--router is uniform or zipf, not {value}")),
                }
            }
            "--layers" => layers = Some(number()? as usize),
            "--seed" => opts.seed = number()?,
            "--tokenizer-from" => tokenizer = Some(PathBuf::from(&value)),
            _ => return Err(format!("unknown option {flag}\n{USAGE}")),
        }
    }
    Ok(Args {
        shape,
        out: PathBuf::from(out),
        opts,
        layers,
        tokenizer,
    })
}

/// The real file whose tokenizer the shape gets.
fn default_tokenizer(shape: &MoeShape) -> PathBuf {
    let dir = std::env::var_os("TESSERA_MODELS_DIR")
        .map_or_else(|| PathBuf::from("models"), PathBuf::from);
    dir.join(match shape.family {
        fullsize::Family::GptOss => "gpt-oss-o200k-vocab.gguf",
        _ => "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
    })
}

fn run(a: Args) -> Result<(), String> {
    let tok_path = a
        .tokenizer
        .clone()
        .unwrap_or_else(|| default_tokenizer(&a.shape));
    let tok = gguf::GgufFile::open(&tok_path).map_err(|e| format!("tokenizer source: {e}"))?;
    let n_layers = a.layers.unwrap_or(a.shape.n_layers);
    if n_layers == 0 || n_layers > a.shape.n_layers {
        return Err(format!("--layers must be in 1..={}", a.shape.n_layers));
    }
    let file = std::fs::File::create(&a.out).map_err(|e| format!("{}: {e}", a.out.display()))?;
    let started = Instant::now();
    let out = BufWriter::with_capacity(8 << 20, file);
    let report = fullsize::write(&a.shape, n_layers, &a.opts, tok.metadata(), out)
        .map_err(|e| format!("{}: {e}", a.out.display()))?;
    let secs = started.elapsed().as_secs_f64();
    let size = std::fs::metadata(&a.out).map_err(|e| e.to_string())?.len();
    println!(
        "{}: {} ({n_layers} layers, {:?} router, seed {}), {} tensors, {size} bytes ({:.2} GiB) in {secs:.1} s",
        a.out.display(),
        a.shape.name,
        a.opts.router,
        a.opts.seed,
        report.n_tensors,
        size as f64 / (1u64 << 30) as f64,
    );
    for (layer, usage) in &report.usage {
        println!(
            "layer {layer} expert usage by rank over {} modelled hidden states: {}",
            router::N_MEASURE,
            router::describe(usage, a.shape.n_used)
        );
    }
    Ok(())
}

fn main() -> ExitCode {
    match parse_args().and_then(run) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("{e}");
            ExitCode::FAILURE
        }
    }
}
