//! Every validation rule of the parser produces its own, descriptive error.

mod common;

use common::{bytes, sample_writer, Raw};
use gguf::{parse, GgmlType, GgufError, GgufFile, GgufWriter, ParseError, ParseErrorKind as K};

fn parse_err(bytes: &[u8]) -> ParseError {
    parse(bytes).expect_err("parse should fail")
}

#[test]
fn wrong_magic_is_rejected() {
    let mut b = sample_writer().write_to_vec();
    b[..4].copy_from_slice(b"GGML");
    let e = parse_err(&b);
    assert!(matches!(e.kind, K::BadMagic { .. }), "{e}");
    assert_eq!(e.offset, 0);
}

#[test]
fn version_one_is_refused_with_an_explanation() {
    let e = parse_err(&Raw::header(1, 0, 0).bytes());
    assert_eq!(e.kind, K::VersionOneUnsupported);
    assert!(e.to_string().contains("version 1 is not supported"), "{e}");
}

#[test]
fn unknown_and_big_endian_versions_are_refused() {
    assert_eq!(
        parse_err(&Raw::header(4, 0, 0).bytes()).kind,
        K::UnsupportedVersion(4)
    );
    let e = parse_err(&Raw::header(3u32.swap_bytes(), 0, 0).bytes());
    assert_eq!(e.kind, K::BigEndian);
}

#[test]
fn every_truncation_of_a_valid_file_is_an_error() {
    let full = sample_writer().write_to_vec();
    for len in 0..full.len() {
        let e = parse(&full[..len]).expect_err("a truncated file must not parse");
        let ok = matches!(
            e.kind,
            K::Truncated { .. } | K::LengthBeyondFile { .. } | K::TensorOutOfRange { .. }
        );
        assert!(ok, "truncated to {len}: {e}");
    }
    assert!(parse(&full).is_ok());
}

#[test]
fn string_length_beyond_the_file_is_rejected_before_allocating() {
    let mut r = Raw::header(3, 0, 1);
    r.u64(u64::MAX).u64(0).u64(0); // key length, then enough bytes for one entry
    let e = parse_err(&r.bytes());
    assert!(
        matches!(e.kind, K::LengthBeyondFile { len: u64::MAX, .. }),
        "{e}"
    );
    assert_eq!(e.offset, 24);
}

#[test]
fn array_length_beyond_the_file_is_rejected_before_allocating() {
    let mut r = Raw::header(3, 0, 1);
    r.str("tokens").u32(9).u32(8).u64(1 << 40); // array of 2^40 strings
    let e = parse_err(&r.bytes());
    assert!(
        matches!(
            e.kind,
            K::LengthBeyondFile {
                len: 1099511627776,
                ..
            }
        ),
        "{e}"
    );
    assert!(e.to_string().contains("tokens"), "{e}");
}

#[test]
fn huge_counts_are_rejected() {
    let e = parse_err(&Raw::header(3, u64::MAX, 0).bytes());
    assert!(matches!(e.kind, K::LengthBeyondFile { .. }), "{e}");
    let e = parse_err(&Raw::header(3, 0, 1 << 60).bytes());
    assert!(matches!(e.kind, K::LengthBeyondFile { .. }), "{e}");
}

#[test]
fn unknown_value_type_names_the_key() {
    let mut r = Raw::header(3, 0, 1);
    r.str("weird").u32(13).u32(0);
    let e = parse_err(&r.bytes());
    assert_eq!(e.kind, K::UnknownValueType(13));
    assert!(e.to_string().contains("weird"), "{e}");
    let mut r = Raw::header(3, 0, 1);
    r.str("weird_array").u32(9).u32(99).u64(0);
    assert_eq!(parse_err(&r.bytes()).kind, K::UnknownValueType(99));
}

#[test]
fn invalid_utf8_and_booleans_are_rejected() {
    let mut r = Raw::header(3, 0, 1);
    r.u64(2);
    r.0.extend_from_slice(&[0xff, 0xfe]);
    r.u32(7);
    assert_eq!(parse_err(&r.bytes()).kind, K::InvalidUtf8);
    let mut r = Raw::header(3, 0, 1);
    r.str("flag").u32(7);
    r.0.push(2);
    assert_eq!(parse_err(&r.bytes()).kind, K::InvalidBool(2));
}

#[test]
fn deeply_nested_arrays_are_rejected() {
    let mut r = Raw::header(3, 0, 1);
    r.str("deep").u32(9);
    for _ in 0..100 {
        r.u32(9).u64(1); // an array holding one array...
    }
    r.u32(0).u64(0);
    assert!(matches!(parse_err(&r.bytes()).kind, K::NestingTooDeep(_)));
}

#[test]
fn unknown_tensor_type_names_the_tensor_and_the_type() {
    let mut r = Raw::header(3, 1, 0);
    r.tensor("blk.0.ffn_up.weight", &[256], 16, 0).data(256);
    let e = parse_err(&r.bytes());
    let msg = e.to_string();
    assert!(
        matches!(e.kind, K::UnknownTensorType { type_id: 16, .. }),
        "{msg}"
    );
    assert!(
        msg.contains("blk.0.ffn_up.weight") && msg.contains("16"),
        "{msg}"
    );
}

