//! Dequantization of the MXFP4, IQ4_NL, IQ4_XS, Q2_K and Q3_K block formats against gguf-py's
//! `gguf.quants.dequantize`, bit for bit, on the seeded random blocks of
//! `tests/goldens/block_formats.json` (made by `scripts/oracle/block_format_goldens.py`).

use kernels::{dequantize_row, Format, GgmlType};

const FIXTURE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/goldens/block_formats.json"
);

fn unhex(s: &str) -> Vec<u8> {
    assert!(s.len().is_multiple_of(2), "odd hex length");
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).expect("hex digit"))
        .collect()
}

fn fixture() -> serde_json::Value {
    let text = std::fs::read_to_string(FIXTURE).expect("the golden fixture is committed");
    serde_json::from_str(&text).expect("the golden fixture is JSON")
}

#[test]
fn dequantization_equals_gguf_py_bit_for_bit() {
    let doc = fixture();
    let types = doc["types"].as_object().expect("a `types` object");
    let mut seen = Vec::new();
    for (name, t) in types {
        let id = t["ggml_type"].as_u64().expect("ggml_type") as u32;
        let ty = GgmlType::from_u32(id).expect("a known type tag");
        assert_eq!(ty.name(), name, "tag {id}");
        let format = Format::from_ggml(ty).expect("supported by the kernels");
        let elems = t["block_elements"].as_u64().expect("block_elements") as usize;
        let nblocks = t["blocks"].as_u64().expect("blocks") as usize;
        assert_eq!(format.block_size(), elems, "{name}");
        assert_eq!(
            format.block_bytes(),
            t["block_bytes"].as_u64().expect("block_bytes") as usize,
            "{name}"
        );
        let raw = unhex(t["blocks_hex"].as_str().expect("blocks_hex"));
        let want: Vec<u32> = unhex(t["f32_le_hex"].as_str().expect("f32_le_hex"))
            .chunks_exact(4)
            .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect();
        assert_eq!(raw.len(), nblocks * format.block_bytes(), "{name}");
        assert_eq!(want.len(), nblocks * elems, "{name}");
        // The whole run as one row, then block by block (a row of one block).
        let mut got = vec![f32::NAN; want.len()];
        dequantize_row(ty, &raw, &mut got).expect("valid row");
        for (k, (g, w)) in got.iter().zip(&want).enumerate() {
            assert_eq!(
                g.to_bits(),
                *w,
                "{name} element {k}: {g} vs gguf-py {}",
                f32::from_bits(*w)
            );
        }
        for (b, src) in raw.chunks_exact(format.block_bytes()).enumerate() {
            let mut one = vec![f32::NAN; elems];
            dequantize_row(ty, src, &mut one).expect("valid block");
            let bits: Vec<u32> = one.iter().map(|v| v.to_bits()).collect();
            assert_eq!(bits, want[b * elems..(b + 1) * elems], "{name} block {b}");
        }
        seen.push(ty);
    }
    for ty in [
        GgmlType::MXFP4,
        GgmlType::IQ4_NL,
        GgmlType::IQ4_XS,
        GgmlType::Q2_K,
        GgmlType::Q3_K,
    ] {
        assert!(seen.contains(&ty), "{ty:?} missing from the fixture");
    }
}
