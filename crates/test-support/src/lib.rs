//! Helpers shared by the tests of Tessera's crates (a dev-dependency only, never linked into
//! the server).
//!
//! - Real model files: [`model_path`] and [`default_model_path`] find a model fetched by
//!   `tessera fetch-model` under `$TESSERA_MODELS_DIR`, else `<repo>/models`, and panic with
//!   the file's name and how to fetch it when it is missing: a test whose input is absent fails,
//!   it never passes silently. Tests that read them belong to the full tier (each crate's
//!   `real-models` feature; scripts/test.sh fetches the models first).
//! - [`free_port`]: a loopback port nothing listens on right now.
//! - [`SplitMix64`]: a tiny seeded generator, identical on every machine, for test data.

use std::net::TcpListener;
use std::path::PathBuf;

/// The default model's canonical file name (Gemma 3 270M, Q4_K_M).
pub const DEFAULT_MODEL_FILE: &str = "gemma-3-270m-q4_k_m.gguf";

/// The repository's root directory (this crate lives at `<repo>/crates/test-support`).
pub fn repo_root() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
}

/// Where fetched models are: `$TESSERA_MODELS_DIR`, else `<repo>/models` (where
/// `tessera fetch-model` and scripts/test.sh put them).
pub fn models_dir() -> PathBuf {
    std::env::var_os("TESSERA_MODELS_DIR").map_or_else(|| repo_root().join("models"), PathBuf::from)
}

/// A real model by its canonical file name, in [`models_dir`].
///
/// # Panics
/// When the file is missing, naming it and saying how to fetch it.
pub fn model_path(file: &str) -> PathBuf {
    let p = models_dir().join(file);
    assert!(
        p.is_file(),
        "model file {file} missing at {}: fetch it with `cargo run --release -- fetch-model \
         <name>` (scripts/test.sh fetches every model the tests read), or point \
         TESSERA_MODELS_DIR at the directory that holds it",
        p.display()
    );
    p
}

/// The default model: the file `$TESSERA_MODEL` names when set, else
/// [`model_path`]`(`[`DEFAULT_MODEL_FILE`]`)`.
///
/// # Panics
/// When the file is missing, naming it and saying how to fetch it.
pub fn default_model_path() -> PathBuf {
    match std::env::var_os("TESSERA_MODEL") {
        Some(p) => {
            let p = PathBuf::from(p);
            assert!(
                p.is_file(),
                "TESSERA_MODEL={} is not a file: unset it to use {DEFAULT_MODEL_FILE} from the \
                 models directory (`cargo run --release -- fetch-model` fetches it)",
                p.display()
            );
            p
        }
        None => model_path(DEFAULT_MODEL_FILE),
    }
}

/// A loopback port nothing listens on right now (bound, read, released).
///
/// # Panics
/// When the system has no ephemeral port to give.
pub fn free_port() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").expect("binds an ephemeral loopback port");
    l.local_addr()
        .expect("a bound socket has an address")
        .port()
}

/// SplitMix64 (Steele, Lea and Flood's generator): tiny, seeded, the same sequence everywhere.
#[derive(Clone, Debug)]
pub struct SplitMix64(u64);

impl SplitMix64 {
    /// A generator whose sequence is a function of `seed` alone.
    pub fn new(seed: u64) -> Self {
        Self(seed)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// The first output of a generator seeded with `z`: a hash of one integer.
    pub fn mix(z: u64) -> u64 {
        Self::new(z).next_u64()
    }

    /// Uniform in `0..n` (modulo bias is negligible for test data).
    ///
    /// # Panics
    /// When `n` is 0.
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splitmix64_gives_the_published_sequence_for_seed_zero() {
        // The reference implementation's first outputs for seed 0.
        let mut r = SplitMix64::new(0);
        assert_eq!(r.next_u64(), 0xE220_A839_7B1D_CDAF);
        assert_eq!(r.next_u64(), 0x6E78_9E6A_A1B9_65F4);
    }

    #[test]
    fn a_missing_model_panics_naming_the_file_and_how_to_fetch_it() {
        let err = std::panic::catch_unwind(|| model_path("no-such-model-file.gguf"))
            .expect_err("a missing model must fail");
        let msg = err.downcast_ref::<String>().cloned().unwrap_or_default();
        assert!(msg.contains("no-such-model-file.gguf"), "{msg}");
        assert!(msg.contains("fetch-model"), "{msg}");
    }

    #[test]
    fn a_free_port_can_be_bound() {
        let p = free_port();
        assert_ne!(p, 0);
        TcpListener::bind(("127.0.0.1", p)).expect("the port is free");
    }
}
