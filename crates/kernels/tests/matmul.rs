//! The public matmul: agreement with a decoded f64 reference, batch invariance, SIMD vs scalar,
//! and input validation.

mod common;

use common::{random_weights, Rng, ALL_TYPES, BIT_EXACT_TYPES};
use kernels::dtype::ActKind;
use kernels::quant::{kquants, legacy, ActQ8_0, BlockQ8K, QK8_0, QK_K};
use kernels::{
    dequantize_row, detect_isa, matmul, matmul_with_isa, Format, GgmlType, Isa, KernelError,
    MatmulScratch, Threads, Weights,
};

/// Activations as the kernels of `ty` see them after quantization, decoded to f32.
fn decoded_activations(ty: GgmlType, x: &[f32]) -> Vec<f32> {
    // BF16 weights of whole 32-column blocks take BF16-rounded activations, as llama.cpp's.
    if ty == GgmlType::BF16 && x.len().is_multiple_of(kernels::bf16dot::BLOCK) {
        let round = |v: f32| kernels::bf16dot::from_bf16(kernels::bf16dot::to_bf16(v));
        return x.iter().map(|&v| round(v)).collect();
    }
    match Format::from_ggml(ty).expect("supported").act_kind() {
        ActKind::F32 => x.to_vec(),
        ActKind::Q8_0 => {
            let mut a = vec![ActQ8_0::default(); x.len() / QK8_0];
            legacy::quantize_act_q8_0(x, &mut a);
            a.iter()
                .flat_map(|b| b.qs.map(|q| b.d * f32::from(q)))
                .collect()
        }
        ActKind::Q8_K => {
            let mut a = vec![BlockQ8K::default(); x.len() / QK_K];
            kquants::quantize_row_q8_k(x, &mut a);
            let mut d = vec![0f32; x.len()];
            kquants::dequantize_q8_k(&a, &mut d);
            d
        }
    }
}

/// f64 reference of the whole product plus the per-element error scale sum |w x|.
fn reference(w: &Weights, x: &[f32], m: usize) -> (Vec<f64>, Vec<f64>) {
    let mut want = vec![0f64; m * w.rows];
    let mut scale = vec![0f64; m * w.rows];
    let mut wr = vec![0f32; w.cols];
    for r in 0..w.rows {
        dequantize_row(w.ty, w.row(r), &mut wr).expect("valid row");
        for i in 0..m {
            let xd = decoded_activations(w.ty, &x[i * w.cols..(i + 1) * w.cols]);
            want[i * w.rows + r] = wr
                .iter()
                .zip(&xd)
                .map(|(&a, &b)| f64::from(a) * f64::from(b))
                .sum();
            scale[i * w.rows + r] = wr
                .iter()
                .zip(&xd)
                .map(|(&a, &b)| (f64::from(a) * f64::from(b)).abs())
                .sum();
        }
    }
    (want, scale)
}

fn isas() -> Vec<Isa> {
    [Isa::Scalar, Isa::Avx2, Isa::Avx512Vnni, Isa::Amx]
        .into_iter()
        .filter(|&i| i <= detect_isa())
        .collect()
}

#[test]
fn matmul_matches_decoded_reference_for_every_format_and_isa() {
    let mut rng = Rng::new(11);
    let threads = Threads::new(3);
    let mut scratch = MatmulScratch::new();
    for ty in ALL_TYPES {
        let (rows, cols, m) = (37, 3 * QK_K, 6);
        let data = random_weights(&mut rng, ty, rows, cols);
        let w = Weights::new(ty, &data, rows, cols).expect("valid weights");
        let x = rng.activations(m * cols);
        let (want, scale) = reference(&w, &x, m);
        for isa in isas() {
            let mut out = vec![f32::NAN; m * rows];
            matmul_with_isa(isa, &threads, &w, &x, m, &mut out, &mut scratch);
            for (k, (&got, (&want, &s))) in out.iter().zip(want.iter().zip(&scale)).enumerate() {
                let err = (f64::from(got) - want).abs();
                assert!(
                    err <= 3e-6 * s + 1e-9,
                    "{ty:?} {isa:?} element {k}: got {got}, want {want}, scale {s}"
                );
            }
        }
    }
}

