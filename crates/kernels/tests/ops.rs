//! Element-wise kernels and f16 helpers against straightforward f64 formulas.

mod common;

use common::Rng;
use kernels::*;

#[test]
fn rms_norm_scales_to_unit_rms_then_applies_weight() {
    let mut rng = Rng::new(21);
    let x = rng.activations(640);
    let w: Vec<f32> = (0..640).map(|_| 1.0 + rng.unit()).collect();
    let mut out = vec![0f32; 640];
    rms_norm(&x, &w, 1e-6, &mut out);
    let ms: f64 = x.iter().map(|&v| f64::from(v) * f64::from(v)).sum::<f64>() / 640.0;
    let inv = 1.0 / (ms + 1e-6).sqrt();
    for i in 0..640 {
        let want = f64::from(x[i]) * inv * f64::from(w[i]);
        assert!(
            (f64::from(out[i]) - want).abs() <= 1e-6 * want.abs().max(1e-3),
            "{i}"
        );
    }
}

#[test]
fn rows_give_the_bits_of_row_by_row_for_every_group_shape() {
    // Squares spanning many binades, so a different summation order would round differently.
    let mut rng = Rng::new(5);
    let d = 96;
    let w: Vec<f32> = (0..d).map(|_| 1.0 + rng.unit()).collect();
    for n in 1..=19 {
        let x: Vec<f32> = (0..n * d)
            .map(|i| rng.unit() * 10f32.powi((i % 13) as i32 - 6))
            .collect();
        let mut want = vec![0.0; n * d];
        for (xr, or) in x.chunks_exact(d).zip(want.chunks_exact_mut(d)) {
            rms_norm(xr, &w, 1e-6, or);
        }
        let mut got = vec![0.0; n * d];
        rms_norm_rows(&x, &w, 1e-6, &mut got);
        let mut inplace = x.clone();
        rms_norm_rows_in_place(&mut inplace, &w, 1e-6);
        let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&got), bits(&want), "{n} rows");
        assert_eq!(bits(&inplace), bits(&want), "{n} rows in place");
    }
}

#[test]
fn in_place_gives_the_bits_of_the_copy() {
    let w: Vec<f32> = (0..8).map(|i| 0.5 + i as f32 / 7.0).collect();
    let x: Vec<f32> = (0..24)
        .map(|i| ((i * 37) % 11) as f32 / 3.0 - 1.7)
        .collect();
    let mut out = vec![0.0; 24];
    rms_norm_rows(&x, &w, 1e-6, &mut out);
    let mut y = x.clone();
    rms_norm_rows_in_place(&mut y, &w, 1e-6);
    let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
    assert_eq!(bits(&y), bits(&out));
    assert_ne!(bits(&y), bits(&x));
}

#[test]
fn each_row_is_normalized_on_its_own() {
    let w = [1.0f32; 2];
    let mut out = [0.0; 4];
    rms_norm_rows(&[3.0, 4.0, 100.0, 0.0], &w, 0.0, &mut out);
    // rms(3, 4) = sqrt(12.5); rms(100, 0) = sqrt(5000).
    let r0 = 12.5f32.sqrt();
    let r1 = 5000.0f32.sqrt();
    let want = [3.0 / r0, 4.0 / r0, 100.0 / r1, 0.0];
    for (o, e) in out.iter().zip(want) {
        assert!((o - e).abs() < 1e-6, "{out:?}");
    }
}

#[test]
fn softmax_is_a_distribution_that_preserves_order_and_ignores_neg_infinity() {
    let mut x = vec![1.0f32, 3.0, 2.0, f32::NEG_INFINITY, 50.0, -50.0];
    softmax(&mut x);
    let total: f32 = x.iter().sum();
    assert!((total - 1.0).abs() < 1e-6);
    assert_eq!(x[3], 0.0);
    assert!(x[4] > x[1] && x[1] > x[2] && x[2] > x[0] && x[0] > x[5]);
    let mut all_masked = vec![f32::NEG_INFINITY; 3];
    softmax(&mut all_masked);
    assert!(all_masked.iter().all(|v| *v == f32::NEG_INFINITY));
}

#[test]
fn gelu_table_version_stays_within_f16_precision_of_exact_gelu() {
    let xs: Vec<f32> = (-1200..1200).map(|i| i as f32 / 100.0).collect();
    let mut a = xs.clone();
    let mut b = xs.clone();
    gelu_tanh(&mut a);
    gelu_tanh_exact(&mut b);
    for ((&x, &p), &q) in xs.iter().zip(&a).zip(&b) {
        // Input and output both rounded to f16: relative error ~2^-10 plus slope * input error.
        assert!(
            (p - q).abs() <= 2e-3 * q.abs().max(x.abs()) + 1e-6,
            "x={x}: {p} vs {q}"
        );
    }
    assert_eq!(a[0], 0.0, "below -10 is zero");
    assert_eq!(
        *a.last().expect("non-empty"),
        *xs.last().expect("non-empty"),
        "above 10 is identity"
    );
}

