//! A GGUF v3 (or v2) writer, used by tests to build tiny model files.
//!
//! It writes exactly what it is given: tensor bytes are not checked against their dims, so
//! tests can also produce inconsistent files on purpose. Tensor data is laid out in insertion
//! order, each tensor starting at the next multiple of the alignment, which is
//! `general.alignment` when that is set to a power-of-two u32-sized integer, 32 otherwise.
//! [`crate::GgufStreamWriter`] writes the same bytes without holding the tensor data.

use std::io;
use std::path::Path;

use crate::parse::{code, ALIGNMENT_KEY, DEFAULT_ALIGNMENT, MAGIC};
use crate::{Array, GgmlType, Metadata, Value};

/// Builder for a GGUF file in memory.
#[derive(Clone, Debug)]
pub struct GgufWriter {
    version: u32,
    metadata: Metadata,
    tensors: Vec<PendingTensor>,
}

#[derive(Clone, Debug)]
struct PendingTensor {
    name: String,
    dims: Vec<u64>,
    ty: GgmlType,
    bytes: Vec<u8>,
}

impl Default for GgufWriter {
    fn default() -> Self {
        Self::new()
    }
}

impl GgufWriter {
    /// An empty version-3 file.
    pub fn new() -> Self {
        Self {
            version: 3,
            metadata: Metadata::new(),
            tensors: Vec::new(),
        }
    }

    /// Sets the version number written to the header (v2 and v3 share one layout).
    pub fn set_version(&mut self, version: u32) -> &mut Self {
        self.version = version;
        self
    }

    /// Adds (or replaces) a metadata entry; entries are written in first-insertion order.
    pub fn add_metadata(&mut self, key: impl Into<String>, value: impl Into<Value>) -> &mut Self {
        self.metadata.insert(key, value.into());
        self
    }

    /// Removes a metadata entry (the others keep their order); whether it was there.
    pub fn remove_metadata(&mut self, key: &str) -> bool {
        let mut kept = Metadata::new();
        let mut found = false;
        for (k, v) in self.metadata.iter() {
            if k == key {
                found = true;
            } else {
                kept.insert(k, v.clone());
            }
        }
        self.metadata = kept;
        found
    }

    /// Removes every tensor named `name`; whether there was one.
    pub fn remove_tensor(&mut self, name: &str) -> bool {
        let before = self.tensors.len();
        self.tensors.retain(|t| t.name != name);
        self.tensors.len() != before
    }

    /// Adds a tensor with `dims` in ggml order (`dims[0]` innermost) and its raw bytes.
    pub fn add_tensor(
        &mut self,
        name: impl Into<String>,
        dims: &[u64],
        ty: GgmlType,
        bytes: Vec<u8>,
    ) -> &mut Self {
        let (name, dims) = (name.into(), dims.to_vec());
        self.tensors.push(PendingTensor {
            name,
            dims,
            ty,
            bytes,
        });
        self
    }

    /// Serialises the whole file.
    pub fn write_to_vec(&self) -> Vec<u8> {
        let align = alignment(&self.metadata);
        let infos = self.tensors.iter().map(|t| HeaderTensor {
            name: &t.name,
            dims: &t.dims,
            ty: t.ty,
            n_bytes: t.bytes.len(),
        });
        let mut out = header(self.version, &self.metadata, infos, align);
        for t in &self.tensors {
            out.resize(out.len().next_multiple_of(align), 0);
            out.extend_from_slice(&t.bytes);
        }
        out
    }

    /// Serialises the file and writes it to `path`.
    pub fn write_file(&self, path: impl AsRef<Path>) -> io::Result<()> {
        std::fs::write(path, self.write_to_vec())
    }
}

/// The alignment of a file with `metadata`: `general.alignment` when that is a power-of-two
/// u32-sized integer, 32 otherwise.
pub(crate) fn alignment(metadata: &Metadata) -> usize {
    match metadata.get_u32(ALIGNMENT_KEY) {
        Ok(Some(a)) if a.is_power_of_two() => a as usize,
        _ => DEFAULT_ALIGNMENT,
    }
}

/// What the header says of one tensor (its data is `n_bytes` long).
pub(crate) struct HeaderTensor<'a> {
    pub name: &'a str,
    pub dims: &'a [u64],
    pub ty: GgmlType,
    pub n_bytes: usize,
}

