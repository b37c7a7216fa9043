//! Bit-identity of the SIMD helpers with their portable forms, and `exp_neg`'s accuracy.

use super::*;

#[test]
fn exp_neg_takes_n_and_2_to_the_n_from_the_bits_exactly() {
    // The same polynomial with n from `round_ties_even` and 2^n from an integer cast.
    let reference = |x: f32| -> f32 {
        use exp_consts::*;
        let small = x < FLOOR;
        let x = x.max(FLOOR);
        let n = (x * LOG2E).round_ties_even();
        let r = n.mul_add(-LN2_LO, n.mul_add(-LN2_HI, x));
        let mut p = POLY[0];
        for &c in &POLY[1..] {
            p = p.mul_add(r, c);
        }
        let scale = f32::from_bits(((n as i32 + 127) as u32) << 23);
        if small {
            0.0
        } else {
            p * scale
        }
    };
    let mut x = -100.0f32;
    while x <= 0.0 {
        assert_eq!(exp_neg(x).to_bits(), reference(x).to_bits(), "x = {x}");
        x += 0.000_37;
    }
    for x in [
        0.0f32,
        -0.0,
        -87.0,
        -87.000_01,
        -86.999_99,
        f32::NEG_INFINITY,
        -0.346_573_6,
    ] {
        assert_eq!(exp_neg(x).to_bits(), reference(x).to_bits(), "x = {x}");
    }
}

#[test]
fn exp_neg_is_within_a_few_ulp_of_exp() {
    let mut worst = 0.0f64;
    let mut x = -87.0f32;
    while x <= 0.0 {
        let want = f64::from(x).exp();
        let got = f64::from(exp_neg(x));
        worst = worst.max(((got - want) / want).abs());
        x += 0.000_731;
    }
    assert!(worst < 4e-7, "worst relative error {worst}");
    assert_eq!(exp_neg(0.0), 1.0);
    assert_eq!(exp_neg(-100.0), 0.0);
    assert_eq!(exp_neg(f32::NEG_INFINITY), 0.0);
}

/// `n` values in -1..1 spread by `seed`.
fn row(seed: usize, n: usize) -> Vec<f32> {
    (0..n)
        .map(|i| ((i * 7919 + seed * 31) % 997) as f32 / 500.0 - 1.0)
        .collect()
}

fn bits(x: &[f32]) -> Vec<u32> {
    x.iter().map(|v| v.to_bits()).collect()
}

/// `x` rounded to f16, as raw bits.
fn f16s(x: &[f32]) -> Vec<u16> {
    x.iter()
        .map(|&v| half::f16::from_f32(v).to_bits())
        .collect()
}

/// f16 bits as f32 (exactly).
fn f32s(x: &[u16]) -> Vec<f32> {
    x.iter()
        .map(|&v| half::f16::from_bits(v).to_f32())
        .collect()
}

/// The SIMD V sum and dots of one block, for f32 or raw f16 K/V rows.
///
/// # Safety
/// The CPU must support AVX2, FMA and F16C (the test detects them first).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn simd_pair<E: KvElem>(
    q: [&[f32]; 2],
    k: [&[E]; KEYS_PER_BLOCK],
    acc: &mut [f32],
    w: &[f32],
    b: &Block<()>,
    v: &[E],
) -> [[f32; KEYS_PER_BLOCK]; 2] {
    axpy_block::<3, _, E, ()>(Avx2(()), acc, w, b, |p| &v[p * b.hd..(p + 1) * b.hd]);
    dots(Avx2(()), q, k)
}

/// # Safety
/// The CPU must support AVX2, FMA and F16C (the test detects them first); `b.hd` is a multiple of
/// 16 and the slices are as `x86::axpy_block` requires.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn simd256_axpy(acc: &mut [f32], w: &[f32], b: &Block<()>, v: &[f32]) {
    // SAFETY: AVX2/FMA/F16C are enabled here; `b.hd` and the slices as `x86::axpy_block` needs
    // them are this function's contract.
    unsafe { x86::axpy_block::<3, f32, ()>(acc, w, b, |p| &v[p * b.hd..(p + 1) * b.hd]) };
}

