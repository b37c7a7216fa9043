//! Merging an adapter into the weights at load (`--lora-merge`): each touched weight becomes
//! `W + scale·(alpha/rank)·B·A`, computed in f32 from the dequantized weight.
//!
//! Formats: F32, F16 and BF16 weights keep their format; every quantized format is stored as
//! Q8_0 (as fine as the kernels read any quantized matrix, and packable for the x16 kernels),
//! or F16 for a width that is no whole number of Q8_0 blocks. The merged bytes are new
//! allocations, leaked like the file they replace; the file pages of the old ones are released.

use gguf::GgmlType;
use kernels::quant::{legacy::quantize_row_q8_0, BlockQ8_0, QK8_0};
use kernels::{plain_bytes, Layout};

use super::{LoraAdapter, LoraPair, Target};
use crate::weights::{Ffn, Matrix, ModelWeights};
use crate::ModelError;

/// Adds `adapter` at user scale `scale` into `w`, whose matrices must still be row-major (merge
/// before packing: `model::load_merged` does).
pub fn merge_adapter(
    w: &mut ModelWeights,
    adapter: &LoraAdapter,
    scale: f32,
) -> Result<(), ModelError> {
    let file = w.file;
    let one = |m: &mut Matrix, p: &LoraPair, name: String| -> Result<(), ModelError> {
        let merged = merge_matrix(m, p, p.scale(adapter.alpha, scale)).map_err(|problem| {
            ModelError::BadTensor {
                path: adapter.path.clone(),
                name,
                problem,
            }
        })?;
        file.release_pages(m.data);
        *m = merged;
        Ok(())
    };
    if let Some(p) = &adapter.output {
        one(&mut w.output, p, "output.weight".into())?;
    }
    for (li, (lw, la)) in w.layers.iter_mut().zip(&adapter.layers).enumerate() {
        for t in Target::ALL {
            let Some(p) = &la.pairs[t as usize] else {
                continue;
            };
            let name = format!("blk.{li}.{}", t.gguf_name());
            let m = match (t, &mut lw.ffn) {
                (Target::Q, _) => &mut lw.wq,
                (Target::K, _) => &mut lw.wk,
                (Target::V, _) => &mut lw.wv,
                (Target::O, _) => &mut lw.wo,
                (Target::Gate, Ffn::Dense { gate, .. }) => gate,
                (Target::Up, Ffn::Dense { up, .. }) => up,
                (Target::Down, Ffn::Dense { down, .. }) => down,
                (_, Ffn::Moe(_)) => {
                    return Err(ModelError::BadTensor {
                        path: adapter.path.clone(),
                        name,
                        problem: "a mixture-of-experts layer has no dense FFN to merge into".into(),
                    })
                }
            };
            one(m, p, name)?;
        }
    }
    Ok(())
}

/// The format a merged matrix of `ty` with `cols` columns is stored in.
fn merged_type(ty: GgmlType, cols: usize) -> GgmlType {
    match ty {
        GgmlType::F32 | GgmlType::F16 | GgmlType::BF16 => ty,
        _ if cols.is_multiple_of(QK8_0) => GgmlType::Q8_0,
        _ => GgmlType::F16,
    }
}

/// `m + scale·B·A`, row by row (the output rows of `B` in order).
fn merge_matrix(m: &Matrix, p: &LoraPair, scale: f32) -> Result<Matrix, String> {
    if m.layout != Layout::RowMajor {
        return Err("cannot merge into a repacked matrix (merge before packing)".into());
    }
    if (p.d_out, p.d_in) != (m.rows, m.cols) {
        return Err(format!(
            "LoRA is [{}, {}], the weight [{}, {}]",
            p.d_in, p.d_out, m.cols, m.rows
        ));
    }
    let ty = merged_type(m.ty, m.cols);
    let mut row = vec![0.0f32; m.cols];
    let zero = BlockQ8_0 {
        d: [0; 2],
        qs: [0; QK8_0],
    };
    let mut blocks = vec![zero; m.cols / QK8_0];
    let mut out: Vec<u8> = Vec::new();
    let rb = m.row_bytes();
    for r in 0..m.rows {
        kernels::dequantize_row(m.ty, &m.data[r * rb..(r + 1) * rb], &mut row)
            .map_err(|e| e.to_string())?;
        for k in 0..p.rank {
            let b = scale * p.b[r * p.rank + k];
            let a = &p.a[k * p.d_in..(k + 1) * p.d_in];
            row.iter_mut().zip(a).for_each(|(v, &a)| *v += b * a);
        }
        match ty {
            GgmlType::F32 => out.extend(row.iter().flat_map(|v| v.to_le_bytes())),
            GgmlType::F16 => out.extend(
                row.iter()
                    .flat_map(|&v| half::f16::from_f32(v).to_le_bytes()),
            ),
            GgmlType::BF16 => out.extend(
                row.iter()
                    .flat_map(|&v| half::bf16::from_f32(v).to_le_bytes()),
            ),
            _ => {
                quantize_row_q8_0(&row, &mut blocks);
                out.extend_from_slice(plain_bytes(&blocks));
            }
        }
    }
    Ok(Matrix {
        ty,
        data: Box::leak(out.into_boxed_slice()),
        rows: m.rows,
        cols: m.cols,
        layout: Layout::RowMajor,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A Q8_0 weight merged stays Q8_0, within a Q8_0 step of the exact `W + s·B·A`.
    #[test]
    fn a_q8_0_weight_merges_into_q8_0_within_its_rounding() {
        let (rows, cols, rank) = (4, 64, 2);
        let w: Vec<f32> = (0..rows * cols)
            .map(|i| ((i * 37 % 101) as f32 - 50.0) / 40.0)
            .collect();
        let mut blocks = vec![
            BlockQ8_0 {
                d: [0; 2],
                qs: [0; QK8_0]
            };
            rows * cols / QK8_0
        ];
        quantize_row_q8_0(&w, &mut blocks);
        let data: &'static [u8] = Box::leak(plain_bytes(&blocks).to_vec().into_boxed_slice());
        let m = Matrix {
            ty: GgmlType::Q8_0,
            data,
            rows,
            cols,
            layout: Layout::RowMajor,
        };
        let p = LoraPair::new(
            rank,
            cols,
            rows,
            (0..rank * cols)
                .map(|i| (i % 7) as f32 / 7.0 - 0.5)
                .collect(),
            (0..rows * rank).map(|i| (i % 3) as f32 - 1.0).collect(),
        );
        let merged = merge_matrix(&m, &p, 0.5).expect("merges");
        assert_eq!(merged.ty, GgmlType::Q8_0);
        let mut got = vec![0.0; rows * cols];
        let mut base = vec![0.0; rows * cols];
        kernels::dequantize_row(GgmlType::Q8_0, merged.data, &mut got).expect("dequantizes");
        kernels::dequantize_row(GgmlType::Q8_0, data, &mut base).expect("dequantizes");
        for r in 0..rows {
            for c in 0..cols {
                let delta: f32 = (0..rank)
                    .map(|k| p.b[r * rank + k] * p.a[k * cols + c])
                    .sum();
                let want = base[r * cols + c] + 0.5 * delta;
                let err = (got[r * cols + c] - want).abs();
                assert!(
                    err < 2.5 / 127.0,
                    "({r}, {c}): {} vs {want}",
                    got[r * cols + c]
                );
            }
        }
        let differs = got.iter().zip(&base).any(|(g, b)| (g - b).abs() > 0.05);
        assert!(differs, "the merge changed nothing");
    }
}