/// Magic, version, counts, metadata and tensor infos (each tensor's offset the previous one's
/// end rounded up to `align`), without the padding that follows them.
pub(crate) fn header<'a>(
    version: u32,
    metadata: &Metadata,
    tensors: impl ExactSizeIterator<Item = HeaderTensor<'a>>,
    align: usize,
) -> Vec<u8> {
    let mut out = Vec::new();
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&version.to_le_bytes());
    out.extend_from_slice(&(tensors.len() as u64).to_le_bytes());
    out.extend_from_slice(&(metadata.len() as u64).to_le_bytes());
    for (key, value) in metadata.iter() {
        put_str(&mut out, key);
        put_value(&mut out, value);
    }
    let mut offset = 0usize;
    for t in tensors {
        put_str(&mut out, t.name);
        out.extend_from_slice(&(t.dims.len() as u32).to_le_bytes());
        for d in t.dims {
            out.extend_from_slice(&d.to_le_bytes());
        }
        out.extend_from_slice(&(t.ty as u32).to_le_bytes());
        out.extend_from_slice(&(offset as u64).to_le_bytes());
        offset = (offset + t.n_bytes).next_multiple_of(align);
    }
    out
}

fn put_str(out: &mut Vec<u8>, s: &str) {
    out.extend_from_slice(&(s.len() as u64).to_le_bytes());
    out.extend_from_slice(s.as_bytes());
}

fn put_value(out: &mut Vec<u8>, v: &Value) {
    let (ty, payload): (u32, Vec<u8>) = match v {
        Value::U8(x) => (code::U8, x.to_le_bytes().to_vec()),
        Value::I8(x) => (code::I8, x.to_le_bytes().to_vec()),
        Value::U16(x) => (code::U16, x.to_le_bytes().to_vec()),
        Value::I16(x) => (code::I16, x.to_le_bytes().to_vec()),
        Value::U32(x) => (code::U32, x.to_le_bytes().to_vec()),
        Value::I32(x) => (code::I32, x.to_le_bytes().to_vec()),
        Value::U64(x) => (code::U64, x.to_le_bytes().to_vec()),
        Value::I64(x) => (code::I64, x.to_le_bytes().to_vec()),
        Value::F32(x) => (code::F32, x.to_le_bytes().to_vec()),
        Value::F64(x) => (code::F64, x.to_le_bytes().to_vec()),
        Value::Bool(x) => (code::BOOL, vec![u8::from(*x)]),
        Value::String(s) => {
            out.extend_from_slice(&code::STRING.to_le_bytes());
            return put_str(out, s);
        }
        Value::Array(a) => {
            out.extend_from_slice(&code::ARRAY.to_le_bytes());
            return put_array(out, a);
        }
    };
    out.extend_from_slice(&ty.to_le_bytes());
    out.extend_from_slice(&payload);
}

macro_rules! put_prims {
    ($out:expr, $code:expr, $v:expr) => {{
        $out.extend_from_slice(&$code.to_le_bytes());
        $out.extend_from_slice(&($v.len() as u64).to_le_bytes());
        for x in $v {
            $out.extend_from_slice(&x.to_le_bytes());
        }
    }};
}

/// Writes element type, count and elements (the array's own type code is already written).
fn put_array(out: &mut Vec<u8>, a: &Array) {
    match a {
        Array::U8(v) => put_prims!(out, code::U8, v),
        Array::I8(v) => put_prims!(out, code::I8, v),
        Array::U16(v) => put_prims!(out, code::U16, v),
        Array::I16(v) => put_prims!(out, code::I16, v),
        Array::U32(v) => put_prims!(out, code::U32, v),
        Array::I32(v) => put_prims!(out, code::I32, v),
        Array::U64(v) => put_prims!(out, code::U64, v),
        Array::I64(v) => put_prims!(out, code::I64, v),
        Array::F32(v) => put_prims!(out, code::F32, v),
        Array::F64(v) => put_prims!(out, code::F64, v),
        Array::Bool(v) => put_prims!(out, code::BOOL, v.iter().map(|&b| u8::from(b))),
        Array::String(v) => {
            out.extend_from_slice(&code::STRING.to_le_bytes());
            out.extend_from_slice(&(v.len() as u64).to_le_bytes());
            v.iter().for_each(|s| put_str(out, s));
        }
        Array::Array(v) => {
            out.extend_from_slice(&code::ARRAY.to_le_bytes());
            out.extend_from_slice(&(v.len() as u64).to_le_bytes());
            v.iter().for_each(|inner| put_array(out, inner));
        }
    }
}