#[test]
fn simd_dots_and_value_sums_give_the_portable_bits() {
    #[cfg(target_arch = "x86_64")]
    if std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma") {
        let hd = 256;
        let (q0, q1) = (row(1, hd), row(2, hd));
        let ks: Vec<Vec<f32>> = (0..KEYS_PER_BLOCK).map(|j| row(10 + j, hd)).collect();
        let k: [&[f32]; KEYS_PER_BLOCK] = std::array::from_fn(|j| &ks[j][..]);
        let (span, n_pos) = (40, 37);
        let w = row(5, 3 * span);
        let v = row(6, n_pos * hd);
        let b = Block {
            span,
            hd,
            base: 0,
            positions: 0..n_pos,
            next: &(),
        };
        let mut acc_simd = row(7, 3 * hd);
        let mut acc_plain = acc_simd.clone();
        // SAFETY: features detected above.
        let d_simd = unsafe { simd_pair([&q0, &q1], k, &mut acc_simd, &w, &b, &v) };
        axpy_block::<3, _, f32, ()>(Portable, &mut acc_plain, &w, &b, |p| {
            &v[p * hd..(p + 1) * hd]
        });
        let d_plain = dots(Portable, [&q0, &q1], k);
        assert_eq!(bits(d_simd.as_flattened()), bits(d_plain.as_flattened()));
        assert_eq!(bits(&acc_simd), bits(&acc_plain));
        // Both SIMD widths (`axpy_block` picks the 512-bit one where it can).
        let mut acc256 = row(7, 3 * hd);
        // SAFETY: features detected above.
        unsafe { simd256_axpy(&mut acc256, &w, &b, &v) };
        assert_eq!(bits(&acc256), bits(&acc_plain));
        if std::is_x86_feature_detected!("avx512f") {
            let mut acc512 = row(7, 3 * hd);
            // SAFETY: AVX-512F detected; hd = 256 is a multiple of WIDE.
            unsafe {
                x86::axpy_block_512::<3, f32, ()>(&mut acc512, &w, &b, |p| &v[p * hd..(p + 1) * hd])
            };
            assert_eq!(bits(&acc512), bits(&acc_plain));
        }
        // f16 rows read directly give the bits of the same rows converted first.
        let k16: Vec<Vec<u16>> = ks.iter().map(|r| f16s(r)).collect();
        let kc: Vec<Vec<f32>> = k16.iter().map(|r| f32s(r)).collect();
        let k16r: [&[u16]; KEYS_PER_BLOCK] = std::array::from_fn(|j| &k16[j][..]);
        let kcr: [&[f32]; KEYS_PER_BLOCK] = std::array::from_fn(|j| &kc[j][..]);
        let v16 = f16s(&v);
        let vc = f32s(&v16);
        let mut acc16 = row(7, 3 * hd);
        let mut accc = acc16.clone();
        // SAFETY: features detected above.
        let d16 = unsafe { simd_pair([&q0, &q1], k16r, &mut acc16, &w, &b, &v16) };
        // SAFETY: as above.
        let dc = unsafe { simd_pair([&q0, &q1], kcr, &mut accc, &w, &b, &vc) };
        assert_eq!(bits(d16.as_flattened()), bits(dc.as_flattened()));
        assert_eq!(bits(&acc16), bits(&accc));
        let dp16 = dots::<_, u16>(Portable, [&q0, &q1], k16r);
        assert_eq!(bits(dp16.as_flattened()), bits(dc.as_flattened()));
        if std::is_x86_feature_detected!("avx512f") && std::is_x86_feature_detected!("avx512vl") {
            // Four heads by four keys: each pair as `dots` computes it.
            let qs4: Vec<Vec<f32>> = (0..4).map(|a| row(20 + a, hd)).collect();
            let ks4: Vec<Vec<u16>> = (0..KEYS4).map(|j| f16s(&row(30 + j, hd))).collect();
            let q4: [&[f32]; 4] = std::array::from_fn(|a| &qs4[a][..]);
            let k4: [&[u16]; KEYS4] = std::array::from_fn(|j| &ks4[j][..]);
            // SAFETY: AVX-512VL detected (and AVX2/FMA above).
            let d4 = unsafe { x86::dots4(q4, k4) };
            // The same keys converted to f32 first (a converted tile) give the same bits.
            let kf: Vec<Vec<f32>> = ks4.iter().map(|r| f32s(r)).collect();
            let kf4: [&[f32]; KEYS4] = std::array::from_fn(|j| &kf[j][..]);
            // SAFETY: as above.
            let d4f = unsafe { x86::dots4(q4, kf4) };
            assert_eq!(bits(d4.as_flattened()), bits(d4f.as_flattened()));
            for a in 0..4 {
                for b in 0..KEYS4 {
                    let one = dots::<_, u16>(Portable, [q4[a], q4[a]], [k4[b]; KEYS_PER_BLOCK]);
                    assert_eq!(d4[a][b].to_bits(), one[0][0].to_bits(), "head {a} key {b}");
                }
            }
        }
    }
}