#[test]
fn each_output_is_bit_identical_whatever_the_batch_and_thread_count() {
    let mut rng = Rng::new(12);
    let pools = [Threads::new(1), Threads::new(2), Threads::new(4)];
    let mut scratch = MatmulScratch::new();
    for ty in ALL_TYPES {
        let (rows, cols, m) = (70, 2 * QK_K, 11);
        let data = random_weights(&mut rng, ty, rows, cols);
        let w = Weights::new(ty, &data, rows, cols).expect("valid weights");
        let x = rng.activations(m * cols);
        for isa in isas() {
            let mut full = vec![0f32; m * rows];
            matmul_with_isa(isa, &pools[1], &w, &x, m, &mut full, &mut scratch);
            // Every row alone, on every pool size.
            for pool in &pools {
                for i in 0..m {
                    let mut one = vec![0f32; rows];
                    matmul_with_isa(
                        isa,
                        pool,
                        &w,
                        &x[i * cols..(i + 1) * cols],
                        1,
                        &mut one,
                        &mut scratch,
                    );
                    assert_eq!(
                        one.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                        full[i * rows..(i + 1) * rows]
                            .iter()
                            .map(|v| v.to_bits())
                            .collect::<Vec<_>>(),
                        "{ty:?} {isa:?} row {i} alone on {} threads",
                        pool.n()
                    );
                }
            }
            // Rows in reverse order land in different groups of four.
            let rev: Vec<f32> = (0..m)
                .rev()
                .flat_map(|i| x[i * cols..(i + 1) * cols].to_vec())
                .collect();
            let mut out_rev = vec![0f32; m * rows];
            matmul_with_isa(isa, &pools[2], &w, &rev, m, &mut out_rev, &mut scratch);
            for i in 0..m {
                let a = &full[i * rows..(i + 1) * rows];
                let b = &out_rev[(m - 1 - i) * rows..(m - i) * rows];
                assert!(
                    a.iter().zip(b).all(|(p, q)| p.to_bits() == q.to_bits()),
                    "{ty:?} {isa:?} row {i} reordered"
                );
            }
        }
    }
}

#[test]
fn default_matmul_uses_the_best_isa() {
    let mut rng = Rng::new(13);
    let threads = Threads::new(2);
    let mut scratch = MatmulScratch::new();
    let data = random_weights(&mut rng, GgmlType::Q4_K, 8, QK_K);
    let w = Weights::new(GgmlType::Q4_K, &data, 8, QK_K).expect("valid weights");
    let x = rng.activations(QK_K);
    let mut a = vec![0f32; 8];
    let mut b = vec![0f32; 8];
    matmul(&threads, &w, &x, 1, &mut a, &mut scratch);
    matmul_with_isa(kernels::isa(), &threads, &w, &x, 1, &mut b, &mut scratch);
    assert_eq!(a, b);
}

#[test]
fn weights_new_validates_type_shape_and_size() {
    let data = vec![0u8; 2 * 34 * 2];
    assert!(Weights::new(GgmlType::Q8_0, &data, 2, 64).is_ok());
    assert!(matches!(
        Weights::new(GgmlType::Q8_0, &data, 3, 64),
        Err(KernelError::SizeMismatch {
            expected: 204,
            actual: 136,
            ..
        })
    ));
    assert!(matches!(
        Weights::new(GgmlType::Q8_0, &data, 2, 48),
        Err(KernelError::RaggedRow { .. })
    ));
    assert!(matches!(
        Weights::new(GgmlType::Q8_1, &data, 2, 32),
        Err(KernelError::UnsupportedType { ty: GgmlType::Q8_1 })
    ));
}

#[test]
fn empty_batch_writes_nothing() {
    let data = vec![0u8; 34];
    let w = Weights::new(GgmlType::Q8_0, &data, 1, 32).expect("valid weights");
    let mut out: Vec<f32> = vec![];
    matmul(
        &Threads::new(2),
        &w,
        &[],
        0,
        &mut out,
        &mut MatmulScratch::new(),
    );
    assert!(out.is_empty());
}

#[test]
#[should_panic(expected = "matmul: x has")]
fn mismatched_activation_length_panics() {
    let data = vec![0u8; 34];
    let w = Weights::new(GgmlType::Q8_0, &data, 1, 32).expect("valid weights");
    let mut out = vec![0f32; 1];
    matmul(
        &Threads::new(1),
        &w,
        &[0.0; 31],
        1,
        &mut out,
        &mut MatmulScratch::new(),
    );
}

