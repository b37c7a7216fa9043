//! Grammar compile times over a corpus of JSON schemas, for `docs/BENCHMARKS.md`.
//!
//! `cargo run --release -p tessera-engine --example grammar_compile -- MODEL.gguf SCHEMAS.json`
//! where SCHEMAS.json is a list of `[name, schema]` pairs (e.g. written by
//! `tests/e2e/schema_corpus.py --dump FILE`). Prints the one-time vocabulary indexing, then
//! p50 / p99 / max of compiling each schema cold (a cache miss) and again warm (a cache hit),
//! and how many schemas llguidance refused.

use std::time::{Duration, Instant};

use engine::constraint::{Constraint, Grammars};

fn pct(sorted: &[Duration], p: f64) -> f64 {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i].as_secs_f64() * 1e3
}

fn summary(label: &str, mut d: Vec<Duration>) {
    d.sort();
    println!(
        "{label}: n={} p50={:.3} ms p99={:.3} ms max={:.3} ms",
        d.len(),
        pct(&d, 0.5),
        pct(&d, 0.99),
        pct(&d, 1.0)
    );
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let (Some(model), Some(corpus)) = (args.get(1), args.get(2)) else {
        return Err("usage: grammar_compile MODEL.gguf SCHEMAS.json".into());
    };
    let file = gguf::GgufFile::open(model)?;
    let tokenizer = tokenizer::Tokenizer::from_metadata(file.metadata())?;
    let schemas: Vec<(String, serde_json::Value)> =
        serde_json::from_str(&std::fs::read_to_string(corpus)?)?;
    let grammars = Grammars::new(tokenizer);
    let t = Instant::now();
    // Indexing the vocabulary happens on the first compilation: time it apart.
    let _ = grammars.compile(&Constraint::Regex("x".into()));
    println!(
        "vocabulary indexing (once): {:.1} ms",
        t.elapsed().as_secs_f64() * 1e3
    );
    let (mut cold, mut cold_ok, mut warm, mut refused) = (Vec::new(), Vec::new(), Vec::new(), 0);
    for (name, schema) in &schemas {
        let c = Constraint::JsonSchema(schema.clone());
        let t = Instant::now();
        let ok = grammars.compile(&c);
        cold.push(t.elapsed());
        if let Err(e) = ok {
            refused += 1;
            println!(
                "refused {name}: {}",
                e.chars().take(100).collect::<String>()
            );
            continue;
        }
        cold_ok.push(*cold.last().expect("pushed above: this is a bug"));
        let t = Instant::now();
        grammars.compile(&c)?;
        warm.push(t.elapsed());
    }
    println!("{} schemas, {refused} refused", schemas.len());
    summary("cold, all (compile + first mask, or the refusal)", cold);
    summary("cold, compiled ones", cold_ok);
    summary("warm (cache hit)", warm);
    Ok(())
}
