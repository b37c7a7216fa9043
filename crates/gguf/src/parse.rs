//! The pure GGUF header parser over a byte slice.
//!
//! Layout (little-endian, v2/v3): magic `GGUF`, u32 version, u64 tensor count, u64 metadata
//! count, the metadata entries (string key, u32 type, value), the tensor infos (string name,
//! u32 n_dims, u64 dims, u32 type, u64 offset), padding to the alignment, then the data
//! section. Strings are a u64 length plus UTF-8 bytes; arrays are a u32 element type, a u64
//! count and the elements.
//!
//! Hostile input: every count or length is checked against the bytes that remain *before*
//! anything is allocated (a count of n elements needs at least n * min_size bytes), array
//! nesting is bounded, and all size arithmetic is checked, so parsing never panics and never
//! allocates more than a small multiple of the input size. On success every tensor's data
//! range lies inside `bytes` and starts on an aligned offset.

use std::collections::HashSet;
use std::mem::size_of;

use crate::error::{ParseError, ParseErrorKind as K};
use crate::{Array, GgmlType, Metadata, TensorInfo, Value};

pub(crate) const MAGIC: &[u8; 4] = b"GGUF";
pub(crate) const DEFAULT_ALIGNMENT: usize = 32;
pub(crate) const ALIGNMENT_KEY: &str = "general.alignment";
const MAX_DIMS: u32 = 4;
const MAX_ARRAY_DEPTH: usize = 8;

/// Metadata value type codes of the GGUF format.
pub(crate) mod code {
    pub const U8: u32 = 0;
    pub const I8: u32 = 1;
    pub const U16: u32 = 2;
    pub const I16: u32 = 3;
    pub const U32: u32 = 4;
    pub const I32: u32 = 5;
    pub const F32: u32 = 6;
    pub const BOOL: u32 = 7;
    pub const STRING: u32 = 8;
    pub const ARRAY: u32 = 9;
    pub const U64: u32 = 10;
    pub const I64: u32 = 11;
    pub const F64: u32 = 12;
}

/// A parsed header: everything but the tensor data itself.
#[derive(Clone, Debug, PartialEq)]
pub struct Parsed {
    pub version: u32,
    pub metadata: Metadata,
    pub tensors: Vec<TensorInfo>,
    /// Alignment of the data section and of every tensor offset (a power of two).
    pub alignment: usize,
    /// Absolute byte offset of the data section; tensor offsets are relative to it.
    pub data_offset: usize,
}

/// Parses a whole GGUF file held in `bytes`.
pub fn parse(bytes: &[u8]) -> Result<Parsed, ParseError> {
    let mut r = Reader {
        buf: bytes,
        pos: 0,
        context: String::new(),
    };
    let version = read_preamble(&mut r)?;
    // Minimal encodings: a metadata entry is >= 13 bytes, a tensor info >= 24.
    let n_tensors = r.count(24, "tensor count")?;
    let n_kv = r.count(13, "metadata count")?;
    let (metadata, alignment) = read_metadata(&mut r, n_kv)?;
    let (tensors, starts) = read_tensor_infos(&mut r, n_tensors)?;
    r.context.clear();
    let data_offset = r
        .pos
        .checked_next_multiple_of(alignment)
        .ok_or_else(|| r.err(r.pos, K::BadAlignment(alignment.to_string())))?;
    for (t, &start) in tensors.iter().zip(&starts) {
        check_placement(&r, t, start, alignment, data_offset)?;
    }
    Ok(Parsed {
        version,
        metadata,
        tensors,
        alignment,
        data_offset,
    })
}

