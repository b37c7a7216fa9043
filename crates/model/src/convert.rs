//! A BF16 copy of a GGUF model: the weights vLLM's CPU backend serves when transformers unpacks
//! the same file (`scripts/peers/gguf_to_bf16.py`), as a GGUF Tessera serves, so both servers can
//! be compared on the same BF16 weights, and so an AMX host can prefill on BF16 tiles.
//!
//! Every tensor of two or more dimensions (the matrices, the embeddings, the experts) is
//! dequantized (`kernels::dequantize_row`, gguf-py's values bit for bit) and rounded to the
//! nearest BF16 (ties to even, as torch's cast); vectors (norms, biases) keep their type. The
//! metadata is copied with `general.file_type` set to BF16 (32, llama.cpp's
//! `LLAMA_FTYPE_MOSTLY_BF16`) and `general.alignment` set to 64: each tensor starts on a cache
//! line, so AMX tile rows read in place are one line each. Tensors are written one at a time
//! (`GgufStreamWriter`), so only one tensor's copy is in memory.

use std::io::Write;

use gguf::{GgmlType, GgufFile, GgufStreamWriter, StreamTensor, Value};

use crate::ModelError;

/// Alignment of the copy's tensors: a cache line.
pub const BF16_ALIGNMENT: u32 = 64;

/// Writes `file`'s BF16 copy to `out` (see the module docs), calling `done` with each converted
/// tensor's name.
pub fn write_bf16<W: Write>(
    file: &GgufFile,
    out: W,
    mut done: impl FnMut(&str),
) -> Result<W, ModelError> {
    let mut md = file.metadata().clone();
    md.insert("general.file_type", Value::U32(32));
    md.insert("general.alignment", Value::U32(BF16_ALIGNMENT));
    let convert = |dims: &[u64]| dims.len() >= 2;
    let specs: Vec<StreamTensor> = file
        .tensors()
        .iter()
        .map(|t| {
            let ty = match convert(&t.dims) {
                true => GgmlType::BF16,
                false => t.ggml_type,
            };
            StreamTensor::new(t.name.clone(), &t.dims, ty)
        })
        .collect();
    let io = |e: std::io::Error| ModelError::invalid(format!("writing the BF16 copy: {e}"));
    let mut w = GgufStreamWriter::new(out, &md, specs).map_err(io)?;
    for t in file.tensors() {
        let bad = |problem: String| ModelError::BadTensor {
            path: "the input".into(),
            name: t.name.clone(),
            problem,
        };
        let view = file.tensor(&t.name).ok_or_else(|| bad("no data".into()))?;
        if !convert(&t.dims) {
            w.write_tensor(|o, _| o.write_all(view.data)).map_err(io)?;
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
            .map_err(|e| bad(e.to_string()))?;
            for &v in &f {
                bytes.extend_from_slice(&kernels::bf16dot::to_bf16(v).to_le_bytes());
            }
        }
        w.write_tensor(|o, _| o.write_all(&bytes)).map_err(io)?;
        done(&t.name);
    }
    w.finish().map_err(io)
}
