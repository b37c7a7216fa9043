//! The BF16 matmul: every path (scalar, AVX2, AVX-512 BF16, as far as this CPU goes) gives the
//! scalar reference's bits, whatever the batch; the AMX tile path sums the same products to f32
//! accuracy and is batch invariant too; the rounding is BF16's; the results are those of the
//! BF16-rounded operands.

use kernels::bf16dot::{
    dot_scalar, from_bf16, matmul_bf16_on, to_bf16, Bf16Path, Bf16Rows, Bf16Scratch,
};
use kernels::{GgmlType, Threads};

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// Mostly values of about ±1, some far larger or smaller (down to the flush threshold and
    /// below), some exact zeros.
    fn value(&mut self) -> f32 {
        let u = (self.next() >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0;
        match self.next() % 50 {
            0 => 0.0,
            1 => u * 1e-20,
            2 => u * 1e-25,
            3 => u * 1e15,
            4 => u * 1e-3,
            _ => u,
        }
    }
}

fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn matrix(rng: &mut Rng, rows: usize, cols: usize) -> (Vec<f32>, Bf16Rows<'static>) {
    let w: Vec<f32> = (0..rows * cols).map(|_| rng.value()).collect();
    let b = Bf16Rows::from_float(GgmlType::F32, &f32_bytes(&w), rows, cols).expect("shape");
    (w, b)
}

fn run(path: Bf16Path, th: &Threads, w: &Bf16Rows, x: &[f32], m: usize) -> Vec<u32> {
    let mut out = vec![0f32; m * w.rows];
    matmul_bf16_on(path, th, w, x, m, &mut out, &mut Bf16Scratch::default());
    out.iter().map(|v| v.to_bits()).collect()
}

#[test]
fn rounding_is_to_nearest_even_with_nans_kept_and_tiny_values_flushed() {
    assert_eq!(to_bf16(1.0), 0x3f80);
    // 1 + 2^-8 is halfway between 1 and 1 + 2^-7: ties go to the even 1.
    assert_eq!(to_bf16(1.0 + 1.0 / 256.0), 0x3f80);
    // 1 + 3 * 2^-8 is halfway between 1 + 2^-7 and 1 + 2^-6: ties go to the even upper one.
    assert_eq!(to_bf16(1.0 + 3.0 / 256.0), 0x3f82);
    assert_eq!(to_bf16(1.0 + 1.0 / 256.0 + 1e-6), 0x3f81);
    assert_eq!(to_bf16(-2.5), 0xc020);
    assert!(from_bf16(to_bf16(f32::NAN)).is_nan());
    assert_eq!(to_bf16(f32::INFINITY), 0x7f80);
    assert_eq!(to_bf16(f32::MAX), 0x7f80, "rounds up to infinity");
    assert_eq!(to_bf16(1e-20), 0x0000, "under 2^-64");
    assert_eq!(to_bf16(-1e-20), 0x8000, "a signed zero");
    assert_ne!(to_bf16(1e-19), 0, "over 2^-64");
    for v in [0.1f32, -3.7, 1e10, 6.1e-5] {
        let r = from_bf16(to_bf16(v));
        assert!((r - v).abs() <= v.abs() / 256.0, "{v} -> {r}");
    }
}

#[test]
fn float_matrices_of_any_float_type_round_alike_and_other_shapes_are_refused() {
    let mut rng = Rng(7);
    let w: Vec<f32> = (0..2 * 64).map(|_| rng.value()).collect();
    let f16: Vec<u8> = w
        .iter()
        .flat_map(|&v| kernels::quant::f32_to_f16(v))
        .collect();
    let from_f16 = Bf16Rows::from_float(GgmlType::F16, &f16, 2, 64).expect("f16");
    let halves: Vec<u16> = f16
        .chunks_exact(2)
        .map(|b| u16::from_le_bytes([b[0], b[1]]))
        .collect();
    let mut back = vec![0f32; 128];
    kernels::f16_to_f32_row(&halves, &mut back);
    for (r, row) in back.chunks_exact(64).enumerate() {
        let want: Vec<u16> = row.iter().map(|&v| to_bf16(v)).collect();
        assert_eq!(from_f16.row(r), &want[..]);
    }
    // Whole tiles of rows are tiled where the CPU multiplies on AMX tiles: the same values.
    let w: Vec<f32> = (0..48 * 96).map(|_| rng.value()).collect();
    let b = Bf16Rows::from_float(GgmlType::F32, &f32_bytes(&w), 48, 96).expect("f32");
    assert_eq!(b.is_tiled(), Bf16Path::detect() == Bf16Path::Amx);
    for (i, &v) in w.iter().enumerate() {
        assert_eq!(
            b.value(i / 96, i % 96),
            to_bf16(v),
            "({}, {})",
            i / 96,
            i % 96
        );
    }
    assert!(Bf16Rows::from_float(GgmlType::F32, &f32_bytes(&w[..2 * 48]), 2, 48).is_none());
    assert!(Bf16Rows::from_float(GgmlType::Q8_0, &[0; 68], 2, 32).is_none());
    assert!(Bf16Rows::from_float(GgmlType::F32, &f32_bytes(&w), 3, 64).is_none());
}

