//! x16-packed weights: the packed matmul agrees with the row-major one, its SIMD kernel gives the
//! scalar kernel's exact bits, every output is independent of the batch and the pool, and packing
//! refuses what it cannot pack. Block counts per row (1, 2, 23; 23 and 3 in the batch test) are
//! not all multiples of the AMX passes' batch of four records.

mod common;

use common::{random_weights, Rng};
use kernels::{
    detect_isa, matmul_with_isa, pack, pack_stacked, packable, GgmlType, Isa, MatmulScratch,
    Threads, Weights,
};

const PACKABLE: [GgmlType; 9] = [
    GgmlType::Q8_0,
    GgmlType::Q5_0,
    GgmlType::Q4_0,
    GgmlType::Q4_1,
    GgmlType::Q5_1,
    GgmlType::MXFP4,
    GgmlType::IQ4_NL,
    GgmlType::Q4_K,
    GgmlType::Q6_K,
];

/// Every ISA above scalar this CPU has.
fn simd_isas() -> impl Iterator<Item = Isa> {
    [Isa::Avx2, Isa::Avx512Vnni, Isa::Amx]
        .into_iter()
        .filter(|&isa| detect_isa() >= isa)
}

/// Shapes to test a type at (columns a multiple of its block).
fn shapes(ty: GgmlType) -> [(usize, usize); 3] {
    if k_quant(ty) {
        [(16, 256), (48, 512), (64, 1024)]
    } else {
        [(16, 32), (48, 64), (64, 736)]
    }
}

fn k_quant(ty: GgmlType) -> bool {
    matches!(ty, GgmlType::Q4_K | GgmlType::Q6_K)
}

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

#[test]
fn packed_matmul_agrees_with_row_major_and_simd_equals_scalar_bitwise() {
    let mut rng = Rng::new(31);
    let threads = Threads::new(2);
    let mut scratch = MatmulScratch::new();
    for ty in PACKABLE {
        for (rows, cols) in shapes(ty) {
            let data = random_weights(&mut rng, ty, rows, cols);
            let row_major = Weights::new(ty, &data, rows, cols).expect("valid weights");
            let packed = pack(ty, &data, rows, cols).expect("packable");
            let want = kernels::packed::packed_len(ty, rows, cols);
            assert_eq!(Some(packed.as_bytes().len()), want);
            // Decode streams every weight byte once per token: packing must not grow them.
            assert_eq!(want, Some(data.len()), "{ty:?}: packing keeps the size");
            let pw = Weights::packed(ty, packed.as_bytes(), rows, cols).expect("valid packed");
            for m in [1, 2, 3, 5, 16, 21, 37] {
                let x = rng.activations(m * cols);
                let mut want = vec![0f32; m * rows];
                matmul_with_isa(
                    Isa::Scalar,
                    &threads,
                    &row_major,
                    &x,
                    m,
                    &mut want,
                    &mut scratch,
                );
                let mut scalar = vec![f32::NAN; m * rows];
                matmul_with_isa(Isa::Scalar, &threads, &pw, &x, m, &mut scalar, &mut scratch);
                // Same exact block sums; only the float association differs (fma vs mul + add).
                for (k, (&a, &b)) in scalar.iter().zip(&want).enumerate() {
                    assert!(
                        (a - b).abs() <= 1e-5 * (1.0 + b.abs()),
                        "{ty:?} {rows}x{cols} m {m} element {k}: packed {a} vs row-major {b}"
                    );
                }
                for isa in simd_isas() {
                    let mut simd = vec![f32::NAN; m * rows];
                    matmul_with_isa(isa, &threads, &pw, &x, m, &mut simd, &mut scratch);
                    assert_eq!(
                        bits(&simd),
                        bits(&scalar),
                        "{ty:?} {rows}x{cols} m {m}: {isa:?} vs scalar"
                    );
                }
            }
        }
    }
}

