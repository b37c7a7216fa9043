//! Errors reported by the kernels for malformed inputs (bad type tags, sizes that do not match).
//! Shape mismatches between buffers the caller allocates itself are programming errors and panic.

use crate::dtype::GgmlType;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KernelError {
    #[error("tensor type {ty:?} is not supported by the kernels")]
    UnsupportedType { ty: GgmlType },
    #[error("a row of {cols} elements is not a whole number of {ty:?} blocks of {block}")]
    RaggedRow {
        ty: GgmlType,
        cols: usize,
        block: usize,
    },
    #[error("{what}: expected {expected} bytes for {ty:?}, got {actual}")]
    SizeMismatch {
        what: &'static str,
        ty: GgmlType,
        expected: usize,
        actual: usize,
    },
    #[error("{what}: expected {expected} elements, got {actual}")]
    LengthMismatch {
        what: &'static str,
        expected: usize,
        actual: usize,
    },
}
