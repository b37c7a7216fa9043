//! Shared helpers of the model's integration tests.
#![allow(dead_code)]

pub mod greedy;

use std::io::Read;
use std::path::PathBuf;

use sha2::{Digest, Sha256};

/// The default model for golden tests: `$TESSERA_MODEL`, else `<workspace>/models/…`.
/// Missing model = failure with instructions, never a silent pass.
pub fn default_model_path() -> PathBuf {
    if let Some(p) = std::env::var_os("TESSERA_MODEL") {
        return PathBuf::from(p);
    }
    let p = PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../models/gemma-3-270m-q4_k_m.gguf"
    ));
    assert!(
        p.exists(),
        "default model missing at {}: run `cargo run --release -- fetch-model` (or scripts/test.sh)",
        p.display()
    );
    p
}

/// A real model by its canonical file name: `$TESSERA_MODELS_DIR/<file>`, else
/// `<workspace>/models/<file>`. Missing model = failure with instructions.
pub fn model_path(file: &str) -> PathBuf {
    let dir = std::env::var_os("TESSERA_MODELS_DIR").map_or_else(
        || PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../models")),
        PathBuf::from,
    );
    let p = dir.join(file);
    assert!(
        p.exists(),
        "model missing at {}: scripts/test.sh fetches it (or set TESSERA_MODELS_DIR)",
        p.display()
    );
    p
}

/// Hex sha256 of a file, read in blocks.
pub fn file_sha256(path: &std::path::Path) -> String {
    let mut f = std::fs::File::open(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = f.read(&mut buf).expect("model file readable");
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
    }
    h.finalize().iter().map(|b| format!("{b:02x}")).collect()
}

/// Path of a committed golden file, relative to the workspace root.
pub fn golden(rel: &str) -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../")).join(rel)
}
