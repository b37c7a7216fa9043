//! RMS-norm over rows, on top of `kernels::rms_norm` (which squares in f32 and
//! accumulates in f64, as ggml does, so our hidden states stay as close as possible to
//! llama.cpp's; the golden tests compare greedy choices).

/// `out[r] = x[r] / rms(x[r]) * w` for each row `r` of `x` (rows of `w.len()` values).
pub fn rms_norm_rows(x: &[f32], w: &[f32], eps: f32, out: &mut [f32]) {
    let d = w.len();
    for (xr, or) in x.chunks_exact(d).zip(out.chunks_exact_mut(d)) {
        kernels::rms_norm(xr, w, eps, or);
    }
}

/// [`rms_norm_rows`] of `x` into itself (the same bits).
pub fn rms_norm_rows_in_place(x: &mut [f32], w: &[f32], eps: f32) {
    for xr in x.chunks_exact_mut(w.len()) {
        kernels::rms_norm_in_place(xr, w, eps);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rms_norm_of_constant_row_is_the_weight() {
        let x = [3.0f32; 4];
        let w = [1.0, 2.0, 3.0, 4.0];
        let mut out = [0.0; 4];
        rms_norm_rows(&x, &w, 0.0, &mut out);
        for (o, g) in out.iter().zip(w) {
            assert!((o - g).abs() < 1e-6);
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
}
