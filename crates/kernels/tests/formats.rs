//! Block layouts, activation quantization and scalar reference dot products.

mod common;

use common::{abs_dot64, dot64, random_weights, Rng, ALL_TYPES};
use kernels::quant::kquants::{self, k4_scales_mins};
use kernels::quant::legacy::{self, quantize_act_q8_0, quantize_row_q8_0};
use kernels::quant::legacy_min;
use kernels::quant::{
    blocks_as_bytes, cast_blocks, f16_to_f32, f32_to_f16, ActQ8_0, BlockIq4Nl, BlockIq4Xs,
    BlockMxfp4, BlockQ2K, BlockQ3K, BlockQ4K, BlockQ4_0, BlockQ4_1, BlockQ5K, BlockQ5_0, BlockQ5_1,
    BlockQ6K, BlockQ8K, BlockQ8_0, QK8_0, QK_K,
};
use kernels::quant::{kquants_low, nonlinear};
use kernels::{dequantize_row, Format, GgmlType, KernelError};

#[test]
fn format_table_agrees_with_block_structs() {
    let sizes = [
        (Format::Q4_0, std::mem::size_of::<BlockQ4_0>()),
        (Format::Q5_0, std::mem::size_of::<BlockQ5_0>()),
        (Format::Q4_1, std::mem::size_of::<BlockQ4_1>()),
        (Format::Q5_1, std::mem::size_of::<BlockQ5_1>()),
        (Format::Q8_0, std::mem::size_of::<BlockQ8_0>()),
        (Format::Q4_K, std::mem::size_of::<BlockQ4K>()),
        (Format::Q5_K, std::mem::size_of::<BlockQ5K>()),
        (Format::Q6_K, std::mem::size_of::<BlockQ6K>()),
        (Format::Q2_K, std::mem::size_of::<BlockQ2K>()),
        (Format::Q3_K, std::mem::size_of::<BlockQ3K>()),
        (Format::MXFP4, std::mem::size_of::<BlockMxfp4>()),
        (Format::IQ4_NL, std::mem::size_of::<BlockIq4Nl>()),
        (Format::IQ4_XS, std::mem::size_of::<BlockIq4Xs>()),
    ];
    for (f, size) in sizes {
        assert_eq!(f.block_bytes(), size, "{f:?}");
    }
    for &ty in GgmlType::ALL {
        if let Ok(f) = Format::from_ggml(ty) {
            assert_eq!(f.block_bytes(), ty.type_size(), "{ty:?} bytes");
            assert_eq!(f.block_size(), ty.block_size(), "{ty:?} elements");
        }
    }
}

#[test]
fn q4_0_decodes_low_nibbles_first_then_high_nibbles() {
    let mut qs = [0u8; 16];
    for (j, q) in qs.iter_mut().enumerate() {
        *q = j as u8 | ((15 - j as u8) << 4);
    }
    let block = BlockQ4_0 {
        d: f32_to_f16(0.5),
        qs,
    };
    let mut out = [0f32; 32];
    legacy::dequantize_q4_0(&[block], &mut out);
    for j in 0..16 {
        assert_eq!(out[j], 0.5 * (j as f32 - 8.0));
        assert_eq!(out[j + 16], 0.5 * (7.0 - j as f32));
    }
}

#[test]
fn q5_0_takes_fifth_bit_of_element_j_from_bit_j_of_qh() {
    let qh: u32 = 0b1010_0000_0000_0001_0000_0000_0000_0011;
    let block = BlockQ5_0 {
        d: f32_to_f16(1.0),
        qh: qh.to_le_bytes(),
        qs: [0x00; 16],
    };
    let mut out = [0f32; 32];
    legacy::dequantize_q5_0(&[block], &mut out);
    for (j, &v) in out.iter().enumerate() {
        let hi = (qh >> j) & 1;
        assert_eq!(v, (hi * 16) as f32 - 16.0, "element {j}");
    }
}

