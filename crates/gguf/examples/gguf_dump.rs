//! Prints a GGUF file's header: metadata (long arrays truncated) and the tensor table.
//!
//! Usage: `cargo run -p tessera-gguf --example gguf_dump -- FILE [--no-tensors]`

use std::process::ExitCode;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some(path) = args.iter().find(|a| !a.starts_with("--")) else {
        eprintln!("usage: gguf_dump FILE [--no-tensors]");
        return ExitCode::from(2);
    };
    let file = match gguf::GgufFile::open(path) {
        Ok(f) => f,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::FAILURE;
        }
    };
    println!(
        "{}: GGUF v{}, {} metadata entries, {} tensors, alignment {}, data at byte {}",
        file.path().display(),
        file.version(),
        file.metadata().len(),
        file.tensors().len(),
        file.alignment(),
        file.data_offset()
    );
    for (key, value) in file.metadata().iter() {
        let ty = match value {
            gguf::Value::Array(a) => format!("array<{}>[{}]", a.elem_type_name(), a.len()),
            v => v.type_name().to_owned(),
        };
        println!("  {key}: {ty} = {value}");
    }
    if args.iter().any(|a| a == "--no-tensors") {
        return ExitCode::SUCCESS;
    }
    let total: usize = file.tensors().iter().map(|t| t.n_bytes).sum();
    println!("tensors ({total} bytes):");
    for t in file.tensors() {
        println!(
            "  {:<40} {:<5} {:?} offset {} bytes {}",
            t.name, t.ggml_type, t.dims, t.offset, t.n_bytes
        );
    }
    ExitCode::SUCCESS
}
