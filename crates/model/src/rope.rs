//! RoPE frequencies, and their scaling from `{arch}.rope.scaling.*`, resolved per layer at load.
//!
//! A layer's RoPE is its inverse frequencies, one per rotated pair (a position `p` turns pair
//! `i` by `p * inv_freq[i]`), and a factor on cos and sin (`mscale`, 1 except under YaRN). Every
//! scaling type is expressed as new frequencies: linear divides them all, Llama 3 divides the
//! low ones, YaRN interpolates between the two by a per-pair ramp, as llama.cpp's
//! `ggml_rope_ext` does with `freq_scale` and `ext_factor`.

use gguf::Metadata;

use crate::ModelError;

/// RoPE frequency scaling from `{arch}.rope.scaling.*`.
#[derive(Clone, Debug, PartialEq)]
pub enum RopeScaling {
    None,
    /// Positions divided by `factor` (frequencies multiplied by 1/factor).
    Linear(f32),
    /// Llama 3's frequency-dependent scaling.
    Llama3 {
        factor: f32,
        low_freq_factor: f32,
        high_freq_factor: f32,
        original_context: f32,
    },
    Yarn(Yarn),
}

/// YaRN as llama.cpp applies it (`llama_context`'s `yarn_*` parameters, `ggml_rope_ext`):
/// pair `i` keeps its frequency where its wavelength is short against the original context
/// (ramp 1), takes `freq_scale` times it where it is long (ramp 0), and mixes the two in
/// between; the ramp falls from 1 to 0 between the pairs `floor(corr(beta_fast))` and
/// `ceil(corr(beta_slow))`, `corr(b) = dims * ln(original / (2 pi b)) / (2 ln base)`. Cos and
/// sin are multiplied by `mscale`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Yarn {
    /// 1 / `rope.scaling.factor`.
    pub freq_scale: f32,
    /// `rope.scaling.original_context_length`, else the training context.
    pub original_context: f32,
    /// llama.cpp's defaults, 32 and 1; it reads `rope.scaling.yarn_beta_*` for two other
    /// architectures only (Grok, Mistral 3), so a file's values are not read here either.
    pub beta_fast: f32,
    pub beta_slow: f32,
    /// The factor on cos and sin: `rope.scaling.attn_factor` (default 1) times
    /// `1 + 0.1 ln(factor)`, computed in f32 in llama.cpp's steps.
    pub mscale: f32,
}

impl RopeScaling {
    /// The scaling a file asks for; `context_length` is YaRN's default original context.
    pub fn from_metadata(
        md: &Metadata,
        arch: &str,
        context_length: usize,
    ) -> Result<RopeScaling, ModelError> {
        let key = |k: &str| format!("{arch}.rope.scaling.{k}");
        let factor = md.get_f32(&key("factor"))?.unwrap_or(1.0);
        let kind = md.get_str(&key("type"))?.unwrap_or("none");
        match kind {
            "none" => {}
            "linear" if factor > 0.0 && factor != 1.0 => return Ok(RopeScaling::Linear(factor)),
            "linear" => {}
            "llama3" => {
                return Ok(RopeScaling::Llama3 {
                    factor,
                    low_freq_factor: md.get_f32(&key("low_freq_factor"))?.unwrap_or(1.0),
                    high_freq_factor: md.get_f32(&key("high_freq_factor"))?.unwrap_or(4.0),
                    original_context: md.get_u32(&key("original_context_length"))?.unwrap_or(8192)
                        as f32,
                })
            }
            "yarn" => return Yarn::from_metadata(md, &key, context_length).map(RopeScaling::Yarn),
            other => {
                return Err(ModelError::invalid(format!(
                    "unsupported RoPE scaling type {other:?}"
                )))
            }
        }
        Ok(RopeScaling::None)
    }

    /// The inverse frequencies and the cos/sin factor of a scaled layer whose RoPE base is
    /// `base`, rotating `rope_dims` dimensions of each head.
    pub fn layer(&self, rope_dims: usize, base: f32) -> (Vec<f32>, f32) {
        let plain = inv_freqs(rope_dims, base);
        let freqs = match *self {
            RopeScaling::None => plain,
            RopeScaling::Linear(f) => plain.iter().map(|x| x / f).collect(),
            RopeScaling::Llama3 {
                factor,
                low_freq_factor,
                high_freq_factor,
                original_context,
            } => {
                let low_wavelen = original_context / low_freq_factor;
                let high_wavelen = original_context / high_freq_factor;
                plain
                    .iter()
                    .map(|&f| {
                        let wavelen = 2.0 * std::f32::consts::PI / f;
                        if wavelen < high_wavelen {
                            f
                        } else if wavelen > low_wavelen {
                            f / factor
                        } else {
                            let smooth = (original_context / wavelen - low_freq_factor)
                                / (high_freq_factor - low_freq_factor);
                            (1.0 - smooth) * f / factor + smooth * f
                        }
                    })
                    .collect()
            }
            RopeScaling::Yarn(y) => return (y.freqs(&plain, rope_dims, base), y.mscale),
        };
        (freqs, 1.0)
    }
}