#[test]
fn every_path_gives_the_scalar_bits_for_every_shape_and_batch() {
    let mut rng = Rng(0x5eed);
    for (rows, cols) in [(1, 32), (5, 64), (9, 96), (16, 768), (13, 320)] {
        let (_, w) = matrix(&mut rng, rows, cols);
        let wrows: Vec<Vec<u16>> = (0..rows)
            .map(|r| (0..cols).map(|c| w.value(r, c)).collect())
            .collect();
        for m in [1, 2, 3, 4, 5, 9] {
            let x: Vec<f32> = (0..m * cols).map(|_| rng.value()).collect();
            let xb: Vec<u16> = x.iter().map(|&v| to_bf16(v)).collect();
            let want: Vec<u32> = (0..m)
                .flat_map(|i| {
                    let xi = &xb[i * cols..(i + 1) * cols];
                    (0..rows).map(move |r| (i, r, xi))
                })
                .map(|(_, r, xi)| dot_scalar(&wrows[r], xi).to_bits())
                .collect();
            for threads in [1, 2] {
                let th = Threads::new(threads);
                // The tile path takes weights of whole 16-row tiles; the others fall back to
                // AVX-512 BF16 (or the best path below it), with its bits.
                let tiles = rows % 16 == 0;
                let paths = [
                    Bf16Path::Scalar,
                    Bf16Path::Avx2,
                    Bf16Path::Avx512Bf16,
                    Bf16Path::Amx,
                ];
                for path in paths
                    .into_iter()
                    .filter(|&p| !(tiles && p == Bf16Path::Amx))
                {
                    assert_eq!(
                        run(path, &th, &w, &x, m),
                        want,
                        "{path:?}, {rows}x{cols}, m {m}, {threads} threads"
                    );
                }
            }
        }
    }
    eprintln!("fastest path here: {:?}", Bf16Path::detect());
}

#[test]
fn a_row_gets_the_same_bits_alone_and_in_a_large_batch() {
    let mut rng = Rng(99);
    // 48 weight rows: whole tiles for the AMX path, which is the fastest where there is one.
    let (rows, cols, m) = (48, 256, 300);
    let (_, w) = matrix(&mut rng, rows, cols);
    let x: Vec<f32> = (0..m * cols).map(|_| rng.value()).collect();
    let th = Threads::new(2);
    let all = run(Bf16Path::detect(), &th, &w, &x, m);
    for i in [0, 1, 150, 299] {
        let alone = run(Bf16Path::detect(), &th, &w, &x[i * cols..(i + 1) * cols], 1);
        assert_eq!(alone[..], all[i * rows..(i + 1) * rows], "row {i}");
    }
}

#[test]
fn results_are_the_products_of_the_rounded_operands() {
    let mut rng = Rng(3);
    let (rows, cols, m) = (8, 512, 3);
    let w: Vec<f32> = (0..rows * cols)
        .map(|_| (rng.next() % 2001) as f32 / 1000.0 - 1.0)
        .collect();
    let x: Vec<f32> = (0..m * cols)
        .map(|_| (rng.next() % 2001) as f32 / 1000.0 - 1.0)
        .collect();
    let b = Bf16Rows::from_float(GgmlType::F32, &f32_bytes(&w), rows, cols).expect("shape");
    let th = Threads::new(2);
    let got = run(Bf16Path::detect(), &th, &b, &x, m);
    for i in 0..m {
        for r in 0..rows {
            let exact: f64 = (0..cols)
                .map(|k| {
                    f64::from(from_bf16(to_bf16(w[r * cols + k])))
                        * f64::from(from_bf16(to_bf16(x[i * cols + k])))
                })
                .sum();
            let v = f64::from(f32::from_bits(got[i * rows + r]));
            assert!((v - exact).abs() < 1e-4, "({i}, {r}): {v} vs {exact}");
        }
    }
}

/// The AMX path (on CPUs without it, the best path there is) sums the products of the rounded
/// operands to f32 accuracy, for every weight tile and activation group shape: one or two weight
/// tiles, one or two groups, partial last groups.
#[test]
fn tile_sums_are_the_rounded_products_to_f32_accuracy() {
    let mut rng = Rng(0xa3c);
    let th = Threads::new(2);
    for (rows, cols) in [(16, 32), (32, 768), (48, 96), (80, 320)] {
        let (_, w) = matrix(&mut rng, rows, cols);
        for m in [1, 5, 16, 17, 33, 47] {
            let x: Vec<f32> = (0..m * cols).map(|_| rng.value()).collect();
            let got = run(Bf16Path::Amx, &th, &w, &x, m);
            for i in 0..m {
                for r in 0..rows {
                    let products = (0..cols).map(|k| {
                        f64::from(from_bf16(w.value(r, k)))
                            * f64::from(from_bf16(to_bf16(x[i * cols + k])))
                    });
                    let (exact, size) = products.fold((0.0, 0.0), |(s, a), p| (s + p, a + p.abs()));
                    let v = f64::from(f32::from_bits(got[i * rows + r]));
                    assert!(
                        (v - exact).abs() <= size * f64::powi(2.0, -20),
                        "{rows}x{cols}, m {m}, ({i}, {r}): {v} vs {exact}"
                    );
                }
            }
        }
    }
}