#[test]
fn simd_softmax_and_f16_rounding_give_the_portable_bits() {
    #[cfg(target_arch = "x86_64")]
    if std::is_x86_feature_detected!("avx2")
        && std::is_x86_feature_detected!("fma")
        && std::is_x86_feature_detected!("f16c")
    {
        /// # Safety
        /// The CPU must support AVX2, FMA and F16C (detected just above).
        #[target_feature(enable = "avx2,fma,f16c")]
        unsafe fn both(x: &mut [f32], y: &mut [f32], s: f32, sink: Option<f32>) {
            softmax_f16(Avx2(()), x, sink);
            scale_round_f16(Avx2(()), y, s);
        }
        /// # Safety
        /// The CPU must support AVX2 and FMA (detected just above).
        #[target_feature(enable = "avx2,fma")]
        unsafe fn exp8(x: [f32; 8]) -> [f32; 8] {
            use std::arch::x86_64::*;
            let mut out = [0.0f32; 8];
            // SAFETY: an 8-float load and store of 8-float arrays; AVX2/FMA are enabled here,
            // all `exp_neg8` needs.
            unsafe {
                let e = x86::exp_neg8(_mm256_loadu_ps(x.as_ptr()));
                _mm256_storeu_ps(out.as_mut_ptr(), e);
            }
            out
        }
        let mut x = -100.0f32;
        while x <= 0.0 {
            let xs: [f32; 8] = std::array::from_fn(|j| x - j as f32 * 0.000_03);
            // SAFETY: features detected above.
            let got = unsafe { exp8(xs) };
            for j in 0..8 {
                assert_eq!(got[j].to_bits(), exp_neg(xs[j]).to_bits(), "x = {}", xs[j]);
            }
            x += 0.000_71;
        }
        let odd = [
            f32::NEG_INFINITY,
            f32::NAN,
            -87.0,
            -87.000_01,
            0.0,
            -0.0,
            -1e-30,
            -88.0,
        ];
        // SAFETY: features detected above.
        let got = unsafe { exp8(odd) };
        for j in 0..8 {
            assert_eq!(
                got[j].to_bits(),
                exp_neg(odd[j]).to_bits(),
                "x = {}",
                odd[j]
            );
        }
        let sizes = [1usize, 5, 8, 9, 16, 100, 515, 1027];
        let sinks = [None, Some(1.5), Some(-3.0)];
        for (n, sink) in sizes.iter().flat_map(|&n| sinks.map(|s| (n, s))) {
            // Scores spread over ~120 (so some fall below exp_neg's -87 cut and some
            // probabilities are f16 subnormals), and raw values spread past f16's range.
            let scores: Vec<f32> = (0..n)
                .map(|i| ((i * 7919 + n) % 4001) as f32 * -0.03 + (i % 3) as f32 * 0.5)
                .collect();
            let raw: Vec<f32> = (0..n)
                .map(|i| ((i * 104_729 + 7) % 20_011) as f32 * 7.37 - 70_000.0)
                .collect();
            let (mut x_simd, mut y_simd) = (scores.clone(), raw.clone());
            // SAFETY: features detected above.
            unsafe { both(&mut x_simd, &mut y_simd, 0.0625, sink) };
            let (mut x_plain, mut y_plain) = (scores.clone(), raw.clone());
            softmax_f16(Portable, &mut x_plain, sink);
            scale_round_f16(Portable, &mut y_plain, 0.0625);
            assert_eq!(bits(&x_simd), bits(&x_plain), "softmax, n = {n}, {sink:?}");
            assert_eq!(bits(&y_simd), bits(&y_plain), "rounding, n = {n}");
            if sink.is_none() {
                let total: f32 = x_plain.iter().sum();
                assert!(
                    (total - 1.0).abs() < 1e-2,
                    "n = {n}: probabilities sum to {total}"
                );
            }
        }
    }
}

#[test]
fn exp_sum_matches_a_plain_loop() {
    for n in [1usize, 7, 8, 9, 100, 1027] {
        let mut x: Vec<f32> = (0..n).map(|i| ((i * 37) % 101) as f32 * -0.3).collect();
        let max = x.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        let want: f64 = x.iter().map(|&v| f64::from(v - max).exp()).sum();
        let got = exp_sum(&mut x, max);
        assert!(((got - want) / want).abs() < 1e-6, "n {n}: {got} vs {want}");
    }
}

