//! Writes a BF16 copy of a GGUF model: the weights vLLM's CPU backend serves when
//! `scripts/peers/gguf_to_bf16.py` unpacks the same file, as a GGUF Tessera serves, so the two
//! servers can be compared on the same BF16 weights.
//!
//! `cargo run --release -p tessera-model --example to_bf16 -- IN.gguf OUT.gguf`
//!
//! Every tensor of two or more dimensions (the matrices, the embeddings, the experts) is
//! dequantized (`kernels::dequantize_row`, gguf-py's values bit for bit) and rounded to the
//! nearest BF16 (ties to even, as torch's cast); vectors (norms, biases) keep their type. The
//! metadata is copied with `general.file_type` set to BF16 (32, llama.cpp's
//! `LLAMA_FTYPE_MOSTLY_BF16`) and `general.alignment` set to 64: each tensor starts on a cache
//! line, so AMX tile rows read in place are one line each. Tensors are written one at a time
//! (`GgufStreamWriter`), so only one tensor's copy is in memory.

use std::io::BufWriter;

use gguf::{GgmlType, GgufFile, GgufStreamWriter, StreamTensor, Value};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [input, output] = &args[..] else {
        eprintln!("usage: to_bf16 IN.gguf OUT.gguf");
        std::process::exit(2);
    };
    if let Err(e) = run(input, output) {
        eprintln!("to_bf16: {e}");
        std::process::exit(1);
    }
}

fn run(input: &str, output: &str) -> Result<(), String> {
    let file = GgufFile::open(input).map_err(|e| format!("{input}: {e}"))?;
    let mut md = file.metadata().clone();
    md.insert("general.file_type", Value::U32(32));
    // Tensors start on cache lines, so AMX tile rows (64 bytes) read in place are one line each.
    md.insert("general.alignment", Value::U32(64));
    let convert = |dims: &[u64]| dims.len() >= 2;
    let specs: Vec<StreamTensor> = file
        .tensors()
        .iter()
        .map(|t| {
            let ty = if convert(&t.dims) {
                GgmlType::BF16
            } else {
                t.ggml_type
            };
            StreamTensor::new(t.name.clone(), &t.dims, ty)
        })
        .collect();
    let out = std::fs::File::create(output).map_err(|e| format!("{output}: {e}"))?;
    let mut w = GgufStreamWriter::new(BufWriter::new(out), &md, specs)
        .map_err(|e| format!("{output}: {e}"))?;
    for t in file.tensors() {
        let view = file
            .tensor(&t.name)
            .ok_or_else(|| format!("{input}: tensor {} has no data", t.name))?;
        if !convert(&t.dims) {
            w.write_tensor(|o, _| o.write_all(view.data))
                .map_err(|e| format!("{output}: {e}"))?;
            continue;
        }
        let cols = t.dims[0] as usize;
        let rows = (t.n_elements() as usize) / cols.max(1);
        let row_bytes = view.data.len() / rows.max(1);
        let mut f = vec![0f32; cols];
        let mut bytes = Vec::with_capacity(rows * cols * 2);
        for r in 0..rows {
            kernels::dequantize_row(
                t.ggml_type,
                &view.data[r * row_bytes..(r + 1) * row_bytes],
                &mut f,
            )
            .map_err(|e| format!("{input}: tensor {}: {e}", t.name))?;
            for &v in &f {
                bytes.extend_from_slice(&kernels::bf16dot::to_bf16(v).to_le_bytes());
            }
        }
        w.write_tensor(|o, _| o.write_all(&bytes))
            .map_err(|e| format!("{output}: {e}"))?;
        eprintln!("{} {:?} {} -> BF16", t.name, t.dims, t.ggml_type);
    }
    w.finish().map_err(|e| format!("{output}: {e}"))?;
    Ok(())
}
