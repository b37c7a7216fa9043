//! RMS-norm over rows and in place (activations live in `kernels`).
//!
//! RMS-norm squares in f32 and accumulates in f64, as ggml does, so that our hidden states stay
//! as close as possible to llama.cpp's (the golden tests compare greedy choices).

/// `out[r] = x[r] / rms(x[r]) * w` for each row `r` of `x` (rows of `w.len()` values).
pub fn rms_norm_rows(x: &[f32], w: &[f32], eps: f32, out: &mut [f32]) {
    let d = w.len();
    for (xr, or) in x.chunks_exact(d).zip(out.chunks_exact_mut(d)) {
        let scale = rms_scale(xr, eps);
        for ((o, &v), &g) in or.iter_mut().zip(xr).zip(w) {
            *o = v * scale * g;
        }
    }
}

/// RMS-norm of one vector in place.
pub fn rms_norm_in_place(x: &mut [f32], w: &[f32], eps: f32) {
    let scale = rms_scale(x, eps);
    for (v, &g) in x.iter_mut().zip(w) {
        *v = *v * scale * g;
    }
}

fn rms_scale(x: &[f32], eps: f32) -> f32 {
    let sum: f64 = x.iter().map(|&v| f64::from(v * v)).sum();
    let mean = (sum / x.len().max(1) as f64) as f32;
    1.0 / (mean + eps).sqrt()
}

pub fn add_in_place(dst: &mut [f32], src: &[f32]) {
    for (d, s) in dst.iter_mut().zip(src) {
        *d += s;
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
    fn rms_norm_in_place_matches_rows() {
        let x = [1.0f32, -2.0, 0.5, 4.0];
        let w = [0.5f32, 1.0, 2.0, 1.5];
        let mut rows = [0.0; 4];
        rms_norm_rows(&x, &w, 1e-6, &mut rows);
        let mut inplace = x;
        rms_norm_in_place(&mut inplace, &w, 1e-6);
        assert_eq!(rows, inplace);
    }
}
