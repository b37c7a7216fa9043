//! A GGUF writer that streams tensor data: the header (metadata and tensor infos) is written
//! first, then each tensor's bytes come from a caller's callback straight into the output, so a
//! file of many gigabytes is written with only the caller's buffers in memory.
//!
//! The bytes are exactly those of [`crate::GgufWriter`] given the same metadata and tensors: the
//! same header, each tensor starting at the next multiple of the alignment (zero padding), no
//! padding after the last one. Unlike `GgufWriter`, every tensor's size is derived from its dims
//! and type, and a callback that writes a different number of bytes is an error.

use std::io::{self, Write};

use crate::writer::{alignment, header, HeaderTensor};
use crate::{GgmlType, Metadata};

/// One tensor of a streamed file: its name, dims in ggml order (`dims[0]` innermost) and type.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StreamTensor {
    pub name: String,
    pub dims: Vec<u64>,
    pub ty: GgmlType,
}

impl StreamTensor {
    pub fn new(name: impl Into<String>, dims: &[u64], ty: GgmlType) -> StreamTensor {
        StreamTensor {
            name: name.into(),
            dims: dims.to_vec(),
            ty,
        }
    }

    /// Bytes of the tensor's data, or `None` when `dims[0]` is not a whole number of blocks
    /// or the size overflows.
    pub fn n_bytes(&self) -> Option<usize> {
        let (&inner, outer) = self.dims.split_first()?;
        let row = self.ty.row_bytes(usize::try_from(inner).ok()?)?;
        outer
            .iter()
            .try_fold(row, |acc, &d| acc.checked_mul(usize::try_from(d).ok()?))
    }
}

/// Writes a GGUF file whose tensor data is produced one tensor at a time, in the order given to
/// [`GgufStreamWriter::new`].
pub struct GgufStreamWriter<W: Write> {
    out: W,
    align: usize,
    tensors: Vec<(StreamTensor, usize)>,
    next: usize,
    /// Bytes written so far (header, padding and data).
    pos: usize,
}

fn invalid(msg: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, msg)
}

impl<W: Write> GgufStreamWriter<W> {
    /// Writes the header of a version-3 file with `metadata` and `tensors` to `out`.
    pub fn new(
        out: W,
        metadata: &Metadata,
        tensors: Vec<StreamTensor>,
    ) -> io::Result<GgufStreamWriter<W>> {
        let sized = tensors
            .into_iter()
            .map(|t| match t.n_bytes() {
                Some(n) => Ok((t, n)),
                None => Err(invalid(format!(
                    "tensor {}: dims {:?} do not fit type {}",
                    t.name, t.dims, t.ty
                ))),
            })
            .collect::<io::Result<Vec<_>>>()?;
        let align = alignment(metadata);
        let infos = sized.iter().map(|(t, n)| HeaderTensor {
            name: &t.name,
            dims: &t.dims,
            ty: t.ty,
            n_bytes: *n,
        });
        let head = header(3, metadata, infos, align);
        let mut w = GgufStreamWriter {
            out,
            align,
            tensors: sized,
            next: 0,
            pos: 0,
        };
        w.out.write_all(&head)?;
        w.pos = head.len();
        Ok(w)
    }

    /// The tensors still to write, the next one first.
    pub fn remaining(&self) -> &[(StreamTensor, usize)] {
        &self.tensors[self.next..]
    }

    /// Writes the next tensor's data: pads to the alignment, then calls `fill` with the output,
    /// which must write exactly the tensor's size in bytes (passed as its second argument).
    pub fn write_tensor(
        &mut self,
        fill: impl FnOnce(&mut dyn Write, usize) -> io::Result<()>,
    ) -> io::Result<()> {
        let Some((t, n)) = self.tensors.get(self.next) else {
            return Err(invalid("every tensor is already written".into()));
        };
        let (name, n) = (t.name.clone(), *n);
        let pad = self.pos.next_multiple_of(self.align) - self.pos;
        self.out.write_all(&vec![0u8; pad])?;
        let mut counted = Counted {
            inner: &mut self.out,
            n: 0,
        };
        fill(&mut counted, n)?;
        let written = counted.n;
        if written != n {
            return Err(invalid(format!(
                "tensor {name}: {written} bytes written, its dims and type take {n}"
            )));
        }
        self.pos += pad + n;
        self.next += 1;
        Ok(())
    }

