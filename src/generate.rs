//! `tessera generate`: one prompt, one streamed continuation.

use std::io::Write;
use std::path::PathBuf;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use clap::Args;
use model::{Sampler, SamplingParams, Session};

#[derive(Args)]
pub struct GenerateArgs {
    /// GGUF model file, or a known model's name (`tessera fetch-model --list`; fetched on first
    /// use, as the default model is when this is not given).
    #[arg(long)]
    model: Option<PathBuf>,
    /// The prompt text.
    #[arg(long)]
    prompt: String,
    /// Maximum number of tokens to generate.
    #[arg(long, default_value_t = 128)]
    max_tokens: usize,
    /// Sampling temperature; 0 is greedy.
    #[arg(long, default_value_t = 0.0)]
    temperature: f32,
    /// Top-k cut-off (0 = off).
    #[arg(long, default_value_t = 0)]
    top_k: usize,
    /// Nucleus cut-off (1 = off).
    #[arg(long, default_value_t = 1.0)]
    top_p: f32,
    /// Seed of the sampler's generator.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Worker threads for the matmuls (default: all cores).
    #[arg(long)]
    threads: Option<usize>,
    /// Tokens per prefill chunk.
    #[arg(long, default_value_t = 512)]
    chunk: usize,
    /// Parse special-token strings (like <start_of_turn>) in the prompt.
    #[arg(long)]
    parse_special: bool,
}

pub fn run(args: GenerateArgs) -> Result<()> {
    let path = crate::resolve_model(args.model)?;
    let threads = args
        .threads
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    let params = SamplingParams {
        temperature: args.temperature,
        top_k: args.top_k,
        top_p: args.top_p,
        seed: Some(args.seed),
        ..Default::default()
    };
    if let Err((field, msg)) = params.validate() {
        bail!("--{}: {msg}", field.replace('_', "-"));
    }
    let t0 = Instant::now();
    let m = model::load(&path, threads).with_context(|| format!("loading {}", path.display()))?;
    let (tok, mut tf) = (m.tokenizer, m.transformer);
    let prompt = tok.encode(&args.prompt, true, args.parse_special);
    if prompt.is_empty() {
        bail!("the prompt is empty");
    }
    let ctx = tf.config().context_length;
    if prompt.len() + args.max_tokens > ctx {
        bail!(
            "prompt ({} tokens) plus --max-tokens ({}) exceeds the context length ({ctx})",
            prompt.len(),
            args.max_tokens
        );
    }
    let load_time = t0.elapsed();
    let mut session = Session::new(&tf, 1, prompt.len() + args.max_tokens, 16);
    let mut sampler = Sampler::new(params, args.seed);
    let mut decoder = tok.incremental_decoder(true);
    let mut out = std::io::stdout().lock();

    let t1 = Instant::now();
    let mut logits = session.prefill(&mut tf, 0, &prompt, args.chunk)?;
    let mut scratch = model::sampler::SampleScratch::default();
    let prefill_time = t1.elapsed();
    let t2 = Instant::now();
    let mut generated = 0;
    for _ in 0..args.max_tokens {
        let next = sampler.sample(&logits, &mut scratch);
        if tok.eog_ids().contains(&next) {
            break;
        }
        sampler.accept(next);
        generated += 1;
        write!(out, "{}", decoder.push(next))?;
        out.flush()?;
        if generated == args.max_tokens {
            break;
        }
        session.run(
            &mut tf,
            &[(0, &[next], model::LogitsWanted::Last)],
            &mut logits,
        )?;
    }
    writeln!(out, "{}", decoder.flush())?;
    let decode_time = t2.elapsed();
    eprintln!(
        "load {:.2}s | prompt {} tokens, {:.1} tok/s | generated {} tokens, {:.1} tok/s",
        load_time.as_secs_f64(),
        prompt.len(),
        prompt.len() as f64 / prefill_time.as_secs_f64(),
        generated,
        generated as f64 / decode_time.as_secs_f64().max(1e-9),
    );
    Ok(())
}