impl Yarn {
    fn from_metadata(
        md: &Metadata,
        key: &dyn Fn(&str) -> String,
        context_length: usize,
    ) -> Result<Yarn, ModelError> {
        // llama.cpp reads an absent or zero factor as 1.
        let factor = match md.get_f32(&key("factor"))? {
            None => 1.0,
            Some(0.0) => 1.0,
            Some(f) if f.is_finite() && f > 0.0 => f,
            Some(_) => {
                return Err(ModelError::invalid(format!(
                    "{} must be positive",
                    key("factor")
                )))
            }
        };
        let original = match md.get_u32(&key("original_context_length"))? {
            Some(0) => {
                return Err(ModelError::invalid(format!(
                    "{} is zero",
                    key("original_context_length")
                )))
            }
            Some(v) => v as f32,
            None => context_length as f32,
        };
        let attn_factor = match md.get_f32(&key("attn_factor"))? {
            Some(v) if !(v.is_finite() && v > 0.0) => {
                return Err(ModelError::invalid(format!(
                    "{} must be positive",
                    key("attn_factor")
                )))
            }
            v => v.unwrap_or(1.0),
        };
        // llama_context: yarn_attn_factor = mscale(factor) / (1 + 0.1 ln factor) * attn_factor,
        // then ggml_rope_ext multiplies it by 1 + 0.1 ln(1 / freq_scale).
        let freq_scale = 1.0 / factor;
        let factor = 1.0 / freq_scale;
        let get_mscale = if factor <= 1.0 {
            1.0
        } else {
            0.1 * factor.ln() + 1.0
        };
        let attn = get_mscale * (1.0 / (1.0 + 0.1 * factor.ln())) * attn_factor;
        Ok(Yarn {
            freq_scale,
            original_context: original,
            beta_fast: 32.0,
            beta_slow: 1.0,
            mscale: attn * (1.0 + 0.1 * (1.0 / freq_scale).ln()),
        })
    }

    /// The ramped frequencies of `plain` (see [`Yarn`]), in f32 as ggml computes them.
    fn freqs(&self, plain: &[f32], rope_dims: usize, base: f32) -> Vec<f32> {
        let dims = rope_dims as f32;
        let corr = |beta: f32| {
            dims * (self.original_context / (beta * 2.0 * std::f32::consts::PI)).ln()
                / (2.0 * base.ln())
        };
        let low = corr(self.beta_fast).floor().max(0.0);
        let high = corr(self.beta_slow).ceil().min(dims - 1.0);
        plain
            .iter()
            .enumerate()
            .map(|(i, &f)| {
                let y = (i as f32 - low) / (high - low).max(0.001);
                let ramp = 1.0 - y.clamp(0.0, 1.0);
                f * self.freq_scale * (1.0 - ramp) + f * ramp
            })
            .collect()
    }
}

/// theta_i = base^(-2i/d) for i in 0..d/2.
pub fn inv_freqs(rope_dims: usize, base: f32) -> Vec<f32> {
    (0..rope_dims / 2)
        .map(|i| base.powf(-((2 * i) as f32) / rope_dims as f32))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn yarn(factor: f32, original: f32) -> Yarn {
        let mut md = Metadata::default();
        md.insert("a.rope.scaling.factor", factor.into());
        md.insert(
            "a.rope.scaling.original_context_length",
            (original as u32).into(),
        );
        let key = |k: &str| format!("a.rope.scaling.{k}");
        Yarn::from_metadata(&md, &key, 1 << 20).expect("valid yarn keys")
    }

    #[test]
    fn yarn_keeps_the_fast_pairs_and_scales_the_slow_ones() {
        // gpt-oss: 64 dims, base 150000, original context 4096, factor 32.
        let y = yarn(32.0, 4096.0);
        let plain = inv_freqs(64, 150_000.0);
        let f = y.freqs(&plain, 64, 150_000.0);
        // corr(32) = 64 ln(4096 / 64pi) / (2 ln 150000) = 8.09 -> 8; corr(1) = 17.8 -> 18.
        for i in 0..=8 {
            assert_eq!(f[i], plain[i], "pair {i} extrapolates");
        }
        for i in 18..32 {
            let want = plain[i] / 32.0;
            assert!((f[i] - want).abs() <= 1e-6 * want, "pair {i} interpolates");
        }
        let mid = (plain[13] / 32.0 + plain[13]) / 2.0;
        assert!((f[13] - mid).abs() <= 1e-6 * mid, "pair 13 is half way");
        let want = 1.0 + 0.1 * 32f32.ln();
        assert!((y.mscale - want).abs() < 1e-6, "mscale {}", y.mscale);
    }

    #[test]
    fn yarn_of_factor_one_changes_nothing() {
        let y = yarn(1.0, 4096.0);
        let plain = inv_freqs(64, 10_000.0);
        for (a, b) in y.freqs(&plain, 64, 10_000.0).iter().zip(&plain) {
            assert!((a - b).abs() <= 1e-6 * b, "{a} vs {b}");
        }
        assert_eq!(y.mscale, 1.0);
    }
}