    /// Checks that every tensor was written, flushes, and returns the output.
    pub fn finish(mut self) -> io::Result<W> {
        if let Some((t, _)) = self.tensors.get(self.next) {
            return Err(invalid(format!("tensor {} was never written", t.name)));
        }
        self.out.flush()?;
        Ok(self.out)
    }
}

/// Counts the bytes that go through it.
struct Counted<'a, W: Write> {
    inner: &'a mut W,
    n: usize,
}

impl<W: Write> Write for Counted<'_, W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let k = self.inner.write(buf)?;
        self.n += k;
        Ok(k)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::GgufWriter;

    /// A small model's worth of tensors of several types and sizes (some not multiples of the
    /// alignment), with their bytes.
    fn tensors() -> Vec<(StreamTensor, Vec<u8>)> {
        let specs = [
            ("token_embd.weight", vec![64u64, 10], GgmlType::Q8_0),
            ("blk.0.attn_norm.weight", vec![7], GgmlType::F32),
            (
                "blk.0.ffn_down_exps.weight",
                vec![256, 3, 2],
                GgmlType::Q4_K,
            ),
            ("blk.0.ffn_up_exps.weight", vec![256, 2, 2], GgmlType::Q6_K),
            (
                "blk.0.ffn_gate_exps.weight",
                vec![32, 5, 2],
                GgmlType::MXFP4,
            ),
            ("output.weight", vec![3, 5], GgmlType::F16),
        ];
        let mut x = 1u8;
        specs
            .into_iter()
            .map(|(name, dims, ty)| {
                let t = StreamTensor::new(name, &dims, ty);
                let n = t.n_bytes().expect("whole blocks");
                let bytes = (0..n)
                    .map(|_| {
                        x = x.wrapping_mul(31).wrapping_add(7);
                        x
                    })
                    .collect();
                (t, bytes)
            })
            .collect()
    }

    fn metadata(alignment: Option<u32>) -> Metadata {
        let mut md = Metadata::new();
        md.insert("general.architecture", "llama".into());
        let tokens = crate::Array::String(vec!["a".into(), "b".into()]);
        md.insert("tokenizer.ggml.tokens", tokens.into());
        if let Some(a) = alignment {
            md.insert("general.alignment", a.into());
        }
        md
    }

    fn streamed(md: &Metadata, ts: &[(StreamTensor, Vec<u8>)]) -> Vec<u8> {
        let specs = ts.iter().map(|(t, _)| t.clone()).collect();
        let mut w = GgufStreamWriter::new(Vec::new(), md, specs).expect("header");
        for (_, bytes) in ts {
            // In pieces, as a generator writes.
            w.write_tensor(|out, n| {
                assert_eq!(n, bytes.len());
                bytes.chunks(5).try_for_each(|c| out.write_all(c))
            })
            .expect("tensor");
        }
        w.finish().expect("finish")
    }

    #[test]
    fn streamed_file_is_byte_identical_to_the_in_memory_writer() {
        for align in [None, Some(64), Some(1)] {
            let md = metadata(align);
            let ts = tensors();
            let mut mem = GgufWriter::new();
            for (k, v) in md.iter() {
                mem.add_metadata(k, v.clone());
            }
            for (t, bytes) in &ts {
                mem.add_tensor(t.name.clone(), &t.dims, t.ty, bytes.clone());
            }
            let expected = mem.write_to_vec();
            assert_eq!(streamed(&md, &ts), expected, "alignment {align:?}");
            let parsed = crate::parse(&expected).expect("parses");
            assert_eq!(parsed.tensors.len(), ts.len());
        }
    }

    #[test]
    fn wrong_sizes_and_missing_tensors_are_errors() {
        let md = metadata(None);
        let ts = tensors();
        let specs: Vec<_> = ts.iter().map(|(t, _)| t.clone()).collect();
        let mut w = GgufStreamWriter::new(Vec::new(), &md, specs.clone()).expect("header");
        let short = w.write_tensor(|out, n| out.write_all(&vec![0; n - 1]));
        assert!(short.is_err());

        let mut w = GgufStreamWriter::new(Vec::new(), &md, specs.clone()).expect("header");
        w.write_tensor(|out, n| out.write_all(&vec![0; n]))
            .expect("first");
        assert_eq!(w.remaining().len(), specs.len() - 1);
        assert!(w.finish().is_err());

        let bad = vec![StreamTensor::new("x", &[100], GgmlType::Q4_K)];
        assert!(GgufStreamWriter::new(Vec::new(), &md, bad).is_err());
    }
}
