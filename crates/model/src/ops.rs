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