#[test]
fn q4_1_and_q5_1_decode_scale_times_quant_plus_minimum() {
    let mut qs = [0u8; 16];
    for (j, q) in qs.iter_mut().enumerate() {
        *q = j as u8 | ((15 - j as u8) << 4);
    }
    let qh: u32 = 0b1000_0000_0000_0001_0000_0000_0000_0101;
    let (d, m) = (f32_to_f16(0.5), f32_to_f16(-3.0));
    let mut out4 = [0f32; 32];
    let mut out5 = [0f32; 32];
    legacy_min::dequantize(&[BlockQ4_1 { d, m, qs }], &mut out4);
    let b5 = BlockQ5_1 {
        d,
        m,
        qh: qh.to_le_bytes(),
        qs,
    };
    legacy_min::dequantize(&[b5], &mut out5);
    for j in 0..32 {
        let q4 = if j < 16 { j as u32 } else { 31 - j as u32 };
        let q5 = q4 | (((qh >> j) & 1) << 4);
        assert_eq!(out4[j], 0.5 * q4 as f32 - 3.0, "q4_1 element {j}");
        assert_eq!(out5[j], 0.5 * q5 as f32 - 3.0, "q5_1 element {j}");
    }
}

/// Packs 8 six-bit scales and mins the way ggml's Q4_K quantizer does (the inverse of the
/// decoder under test, written from the format description).
fn pack_k4_scales(sc: &[u8; 8], mn: &[u8; 8]) -> [u8; 12] {
    let mut s = [0u8; 12];
    for j in 0..4 {
        s[j] = sc[j] | ((sc[j + 4] >> 4) << 6);
        s[j + 4] = mn[j] | ((mn[j + 4] >> 4) << 6);
        s[j + 8] = (sc[j + 4] & 0x0F) | ((mn[j + 4] & 0x0F) << 4);
    }
    s
}

#[test]
fn k4_scales_and_mins_round_trip_through_the_12_byte_packing() {
    let mut rng = Rng::new(1);
    for _ in 0..200 {
        let sc: [u8; 8] = std::array::from_fn(|_| rng.byte() & 63);
        let mn: [u8; 8] = std::array::from_fn(|_| rng.byte() & 63);
        assert_eq!(k4_scales_mins(&pack_k4_scales(&sc, &mn)), (sc, mn));
    }
}

/// Builds a Q5_K block (Q4_K when `five_bits` is false) from quants given in element order.
fn pack_q45k(q: &[u8; QK_K], five_bits: bool) -> ([u8; 128], [u8; 32]) {
    let mut qs = [0u8; 128];
    let mut qh = [0u8; 32];
    for c in 0..4 {
        for l in 0..32 {
            let (lo, hi) = (q[64 * c + l], q[64 * c + 32 + l]);
            qs[32 * c + l] = (lo & 0x0F) | ((hi & 0x0F) << 4);
            if five_bits {
                qh[l] |= ((lo >> 4) & 1) << (2 * c);
                qh[l] |= ((hi >> 4) & 1) << (2 * c + 1);
            }
        }
    }
    (qs, qh)
}

#[test]
fn q4_k_and_q5_k_decode_scaled_quants_minus_scaled_mins_per_sub_block() {
    let mut rng = Rng::new(2);
    let sc: [u8; 8] = std::array::from_fn(|_| rng.byte() & 63);
    let mn: [u8; 8] = std::array::from_fn(|_| rng.byte() & 63);
    let (d, dmin) = (0.25f32, 0.125f32);
    let q5: [u8; QK_K] = std::array::from_fn(|_| rng.byte() & 31);
    let q4: [u8; QK_K] = std::array::from_fn(|i| q5[i] & 15);

    let (qs4, _) = pack_q45k(&q4, false);
    let b4 = BlockQ4K {
        d: f32_to_f16(d),
        dmin: f32_to_f16(dmin),
        scales: pack_k4_scales(&sc, &mn),
        qs: qs4,
    };
    let (qs5, qh5) = pack_q45k(&q5, true);
    let b5 = BlockQ5K {
        d: b4.d,
        dmin: b4.dmin,
        scales: b4.scales,
        qh: qh5,
        qs: qs5,
    };

    let mut out4 = [0f32; QK_K];
    let mut out5 = [0f32; QK_K];
    kquants::dequantize_q4_k(&[b4], &mut out4);
    kquants::dequantize_q5_k(&[b5], &mut out5);
    for i in 0..QK_K {
        let j = i / 32;
        let expect = |q: u8| d * f32::from(sc[j]) * f32::from(q) - dmin * f32::from(mn[j]);
        assert_eq!(out4[i], expect(q4[i]), "q4_k element {i}");
        assert_eq!(out5[i], expect(q5[i]), "q5_k element {i}");
    }
}