#[test]
fn simd_kernels_agree_with_scalar_and_avx2_equals_vnni_bitwise() {
    let mut rng = Rng::new(14);
    let threads = Threads::new(2);
    let mut scratch = MatmulScratch::new();
    for ty in ALL_TYPES {
        for &(rows, cols, m) in &[(9usize, QK_K, 1usize), (21, 5 * QK_K, 5), (4, 2 * QK_K, 8)] {
            let data = random_weights(&mut rng, ty, rows, cols);
            let w = Weights::new(ty, &data, rows, cols).expect("valid weights");
            let x = rng.activations(m * cols);
            let run = |isa: Isa, scratch: &mut MatmulScratch| {
                let mut out = vec![0f32; m * rows];
                matmul_with_isa(isa, &threads, &w, &x, m, &mut out, scratch);
                out
            };
            let scalar = run(Isa::Scalar, &mut scratch);
            let (_, scale) = reference(&w, &x, m);
            let simd: Vec<Vec<f32>> = isas()[1..]
                .iter()
                .map(|&isa| run(isa, &mut scratch))
                .collect();
            for out in &simd {
                for k in 0..out.len() {
                    let err = f64::from((out[k] - scalar[k]).abs());
                    assert!(
                        err <= 3e-6 * scale[k] + 1e-9,
                        "{ty:?} element {k}: {} vs scalar {}",
                        out[k],
                        scalar[k]
                    );
                }
            }
            let bits = |v: &Vec<f32>| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
            for other in simd.iter().skip(1) {
                assert_eq!(bits(&simd[0]), bits(other), "{ty:?}: AVX2 and VNNI differ");
            }
        }
    }
}

#[test]
fn new_block_formats_give_the_scalar_bits_on_every_isa() {
    // MXFP4 / IQ4_NL (blocks of 32) and Q2_K / Q3_K / IQ4_XS (256): every kernel forms the
    // scalar reference's exact integers and its float steps, so the outputs are equal bit for
    // bit, at every batch size (groups of 16, 8, 4 and the remainder).
    let mut rng = Rng::new(17);
    let threads = Threads::new(2);
    let mut scratch = MatmulScratch::new();
    let all = isas();
    assert!(all.len() >= 2 || detect_isa() == Isa::Scalar);
    for ty in BIT_EXACT_TYPES {
        for &(rows, cols, m) in &[(9usize, QK_K, 1usize), (21, 3 * QK_K, 7), (5, 2 * QK_K, 19)] {
            let data = random_weights(&mut rng, ty, rows, cols);
            let w = Weights::new(ty, &data, rows, cols).expect("valid weights");
            let x = rng.activations(m * cols);
            let bits = |isa: Isa, scratch: &mut MatmulScratch| {
                let mut out = vec![f32::NAN; m * rows];
                matmul_with_isa(isa, &threads, &w, &x, m, &mut out, scratch);
                out.iter().map(|v| v.to_bits()).collect::<Vec<_>>()
            };
            let scalar = bits(Isa::Scalar, &mut scratch);
            assert!(
                scalar.iter().all(|&b| f32::from_bits(b).is_finite()),
                "{ty:?}"
            );
            for &isa in &all[1..] {
                assert_eq!(
                    bits(isa, &mut scratch),
                    scalar,
                    "{ty:?} {isa:?} vs scalar, m {m}"
                );
            }
        }
    }
}

#[test]
fn float_formats_handle_rows_that_are_not_a_multiple_of_eight() {
    // Column counts around the 256-bit bodies' steps of 8 and the 512-bit bodies' 16 (a last
    // run of eight, a tail shorter than eight); batches of 2 and 19 (16-row passes and the
    // rest); seven weight rows (a tile of four and three single rows). The SIMD paths agree bit for bit, and all with the decoded reference.
    let mut rng = Rng::new(15);
    let threads = Threads::new(1);
    let mut scratch = MatmulScratch::new();
    for ty in [GgmlType::F32, GgmlType::F16, GgmlType::BF16] {
        for cols in [1usize, 7, 13, 24, 29, 40, 57] {
            for m in [2usize, 19] {
                let data = random_weights(&mut rng, ty, 7, cols);
                let w = Weights::new(ty, &data, 7, cols).expect("valid weights");
                let x = rng.activations(m * cols);
                let (want, scale) = reference(&w, &x, m);
                let mut simd_bits: Option<Vec<u32>> = None;
                for isa in isas() {
                    let mut out = vec![0f32; 7 * m];
                    matmul_with_isa(isa, &threads, &w, &x, m, &mut out, &mut scratch);
                    for k in 0..out.len() {
                        assert!(
                            (f64::from(out[k]) - want[k]).abs() <= 3e-6 * scale[k] + 1e-9,
                            "{ty:?} {isa:?} cols {cols}"
                        );
                    }
                    if isa > Isa::Scalar {
                        let bits: Vec<u32> = out.iter().map(|v| v.to_bits()).collect();
                        match &simd_bits {
                            Some(first) => assert_eq!(&bits, first, "{ty:?} {isa:?} cols {cols}"),
                            None => simd_bits = Some(bits),
                        }
                    }
                }
            }
        }
    }
}