#[test]
fn a_sink_takes_its_share_of_the_softmax_and_no_probability() {
    let scores = [0.5f32, -1.0, 2.0, 0.0, -0.25];
    for sink in [-2.0f32, 1.0, 3.0] {
        let mut x = scores.to_vec();
        softmax_f16(Portable, &mut x, Some(sink));
        let all: Vec<f64> = scores
            .iter()
            .chain([&sink])
            .map(|&v| f64::from(v).exp())
            .collect();
        let total: f64 = all.iter().sum();
        for (got, e) in x.iter().zip(&all) {
            let want = e / total;
            assert!(
                (f64::from(*got) - want).abs() < 1e-3 * want.max(1e-3),
                "sink {sink}"
            );
        }
    }
    let (mut with, mut without) = (scores.to_vec(), scores.to_vec());
    softmax_f16(Portable, &mut with, Some(f32::NEG_INFINITY));
    softmax_f16(Portable, &mut without, None);
    assert_eq!(with, without, "a sink at -inf is no sink");
}

#[test]
fn transposed_dots_give_the_bits_of_dots() {
    for hd in [8, 64, 136, 256] {
        let stride = 24;
        let qs: Vec<Vec<f32>> = (0..2).map(|a| row(40 + a, hd)).collect();
        let mut keys: Vec<Vec<f32>> = (0..KEYS_T).map(|k| row(50 + k, hd)).collect();
        // Signed zeros and cancellation: key 3 is zero, key 4 the negation of key 5.
        keys[3].iter_mut().for_each(|x| *x = -0.0);
        keys[4] = keys[5].iter().map(|x| -x).collect();
        let mut kt = vec![f32::NAN; (hd - 1) * stride + KEYS_T];
        for (k, key) in keys.iter().enumerate() {
            for (i, &x) in key.iter().enumerate() {
                kt[i * stride + k] = x;
            }
        }
        let q: [&[f32]; 2] = [&qs[0], &qs[1]];
        let portable = dots_t_portable(q, &kt, stride);
        for (k, key) in keys.iter().enumerate() {
            let one = dots(Portable, q, [&key[..]; KEYS_PER_BLOCK]);
            for a in 0..2 {
                assert_eq!(
                    portable[a][k].to_bits(),
                    one[a][0].to_bits(),
                    "hd {hd} head {a} key {k}"
                );
            }
        }
        if let Some(wide) = Wide::detect() {
            let three = dots_t(wide, [q[0], q[1], q[0]], &kt, stride);
            let two = dots_t(wide, q, &kt, stride);
            let one = dots_t(wide, [q[1]], &kt, stride);
            assert_eq!(
                bits(two.as_flattened()),
                bits(portable.as_flattened()),
                "hd {hd}"
            );
            assert_eq!(bits(&one[0]), bits(&portable[1]), "hd {hd}, one head");
            assert_eq!(
                bits(three.as_flattened()[..32].as_ref()),
                bits(portable.as_flattened())
            );
            assert_eq!(bits(&three[2]), bits(&portable[0]), "hd {hd}, three heads");
        }
    }
}

#[test]
fn transpose16_moves_every_value_and_zeroes_missing_rows() {
    let (src_stride, dst_stride) = (40, 24);
    let src: Vec<f32> = (0..15 * src_stride + KEYS_T)
        .map(|i| i as f32 * 0.5 - 3.0)
        .collect();
    for rows in [0, 1, 7, 15, 16] {
        let mut want = vec![f32::NAN; 15 * dst_stride + KEYS_T];
        transpose16_portable(&src, src_stride, rows, &mut want, dst_stride);
        for i in 0..KEYS_T {
            for r in 0..KEYS_T {
                let v = want[i * dst_stride + r];
                let expect = if r < rows {
                    src[r * src_stride + i]
                } else {
                    0.0
                };
                assert_eq!(v.to_bits(), expect.to_bits(), "rows {rows} ({i}, {r})");
            }
        }
        if let Some(wide) = Wide::detect() {
            let mut got = vec![f32::NAN; want.len()];
            transpose16(wide, &src, src_stride, rows, &mut got, dst_stride);
            assert_eq!(bits(&got), bits(&want), "rows {rows}");
        }
    }
}

