//! `tessera-bench`: the `tessera bench` load generator as a standalone binary.

use clap::Parser;

#[derive(Parser)]
#[command(
    name = "tessera-bench",
    version,
    about = "Load generator for OpenAI-compatible servers"
)]
struct Cli {
    #[command(flatten)]
    args: bench::BenchArgs,
}

fn main() -> anyhow::Result<()> {
    bench::run(Cli::parse().args)
}
