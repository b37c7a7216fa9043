//! Error types.
//!
//! [`ParseError`] comes from the pure byte-slice parser and knows only a byte offset, a
//! context (which key or tensor was being read) and what went wrong. [`GgufError`] is the
//! file-level error: every variant that concerns a file names its path in `Display`, so a
//! message printed at the edge of the program is actionable on its own.

use std::fmt;
use std::path::{Path, PathBuf};

use crate::GgmlType;

/// A header parse failure: where (byte offset and context) and what.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("at byte {offset}{}: {kind}", Context(.context))]
pub struct ParseError {
    /// Byte offset in the file where the offending item starts.
    pub offset: usize,
    /// What was being read, e.g. "metadata key `general.name`"; empty at top level.
    pub context: String,
    /// What went wrong.
    pub kind: ParseErrorKind,
}

struct Context<'a>(&'a str);

impl fmt::Display for Context<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.is_empty() {
            Ok(())
        } else {
            write!(f, " ({})", self.0)
        }
    }
}

/// The specific problem behind a [`ParseError`].
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ParseErrorKind {
    #[error("not a GGUF file (magic {found:02x?}, expected \"GGUF\")")]
    BadMagic { found: Vec<u8> },
    #[error("GGUF version 1 is not supported (only v2 and v3); re-convert the model with a current llama.cpp")]
    VersionOneUnsupported,
    #[error("big-endian GGUF files are not supported")]
    BigEndian,
    #[error("unsupported GGUF version {0} (only v2 and v3 are supported)")]
    UnsupportedVersion(u32),
    #[error("file truncated while reading {what}: need {needed} bytes, {available} left")]
    Truncated {
        what: &'static str,
        needed: u64,
        available: u64,
    },
    #[error("{what} of {len} does not fit in the {remaining} bytes left in the file")]
    LengthBeyondFile {
        what: &'static str,
        len: u64,
        remaining: u64,
    },
    #[error("string is not valid UTF-8")]
    InvalidUtf8,
    #[error("invalid boolean byte {0} (expected 0 or 1)")]
    InvalidBool(u8),
    #[error("unknown metadata value type {0}")]
    UnknownValueType(u32),
    #[error("arrays nested more than {0} deep")]
    NestingTooDeep(usize),
    #[error("duplicate metadata key `{0}`")]
    DuplicateKey(String),
    #[error("general.alignment must be a power-of-two u32, found {0}")]
    BadAlignment(String),
    #[error("duplicate tensor name `{0}`")]
    DuplicateTensor(String),
    #[error("unknown or unsupported tensor type {type_id} for tensor `{tensor}`")]
    UnknownTensorType { tensor: String, type_id: u32 },
    #[error("tensor `{tensor}` has {n_dims} dimensions (expected 1 to 4)")]
    BadDimCount { tensor: String, n_dims: u32 },
    #[error("tensor `{tensor}` has a zero dimension in {dims:?}")]
    ZeroDim { tensor: String, dims: Vec<u64> },
    #[error("tensor `{tensor}` size overflows for dims {dims:?}")]
    SizeOverflow { tensor: String, dims: Vec<u64> },
    #[error(
        "tensor `{tensor}`: row of {ne0} elements is not a multiple of the {ty} block size {block}"
    )]
    PartialBlock {
        tensor: String,
        ty: GgmlType,
        ne0: u64,
        block: usize,
    },
    #[error("tensor `{tensor}` at data offset {offset} is not aligned to {alignment}")]
    MisalignedTensor {
        tensor: String,
        offset: u64,
        alignment: usize,
    },
    #[error("tensor `{tensor}` data (bytes {start}..{end}) lies beyond the end of the file ({file_len} bytes); is the file truncated?")]
    TensorOutOfRange {
        tensor: String,
        start: u64,
        end: u64,
        file_len: u64,
    },
}

/// A file-level error. `Display` always names the file (when known) and the problem.
#[derive(Debug, thiserror::Error)]
pub enum GgufError {
    #[error("{}: cannot read GGUF file: {source}", .path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{}: invalid GGUF file: {source}", .path.display())]
    Parse { path: PathBuf, source: ParseError },
    #[error("{}missing metadata key `{key}`", PathPrefix(.path))]
    MissingKey { path: Option<PathBuf>, key: String },
    #[error("{}metadata key `{key}` has type {found}, expected {expected}", PathPrefix(.path))]
    WrongType {
        path: Option<PathBuf>,
        key: String,
        expected: &'static str,
        found: String,
    },
    #[error("{}: missing tensor `{name}`", .path.display())]
    MissingTensor { path: PathBuf, name: String },
}

/// Renders `"<path>: "` for a known path and nothing otherwise.
struct PathPrefix<'a>(&'a Option<PathBuf>);

impl fmt::Display for PathPrefix<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Some(p) => write!(f, "{}: ", p.display()),
            None => Ok(()),
        }
    }
}

impl GgufError {
    /// The file this error is about, if known.
    pub fn path(&self) -> Option<&Path> {
        match self {
            Self::Io { path, .. } | Self::Parse { path, .. } | Self::MissingTensor { path, .. } => {
                Some(path)
            }
            Self::MissingKey { path, .. } | Self::WrongType { path, .. } => path.as_deref(),
        }
    }
}