#[test]
fn q8_0_weights_at_minus_128_do_not_saturate() {
    // -128 never comes out of llama.cpp's quantizer but is a valid byte in a file.
    let threads = Threads::new(1);
    let mut scratch = MatmulScratch::new();
    let block = kernels::quant::BlockQ8_0 {
        d: kernels::quant::f32_to_f16(1.0),
        qs: [-128; 32],
    };
    let data = kernels::quant::blocks_as_bytes(&[block]).to_vec();
    let w = Weights::new(GgmlType::Q8_0, &data, 1, 32).expect("valid weights");
    let x = vec![-127.0f32; 32]; // activation scale exactly 1
    for isa in isas() {
        let mut out = [0f32; 1];
        matmul_with_isa(isa, &threads, &w, &x, 1, &mut out, &mut scratch);
        assert_eq!(out[0], 128.0 * 127.0 * 32.0, "{isa:?}");
    }
}

#[test]
fn blocks_of_32_in_odd_numbers_agree_across_isas() {
    // The 512-bit kernels take blocks in pairs; an odd count ends in a zero-padded pair.
    let mut rng = Rng::new(16);
    let threads = Threads::new(2);
    let mut scratch = MatmulScratch::new();
    for ty in [
        GgmlType::Q4_0,
        GgmlType::Q5_0,
        GgmlType::Q8_0,
        GgmlType::Q4_1,
        GgmlType::Q5_1,
        GgmlType::MXFP4,
        GgmlType::IQ4_NL,
    ] {
        for blocks in [1usize, 3, 7] {
            let (rows, cols, m) = (6, blocks * QK8_0, 5);
            let data = random_weights(&mut rng, ty, rows, cols);
            let w = Weights::new(ty, &data, rows, cols).expect("valid weights");
            let x = rng.activations(m * cols);
            let (want, scale) = reference(&w, &x, m);
            let mut outs = Vec::new();
            for isa in isas() {
                let mut out = vec![0f32; m * rows];
                matmul_with_isa(isa, &threads, &w, &x, m, &mut out, &mut scratch);
                for k in 0..out.len() {
                    let err = (f64::from(out[k]) - want[k]).abs();
                    assert!(
                        err <= 3e-6 * scale[k] + 1e-9,
                        "{ty:?} {isa:?} {blocks} blocks, element {k}"
                    );
                }
                outs.push(out);
            }
            // Every SIMD path gives the AVX2 bits; the new formats also the scalar ones.
            let bits = |v: &Vec<f32>| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
            let first = usize::from(!BIT_EXACT_TYPES.contains(&ty));
            for other in outs.iter().skip(first + 1) {
                assert_eq!(
                    bits(&outs[first]),
                    bits(other),
                    "{ty:?} {blocks} blocks: SIMD paths differ"
                );
            }
        }
    }
}

#[test]
#[should_panic(expected = "inconsistent Weights")]
fn hand_built_weights_with_a_wrong_size_are_rejected() {
    let data = vec![0u8; 30];
    let w = Weights {
        ty: GgmlType::Q8_0,
        data: &data,
        rows: 1,
        cols: 32,
        layout: kernels::Layout::RowMajor,
    };
    let mut out = vec![0f32; 1];
    matmul(
        &Threads::new(1),
        &w,
        &[0.0; 32],
        1,
        &mut out,
        &mut MatmulScratch::new(),
    );
}

#[test]
fn pool_scratch_and_weights_can_move_between_threads() {
    fn assert_send_sync<T: Send + Sync>() {}
    fn assert_send<T: Send>() {}
    assert_send_sync::<Threads>();
    assert_send_sync::<Weights<'static>>();
    assert_send::<MatmulScratch>();
}
