//! Random quantized rows with a chosen standard deviation, written as raw ggml blocks (no f32
//! matrix is ever formed, so gigabytes cost only the time to draw the bytes).
//!
//! Every format draws its quants uniformly and picks its scales so the decoded values are
//! centred on zero with the wanted standard deviation (within a few tens of percent):
//! - Q4_K: `d` a power of two and `dmin = 7.5 d` (exact in f16), each sub-block's min equal to
//!   its scale, so a value is `d * sc * (q - 7.5)`; scales spread ±25% around their mean.
//! - Q6_K: `d * sc * (q - 32)` with signed scales of random sign.
//! - Q8_0: `d * q` with `q` uniform in ±127.
//! - MXFP4: one shared power-of-two exponent, uniform nibbles (symmetric E2M1 values).
//!
//! Element 0 of each row can be made [`First::Quiet`] (decoding to about zero: the matrix then
//! ignores the residual stream's dimension 0) or [`First::Massive`] (about 50 standard
//! deviations: the embeddings give every token's residual one large fixed dimension, as trained
//! models' residual streams have, which the router reads as a bias; see `router`).

use gguf::GgmlType;

use super::super::SplitMix64;

/// What element 0 of a row holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum First {
    Plain,
    Quiet,
    Massive,
}

/// Standard deviation of a uniform 4-bit quant about 7.5, of a uniform 6-bit one about 32, of a
/// uniform byte in ±127, and of a uniform E2M1 value (in MXFP4's doubled units).
const SD_Q4: f32 = 4.61;
const SD_Q6: f32 = 18.47;
const SD_Q8: f32 = 73.6;
const SD_E2M1: f32 = 5.85;

impl SplitMix64 {
    fn fill_bytes(&mut self, out: &mut [u8]) {
        for chunk in out.chunks_mut(8) {
            let r = self.next_u64().to_le_bytes();
            chunk.copy_from_slice(&r[..chunk.len()]);
        }
    }

    /// Uniform in `lo..=hi`.
    fn range(&mut self, lo: i32, hi: i32) -> i32 {
        lo + (self.next_u64() % (hi - lo + 1) as u64) as i32
    }
}

/// Appends one row of `cols` values of type `ty` with standard deviation `sd` to `out`.
///
/// # Panics
/// If `ty` is not F32, Q4_K, Q6_K, Q8_0 or MXFP4, or `cols` is not a whole number of blocks.
pub fn push_row(
    ty: GgmlType,
    cols: usize,
    sd: f32,
    first: First,
    rng: &mut SplitMix64,
    out: &mut Vec<u8>,
) {
    let n_blocks = cols / ty.block_size();
    assert_eq!(n_blocks * ty.block_size(), cols, "{ty}: {cols} columns");
    let start = out.len();
    out.resize(start + n_blocks * ty.type_size(), 0);
    let row = &mut out[start..];
    match ty {
        GgmlType::F32 => {
            for (i, v) in row.chunks_exact_mut(4).enumerate() {
                let x = match (i, first) {
                    (0, First::Quiet) => 0.0,
                    (0, First::Massive) => 50.0 * sd,
                    _ => sd * 3f32.sqrt() * rng.next_signed(),
                };
                v.copy_from_slice(&x.to_le_bytes());
            }
        }
        GgmlType::Q4_K => q4_k(row, sd, first, rng),
        GgmlType::Q6_K => q6_k(row, sd, first, rng),
        GgmlType::Q8_0 => q8_0(row, sd, first, rng),
        GgmlType::MXFP4 => mxfp4(row, sd, first, rng),
        _ => panic!("no random rows of type {ty}"),
    }
}

/// The power of two nearest `x` (in log scale).
fn pow2_near(x: f32) -> f32 {
    2f32.powi(x.log2().round() as i32)
}

fn f16(x: f32) -> [u8; 2] {
    half::f16::from_f32(x).to_le_bytes()
}

fn q4_k(row: &mut [u8], sd: f32, first: First, rng: &mut SplitMix64) {
    // Massive rows use small scales everywhere but sub-block 0 of block 0 (scale 63), so that
    // element 0 stands about 50 standard deviations out; other rows centre their scales on 24.
    let mean_sc = if first == First::Massive { 2.0 } else { 24.0 };
    let d = pow2_near(sd / (SD_Q4 * mean_sc));
    let k = sd / (SD_Q4 * d); // the scale that gives exactly `sd`
    let (lo, hi) = (
        (0.75 * k).round().max(1.0) as i32,
        (1.25 * k).round().min(63.0) as i32,
    );
    for (b, block) in row.chunks_exact_mut(144).enumerate() {
        block[0..2].copy_from_slice(&f16(d));
        block[2..4].copy_from_slice(&f16(7.5 * d));
        let mut sc = [0u8; 8];
        sc.iter_mut()
            .for_each(|s| *s = rng.range(lo, hi.max(lo)) as u8);
        rng.fill_bytes(&mut block[16..144]);
        if b == 0 && first != First::Plain {
            if first == First::Massive {
                sc[0] = 63;
                // Sub-block 0 (elements 0..32: low nibbles of bytes 0..32) near its centre.
                for byte in &mut block[16..48] {
                    *byte = (*byte & 0xF0) | (7 + (*byte & 1));
                }
            }
            let q0 = if first == First::Massive {
                15
            } else {
                7 + (block[16] & 1)
            };
            block[16] = (block[16] & 0xF0) | q0;
        }
        block[4..16].copy_from_slice(&pack_k4_scales(&sc));
    }
}