#[test]
fn packed_outputs_do_not_depend_on_the_batch_or_the_pool() {
    let mut rng = Rng::new(32);
    let pools = [Threads::new(1), Threads::new(2), Threads::new(3)];
    let mut scratch = MatmulScratch::new();
    for ty in PACKABLE {
        let (rows, cols, m) = (96, if k_quant(ty) { 768 } else { 736 }, 37);
        let data = random_weights(&mut rng, ty, rows, cols);
        let packed = pack(ty, &data, rows, cols).expect("packable");
        let w = Weights::packed(ty, packed.as_bytes(), rows, cols).expect("valid packed");
        let x = rng.activations(m * cols);
        for isa in [Isa::Scalar, Isa::Avx2, Isa::Avx512Vnni, Isa::Amx] {
            if detect_isa() < isa {
                continue;
            }
            let mut full = vec![0f32; m * rows];
            matmul_with_isa(isa, &pools[1], &w, &x, m, &mut full, &mut scratch);
            for pool in &pools {
                for i in 0..m {
                    let mut one = vec![0f32; rows];
                    let xi = &x[i * cols..(i + 1) * cols];
                    matmul_with_isa(isa, pool, &w, xi, 1, &mut one, &mut scratch);
                    assert_eq!(
                        bits(&one),
                        bits(&full[i * rows..(i + 1) * rows]),
                        "{ty:?} {isa:?} row {i} alone on {} threads",
                        pool.n()
                    );
                }
            }
        }
    }
}

/// A mixture of experts' stacked matrices pack to each matrix's own packing, one after another.
#[test]
fn stacked_matrices_pack_as_each_alone_in_order() {
    let mut rng = Rng::new(71);
    for ty in PACKABLE {
        let (rows, cols) = shapes(ty)[1];
        let n = 5;
        let mats: Vec<Vec<u8>> = (0..n)
            .map(|_| random_weights(&mut rng, ty, rows, cols))
            .collect();
        let stacked = pack_stacked(ty, &mats.concat(), n, rows, cols).expect("packable");
        let each: Vec<u8> = mats
            .iter()
            .flat_map(|m| {
                pack(ty, m, rows, cols)
                    .expect("packable")
                    .as_bytes()
                    .to_vec()
            })
            .collect();
        assert_eq!(stacked.as_bytes(), &each[..], "{ty:?}");
        let all = mats.concat();
        assert!(
            pack_stacked(ty, &all[1..], n, rows, cols).is_none(),
            "{ty:?} short"
        );
        assert!(
            pack_stacked(ty, &all, n + 1, rows, cols).is_none(),
            "{ty:?} count"
        );
    }
}

#[test]
fn packing_refuses_unpackable_types_shapes_and_sizes() {
    let mut rng = Rng::new(33);
    let data = random_weights(&mut rng, GgmlType::Q8_0, 24, 64);
    assert!(
        !packable(GgmlType::Q8_0, 24, 64),
        "rows not a multiple of 16"
    );
    assert!(pack(GgmlType::Q8_0, &data, 24, 64).is_none());
    assert!(!packable(GgmlType::Q5_K, 16, 256), "Q5_K is not packed");
    assert!(
        !packable(GgmlType::Q4_K, 16, 128),
        "Q4_K needs whole super-blocks"
    );
    assert!(!packable(GgmlType::F32, 16, 32));
    let data = random_weights(&mut rng, GgmlType::Q8_0, 16, 64);
    assert!(
        pack(GgmlType::Q8_0, &data[1..], 16, 64).is_none(),
        "short data"
    );
    assert!(Weights::packed(GgmlType::Q8_0, &data[1..], 16, 64).is_err());
    assert!(Weights::packed(GgmlType::Q4_K, &data, 16, 64).is_err());
    assert!(Weights::packed(GgmlType::Q5_K, &data, 16, 256).is_err());
    assert!(Weights::packed(GgmlType::Q5_K, &data, 16, 256).is_err());
}

