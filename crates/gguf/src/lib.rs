//! GGUF model files: a validating header parser, zero-copy tensor views over an mmap, a
//! writer for tests, and a streaming writer for files too large to hold in memory.
//!
//! Design: [`parse`] is a pure function over a byte slice that checks everything up front
//! (see its module for the hostile-input rules). [`GgufFile::open`] maps the file and runs
//! the parser over the mapping, so afterwards every [`TensorView`] is a plain in-bounds slice
//! of the map: no copies, no further checks. Tensor data is aligned to the file's alignment
//! (32 bytes by default) both in the file and in memory, because the map is page-aligned.
//!
//! Only little-endian GGUF v2 and v3 are read; v1 is refused with a clear message.

mod error;
mod parse;
mod stream;
mod types;
mod value;
mod writer;

use std::collections::HashMap;
use std::fs::File;
use std::path::{Path, PathBuf};

pub use error::{GgufError, ParseError, ParseErrorKind};
pub use parse::{parse, Parsed};
pub use stream::{GgufStreamWriter, StreamTensor};
pub use types::GgmlType;
pub use value::{Array, Metadata, Value};
pub use writer::GgufWriter;

/// Description of one tensor from the header.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TensorInfo {
    pub name: String,
    /// Shape in ggml order: `dims[0]` is the contiguous (innermost) dimension.
    pub dims: Vec<u64>,
    pub ggml_type: GgmlType,
    /// Offset of the data relative to the start of the data section.
    pub offset: u64,
    /// Size of the data in bytes.
    pub n_bytes: usize,
}

impl TensorInfo {
    /// Total number of elements.
    pub fn n_elements(&self) -> u64 {
        // The parser checked that this product fits in an i64.
        self.dims.iter().product()
    }
}

/// A tensor's description and its bytes, borrowed from the mapped file.
#[derive(Clone, Copy, Debug)]
pub struct TensorView<'a> {
    pub info: &'a TensorInfo,
    pub data: &'a [u8],
}

impl TensorView<'_> {
    pub fn name(&self) -> &str {
        &self.info.name
    }

    pub fn dims(&self) -> &[u64] {
        &self.info.dims
    }

    pub fn ggml_type(&self) -> GgmlType {
        self.info.ggml_type
    }
}

/// An open GGUF file. Owns the memory map that all tensor views borrow from.
pub struct GgufFile {
    path: PathBuf,
    map: memmap2::Mmap,
    parsed: Parsed,
    by_name: HashMap<String, usize>,
}

impl std::fmt::Debug for GgufFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GgufFile")
            .field("path", &self.path)
            .field("version", &self.parsed.version)
            .field("n_metadata", &self.parsed.metadata.len())
            .field("n_tensors", &self.parsed.tensors.len())
            .finish()
    }
}

impl GgufFile {
    /// Maps and validates the file at `path`.
    pub fn open(path: impl AsRef<Path>) -> Result<GgufFile, GgufError> {
        let path = path.as_ref().to_path_buf();
        let io_err = |source| GgufError::Io {
            path: path.clone(),
            source,
        };
        let file = File::open(&path).map_err(io_err)?;
        // Mapping a directory fails with a baffling "No such device"; say what is wrong.
        if !file.metadata().map_err(io_err)?.is_file() {
            let source =
                std::io::Error::new(std::io::ErrorKind::InvalidInput, "not a regular file");
            return Err(GgufError::Io { path, source });
        }
        // SAFETY: the map is read-only. Like every mmap-based model loader we rely on the
        // file not being truncated or rewritten while it is open; model files are immutable
        // artefacts, and the alternative (reading ~GBs into memory) defeats the purpose.
        let map = unsafe { memmap2::Mmap::map(&file) }.map_err(io_err)?;
        let mut parsed = parse(&map).map_err(|source| GgufError::Parse {
            path: path.clone(),
            source,
        })?;
        parsed.metadata.set_path(path.clone());
        let by_name = parsed
            .tensors
            .iter()
            .enumerate()
            .map(|(i, t)| (t.name.clone(), i))
            .collect();
        Ok(GgufFile {
            path,
            map,
            parsed,
            by_name,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Drops the pages under `data` (a view into this file, e.g. a tensor whose bytes were copied
    /// elsewhere) from the process's resident memory; a later read maps them in again from the
    /// file. Returns whether the advice was applied (false if `data` is not part of this map).
    pub fn release_pages(&self, data: &[u8]) -> bool {
        let base = self.map.as_ptr() as usize;
        let start = data.as_ptr() as usize;
        if data.is_empty() || start < base || start + data.len() > base + self.map.len() {
            return false;
        }
        #[cfg(unix)]
        {
            // SAFETY: the map is read-only and backed by the file, so MADV_DONTNEED only discards
            // clean pages that the next access re-reads from the same file: every live view keeps
            // seeing the same bytes (under the immutable-file assumption `open` already makes).
            unsafe {
                self.map
                    .unchecked_advise_range(
                        memmap2::UncheckedAdvice::DontNeed,
                        start - base,
                        data.len(),
                    )
                    .is_ok()
            }
        }
        #[cfg(not(unix))]
        false
    }

    pub fn version(&self) -> u32 {
        self.parsed.version
    }

    pub fn metadata(&self) -> &Metadata {
        &self.parsed.metadata
    }

    /// Tensor descriptions in file order.
    pub fn tensors(&self) -> &[TensorInfo] {
        &self.parsed.tensors
    }

    /// Alignment of the tensor data.
    pub fn alignment(&self) -> usize {
        self.parsed.alignment
    }

    /// Absolute file offset of the data section.
    pub fn data_offset(&self) -> usize {
        self.parsed.data_offset
    }

    pub fn tensor(&self, name: &str) -> Option<TensorView<'_>> {
        let info = &self.parsed.tensors[*self.by_name.get(name)?];
        // The parser checked that this range lies inside the file, and offsets fit in usize
        // because they are bounded by the mapped length.
        let start = self.parsed.data_offset + info.offset as usize;
        Some(TensorView {
            info,
            data: &self.map[start..start + info.n_bytes],
        })
    }

    /// Like [`GgufFile::tensor`], but a missing tensor is an error naming file and tensor.
    pub fn require_tensor(&self, name: &str) -> Result<TensorView<'_>, GgufError> {
        self.tensor(name).ok_or_else(|| GgufError::MissingTensor {
            path: self.path.clone(),
            name: name.to_owned(),
        })
    }
}

#[cfg(test)]
mod tests {
    /// Servers share one open model across worker threads.
    #[test]
    fn open_files_can_be_shared_across_threads() {
        fn assert_send_sync<T: Send + Sync>() {}
        assert_send_sync::<super::GgufFile>();
        assert_send_sync::<super::TensorView<'static>>();
    }
}