/// Packs eight 6-bit scales, each sub-block's min equal to its scale (ggml's Q4_K layout).
fn pack_k4_scales(sc: &[u8; 8]) -> [u8; 12] {
    let mut s = [0u8; 12];
    for j in 0..4 {
        s[j] = sc[j] & 63;
        s[j + 4] = sc[j] & 63;
    }
    for j in 4..8 {
        s[j + 4] = (sc[j] & 0xF) | ((sc[j] & 0xF) << 4);
        s[j - 4] |= (sc[j] >> 4) << 6;
        s[j] |= (sc[j] >> 4) << 6;
    }
    s
}

fn q6_k(row: &mut [u8], sd: f32, first: First, rng: &mut SplitMix64) {
    let d = sd / (SD_Q6 * 30.0);
    for block in row.chunks_exact_mut(210) {
        rng.fill_bytes(&mut block[..192]);
        for s in &mut block[192..208] {
            let mag = rng.range(23, 37);
            *s = (if rng.next_u64() & 1 == 0 { mag } else { -mag }) as i8 as u8;
        }
        block[208..210].copy_from_slice(&f16(d));
    }
    if first == First::Quiet {
        // Element 0: low nibble of ql[0] and bits 0..2 of qh[0] (at byte 128); 32 decodes to 0.
        row[0] &= 0xF0;
        row[128] = (row[128] & !3) | 2;
    }
}

fn q8_0(row: &mut [u8], sd: f32, first: First, rng: &mut SplitMix64) {
    let d = sd / SD_Q8;
    for block in row.chunks_exact_mut(34) {
        block[0..2].copy_from_slice(&f16(d));
        for q in &mut block[2..] {
            *q = rng.range(-127, 127) as i8 as u8;
        }
    }
    match first {
        First::Plain => {}
        First::Quiet => row[2] = 0,
        First::Massive => {
            // Block 0: element 0 at 127 steps of 50 sd / 127, the rest within ±3 steps.
            row[0..2].copy_from_slice(&f16(50.0 * sd / 127.0));
            row[2] = 127;
            for q in &mut row[3..34] {
                *q = rng.range(-3, 3) as i8 as u8;
            }
        }
    }
}

fn mxfp4(row: &mut [u8], sd: f32, first: First, rng: &mut SplitMix64) {
    // Value = E2M1 (doubled) * 2^(e - 128).
    let e = (128 + (sd / SD_E2M1).log2().round() as i32).clamp(1, 254) as u8;
    for block in row.chunks_exact_mut(17) {
        block[0] = e;
        rng.fill_bytes(&mut block[1..]);
    }
    if first == First::Quiet {
        row[1] &= 0xF0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decoded(ty: GgmlType, cols: usize, sd: f32, first: First, seed: u64) -> Vec<f32> {
        let mut bytes = Vec::new();
        push_row(ty, cols, sd, first, &mut SplitMix64(seed), &mut bytes);
        assert_eq!(bytes.len(), ty.row_bytes(cols).expect("whole blocks"));
        let mut out = vec![0.0; cols];
        kernels::dequantize_row(ty, &bytes, &mut out).expect("dequantizes");
        out
    }

    fn mean_sd(v: &[f32]) -> (f32, f32) {
        let n = v.len() as f32;
        let mean = v.iter().sum::<f32>() / n;
        let var = v.iter().map(|x| (x - mean).powi(2)).sum::<f32>() / n;
        (mean, var.sqrt())
    }

    #[test]
    fn rows_decode_centred_with_the_wanted_spread() {
        for ty in [
            GgmlType::F32,
            GgmlType::Q4_K,
            GgmlType::Q6_K,
            GgmlType::Q8_0,
            GgmlType::MXFP4,
        ] {
            for sd in [0.02f32, 0.3, 1.0] {
                let v = decoded(ty, 8192, sd, First::Plain, 3);
                let (mean, got) = mean_sd(&v);
                assert!(v.iter().all(|x| x.is_finite()), "{ty}");
                assert!(mean.abs() < 0.1 * sd, "{ty} sd {sd}: mean {mean}");
                // MXFP4's exponent is a power of two: within a factor sqrt(2).
                let tol = if ty == GgmlType::MXFP4 { 1.45 } else { 1.2 };
                assert!(got < sd * tol && got > sd / tol, "{ty} sd {sd}: got {got}");
            }
        }
    }

    #[test]
    fn first_element_is_quiet_or_massive_as_asked() {
        for ty in [
            GgmlType::F32,
            GgmlType::Q4_K,
            GgmlType::Q6_K,
            GgmlType::Q8_0,
            GgmlType::MXFP4,
        ] {
            for seed in 0..20 {
                let v = decoded(ty, 512, 0.5, First::Quiet, seed);
                // Q4_K's centre is between two quants: half a step of the block's scale.
                assert!(v[0].abs() < 0.1, "{ty}: quiet element 0 is {}", v[0]);
            }
        }
        for ty in [GgmlType::F32, GgmlType::Q4_K, GgmlType::Q8_0] {
            let v = decoded(ty, 2048, 1.0, First::Massive, 9);
            let (_, rest) = mean_sd(&v[1..]);
            assert!(
                v[0] > 30.0 * rest && v[0] < 80.0 * rest,
                "{ty}: {} vs sd {rest}",
                v[0]
            );
        }
    }
}