/// # Safety
/// The CPU must support AVX2, FMA and F16C (the test detects them first); the shapes are as
/// `x86::axpy_rows` requires (`b.hd` a multiple of 8, checked by `axpy_rows` first).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn simd256_rows(acc: &mut [f32], w: &[f32], b: &Block<()>, heads: usize, v: &[u16]) {
    let row = heads * b.hd;
    // SAFETY: features enabled here; shapes per the contract.
    unsafe { x86::axpy_rows::<u16, ()>(acc, w, b, heads, |p| &v[p * row..(p + 1) * row]) };
}

#[test]
fn row_by_row_dots_and_value_sums_give_the_bits_of_the_head_by_head_ones() {
    // Head dimensions with 16 lanes, 8 lanes only, and a tail; ten heads (two runs of pairs).
    for hd in [128, 24, 20] {
        let heads = 10;
        let (span, n_pos) = (29, 23);
        let qs: Vec<Vec<f32>> = (0..heads).map(|h| row(40 + h, hd)).collect();
        let ks: Vec<Vec<u16>> = (0..heads).map(|h| f16s(&row(60 + h, hd))).collect();
        let q: [&[f32]; 10] = std::array::from_fn(|h| &qs[h][..]);
        let k: [&[u16]; 10] = std::array::from_fn(|h| &ks[h][..]);
        let want: Vec<f32> = (0..heads)
            .map(|h| dots::<_, u16>(Portable, [q[h], q[h]], [k[h]; KEYS_PER_BLOCK])[0][0])
            .collect();
        assert_eq!(bits(&dots_own(Portable, q, k)), bits(&want), "hd {hd}");
        if let Some(simd) = Avx2::detect() {
            assert_eq!(bits(&dots_own(simd, q, k)), bits(&want), "hd {hd}");
        }

        // Values: rows of `heads * hd`, each head's accumulator as `axpy_block` leaves it.
        let w = row(5, heads * span);
        let v = f16s(&row(6, n_pos * heads * hd));
        let b = Block {
            span,
            hd,
            base: 3,
            positions: 3..3 + n_pos - 2,
            next: &(),
        };
        let start = row(7, heads * hd);
        let mut want = start.clone();
        for h in 0..heads {
            let acc = &mut want[h * hd..(h + 1) * hd];
            let vh = |p: usize| &v[(p - 3) * heads * hd + h * hd..][..hd];
            axpy_block::<1, _, u16, ()>(Portable, acc, &w[h * span..], &b, vh);
        }
        let rows = |p: usize| &v[(p - 3) * heads * hd..(p - 2) * heads * hd];
        let mut plain = start.clone();
        axpy_rows(Portable, &mut plain, &w, &b, heads, rows);
        assert_eq!(bits(&plain), bits(&want), "hd {hd}");
        if let Some(simd) = Avx2::detect() {
            let mut got = start.clone();
            axpy_rows(simd, &mut got, &w, &b, heads, rows);
            assert_eq!(bits(&got), bits(&want), "hd {hd}");
            #[cfg(target_arch = "x86_64")]
            if hd % 8 == 0 {
                // The 256-bit form, which `axpy_rows` skips where AVX-512 is there.
                let mut got = start.clone();
                let shifted = Block {
                    base: 0,
                    positions: 0..n_pos - 2,
                    ..b
                };
                // SAFETY: `Avx2` detected; hd is a multiple of 8; the shapes fit.
                unsafe { simd256_rows(&mut got, &w, &shifted, heads, &v) };
                assert_eq!(bits(&got), bits(&want), "hd {hd}");
            }
        }
    }
}

#[test]
fn one_row_dots_give_the_bits_of_dots() {
    // A head dimension with a tail, and one without.
    for hd in [64, 20] {
        let q = row(1, hd);
        let ks: Vec<Vec<u16>> = (0..KEYS1).map(|j| f16s(&row(10 + j, hd))).collect();
        let k: [&[u16]; KEYS1] = std::array::from_fn(|j| &ks[j][..]);
        let want: Vec<f32> = (0..KEYS1)
            .map(|j| dots::<_, u16>(Portable, [&q, &q], [k[j]; KEYS_PER_BLOCK])[0][0])
            .collect();
        assert_eq!(bits(&dots1(Portable, &q, k)), bits(&want), "hd {hd}");
        if let Some(simd) = Avx2::detect() {
            assert_eq!(bits(&dots1(simd, &q, k)), bits(&want), "hd {hd}");
        }
    }
}
