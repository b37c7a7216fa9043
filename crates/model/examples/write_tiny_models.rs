//! Writes the tiny test models, `tiny-{arch}.gguf` for every arch in
//! `model::testing::TINY_ARCHS`, `TINY_MOE_ARCHS` and `encoders::TINY_ENCODER_ARCHS`, and
//! `tiny-qwen3-embed.gguf` (`tiny_qwen3_embedding_gguf`), and `tiny-{arch}-lora.gguf`, the
//! LoRA adapter of each arch in `testing::lora::TINY_LORA_ARCHS`, into the directory given as the only
//! argument (created if missing). The seed is the one the goldens under `tests/goldens/tiny/`
//! were made with (`model::testing::tiny_seed`); a second argument, SEED, writes every model
//! from that seed instead (to search for one without near-ties); `scripts/oracle/tiny_models.py` and `encoder_goldens.py` run this and feed
//! the files to llama.cpp.

use std::path::PathBuf;
use std::process::ExitCode;

use model::testing::encoders::{tiny_encoder_gguf, TINY_ENCODER_ARCHS};
use model::testing::lora::{tiny_lora_gguf, tiny_lora_seed, TINY_LORA_ARCHS};
use model::testing::{
    tiny_model_gguf, tiny_qwen3_embedding_gguf, tiny_seed, TINY_ARCHS, TINY_MOE_ARCHS,
};

fn main() -> ExitCode {
    let mut args = std::env::args_os().skip(1);
    let (Some(dir), seed, None) = (args.next(), args.next(), args.next()) else {
        eprintln!("usage: write_tiny_models DIR [SEED]");
        return ExitCode::from(2);
    };
    let seed: Option<u64> = match seed.map(|s| s.to_string_lossy().parse()) {
        None => None,
        Some(Ok(s)) => Some(s),
        Some(Err(_)) => {
            eprintln!("SEED must be a whole number");
            return ExitCode::from(2);
        }
    };
    let seed_of = |arch: &str| seed.unwrap_or_else(|| tiny_seed(arch));
    let dir = PathBuf::from(dir);
    if let Err(e) = std::fs::create_dir_all(&dir) {
        eprintln!("{}: {e}", dir.display());
        return ExitCode::FAILURE;
    }
    let decoders = TINY_ARCHS.iter().chain(TINY_MOE_ARCHS);
    let files = decoders
        .map(|a| (a, tiny_model_gguf(a, seed_of(a))))
        .chain(
            TINY_ENCODER_ARCHS
                .iter()
                .map(|a| (a, tiny_encoder_gguf(a, seed_of(a)))),
        )
        .map(|(a, bytes)| (a.to_string(), bytes))
        .chain(std::iter::once((
            "qwen3-embed".to_string(),
            tiny_qwen3_embedding_gguf(seed_of("qwen3")),
        )))
        .chain(TINY_LORA_ARCHS.iter().map(|a| {
            let seed = seed.unwrap_or_else(|| tiny_lora_seed(a));
            (format!("{a}-lora"), tiny_lora_gguf(a, seed))
        }));
    for (arch, bytes) in files {
        let path = dir.join(format!("tiny-{arch}.gguf"));
        if let Err(e) = std::fs::write(&path, bytes) {
            eprintln!("{}: {e}", path.display());
            return ExitCode::FAILURE;
        }
        println!("{}", path.display());
    }
    ExitCode::SUCCESS
}