fn read_preamble(r: &mut Reader<'_>) -> Result<u32, ParseError> {
    let magic = r.take(4, "magic")?;
    if magic != MAGIC {
        return Err(r.err(
            0,
            K::BadMagic {
                found: magic.to_vec(),
            },
        ));
    }
    let version = r.u32("version")?;
    match version {
        2 | 3 => Ok(version),
        1 => Err(r.err(4, K::VersionOneUnsupported)),
        v if (1..=3).contains(&v.swap_bytes()) => Err(r.err(4, K::BigEndian)),
        v => Err(r.err(4, K::UnsupportedVersion(v))),
    }
}

fn read_metadata(r: &mut Reader<'_>, n_kv: usize) -> Result<(Metadata, usize), ParseError> {
    let mut metadata = Metadata::new();
    let mut alignment = DEFAULT_ALIGNMENT;
    for i in 0..n_kv {
        let start = r.pos;
        r.context = format!("metadata entry #{i}");
        let key = r.string("metadata key")?;
        r.context = format!("metadata key `{key}`");
        if metadata.contains_key(&key) {
            return Err(r.err(start, K::DuplicateKey(key)));
        }
        let ty = r.u32("value type")?;
        let value = read_value(r, ty, 0)?;
        if key == ALIGNMENT_KEY {
            alignment = match value.as_integer().and_then(|a| u32::try_from(a).ok()) {
                Some(a) if a.is_power_of_two() => a as usize,
                _ => return Err(r.err(start, K::BadAlignment(value.to_string()))),
            };
        }
        metadata.insert(key, value);
    }
    Ok((metadata, alignment))
}

/// Reads the tensor infos; returns them with the file offset where each record starts.
fn read_tensor_infos(
    r: &mut Reader<'_>,
    n: usize,
) -> Result<(Vec<TensorInfo>, Vec<usize>), ParseError> {
    let mut tensors = Vec::with_capacity(n);
    let mut starts = Vec::with_capacity(n);
    let mut seen = HashSet::with_capacity(n);
    for i in 0..n {
        let start = r.pos;
        r.context = format!("tensor info #{i}");
        let name = r.string("tensor name")?;
        r.context = format!("tensor `{name}`");
        if !seen.insert(name.clone()) {
            return Err(r.err(start, K::DuplicateTensor(name)));
        }
        let n_dims = r.u32("dimension count")?;
        if n_dims == 0 || n_dims > MAX_DIMS {
            return Err(r.err(
                start,
                K::BadDimCount {
                    tensor: name,
                    n_dims,
                },
            ));
        }
        let dims = (0..n_dims)
            .map(|_| r.u64("dimension"))
            .collect::<Result<Vec<_>, _>>()?;
        let type_pos = r.pos;
        let type_id = r.u32("tensor type")?;
        let ggml_type = GgmlType::from_u32(type_id).ok_or_else(|| {
            r.err(
                type_pos,
                K::UnknownTensorType {
                    tensor: name.clone(),
                    type_id,
                },
            )
        })?;
        let offset = r.u64("tensor offset")?;
        let n_bytes = tensor_bytes(&name, &dims, ggml_type).map_err(|k| r.err(start, k))?;
        tensors.push(TensorInfo {
            name,
            dims,
            ggml_type,
            offset,
            n_bytes,
        });
        starts.push(start);
    }
    Ok((tensors, starts))
}

/// Size in bytes of a tensor of `dims` (ggml order) and type `ty`.
fn tensor_bytes(name: &str, dims: &[u64], ty: GgmlType) -> Result<usize, K> {
    if dims.contains(&0) {
        return Err(K::ZeroDim {
            tensor: name.to_owned(),
            dims: dims.to_vec(),
        });
    }
    let overflow = || K::SizeOverflow {
        tensor: name.to_owned(),
        dims: dims.to_vec(),
    };
    // ggml counts elements in i64; anything beyond that cannot be a real tensor.
    let n_elements = dims
        .iter()
        .try_fold(1u64, |acc, &d| acc.checked_mul(d))
        .ok_or_else(overflow)?;
    if n_elements > i64::MAX as u64 {
        return Err(overflow());
    }
    let ne0 = usize::try_from(dims[0]).map_err(|_| overflow())?;
    if !ne0.is_multiple_of(ty.block_size()) {
        return Err(K::PartialBlock {
            tensor: name.to_owned(),
            ty,
            ne0: dims[0],
            block: ty.block_size(),
        });
    }
    let row = ty.row_bytes(ne0).ok_or_else(overflow)?;
    let rows = usize::try_from(n_elements / dims[0]).map_err(|_| overflow())?;
    row.checked_mul(rows).ok_or_else(overflow)
}

