//! Writes the random LoRA adapter of `model::testing::lora::real_lora_gguf` for a real GGUF
//! model: `write_real_lora MODEL OUT [SEED [STRENGTH]]` (defaults: the seed and strength of the
//! Qwen2.5-Coder-0.5B LoRA goldens, `QWEN_LORA_SEED` and `QWEN_LORA_STRENGTH`). The same
//! arguments write the same bytes. `scripts/oracle/qwen_lora_adapter.py` and the e2e tests run
//! this; the adapter is written outside the repository (weights are never committed).

use std::process::ExitCode;

use model::testing::lora::{real_lora_gguf, QWEN_LORA_SEED, QWEN_LORA_STRENGTH};

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (model, out, seed, strength) = match &args[..] {
        [m, o] => (m, o, Ok(QWEN_LORA_SEED), Ok(QWEN_LORA_STRENGTH)),
        [m, o, s] => (m, o, s.parse(), Ok(QWEN_LORA_STRENGTH)),
        [m, o, s, st] => (m, o, s.parse(), st.parse()),
        _ => {
            eprintln!("usage: write_real_lora MODEL OUT [SEED [STRENGTH]]");
            return ExitCode::from(2);
        }
    };
    let (Ok(seed), Ok(strength)) = (seed, strength) else {
        eprintln!("SEED must be a whole number and STRENGTH a number");
        return ExitCode::from(2);
    };
    let file = match gguf::GgufFile::open(model) {
        Ok(f) => f,
        Err(e) => {
            eprintln!("{model}: {e}");
            return ExitCode::FAILURE;
        }
    };
    let Some(bytes) = real_lora_gguf(&file, seed, strength) else {
        eprintln!("{model}: no attn_q, attn_v or ffn_down weight to adapt");
        return ExitCode::FAILURE;
    };
    if let Err(e) = std::fs::write(out, bytes) {
        eprintln!("{out}: {e}");
        return ExitCode::FAILURE;
    }
    println!("{out}: seed {seed}, strength {strength}");
    ExitCode::SUCCESS
}
