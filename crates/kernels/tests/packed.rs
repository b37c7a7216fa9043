//! x16-packed weights: the packed matmul agrees with the row-major one, its SIMD kernel gives the
//! scalar kernel's exact bits, every output is independent of the batch and the pool, and packing
//! refuses what it cannot pack.

mod common;

use common::{random_weights, Rng};
use kernels::{
    detect_isa, matmul_with_isa, pack, pack_stacked, packable, GgmlType, Isa, MatmulScratch,
    Threads, Weights,
};

const PACKABLE: [GgmlType; 7] = [
    GgmlType::Q8_0,
    GgmlType::Q5_0,
    GgmlType::Q4_0,
    GgmlType::Q4_1,
    GgmlType::Q5_1,
    GgmlType::Q4_K,
    GgmlType::Q6_K,
];

/// Shapes to test a type at (columns a multiple of its block).
fn shapes(ty: GgmlType) -> [(usize, usize); 3] {
    if matches!(ty, GgmlType::Q4_K | GgmlType::Q6_K) {
        [(16, 256), (48, 512), (64, 1024)]
    } else {
        [(16, 32), (48, 64), (64, 736)]
    }
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
                for isa in [Isa::Avx2, Isa::Avx512Vnni, Isa::Amx] {
                    if detect_isa() < isa {
                        continue;
                    }
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
        let (rows, cols, m) = (96, 512, 23);
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
    let cases: [([GgmlType; 3], bool); 4] = [
        ([GgmlType::Q5_0, GgmlType::Q5_0, GgmlType::Q8_0], true),
        ([GgmlType::Q4_K, GgmlType::Q6_K, GgmlType::Q4_K], true),
        ([GgmlType::Q8_0, GgmlType::Q4_K, GgmlType::Q5_0], true),
        ([GgmlType::Q5_0, GgmlType::Q8_0, GgmlType::Q4_0], false),
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