#[test]
fn shared_input_matmul_gives_each_output_the_bits_of_its_own_call() {
    let mut rng = Rng::new(34);
    let cols = 512;
    // (types, packed): one activation kind packed (shared region), two kinds packed and
    // row-major weights (one call each); Q8_0 and Q4_K take different activation blocks.
    let cases: [([GgmlType; 3], bool); 6] = [
        ([GgmlType::Q5_0, GgmlType::Q5_0, GgmlType::Q8_0], true),
        ([GgmlType::Q4_K, GgmlType::Q6_K, GgmlType::Q4_K], true),
        ([GgmlType::Q8_0, GgmlType::Q4_K, GgmlType::Q5_0], true),
        ([GgmlType::Q5_0, GgmlType::Q8_0, GgmlType::Q4_0], false),
        ([GgmlType::MXFP4, GgmlType::IQ4_NL, GgmlType::Q8_0], true),
        ([GgmlType::MXFP4, GgmlType::Q4_K, GgmlType::IQ4_NL], true),
    ];
    let rows = [64, 16, 48];
    for (types, packed) in cases {
        let data: Vec<Vec<u8>> = (0..3)
            .map(|k| random_weights(&mut rng, types[k], rows[k], cols))
            .collect();
        let packs: Vec<_> = (0..3)
            .map(|k| pack(types[k], &data[k], rows[k], cols).expect("packable"))
            .collect();
        let ws: Vec<Weights> = (0..3)
            .map(|k| {
                if packed {
                    Weights::packed(types[k], packs[k].as_bytes(), rows[k], cols)
                } else {
                    Weights::new(types[k], &data[k], rows[k], cols)
                }
                .expect("valid weights")
            })
            .collect();
        for threads in [Threads::new(1), Threads::new(2), Threads::new(3)] {
            let mut scratch = MatmulScratch::new();
            for m in [1, 5, 16] {
                let x = rng.activations(m * cols);
                let mut outs: Vec<Vec<f32>> = rows.iter().map(|&r| vec![f32::NAN; m * r]).collect();
                let [a, b, c] = &mut outs[..] else {
                    unreachable!()
                };
                kernels::matmul_shared(
                    &threads,
                    [&ws[0], &ws[1], &ws[2]],
                    &x,
                    m,
                    [a, b, c],
                    &mut scratch,
                );
                for k in 0..3 {
                    let mut one = vec![f32::NAN; m * rows[k]];
                    kernels::matmul(&threads, &ws[k], &x, m, &mut one, &mut scratch);
                    assert_eq!(
                        bits(&outs[k]),
                        bits(&one),
                        "{types:?} packed {packed} matrix {k} m {m} on {} threads",
                        threads.n()
                    );
                }
            }
        }
    }
}

#[test]
fn q4_1_and_q5_1_give_the_same_bits_row_major_and_packed_on_every_isa() {
    // Their kernels all take the scalar reference's float steps per block (`legacy_min`), so
    // unlike the other formats even the row-major scalar path agrees bit for bit.
    let mut rng = Rng::new(33);
    let threads = Threads::new(2);
    let mut scratch = MatmulScratch::new();
    for ty in [GgmlType::Q4_1, GgmlType::Q5_1] {
        for (rows, cols) in [(16, 32), (32, 96), (48, 640)] {
            let data = random_weights(&mut rng, ty, rows, cols);
            let row_major = Weights::new(ty, &data, rows, cols).expect("valid weights");
            let packed = pack(ty, &data, rows, cols).expect("packable");
            assert_eq!(packed.as_bytes().len(), data.len(), "{ty:?}: same bytes");
            let pw = Weights::packed(ty, packed.as_bytes(), rows, cols).expect("valid packed");
            for m in [1, 3, 4, 9, 16, 19] {
                let x = rng.activations(m * cols);
                let mut want = vec![f32::NAN; m * rows];
                matmul_with_isa(
                    Isa::Scalar,
                    &threads,
                    &row_major,
                    &x,
                    m,
                    &mut want,
                    &mut scratch,
                );
                for isa in [Isa::Scalar, Isa::Avx2, Isa::Avx512Vnni, Isa::Amx] {
                    if detect_isa() < isa {
                        continue;
                    }
                    for w in [&row_major, &pw] {
                        let mut out = vec![f32::NAN; m * rows];
                        matmul_with_isa(isa, &threads, w, &x, m, &mut out, &mut scratch);
                        assert_eq!(
                            bits(&out),
                            bits(&want),
                            "{ty:?} {rows}x{cols} m {m} {isa:?} {:?}",
                            w.layout
                        );
                    }
                }
            }
        }
    }
}