#[test]
fn q6_k_decodes_signed_group_scales_times_quants_minus_32() {
    let mut rng = Rng::new(3);
    let q: [u8; QK_K] = std::array::from_fn(|_| rng.byte() & 63);
    let scales: [i8; 16] = std::array::from_fn(|_| rng.byte() as i8);
    let mut ql = [0u8; 128];
    let mut qh = [0u8; 64];
    // Layout per half of 128: element l (l < 32) low nibble of ql[l], l+32 low of ql[l+32],
    // l+64 high of ql[l], l+96 high of ql[l+32]; top bits in qh[l] at shifts 0, 2, 4, 6.
    for half in 0..2 {
        for l in 0..32 {
            let e = |k: usize| q[128 * half + 32 * k + l];
            ql[64 * half + l] = (e(0) & 15) | ((e(2) & 15) << 4);
            ql[64 * half + 32 + l] = (e(1) & 15) | ((e(3) & 15) << 4);
            qh[32 * half + l] =
                (e(0) >> 4) | ((e(1) >> 4) << 2) | ((e(2) >> 4) << 4) | ((e(3) >> 4) << 6);
        }
    }
    let d = 0.5f32;
    let block = BlockQ6K {
        ql,
        qh,
        scales,
        d: f32_to_f16(d),
    };
    let mut out = [0f32; QK_K];
    kquants::dequantize_q6_k(&[block], &mut out);
    for i in 0..QK_K {
        let expect = d * f32::from(scales[i / 16]) * (f32::from(q[i]) - 32.0);
        assert_eq!(out[i], expect, "element {i}");
    }
}

#[test]
fn q8_0_quantization_error_is_within_half_a_step() {
    let mut rng = Rng::new(4);
    let x = rng.activations(QK8_0 * 64);
    let mut blocks = vec![
        BlockQ8_0 {
            d: [0; 2],
            qs: [0; 32]
        };
        64
    ];
    quantize_row_q8_0(&x, &mut blocks);
    let mut back = vec![0f32; x.len()];
    legacy::dequantize_q8_0(&blocks, &mut back);
    for (b, (xs, ys)) in blocks.iter().zip(x.chunks(32).zip(back.chunks(32))) {
        let amax = xs.iter().fold(0f32, |m, v| m.max(v.abs()));
        let d = amax / 127.0;
        let d16 = f16_to_f32(b.d);
        assert!(
            b.qs.iter().any(|q| q.unsigned_abs() == 127),
            "the largest element maps to +-127"
        );
        for (&a, &y) in xs.iter().zip(ys) {
            let bound = d / 2.0 + 127.0 * (d - d16).abs() + 1e-6;
            assert!((a - y).abs() <= bound, "{a} decoded as {y}, bound {bound}");
        }
    }
}

#[test]
fn q8_0_rounds_halfway_cases_to_even_like_llama_cpp_on_x86() {
    let mut x = [0f32; 32];
    x[0] = 127.0; // scale 1, multiplier exactly 1
    x[1] = 2.5;
    x[2] = 3.5;
    x[3] = -2.5;
    let mut act = [ActQ8_0::default()];
    quantize_act_q8_0(&x, &mut act);
    assert_eq!(&act[0].qs[..4], &[127, 2, 4, -2]);
    assert_eq!(act[0].sum, 127 + 2 + 4 - 2);
    assert_eq!(act[0].d, 1.0);
}

#[test]
fn q8_k_quantization_matches_scale_bound_and_block_sums() {
    let mut rng = Rng::new(5);
    let x = rng.activations(QK_K * 8);
    let mut blocks = vec![BlockQ8K::default(); 8];
    kquants::quantize_row_q8_k(&x, &mut blocks);
    let mut back = vec![0f32; x.len()];
    kquants::dequantize_q8_k(&blocks, &mut back);
    for (b, (xs, ys)) in blocks.iter().zip(x.chunks(QK_K).zip(back.chunks(QK_K))) {
        for (s, g) in b.bsums.iter().zip(b.qs.chunks(16)) {
            assert_eq!(i32::from(*s), g.iter().map(|&q| i32::from(q)).sum::<i32>());
        }
        for (s, g) in b.sub_sums.iter().zip(b.qs.chunks(32)) {
            assert_eq!(i32::from(*s), g.iter().map(|&q| i32::from(q)).sum::<i32>());
        }
        for (&a, &y) in xs.iter().zip(ys) {
            assert!(
                (a - y).abs() <= b.d.abs() * 0.5001,
                "{a} decoded as {y} with d {}",
                b.d
            );
        }
    }
}

