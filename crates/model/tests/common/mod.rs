//! Shared helpers of the model's integration tests.
#![allow(dead_code)]

pub mod greedy;

use std::io::Read;
use std::path::PathBuf;

use sha2::{Digest, Sha256};

/// The default model and the real models by canonical file name: see `test_support` (a missing
/// model fails with instructions, never a silent pass).
#[allow(unused_imports)] // each test binary uses its own part
pub use test_support::{default_model_path, model_path};

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