/// Packed MXFP4's scales are its exponent bytes decoded in vectors: every byte, 0 and 1 (the
/// subnormals) and 255 included, gives the scalar decode's bits through every ISA. Row `r`
/// takes exponent `r` in its first block and `255 - r` in its second. The activations are small
/// enough that 2^127 times a block sum stays finite (activation scales about 2^-17 and, in the
/// second block, 2^-24, f16's smallest: a block sum is below 2^16), and the two blocks' sums
/// are never both that large.
#[test]
fn mxfp4_scales_decode_every_exponent_byte_on_every_isa() {
    let mut rng = Rng::new(35);
    let threads = Threads::new(2);
    let mut scratch = MatmulScratch::new();
    let (rows, cols) = (256, 64);
    let mut data = random_weights(&mut rng, GgmlType::MXFP4, rows, cols);
    for (r, row) in data.chunks_exact_mut(2 * 17).enumerate() {
        row[0] = r as u8;
        row[17] = 255 - r as u8;
    }
    let packed = pack(GgmlType::MXFP4, &data, rows, cols).expect("packable");
    let pw = Weights::packed(GgmlType::MXFP4, packed.as_bytes(), rows, cols).expect("valid");
    for m in [1, 16, 17] {
        let x: Vec<f32> = (0..m * cols)
            .map(|k| rng.unit() * if k % cols < 32 { 1e-3 } else { 1e-5 })
            .collect();
        let mut scalar = vec![f32::NAN; m * rows];
        matmul_with_isa(Isa::Scalar, &threads, &pw, &x, m, &mut scalar, &mut scratch);
        assert!(scalar.iter().all(|v| v.is_finite()), "finite outputs");
        assert!(
            scalar[..rows].iter().filter(|&&v| v != 0.0).count() > 200,
            "most rows see their scale"
        );
        for isa in simd_isas() {
            let mut simd = vec![f32::NAN; m * rows];
            matmul_with_isa(isa, &threads, &pw, &x, m, &mut simd, &mut scratch);
            assert_eq!(bits(&simd), bits(&scalar), "m {m}: {isa:?} vs scalar");
        }
    }
}

/// The table formats' largest products: row `r` of a block has every nibble `r % 16` (so each
/// table value, the extremes included: MXFP4's ±12, IQ4_NL's -127 and 113), against activations
/// of one sign at full scale (quants ±127): the i16 and i32 sums of every ISA stay exact, the
/// scalar kernel's bits, and the packed sums agree with the row-major kernel's.
#[test]
fn table_formats_sum_their_extreme_values_exactly_on_every_isa() {
    let mut rng = Rng::new(36);
    let threads = Threads::new(2);
    let mut scratch = MatmulScratch::new();
    let (rows, cols) = (32, 736);
    for ty in [GgmlType::MXFP4, GgmlType::IQ4_NL] {
        let (bb, head) = if ty == GgmlType::MXFP4 {
            (17, 1)
        } else {
            (18, 2)
        };
        let mut data = random_weights(&mut rng, ty, rows, cols);
        for (r, row) in data.chunks_exact_mut(cols / 32 * bb).enumerate() {
            for block in row.chunks_exact_mut(bb) {
                block[head..].fill(0x11 * (r % 16) as u8);
            }
        }
        let row_major = Weights::new(ty, &data, rows, cols).expect("valid weights");
        let packed = pack(ty, &data, rows, cols).expect("packable");
        let pw = Weights::packed(ty, packed.as_bytes(), rows, cols).expect("valid packed");
        // All positive, all negative, then a block's sign alternating by block, for 16 and 17
        // activation rows (the AMX tiles and the rest).
        for m in [16, 17] {
            let x: Vec<f32> = (0..m * cols)
                .map(|k| match (k / cols) % 3 {
                    0 => 1.0,
                    1 => -1.0,
                    _ => [1.0, -1.0][(k % cols / 32) % 2],
                })
                .collect();
            let mut want = vec![f32::NAN; m * rows];
            let mut scalar = vec![f32::NAN; m * rows];
            matmul_with_isa(
                Isa::Scalar,
                &threads,
                &row_major,
                &x,
                m,
                &mut want,
                &mut scratch,
            );
            matmul_with_isa(Isa::Scalar, &threads, &pw, &x, m, &mut scalar, &mut scratch);
            for (k, (&a, &b)) in scalar.iter().zip(&want).enumerate() {
                assert!(
                    (a - b).abs() <= 1e-5 * (1.0 + b.abs()),
                    "{ty:?} m {m} element {k}: packed {a} vs row-major {b}"
                );
            }
            for isa in simd_isas() {
                let mut simd = vec![f32::NAN; m * rows];
                matmul_with_isa(isa, &threads, &pw, &x, m, &mut simd, &mut scratch);
                assert_eq!(
                    bits(&simd),
                    bits(&scalar),
                    "{ty:?} m {m}: {isa:?} vs scalar"
                );
            }
        }
    }
}