/// BF16 weights given to `kernels::matmul` (a BF16 tensor of a GGUF file, in place) multiply
/// with BF16-rounded activations, as llama.cpp multiplies them: the bits of `matmul_bf16` on the
/// path of the same instruction set, whether the bytes are borrowed or (misaligned) copied.
#[test]
fn bf16_weights_in_matmul_take_the_bf16_arithmetic() {
    use kernels::{matmul_with_isa, Isa, MatmulScratch, Weights};
    let mut rng = Rng(0xbf16);
    let (rows, cols, m) = (48, 256, 7);
    let w: Vec<f32> = (0..rows * cols).map(|_| rng.value()).collect();
    // One spare byte in front, to also hand the route bytes at an odd address.
    let mut bytes = vec![0u8];
    bytes.extend(w.iter().flat_map(|&v| to_bf16(v).to_le_bytes()));
    let x: Vec<f32> = (0..m * cols).map(|_| rng.value()).collect();
    let th = Threads::new(2);
    for (isa, path) in [
        (Isa::Scalar, Bf16Path::Scalar),
        (Isa::Avx2, Bf16Path::Avx2),
        (Isa::Avx512Vnni, Bf16Path::Avx512Bf16),
        (Isa::Amx, Bf16Path::Amx),
    ] {
        let rounded = Bf16Rows::view(&bytes[1..], rows, cols).expect("shape");
        let want = run(path, &th, &rounded, &x, m);
        for at in [&bytes[1..], &bytes[1..].to_vec()[..]] {
            let weights = Weights::new(GgmlType::BF16, at, rows, cols).expect("weights");
            let mut out = vec![0f32; m * rows];
            matmul_with_isa(
                isa,
                &th,
                &weights,
                &x,
                m,
                &mut out,
                &mut MatmulScratch::new(),
            );
            let got: Vec<u32> = out.iter().map(|v| v.to_bits()).collect();
            assert_eq!(got, want, "{isa:?}");
        }
        // Repacked at load (tiled for AMX where the CPU has it): the bits of the same weights
        // tiled by `Bf16Rows::from_float`.
        if let Some(p) = kernels::pack(GgmlType::BF16, &bytes[1..], rows, cols) {
            let tiled = Bf16Rows::from_float(GgmlType::BF16, &bytes[1..], rows, cols);
            let want = run(path, &th, &tiled.expect("shape"), &x, m);
            let weights = Weights::packed(GgmlType::BF16, p.as_bytes(), rows, cols);
            let mut out = vec![0f32; m * rows];
            let mut scratch = MatmulScratch::new();
            let w = weights.expect("packed");
            matmul_with_isa(isa, &th, &w, &x, m, &mut out, &mut scratch);
            let got: Vec<u32> = out.iter().map(|v| v.to_bits()).collect();
            assert_eq!(got, want, "packed, {isa:?}");
        }
    }
    assert_eq!(
        kernels::packable(GgmlType::BF16, rows, cols),
        Bf16Path::detect() == Bf16Path::Amx
    );
}

/// Through an identity matrix every path hands back each activation rounded to BF16: ties to
/// even, tiny magnitudes flushed to zero, large values kept; a NaN makes its row NaN.
/// (The AMX path rounds 16 values at a time on the vector units; the others one at a time.)
#[test]
fn an_identity_returns_the_rounded_activations_on_every_path() {
    let n = 32;
    let mut w = vec![0f32; n * n];
    for r in 0..n {
        w[r * n + r] = 1.0;
    }
    let w = Bf16Rows::from_float(GgmlType::F32, &f32_bytes(&w), n, n).expect("shape");
    let special = [
        1.0 + 1.0 / 256.0,
        1.0 + 3.0 / 256.0,
        -(1.0 + 3.0 / 256.0),
        1.0 + 1.0 / 256.0 + 1e-6,
        1e-20,
        -1e-25,
        -0.0,
        3.0e38,
        -2.5,
        7.0e-19,
        123456.78,
    ];
    let mut rng = Rng(41);
    let m = 19;
    let mut x: Vec<f32> = (0..m * n).map(|_| rng.value()).collect();
    x[..special.len()].copy_from_slice(&special);
    x[5 * n + 7] = f32::NAN;
    let th = Threads::new(2);
    for path in [
        Bf16Path::Scalar,
        Bf16Path::Avx2,
        Bf16Path::Avx512Bf16,
        Bf16Path::Amx,
    ] {
        let got = run(path, &th, &w, &x, m);
        for i in 0..m {
            for r in 0..n {
                let v = f32::from_bits(got[i * n + r]);
                if i == 5 {
                    assert!(v.is_nan(), "{path:?} ({i}, {r}): {v}");
                    continue;
                }
                let want = from_bf16(to_bf16(x[i * n + r]));
                // A signed zero comes back +0: the sums start at +0.
                assert_eq!(v, want, "{path:?} ({i}, {r}) of {}", x[i * n + r]);
            }
        }
    }
}