#[test]
fn q8_k_maps_the_signed_extreme_to_minus_127_and_rounds_half_to_even() {
    let mut x = [0f32; QK_K];
    x[0] = -127.0;
    x[1] = 2.5;
    x[2] = -3.5;
    let mut b = [BlockQ8K::default()];
    kquants::quantize_row_q8_k(&x, &mut b);
    assert_eq!(&b[0].qs[..3], &[-127, 2, -4]);
    assert_eq!(b[0].d, 1.0);
    let zeros = [0f32; QK_K];
    kquants::quantize_row_q8_k(&zeros, &mut b);
    assert_eq!(b[0], BlockQ8K::default());
}

/// Quantized activations decoded back to f32, as the integer kernels see them.
fn q8_0_view(x: &[f32]) -> (Vec<ActQ8_0>, Vec<f32>) {
    let mut acts = vec![ActQ8_0::default(); x.len() / QK8_0];
    quantize_act_q8_0(x, &mut acts);
    let dec = acts
        .iter()
        .flat_map(|a| a.qs.map(|q| a.d * f32::from(q)))
        .collect();
    (acts, dec)
}

fn q8_k_view(x: &[f32]) -> (Vec<BlockQ8K>, Vec<f32>) {
    let mut acts = vec![BlockQ8K::default(); x.len() / QK_K];
    kquants::quantize_row_q8_k(x, &mut acts);
    let mut dec = vec![0f32; x.len()];
    kquants::dequantize_q8_k(&acts, &mut dec);
    (acts, dec)
}

/// Scalar dot of one weight row with activations `x` through the format's own activation path.
/// Returns (kernel result, f64 dot of the decoded operands, error scale).
fn scalar_dot(ty: GgmlType, w: &[u8], x: &[f32]) -> (f32, f64, f64) {
    let mut wf = vec![0f32; x.len()];
    dequantize_row(ty, w, &mut wf).expect("valid row");
    let f = Format::from_ggml(ty).expect("supported");
    let (got, xd) = match f {
        Format::F32 => (kernels::quant::float::dot_f32(w, x), x.to_vec()),
        Format::F16 => (kernels::quant::float::dot_f16(w, x), x.to_vec()),
        Format::BF16 => (kernels::quant::float::dot_bf16(w, x), x.to_vec()),
        Format::Q4_0 | Format::Q5_0 | Format::Q8_0 => {
            let (a, xd) = q8_0_view(x);
            let v = match f {
                Format::Q4_0 => legacy::dot_q4_0(cast_blocks(w), &a),
                Format::Q5_0 => legacy::dot_q5_0(cast_blocks(w), &a),
                _ => legacy::dot_q8_0(cast_blocks(w), &a),
            };
            (v, xd)
        }
        Format::Q4_1 | Format::Q5_1 => {
            let (a, xd) = q8_0_view(x);
            let v = match f {
                Format::Q4_1 => legacy_min::dot_q4_1(cast_blocks(w), &a),
                _ => legacy_min::dot_q5_1(cast_blocks(w), &a),
            };
            (v, xd)
        }
        Format::MXFP4 | Format::IQ4_NL => {
            let (a, xd) = q8_0_view(x);
            let v = match f {
                Format::MXFP4 => nonlinear::dot_mxfp4(cast_blocks(w), &a),
                _ => nonlinear::dot_iq4_nl(cast_blocks(w), &a),
            };
            (v, xd)
        }
        Format::Q4_K
        | Format::Q5_K
        | Format::Q6_K
        | Format::Q2_K
        | Format::Q3_K
        | Format::IQ4_XS => {
            let (a, xd) = q8_k_view(x);
            let v = match f {
                Format::Q4_K => kquants::dot_q4_k(cast_blocks(w), &a),
                Format::Q5_K => kquants::dot_q5_k(cast_blocks(w), &a),
                Format::Q6_K => kquants::dot_q6_k(cast_blocks(w), &a),
                Format::Q2_K => kquants_low::dot_q2_k(cast_blocks(w), &a),
                Format::Q3_K => kquants_low::dot_q3_k(cast_blocks(w), &a),
                _ => nonlinear::dot_iq4_xs(cast_blocks(w), &a),
            };
            (v, xd)
        }
    };
    (got, dot64(&wf, &xd), abs_dot64(&wf, &xd))
}