/// The K-quant AMX passes take their row tiles in chunks whose activations fit in L2 (five
/// tiles at 40 blocks a row): over several chunks and a remainder, each output keeps the scalar
/// kernel's bits.
#[test]
fn k_quant_row_tiles_in_several_chunks_give_the_scalar_bits() {
    let mut rng = Rng::new(33);
    let threads = Threads::new(2);
    let mut scratch = MatmulScratch::new();
    let (rows, cols, m) = (32, 40 * 256, 16 * 11 + 5);
    for ty in [GgmlType::Q4_K, GgmlType::Q6_K] {
        let data = random_weights(&mut rng, ty, rows, cols);
        let packed = pack(ty, &data, rows, cols).expect("packable");
        let w = Weights::packed(ty, packed.as_bytes(), rows, cols).expect("valid packed");
        let x = rng.activations(m * cols);
        let mut want = vec![f32::NAN; m * rows];
        matmul_with_isa(Isa::Scalar, &threads, &w, &x, m, &mut want, &mut scratch);
        for isa in simd_isas() {
            let mut got = vec![f32::NAN; m * rows];
            matmul_with_isa(isa, &threads, &w, &x, m, &mut got, &mut scratch);
            assert_eq!(bits(&got), bits(&want), "{ty:?} {isa:?} over {m} rows");
        }
    }
}

#[test]
fn segmented_matmul_gives_each_segment_the_bits_of_its_own_call() {
    let mut rng = Rng::new(35);
    let (cols, n_seg) = (512, 4);
    // (gate-like type, up-like type, packed): one activation kind packed (one region), two
    // kinds, and row-major weights (one call per segment).
    let cases = [
        (GgmlType::Q4_K, GgmlType::Q6_K, true),
        (GgmlType::MXFP4, GgmlType::MXFP4, true),
        (GgmlType::Q8_0, GgmlType::Q4_K, true),
        (GgmlType::Q5_0, GgmlType::Q8_0, false),
    ];
    let rows = [48, 32];
    for (ta, tb, packed) in cases {
        let types = [ta, tb];
        let data: Vec<[Vec<u8>; 2]> = (0..n_seg)
            .map(|_| std::array::from_fn(|k| random_weights(&mut rng, types[k], rows[k], cols)))
            .collect();
        let packs: Vec<[_; 2]> = data
            .iter()
            .map(|d| std::array::from_fn(|k| pack(types[k], &d[k], rows[k], cols).expect("pack")))
            .collect();
        let ws: Vec<[Weights; 2]> = (0..n_seg)
            .map(|s| {
                std::array::from_fn(|k| {
                    match packed {
                        true => Weights::packed(types[k], packs[s][k].as_bytes(), rows[k], cols),
                        false => Weights::new(types[k], &data[s][k], rows[k], cols),
                    }
                    .expect("valid weights")
                })
            })
            .collect();
        // Runs of 3, 0, 1 and 5 rows with a gap of two rows (left untouched) before the last.
        let runs = [0..3, 3..3, 3..4, 6..11];
        let m = 11;
        let segments: Vec<kernels::Segment<2>> = ws.iter().cloned().zip(runs.clone()).collect();
        for threads in [Threads::new(1), Threads::new(2), Threads::new(3)] {
            let mut scratch = MatmulScratch::new();
            let x = rng.activations(m * cols);
            let mut a = vec![f32::NAN; m * rows[0]];
            let mut b = vec![f32::NAN; m * rows[1]];
            kernels::matmul_segments(&threads, &segments, &x, m, [&mut a, &mut b], &mut scratch);
            for (k, out) in [&a, &b].into_iter().enumerate() {
                for (s, run) in runs.iter().enumerate() {
                    let mut one = vec![f32::NAN; run.len() * rows[k]];
                    let xs = &x[run.start * cols..run.end * cols];
                    kernels::matmul(&threads, &ws[s][k], xs, run.len(), &mut one, &mut scratch);
                    let got = &out[run.start * rows[k]..run.end * rows[k]];
                    assert_eq!(bits(got), bits(&one), "{types:?} {packed} {k} segment {s}");
                }
                let gap = &out[4 * rows[k]..6 * rows[k]];
                assert!(
                    gap.iter().all(|v| v.is_nan()),
                    "rows in no run are untouched"
                );
            }
        }
    }
}
