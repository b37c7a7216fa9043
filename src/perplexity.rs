//! `tessera perplexity`: the llama-perplexity procedure on a text file.

use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use clap::Args;
use model::KvDtype;

#[derive(Args)]
pub struct PerplexityArgs {
    /// GGUF model file, or a known model's name (`tessera fetch-model --list`; fetched on first
    /// use, as the default model is when this is not given).
    #[arg(long)]
    model: Option<PathBuf>,
    /// UTF-8 text file to score (one trailing newline is dropped, as llama.cpp's reader does).
    #[arg(long)]
    file: PathBuf,
    /// Window size; the second half of each window is scored.
    #[arg(long, default_value_t = 512)]
    ctx: usize,
    /// KV cache storage: f32, f16 or q8_0.
    #[arg(long, default_value = "f16")]
    kv_dtype: String,
    /// Worker threads (default: all cores).
    #[arg(long)]
    threads: Option<usize>,
}

pub fn run(args: PerplexityArgs) -> Result<()> {
    let Some(dtype) = KvDtype::parse(&args.kv_dtype) else {
        bail!(
            "--kv-dtype must be f32, f16 or q8_0, not {:?}",
            args.kv_dtype
        );
    };
    let path = crate::resolve_model(args.model)?;
    let threads = args
        .threads
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    let mut text = std::fs::read_to_string(&args.file)
        .with_context(|| format!("reading {}", args.file.display()))?;
    if text.ends_with('\n') {
        text.pop();
    }
    let m = model::load(&path, threads).with_context(|| format!("loading {}", path.display()))?;
    let (tok, mut tf) = (m.tokenizer, m.transformer);
    let tokens = tok.encode(&text, true, false);
    // llama-perplexity puts BOS at the head of each window only when the model adds one.
    let bos = match (tok.add_bos(), tok.bos_id()) {
        (true, Some(id)) => Some(id),
        (true, None) => bail!("the model asks for a BOS token but has none"),
        (false, _) => None,
    };
    if tokens.len() < 2 * args.ctx {
        bail!(
            "the text has {} tokens; at least two windows of {} are needed",
            tokens.len(),
            args.ctx
        );
    }
    let t0 = std::time::Instant::now();
    let r = model::eval::perplexity(&mut tf, &tokens, bos, args.ctx, dtype, |done, total| {
        eprint!("\r[{done}/{total}] windows");
    })?;
    eprintln!();
    println!(
        "{} tokens, {} windows of {}, {} scored, kv {}: PPL = {:.4} +/- {:.4} ({:.1}s)",
        tokens.len(),
        r.n_chunks,
        args.ctx,
        r.n_scored,
        args.kv_dtype,
        r.ppl,
        r.ppl_error,
        t0.elapsed().as_secs_f64()
    );
    Ok(())
}
