//! Shared fixtures: a valid sample file covering every value type, and a raw byte builder
//! for headers the writer refuses to produce.
#![allow(dead_code)] // each test binary uses a different subset

use gguf::{Array, GgmlType, GgufWriter, Value};

/// Every metadata value type, including nested and empty arrays.
pub fn all_values() -> Vec<(&'static str, Value)> {
    vec![
        ("t.u8", Value::U8(200)),
        ("t.i8", Value::I8(-100)),
        ("t.u16", Value::U16(60_000)),
        ("t.i16", Value::I16(-30_000)),
        ("t.u32", Value::U32(4_000_000_000)),
        ("t.i32", Value::I32(-2_000_000_000)),
        ("t.u64", Value::U64(u64::MAX - 1)),
        ("t.i64", Value::I64(i64::MIN + 1)),
        ("t.f32", Value::F32(1e-6)),
        ("t.f64", Value::F64(-2.5e300)),
        ("t.bool", Value::Bool(true)),
        ("t.string", Value::from("héllo ▁world")),
        ("t.empty_string", Value::from("")),
        ("a.u8", vec![1u8, 2, 255].into()),
        ("a.i8", vec![-1i8, 0, 127].into()),
        ("a.u16", vec![7u16, 65_535].into()),
        ("a.i16", vec![-7i16, 300].into()),
        ("a.u32", vec![1u32, 2, 3].into()),
        ("a.i32", vec![-1i32, i32::MAX].into()),
        ("a.u64", vec![u64::MAX].into()),
        ("a.i64", vec![i64::MIN, 0].into()),
        ("a.f32", vec![0.5f32, -0.0, f32::INFINITY].into()),
        ("a.f64", vec![1.25f64].into()),
        ("a.bool", vec![true, false, true].into()),
        (
            "a.string",
            vec!["<pad>".to_owned(), String::new(), "▁the".to_owned()].into(),
        ),
        ("a.empty", Value::Array(Array::U32(vec![]))),
        (
            "a.nested",
            Value::Array(Array::Array(vec![
                Array::I32(vec![1, 2]),
                Array::String(vec!["x".into()]),
                Array::Array(vec![Array::Bool(vec![false])]),
            ])),
        ),
    ]
}

/// Deterministic filler bytes for tensor data.
pub fn bytes(n: usize, seed: u8) -> Vec<u8> {
    (0..n)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

/// A valid file with all value types and tensors of several types (sizes deliberately not
/// multiples of the alignment, so padding is exercised).
pub fn sample_writer() -> GgufWriter {
    let mut w = GgufWriter::new();
    w.add_metadata("general.architecture", "test");
    for (k, v) in all_values() {
        w.add_metadata(k, v);
    }
    w.add_tensor("norm", &[3], GgmlType::F32, bytes(12, 1));
    w.add_tensor("q8", &[64, 2], GgmlType::Q8_0, bytes(2 * 2 * 34, 2));
    w.add_tensor("q4k", &[256, 3], GgmlType::Q4_K, bytes(3 * 144, 3));
    w.add_tensor("q6k", &[512], GgmlType::Q6_K, bytes(2 * 210, 4));
    w.add_tensor("q5_0", &[32, 1, 2, 1], GgmlType::Q5_0, bytes(2 * 22, 5));
    w.add_tensor("half", &[5, 1], GgmlType::F16, bytes(10, 6));
    w
}

/// Hand-assembles GGUF bytes, field by field.
#[derive(Default)]
pub struct Raw(pub Vec<u8>);

impl Raw {
    /// Magic, version and the two counts.
    pub fn header(version: u32, n_tensors: u64, n_kv: u64) -> Self {
        let mut r = Raw(b"GGUF".to_vec());
        r.u32(version).u64(n_tensors).u64(n_kv);
        r
    }
    pub fn u32(&mut self, v: u32) -> &mut Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    pub fn u64(&mut self, v: u64) -> &mut Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    pub fn str(&mut self, s: &str) -> &mut Self {
        self.u64(s.len() as u64);
        self.0.extend_from_slice(s.as_bytes());
        self
    }
    /// A metadata entry holding a u32 (type code 4).
    pub fn kv_u32(&mut self, key: &str, v: u32) -> &mut Self {
        self.str(key).u32(4).u32(v)
    }
    /// A tensor info record with a raw type number.
    pub fn tensor(&mut self, name: &str, dims: &[u64], ty: u32, offset: u64) -> &mut Self {
        self.str(name).u32(dims.len() as u32);
        for &d in dims {
            self.u64(d);
        }
        self.u32(ty).u64(offset)
    }
    /// Pads to a multiple of 32, then appends `n` data bytes.
    pub fn data(&mut self, n: usize) -> &mut Self {
        self.0.resize(self.0.len().next_multiple_of(32) + n, 0);
        self
    }
    pub fn bytes(&self) -> Vec<u8> {
        self.0.clone()
    }
}