#[test]
fn scalar_dots_equal_the_dot_of_decoded_operands_up_to_f32_rounding() {
    let mut rng = Rng::new(6);
    for ty in ALL_TYPES {
        for _ in 0..20 {
            let cols = QK_K * (1 + rng.below(4));
            let w = random_weights(&mut rng, ty, 1, cols);
            let x = rng.activations(cols);
            let (got, want, scale) = scalar_dot(ty, &w, &x);
            let err = (f64::from(got) - want).abs();
            assert!(
                err <= 2e-6 * scale + 1e-9,
                "{ty:?}: got {got}, want {want}, scale {scale}"
            );
        }
    }
}

#[test]
fn activation_quantization_error_stays_within_budget() {
    // Budget relative to sum |w_i x_i|: half a q8 step per element is ~1/254 of the block max;
    // measured errors are far smaller, these bounds catch a wrong scale or rounding.
    let mut rng = Rng::new(7);
    for ty in ALL_TYPES {
        let budget = match Format::from_ggml(ty).expect("supported").act_kind() {
            kernels::dtype::ActKind::F32 => 1e-5,
            _ => 2e-2,
        };
        for _ in 0..20 {
            let w = random_weights(&mut rng, ty, 1, QK_K * 2);
            let x: Vec<f32> = (0..QK_K * 2).map(|_| rng.unit()).collect();
            let mut wf = vec![0f32; x.len()];
            dequantize_row(ty, &w, &mut wf).expect("valid row");
            let (got, _, _) = scalar_dot(ty, &w, &x);
            let exact = dot64(&wf, &x);
            let scale = abs_dot64(&wf, &x);
            assert!(
                (f64::from(got) - exact).abs() <= budget * scale,
                "{ty:?}: {got} vs {exact} (scale {scale})"
            );
        }
    }
}

#[test]
fn dequantize_row_rejects_wrong_sizes_and_unsupported_types() {
    let mut out = [0f32; 32];
    assert!(matches!(
        dequantize_row(GgmlType::Q8_0, &[0u8; 33], &mut out),
        Err(KernelError::SizeMismatch {
            expected: 34,
            actual: 33,
            ..
        })
    ));
    assert!(matches!(
        dequantize_row(GgmlType::Q4_K, &[0u8; 144], &mut out),
        Err(KernelError::RaggedRow {
            cols: 32,
            block: 256,
            ..
        })
    ));
    assert!(matches!(
        dequantize_row(GgmlType::Q8_1, &[0u8; 36], &mut out),
        Err(KernelError::UnsupportedType { ty: GgmlType::Q8_1 })
    ));
}

#[test]
fn block_byte_views_round_trip() {
    let blocks = [BlockQ4_0 {
        d: f32_to_f16(1.5),
        qs: [7; 16],
    }; 3];
    let bytes = blocks_as_bytes(&blocks);
    assert_eq!(bytes.len(), 54);
    assert_eq!(cast_blocks::<BlockQ4_0>(bytes), &blocks);
}

#[test]
fn fast_rounding_matches_round_ties_even_on_the_quantizer_range() {
    let mut rng = Rng::new(8);
    let mut values: Vec<f32> = (-600..=600).map(|i| i as f32 * 0.25).collect();
    values.extend((0..20_000).map(|_| rng.unit() * 130.0));
    for v in values {
        assert_eq!(
            kernels::quant::round_half_even(v),
            v.round_ties_even() as i32,
            "{v}"
        );
    }
}

#[test]
fn paired_q8_0_activations_hold_the_same_quants_and_scales_as_single_blocks() {
    use kernels::quant::legacy::quantize_act_q8_0x2;
    use kernels::quant::ActQ8_0x2;
    let mut rng = Rng::new(9);
    for blocks in [1usize, 2, 5, 8] {
        let x = rng.activations(blocks * QK8_0);
        let mut single = vec![ActQ8_0::default(); blocks];
        quantize_act_q8_0(&x, &mut single);
        let mut pairs = vec![ActQ8_0x2::default(); blocks.div_ceil(2)];
        quantize_act_q8_0x2(&x, &mut pairs);
        for (b, s) in single.iter().enumerate() {
            let p = &pairs[b / 2];
            let half = b % 2;
            let unbiased: Vec<i8> = p.qs[half * 32..half * 32 + 32]
                .iter()
                .map(|&q| (i16::from(q) - 128) as i8)
                .collect();
            assert_eq!(unbiased, s.qs);
            assert!(p.d[half * 8..half * 8 + 8].iter().all(|&d| d == s.d));
        }
        if blocks % 2 == 1 {
            let last = &pairs[blocks / 2];
            assert!(
                last.qs[32..].iter().all(|&q| q == 128) && last.d[8..].iter().all(|&d| d == 0.0)
            );
        }
    }
}