/// Checks that a tensor's data is aligned and lies inside the file.
fn check_placement(
    r: &Reader<'_>,
    t: &TensorInfo,
    info_start: usize,
    alignment: usize,
    data_offset: usize,
) -> Result<(), ParseError> {
    if !t.offset.is_multiple_of(alignment as u64) {
        let kind = K::MisalignedTensor {
            tensor: t.name.clone(),
            offset: t.offset,
            alignment,
        };
        return Err(r.err(info_start, kind));
    }
    let start = (data_offset as u64).checked_add(t.offset);
    let end = start.and_then(|s| s.checked_add(t.n_bytes as u64));
    match (start, end) {
        (Some(_), Some(end)) if end <= r.buf.len() as u64 => Ok(()),
        _ => Err(r.err(
            info_start,
            K::TensorOutOfRange {
                tensor: t.name.clone(),
                start: start.unwrap_or(u64::MAX),
                end: end.unwrap_or(u64::MAX),
                file_len: r.buf.len() as u64,
            },
        )),
    }
}

/// Smallest encoding of one element of a metadata type, or `None` if the type is unknown.
fn min_size(ty: u32) -> Option<usize> {
    Some(match ty {
        code::U8 | code::I8 | code::BOOL => 1,
        code::U16 | code::I16 => 2,
        code::U32 | code::I32 | code::F32 => 4,
        code::U64 | code::I64 | code::F64 | code::STRING => 8,
        code::ARRAY => 12,
        _ => return None,
    })
}

macro_rules! scalar {
    ($r:expr, $t:ty) => {
        <$t>::from_le_bytes($r.bytes::<{ size_of::<$t>() }>(stringify!($t))?)
    };
}

macro_rules! prim_vec {
    ($r:expr, $n:expr, $t:ty) => {{
        // `count` checked that n * min_size fits in the remaining bytes, so no overflow.
        let raw = $r.take($n * size_of::<$t>(), "array data")?;
        raw.chunks_exact(size_of::<$t>())
            .map(|c| <$t>::from_le_bytes(c.try_into().expect("exact chunk; this is a bug")))
            .collect()
    }};
}

fn read_value(r: &mut Reader<'_>, ty: u32, depth: usize) -> Result<Value, ParseError> {
    Ok(match ty {
        code::U8 => Value::U8(scalar!(r, u8)),
        code::I8 => Value::I8(scalar!(r, i8)),
        code::U16 => Value::U16(scalar!(r, u16)),
        code::I16 => Value::I16(scalar!(r, i16)),
        code::U32 => Value::U32(scalar!(r, u32)),
        code::I32 => Value::I32(scalar!(r, i32)),
        code::U64 => Value::U64(scalar!(r, u64)),
        code::I64 => Value::I64(scalar!(r, i64)),
        code::F32 => Value::F32(scalar!(r, f32)),
        code::F64 => Value::F64(scalar!(r, f64)),
        code::BOOL => Value::Bool(r.bool()?),
        code::STRING => Value::String(r.string("string value")?),
        code::ARRAY => Value::Array(read_array(r, depth)?),
        other => return Err(r.err(r.pos - 4, K::UnknownValueType(other))),
    })
}

