//! What the server does to a pooled row before answering: Matryoshka truncation, L2
//! normalisation, and the base64 encoding OpenAI's clients decode.

use base64::Engine as _;

/// `row` cut to its first `dimensions` values (all when `None`), then scaled to unit length
/// when `normalize` (a zero vector stays zero).
pub fn finish(row: &[f32], dimensions: Option<usize>, normalize: bool) -> Vec<f32> {
    let n = dimensions.unwrap_or(row.len()).min(row.len());
    let mut v = row[..n].to_vec();
    if normalize {
        let norm = v
            .iter()
            .map(|&x| f64::from(x) * f64::from(x))
            .sum::<f64>()
            .sqrt();
        if norm > 0.0 {
            v.iter_mut()
                .for_each(|x| *x = (f64::from(*x) / norm) as f32);
        }
    }
    v
}

/// The little-endian bytes of `v`'s floats, base64 (standard alphabet, padded): what OpenAI's
/// `encoding_format: "base64"` returns and its clients decode with `np.frombuffer(..., float32)`.
pub fn to_base64(v: &[f32]) -> String {
    let bytes: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn truncation_comes_before_normalisation() {
        let v = finish(&[3.0, 4.0, 12.0], Some(2), true);
        assert_eq!(v, vec![0.6, 0.8]);
        let all = finish(&[3.0, 4.0, 12.0], None, true);
        assert!((all.iter().map(|x| x * x).sum::<f32>() - 1.0).abs() < 1e-6);
        assert_eq!(finish(&[3.0, 4.0], None, false), vec![3.0, 4.0]);
        assert_eq!(finish(&[0.0, 0.0], None, true), vec![0.0, 0.0]);
    }

    #[test]
    fn base64_holds_the_little_endian_floats() {
        // 1.0f32 = 0x3f800000 → bytes 00 00 80 3f.
        assert_eq!(to_base64(&[1.0]), "AACAPw==");
        let decoded = base64::engine::general_purpose::STANDARD
            .decode(to_base64(&[0.5, -2.25]))
            .expect("decodes");
        let back: Vec<f32> = decoded
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect();
        assert_eq!(back, vec![0.5, -2.25]);
    }
}
