//! Measures the KV memory one long sequence holds, with and without sliding-window release.
//!
//! `cargo run --release -p tessera-engine --example kv_footprint -- [MODEL] [--tokens 8000]`
//!
//! Runs one request whose prompt is `--tokens` tokens of `tests/data/` text (repeated as needed)
//! through the real engine, samples the tiles in use while it runs, and prints the peak in tiles
//! and bytes for each setting.

use std::sync::atomic::Ordering::Relaxed;
use std::time::{Duration, Instant};

use engine::{EngineConfig, EngineHandle, Event, GenerateRequest};

fn main() {
    let mut args = std::env::args().skip(1);
    let mut model_path = String::from("models/gemma-3-270m-q4_k_m.gguf");
    let mut n_tokens = 8000usize;
    while let Some(a) = args.next() {
        match a.as_str() {
            "--tokens" => {
                n_tokens = args
                    .next()
                    .and_then(|v| v.parse().ok())
                    .unwrap_or_else(|| fail("--tokens needs a number"))
            }
            s if !s.starts_with("--") => model_path = s.to_string(),
            s => fail(&format!("unknown flag {s}")),
        }
    }
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../tests/data/pride_and_prejudice_ch1-7.txt"
    ))
    .unwrap_or_else(|e| fail(&format!("reading the text: {e}")));
    for release in [true, false] {
        let cfg = EngineConfig {
            kv_bytes: 2 << 30,
            release_window_tiles: release,
            ..EngineConfig::default()
        };
        let path = model_path.clone();
        let handle = EngineHandle::spawn(cfg, move || {
            let m = model::load(std::path::Path::new(&path), 2).map_err(|e| e.to_string())?;
            Ok((m.transformer, m.tokenizer))
        })
        .unwrap_or_else(|e| fail(&e.to_string()));
        let mut prompt = handle.tokenizer().encode(&text, true, false);
        while prompt.len() < n_tokens {
            let again = prompt[1..].to_vec();
            prompt.extend(again);
        }
        prompt.truncate(n_tokens);
        let tile_bytes = tile_bytes(&model_path);
        let mut stream = handle
            .submit(GenerateRequest {
                prompt,
                max_tokens: 1,
                ..Default::default()
            })
            .unwrap_or_else(|e| fail(&e.to_string()));
        let t0 = Instant::now();
        let mut peak = 0;
        loop {
            peak = peak.max(handle.stats().tiles_in_use.load(Relaxed));
            match stream.events.try_recv() {
                Ok(Event::Finished { .. }) => break,
                Ok(Event::Error(e)) => fail(&e.to_string()),
                Ok(_) => {}
                Err(tokio::sync::mpsc::error::TryRecvError::Empty) => {
                    std::thread::sleep(Duration::from_millis(2))
                }
                Err(_) => fail("the engine stopped"),
            }
        }
        println!(
            "{n_tokens} tokens, window release {}: peak {peak} tiles = {:.1} MiB of KV ({:.1}s)",
            if release { "on " } else { "off" },
            (peak as usize * tile_bytes) as f64 / (1 << 20) as f64,
            t0.elapsed().as_secs_f64()
        );
        handle.shutdown(Duration::from_secs(1));
    }
}

/// Bytes of one tile (K and V, f16, 16 tokens, one KV group of layers).
fn tile_bytes(path: &str) -> usize {
    let file = gguf::GgufFile::open(path).unwrap_or_else(|e| fail(&e.to_string()));
    let cfg =
        model::ModelConfig::from_metadata(file.metadata()).unwrap_or_else(|e| fail(&e.to_string()));
    cfg.kv_layout(16).tile_bytes()
}

fn fail(msg: &str) -> ! {
    eprintln!("error: {msg}");
    std::process::exit(1)
}