fn read_array(r: &mut Reader<'_>, depth: usize) -> Result<Array, ParseError> {
    if depth >= MAX_ARRAY_DEPTH {
        return Err(r.err(r.pos, K::NestingTooDeep(MAX_ARRAY_DEPTH)));
    }
    let type_pos = r.pos;
    let ty = r.u32("array element type")?;
    let min = min_size(ty).ok_or_else(|| r.err(type_pos, K::UnknownValueType(ty)))?;
    let n = r.count(min, "array length")?;
    Ok(match ty {
        code::U8 => Array::U8(r.take(n, "array data")?.to_vec()),
        code::I8 => Array::I8(prim_vec!(r, n, i8)),
        code::U16 => Array::U16(prim_vec!(r, n, u16)),
        code::I16 => Array::I16(prim_vec!(r, n, i16)),
        code::U32 => Array::U32(prim_vec!(r, n, u32)),
        code::I32 => Array::I32(prim_vec!(r, n, i32)),
        code::U64 => Array::U64(prim_vec!(r, n, u64)),
        code::I64 => Array::I64(prim_vec!(r, n, i64)),
        code::F32 => Array::F32(prim_vec!(r, n, f32)),
        code::F64 => Array::F64(prim_vec!(r, n, f64)),
        code::BOOL => Array::Bool((0..n).map(|_| r.bool()).collect::<Result<_, _>>()?),
        code::STRING => Array::String(
            (0..n)
                .map(|_| r.string("string element"))
                .collect::<Result<_, _>>()?,
        ),
        _ => Array::Array(
            (0..n)
                .map(|_| read_array(r, depth + 1))
                .collect::<Result<_, _>>()?,
        ),
    })
}

/// A cursor over the input that produces positioned, contextual errors.
struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
    /// What is being read, copied into errors.
    context: String,
}

impl<'a> Reader<'a> {
    fn err(&self, offset: usize, kind: K) -> ParseError {
        ParseError {
            offset,
            context: self.context.clone(),
            kind,
        }
    }

    fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }

    fn take(&mut self, n: usize, what: &'static str) -> Result<&'a [u8], ParseError> {
        if n > self.remaining() {
            let kind = K::Truncated {
                what,
                needed: n as u64,
                available: self.remaining() as u64,
            };
            return Err(self.err(self.pos, kind));
        }
        let s = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }

    fn bytes<const N: usize>(&mut self, what: &'static str) -> Result<[u8; N], ParseError> {
        let s = self.take(N, what)?;
        Ok(s.try_into().expect("take returned N bytes; this is a bug"))
    }

    fn u32(&mut self, what: &'static str) -> Result<u32, ParseError> {
        self.bytes(what).map(u32::from_le_bytes)
    }

    fn u64(&mut self, what: &'static str) -> Result<u64, ParseError> {
        self.bytes(what).map(u64::from_le_bytes)
    }

    fn bool(&mut self) -> Result<bool, ParseError> {
        match self.bytes::<1>("bool")?[0] {
            0 => Ok(false),
            1 => Ok(true),
            b => Err(self.err(self.pos - 1, K::InvalidBool(b))),
        }
    }

    /// Reads a u64 count of items that each take at least `min_size` bytes, rejecting
    /// counts that the rest of the input cannot possibly hold.
    fn count(&mut self, min_size: usize, what: &'static str) -> Result<usize, ParseError> {
        let start = self.pos;
        let n = self.u64(what)?;
        let remaining = self.remaining() as u64;
        match n.checked_mul(min_size as u64) {
            Some(need) if need <= remaining => Ok(n as usize),
            _ => Err(self.err(
                start,
                K::LengthBeyondFile {
                    what,
                    len: n,
                    remaining,
                },
            )),
        }
    }

    fn string(&mut self, what: &'static str) -> Result<String, ParseError> {
        let start = self.pos;
        let n = self.count(1, what)?;
        let raw = self.take(n, what)?;
        String::from_utf8(raw.to_vec()).map_err(|_| self.err(start, K::InvalidUtf8))
    }
}
