//! Writes the tiny test models, `tiny-{arch}.gguf` for every arch in
//! `model::testing::TINY_ARCHS` and `TINY_MOE_ARCHS`, into the directory given as the only
//! argument (created if missing). The seed is the one the goldens under `tests/goldens/tiny/`
//! were made with; `scripts/oracle/tiny_models.py` runs this and feeds the files to llama.cpp.

use std::path::PathBuf;
use std::process::ExitCode;

use model::testing::{tiny_model_gguf, TINY_ARCHS, TINY_MOE_ARCHS, TINY_SEED};

fn main() -> ExitCode {
    let mut args = std::env::args_os().skip(1);
    let (Some(dir), None) = (args.next(), args.next()) else {
        eprintln!("usage: write_tiny_models DIR");
        return ExitCode::from(2);
    };
    let dir = PathBuf::from(dir);
    if let Err(e) = std::fs::create_dir_all(&dir) {
        eprintln!("{}: {e}", dir.display());
        return ExitCode::FAILURE;
    }
    for arch in TINY_ARCHS.iter().chain(TINY_MOE_ARCHS) {
        let path = dir.join(format!("tiny-{arch}.gguf"));
        if let Err(e) = std::fs::write(&path, tiny_model_gguf(arch, TINY_SEED)) {
            eprintln!("{}: {e}", path.display());
            return ExitCode::FAILURE;
        }
        println!("{}", path.display());
    }
    ExitCode::SUCCESS
}
