//! Shared helpers of the model's integration tests.
#![allow(dead_code)]

use std::path::PathBuf;

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

/// Path of a committed golden file, relative to the workspace root.
pub fn golden(rel: &str) -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../")).join(rel)
}