#[test]
fn bad_dimension_counts_are_rejected() {
    for dims in [&[][..], &[1, 1, 1, 1, 1][..]] {
        let mut r = Raw::header(3, 1, 0);
        r.tensor("t", dims, 0, 0).data(4);
        let e = parse_err(&r.bytes());
        assert!(matches!(e.kind, K::BadDimCount { .. }), "{e}");
    }
}

#[test]
fn zero_and_overflowing_dimensions_are_rejected() {
    let mut r = Raw::header(3, 1, 0);
    r.tensor("t", &[4, 0], 0, 0).data(16);
    assert!(matches!(parse_err(&r.bytes()).kind, K::ZeroDim { .. }));
    for dims in [&[u64::MAX, 2][..], &[1 << 32, 1 << 32][..], &[1 << 62][..]] {
        let mut r = Raw::header(3, 1, 0);
        r.tensor("t", dims, 0, 0).data(16);
        let e = parse_err(&r.bytes());
        assert!(matches!(e.kind, K::SizeOverflow { .. }), "{dims:?}: {e}");
    }
}

#[test]
fn rows_that_are_not_whole_blocks_are_rejected() {
    let mut r = Raw::header(3, 1, 0);
    r.tensor("t", &[100, 2], GgmlType::Q4_K as u32, 0)
        .data(1000);
    assert!(matches!(
        parse_err(&r.bytes()).kind,
        K::PartialBlock {
            ne0: 100,
            block: 256,
            ..
        }
    ));
}

#[test]
fn tensor_data_past_the_end_of_the_file_is_rejected() {
    let mut w = GgufWriter::new();
    w.add_tensor("a", &[8], GgmlType::F32, bytes(32, 0));
    w.add_tensor("short", &[64], GgmlType::F32, bytes(100, 0)); // needs 256 bytes
    let e = parse_err(&w.write_to_vec());
    assert!(
        matches!(&e.kind, K::TensorOutOfRange { tensor, .. } if tensor == "short"),
        "{e}"
    );
    let mut r = Raw::header(3, 1, 0);
    r.tensor("far", &[4], 0, u64::MAX - 31).data(16);
    assert!(matches!(
        parse_err(&r.bytes()).kind,
        K::TensorOutOfRange { .. }
    ));
}

#[test]
fn misaligned_tensor_offsets_are_rejected() {
    let mut r = Raw::header(3, 1, 0);
    r.tensor("t", &[4], 0, 4).data(64);
    let e = parse_err(&r.bytes());
    assert!(
        matches!(
            e.kind,
            K::MisalignedTensor {
                offset: 4,
                alignment: 32,
                ..
            }
        ),
        "{e}"
    );
}

#[test]
fn duplicate_keys_and_tensor_names_are_rejected() {
    let mut r = Raw::header(3, 0, 2);
    r.kv_u32("dup", 1).kv_u32("dup", 2);
    assert_eq!(parse_err(&r.bytes()).kind, K::DuplicateKey("dup".into()));
    let mut w = GgufWriter::new();
    w.add_tensor("same", &[8], GgmlType::F32, bytes(32, 0));
    w.add_tensor("same", &[8], GgmlType::F32, bytes(32, 0));
    assert_eq!(
        parse_err(&w.write_to_vec()).kind,
        K::DuplicateTensor("same".into())
    );
}

#[test]
fn alignment_must_be_a_power_of_two_integer() {
    for bad in [
        gguf::Value::U32(48),
        gguf::Value::U32(0),
        gguf::Value::from("32"),
    ] {
        let mut w = GgufWriter::new();
        w.add_metadata("general.alignment", bad.clone());
        let e = parse_err(&w.write_to_vec());
        assert!(matches!(e.kind, K::BadAlignment(_)), "{bad:?}: {e}");
    }
}

#[test]
fn open_reports_missing_files_with_their_path() {
    let path = std::env::temp_dir().join("tessera-gguf-definitely-missing.gguf");
    let e = GgufFile::open(&path).expect_err("missing file");
    assert!(matches!(e, GgufError::Io { .. }));
    assert!(e.to_string().contains(&path.display().to_string()), "{e}");
}

#[test]
fn open_reports_invalid_and_empty_files_with_their_path() {
    for (tag, content) in [
        ("garbage", b"not a gguf file at all".to_vec()),
        ("empty", vec![]),
    ] {
        let path = std::env::temp_dir().join(format!("tessera-gguf-{}-{tag}", std::process::id()));
        std::fs::write(&path, &content).expect("write temp file");
        let e = GgufFile::open(&path).expect_err("invalid file");
        let _ = std::fs::remove_file(&path);
        assert!(matches!(e, GgufError::Parse { .. }), "{e}");
        assert!(e.to_string().contains(&path.display().to_string()), "{e}");
    }
}

#[test]
fn open_refuses_a_directory_clearly() {
    let dir = std::env::temp_dir();
    let e = GgufFile::open(&dir).expect_err("a directory is not a model");
    assert!(matches!(e, GgufError::Io { .. }));
    assert!(e.to_string().contains("not a regular file"), "{e}");
}
