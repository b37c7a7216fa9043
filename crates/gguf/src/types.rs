//! ggml tensor element types and their block geometry.
//!
//! Every ggml type stores elements in fixed-size blocks: `block_size` elements packed into
//! `type_size` bytes. A row of `n` elements is only representable when `n` is a multiple of
//! the block size, which is why [`GgmlType::row_bytes`] returns an `Option`.

/// A ggml tensor element type, numbered as in the GGUF file format.
#[allow(non_camel_case_types)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum GgmlType {
    F32 = 0,
    F16 = 1,
    Q4_0 = 2,
    Q4_1 = 3,
    Q5_0 = 6,
    Q5_1 = 7,
    Q8_0 = 8,
    Q8_1 = 9,
    Q2_K = 10,
    Q3_K = 11,
    Q4_K = 12,
    Q5_K = 13,
    Q6_K = 14,
    Q8_K = 15,
    BF16 = 30,
}

/// Elements per super-block of the k-quant family.
const QK_K: usize = 256;

impl GgmlType {
    /// All supported types, in file-format order.
    pub const ALL: [GgmlType; 15] = [
        Self::F32,
        Self::F16,
        Self::Q4_0,
        Self::Q4_1,
        Self::Q5_0,
        Self::Q5_1,
        Self::Q8_0,
        Self::Q8_1,
        Self::Q2_K,
        Self::Q3_K,
        Self::Q4_K,
        Self::Q5_K,
        Self::Q6_K,
        Self::Q8_K,
        Self::BF16,
    ];

    /// The type with file-format number `v`, or `None` for unknown or unsupported numbers
    /// (including the IQ family, which we do not read).
    pub fn from_u32(v: u32) -> Option<Self> {
        Self::ALL.into_iter().find(|t| *t as u32 == v)
    }

    /// Number of elements in one block.
    pub fn block_size(self) -> usize {
        use GgmlType::*;
        match self {
            F32 | F16 | BF16 => 1,
            Q4_0 | Q4_1 | Q5_0 | Q5_1 | Q8_0 | Q8_1 => 32,
            Q2_K | Q3_K | Q4_K | Q5_K | Q6_K | Q8_K => QK_K,
        }
    }

    /// Number of bytes in one block.
    pub fn type_size(self) -> usize {
        use GgmlType::*;
        match self {
            F32 => 4,
            F16 | BF16 => 2,
            Q4_0 => 2 + 16,           // f16 scale + 32 nibbles
            Q4_1 => 2 * 2 + 16,       // f16 scale + f16 min + 32 nibbles
            Q5_0 => 2 + 4 + 16,       // f16 scale + high bits + nibbles
            Q5_1 => 2 * 2 + 4 + 16,   // f16 scale + f16 min + high bits + nibbles
            Q8_0 => 2 + 32,           // f16 scale + 32 bytes
            Q8_1 => 2 * 2 + 32,       // f16 scale + f16 sum + 32 bytes
            Q2_K => 16 + 64 + 2 * 2,  // scales + 2-bit quants + d, dmin
            Q3_K => 32 + 64 + 12 + 2, // high-bit mask + quants + scales + d
            Q4_K => 2 * 2 + 12 + 128, // d, dmin + 6-bit scales + nibbles
            Q5_K => 2 * 2 + 12 + 32 + 128,
            Q6_K => 128 + 64 + 16 + 2, // low bits + high bits + scales + d
            Q8_K => 4 + QK_K + 2 * QK_K / 16, // f32 d + quants + i16 block sums
        }
    }

    /// Bytes taken by a row of `n` elements, or `None` if `n` is not a multiple of the
    /// block size (or the size overflows).
    pub fn row_bytes(self, n: usize) -> Option<usize> {
        if !n.is_multiple_of(self.block_size()) {
            return None;
        }
        (n / self.block_size()).checked_mul(self.type_size())
    }

    /// The name ggml uses for this type, e.g. `"Q4_K"`.
    pub fn name(self) -> &'static str {
        use GgmlType::*;
        match self {
            F32 => "F32",
            F16 => "F16",
            Q4_0 => "Q4_0",
            Q4_1 => "Q4_1",
            Q5_0 => "Q5_0",
            Q5_1 => "Q5_1",
            Q8_0 => "Q8_0",
            Q8_1 => "Q8_1",
            Q2_K => "Q2_K",
            Q3_K => "Q3_K",
            Q4_K => "Q4_K",
            Q5_K => "Q5_K",
            Q6_K => "Q6_K",
            Q8_K => "Q8_K",
            BF16 => "BF16",
        }
    }
}

impl std::fmt::Display for GgmlType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn from_u32_inverts_the_discriminant() {
        for t in GgmlType::ALL {
            assert_eq!(GgmlType::from_u32(t as u32), Some(t));
        }
        assert_eq!(GgmlType::from_u32(4), None); // removed Q4_2
        assert_eq!(GgmlType::from_u32(16), None); // IQ2_XXS, unsupported
    }

    #[test]
    fn block_sizes_match_the_ggml_layouts() {
        let expect = [
            (GgmlType::Q4_0, 18),
            (GgmlType::Q8_0, 34),
            (GgmlType::Q5_0, 22),
            (GgmlType::Q2_K, 84),
            (GgmlType::Q3_K, 110),
            (GgmlType::Q4_K, 144),
            (GgmlType::Q5_K, 176),
            (GgmlType::Q6_K, 210),
            (GgmlType::Q8_K, 292),
        ];
        for (t, size) in expect {
            assert_eq!(t.type_size(), size, "{t}");
        }
    }

    #[test]
    fn row_bytes_rejects_partial_blocks() {
        assert_eq!(GgmlType::Q4_K.row_bytes(512), Some(288));
        assert_eq!(GgmlType::Q4_K.row_bytes(100), None);
        assert_eq!(GgmlType::F32.row_bytes(3), Some(12));
        assert_eq!(GgmlType::F32.row_bytes(usize::MAX), None);
    }
}
