//! Writes a BF16 copy of a GGUF model (`model::convert::write_bf16`, which says how): the
//! weights vLLM's CPU backend serves from the same file, as a GGUF Tessera serves.
//!
//! `cargo run --release -p tessera-model --example to_bf16 -- IN.gguf OUT.gguf`

use std::io::BufWriter;

use gguf::GgufFile;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [input, output] = &args[..] else {
        eprintln!("usage: to_bf16 IN.gguf OUT.gguf");
        std::process::exit(2);
    };
    if let Err(e) = run(input, output) {
        eprintln!("to_bf16: {e}");
        std::process::exit(1);
    }
}

fn run(input: &str, output: &str) -> Result<(), String> {
    let file = GgufFile::open(input).map_err(|e| format!("{input}: {e}"))?;
    let out = std::fs::File::create(output).map_err(|e| format!("{output}: {e}"))?;
    model::convert::write_bf16(&file, BufWriter::new(out), |name| {
        eprintln!("{name} -> BF16")
    })
    .map_err(|e| format!("{input} -> {output}: {e}"))?;
    Ok(())
}
