//! ggml tensor element types and their block geometry.
//!
//! Every ggml type stores elements in fixed-size blocks: `block_size` elements packed into
//! `type_size` bytes. A row of `n` elements is only representable when `n` is a multiple of
//! the block size, which is why [`GgmlType::row_bytes`] returns an `Option`.

/// Defines [`GgmlType`] from one table row per type: file-format number, elements per
/// block and bytes per block. One table keeps the numbering, names and sizes in step.
macro_rules! ggml_types {
    ($($name:ident = $id:literal, $block:expr, $bytes:expr;)*) => {
        /// A ggml tensor element type, numbered as in the GGUF file format.
        #[allow(non_camel_case_types)]
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub enum GgmlType { $($name = $id,)* }

        impl GgmlType {
            /// All supported types, in file-format order.
            pub const ALL: &'static [GgmlType] = &[$(Self::$name,)*];

            /// The type with file-format number `v`, or `None` for unknown or unsupported
            /// numbers (including most of the IQ family, which we do not read).
            pub fn from_u32(v: u32) -> Option<Self> {
                match v { $($id => Some(Self::$name),)* _ => None }
            }

            /// Number of elements in one block.
            pub fn block_size(self) -> usize {
                match self { $(Self::$name => $block,)* }
            }

            /// Number of bytes in one block.
            pub fn type_size(self) -> usize {
                match self { $(Self::$name => $bytes,)* }
            }

            /// The name ggml uses for this type, e.g. `"Q4_K"`.
            pub fn name(self) -> &'static str {
                match self { $(Self::$name => stringify!($name),)* }
            }
        }
    };
}

/// Elements per super-block of the k-quant family.
const QK_K: usize = 256;

// Block layouts (f16 unless noted): scale `d`, min/offset `m`, packed quants `qs`.
ggml_types! {
    F32 = 0, 1, 4;
    F16 = 1, 1, 2;
    Q4_0 = 2, 32, 2 + 16;              // d + 32 nibbles
    Q4_1 = 3, 32, 2 + 2 + 16;          // d + m + 32 nibbles
    Q5_0 = 6, 32, 2 + 4 + 16;          // d + fifth bits + nibbles
    Q5_1 = 7, 32, 2 + 2 + 4 + 16;      // d + m + fifth bits + nibbles
    Q8_0 = 8, 32, 2 + 32;              // d + 32 bytes
    Q8_1 = 9, 32, 2 + 2 + 32;          // d + sum + 32 bytes
    Q2_K = 10, QK_K, 16 + 64 + 2 + 2;  // scales + 2-bit quants + d + dmin
    Q3_K = 11, QK_K, 32 + 64 + 12 + 2; // high-bit mask + quants + scales + d
    Q4_K = 12, QK_K, 2 + 2 + 12 + 128; // d + dmin + 6-bit scales + nibbles
    Q5_K = 13, QK_K, 2 + 2 + 12 + 32 + 128;
    Q6_K = 14, QK_K, 128 + 64 + 16 + 2; // low bits + high bits + scales + d
    Q8_K = 15, QK_K, 4 + QK_K + 2 * QK_K / 16; // f32 d + quants + i16 block sums
    IQ4_NL = 20, 32, 2 + 16;           // d + 32 nibbles indexing a 16-value table
    IQ4_XS = 23, QK_K, 2 + 2 + QK_K / 64 + QK_K / 2; // d + high + low 6-bit scales + nibbles
    BF16 = 30, 1, 2;
    MXFP4 = 39, 32, 1 + 16;            // E8M0 exponent + 32 E2M1 nibbles
}

impl GgmlType {
    /// Bytes taken by a row of `n` elements, or `None` if `n` is not a multiple of the
    /// block size (or the size overflows).
    pub fn row_bytes(self, n: usize) -> Option<usize> {
        if !n.is_multiple_of(self.block_size()) {
            return None;
        }
        (n / self.block_size()).checked_mul(self.type_size())
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
        for &t in GgmlType::ALL {
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
            (GgmlType::IQ4_NL, 18),
            (GgmlType::IQ4_XS, 136),
            (GgmlType::MXFP4, 17),
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