#[test]
fn silu_is_within_a_few_ulp_of_libm_and_the_same_bits_in_lanes_and_alone() {
    let mut rng = Rng::new(31);
    let mut x = rng.activations(1001);
    x.iter_mut()
        .enumerate()
        .for_each(|(i, v)| *v *= 1.0 + (i % 40) as f32);
    x.extend([
        0.0, -0.0, 90.0, -90.0, 87.5, -87.5, 1e-30, -1e-30, 200.0, -200.0,
    ]);
    let up = rng.activations(x.len());
    let mut lanes = x.clone();
    silu(&mut lanes);
    let mut fused = x.clone();
    silu_mul(&mut fused, &up);
    for (i, &v) in x.iter().enumerate() {
        // One element alone takes the scalar path; in the vector it went through the lanes.
        let mut alone = [v];
        silu(&mut alone);
        assert_eq!(
            alone[0].to_bits(),
            lanes[i].to_bits(),
            "silu({v}) lanes vs alone"
        );
        assert_eq!(
            (lanes[i] * up[i]).to_bits(),
            fused[i].to_bits(),
            "silu_mul({v})"
        );
        let exact = f64::from(v) / (1.0 + (-f64::from(v)).exp());
        let err = (f64::from(lanes[i]) - exact).abs();
        assert!(
            err <= 4.0 * f64::from(f32::EPSILON) * exact.abs() + 1e-35,
            "silu({v}) = {} vs {exact}",
            lanes[i]
        );
    }
}

#[test]
fn silu_mul_add_scale_follow_their_definitions() {
    let mut x = vec![-2.0f32, 0.0, 3.0];
    silu(&mut x);
    for (got, v) in x.iter().zip([-2.0f32, 0.0, 3.0]) {
        assert!((got - v / (1.0 + (-v).exp())).abs() < 1e-7);
    }
    let mut a = vec![1.0f32, 2.0];
    mul(&mut a, &[3.0, 4.0]);
    assert_eq!(a, [3.0, 8.0]);
    add(&mut a, &[1.0, -8.0]);
    assert_eq!(a, [4.0, 0.0]);
    scale(&mut a, 0.5);
    assert_eq!(a, [2.0, 0.0]);
}

#[test]
fn f16_rows_round_trip_and_feed_dot_and_axpy() {
    let mut rng = Rng::new(22);
    for n in [1usize, 7, 8, 63, 256, 257] {
        let x = rng.activations(n);
        let mut h = vec![0u16; n];
        f32_to_f16_row(&x, &mut h);
        let mut back = vec![0f32; n];
        f16_to_f32_row(&h, &mut back);
        for (&a, &b) in x.iter().zip(&back) {
            assert!((a - b).abs() <= a.abs() * 4.9e-4 + 6e-8, "{a} -> {b}");
        }
        let q = rng.activations(n);
        let want: f64 = back
            .iter()
            .zip(&q)
            .map(|(&a, &b)| f64::from(a) * f64::from(b))
            .sum();
        let scale: f64 = back
            .iter()
            .zip(&q)
            .map(|(&a, &b)| (f64::from(a) * f64::from(b)).abs())
            .sum();
        assert!((f64::from(dot_f16_f32(&h, &q)) - want).abs() <= 1e-6 * scale + 1e-9);
        let mut y = q.clone();
        axpy_f16(0.75, &h, &mut y);
        for i in 0..n {
            let want = f64::from(q[i]) + 0.75 * f64::from(back[i]);
            assert!((f64::from(y[i]) - want).abs() <= 1e-6 * want.abs() + 1e-7);
        }
    }
}

#[test]
fn gelu_tanh_equals_exact_gelu_of_f16_rounded_input_rounded_to_f16() {
    use kernels::quant::{f16_to_f32, f32_to_f16};
    let mut rng = Rng::new(23);
    let xs: Vec<f32> = (0..4099).map(|_| rng.unit() * 12.0).collect();
    let mut got = xs.clone();
    gelu_tanh(&mut got);
    for (&x, &g) in xs.iter().zip(&got) {
        let want = if x <= -10.0 {
            0.0
        } else if x >= 10.0 {
            x
        } else {
            let mut v = [f16_to_f32(f32_to_f16(x))];
            gelu_tanh_exact(&mut v);
            f16_to_f32(f32_to_f16(v[0]))
        };
        assert_eq!(g.to_bits(), want.to_bits(), "x = {x}");
    }
}

#[test]
fn f16_row_conversion_rounds_like_the_scalar_converter() {
    let mut rng = Rng::new(24);
    let x: Vec<f32> = (0..1003).map(|_| rng.unit() * 1000.0).collect();
    let mut h = vec![0u16; x.len()];
    f32_to_f16_row(&x, &mut h);
    for (&v, &b) in x.iter().zip(&h) {
        assert_eq!(b.to_le_bytes(), kernels::quant::f32_to_f16(v), "{v}");
    }
}
