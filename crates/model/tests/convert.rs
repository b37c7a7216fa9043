//! `model::convert::write_bf16` on a tiny model: every matrix becomes the BF16 rounding of its
//! dequantized values, vectors are copied, tensors start on cache lines, and the copy loads and
//! runs.

use std::path::PathBuf;

use gguf::{GgmlType, GgufFile, Value};
use kernels::bf16dot::to_bf16;
use model::testing::{tiny_model_gguf, TINY_SEED};
use model::Session;

struct TempDir(PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[test]
fn the_bf16_copy_holds_each_matrix_rounded_and_runs() {
    let dir = TempDir(std::env::temp_dir().join(format!("tessera-convert-{}", std::process::id())));
    std::fs::create_dir_all(&dir.0).expect("temp dir");
    let (src, dst) = (dir.0.join("tiny.gguf"), dir.0.join("tiny-bf16.gguf"));
    std::fs::write(&src, tiny_model_gguf("qwen2", TINY_SEED)).expect("write tiny model");
    let input = GgufFile::open(&src).expect("tiny model opens");
    let out = std::fs::File::create(&dst).expect("create copy");
    let mut names = Vec::new();
    model::convert::write_bf16(&input, out, |n| names.push(n.to_string())).expect("converts");

    let copy = GgufFile::open(&dst).expect("copy opens");
    assert_eq!(
        copy.metadata().get("general.file_type"),
        Some(&Value::U32(32))
    );
    assert_eq!(copy.alignment(), 64);
    assert_eq!(copy.tensors().len(), input.tensors().len());
    let mut matrices = 0;
    for t in input.tensors() {
        let (a, b) = (
            input.tensor(&t.name).expect("data"),
            copy.tensor(&t.name).expect("data"),
        );
        assert_eq!(
            b.data.as_ptr() as usize % 64,
            0,
            "{} starts on a cache line",
            t.name
        );
        let info = copy
            .tensors()
            .iter()
            .find(|c| c.name == t.name)
            .expect("same tensors");
        assert_eq!(info.dims, t.dims);
        if t.dims.len() < 2 {
            assert_eq!(
                (info.ggml_type, b.data),
                (t.ggml_type, a.data),
                "{} copied",
                t.name
            );
            continue;
        }
        matrices += 1;
        assert_eq!(info.ggml_type, GgmlType::BF16, "{}", t.name);
        let cols = t.dims[0] as usize;
        let rows = t.n_elements() as usize / cols;
        let mut row = vec![0f32; cols];
        let in_row = a.data.len() / rows;
        for r in 0..rows {
            kernels::dequantize_row(t.ggml_type, &a.data[r * in_row..(r + 1) * in_row], &mut row)
                .expect("dequantizes");
            for (c, v) in row.iter().enumerate() {
                let at = 2 * (r * cols + c);
                let got = u16::from_le_bytes([b.data[at], b.data[at + 1]]);
                assert_eq!(got, to_bf16(*v), "{} row {r} col {c}", t.name);
            }
        }
    }
    assert!(
        matrices > 0 && names.len() == matrices,
        "every matrix reported"
    );

    let mut m = model::load(&dst, 2).expect("the copy loads");
    let mut session = Session::new(&m.transformer, 1, 32, 4);
    let logits = session
        .prefill(&mut m.transformer, 0, &[5, 17, 42, 9, 100], 3)
        .expect("runs");
    assert!(!logits.is_empty() && logits.iter().all(|x| x.is_finite()));
}
