//! Writer -> parser and writer -> file -> `GgufFile` round trips, and the metadata getters.

mod common;

use std::path::PathBuf;

use common::{all_values, bytes, sample_writer};
use gguf::{parse, Array, GgmlType, GgufError, GgufFile, GgufWriter, Value};

/// A per-test path in the temp dir; removed on drop.
struct TempFile(PathBuf);

impl TempFile {
    fn new(tag: &str) -> Self {
        let name = format!("tessera-gguf-{}-{tag}.gguf", std::process::id());
        TempFile(std::env::temp_dir().join(name))
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

#[test]
fn every_value_type_survives_a_round_trip_in_order() {
    let parsed = parse(&sample_writer().write_to_vec()).expect("sample file parses");
    let got: Vec<(&str, &Value)> = parsed.metadata.iter().skip(1).collect();
    let want = all_values();
    assert_eq!(got.len(), want.len());
    for ((gk, gv), (wk, wv)) in got.iter().zip(&want) {
        assert_eq!(gk, wk);
        assert_eq!(*gv, wv, "value of {wk}");
    }
    assert_eq!(parsed.version, 3);
    assert_eq!(parsed.alignment, 32);
}

#[test]
fn tensor_views_return_the_written_bytes_at_aligned_addresses() {
    let tmp = TempFile::new("views");
    sample_writer().write_file(&tmp.0).expect("write temp file");
    let file = GgufFile::open(&tmp.0).expect("open sample");
    let names: Vec<&str> = file.tensors().iter().map(|t| t.name.as_str()).collect();
    assert_eq!(names, ["norm", "q8", "q4k", "q6k", "q5_0", "half"]);
    let q4k = file.require_tensor("q4k").expect("q4k present");
    assert_eq!(q4k.ggml_type(), GgmlType::Q4_K);
    assert_eq!(q4k.dims(), [256, 3]);
    assert_eq!(q4k.data, bytes(3 * 144, 3).as_slice());
    assert_eq!(
        file.require_tensor("q5_0").expect("present").data,
        bytes(44, 5).as_slice()
    );
    assert_eq!(file.tensor("half").expect("present").data.len(), 10);
    for t in file.tensors() {
        let view = file.tensor(&t.name).expect("listed tensor is found");
        assert_eq!(view.data.len(), t.n_bytes);
        assert_eq!(
            view.data.as_ptr() as usize % 32,
            0,
            "{} is aligned in memory",
            t.name
        );
    }
}

#[test]
fn version_two_files_are_read() {
    let mut w = sample_writer();
    w.set_version(2);
    let parsed = parse(&w.write_to_vec()).expect("v2 parses");
    assert_eq!(parsed.version, 2);
    assert_eq!(parsed.tensors.len(), 6);
}

#[test]
fn custom_alignment_is_used_for_data_and_offsets() {
    let mut w = GgufWriter::new();
    w.add_metadata("general.alignment", 64u32);
    w.add_tensor("a", &[3], GgmlType::F32, bytes(12, 0));
    w.add_tensor("b", &[2], GgmlType::BF16, bytes(4, 0));
    let parsed = parse(&w.write_to_vec()).expect("parses");
    assert_eq!(parsed.alignment, 64);
    assert_eq!(parsed.data_offset % 64, 0);
    assert_eq!(parsed.tensors[1].offset, 64);
}

#[test]
fn a_file_without_tensors_parses() {
    let mut w = GgufWriter::new();
    w.add_metadata("k", "v");
    let parsed = parse(&w.write_to_vec()).expect("parses");
    assert!(parsed.tensors.is_empty());
    assert_eq!(parsed.metadata.require_str("k").expect("present"), "v");
}

#[test]
fn integer_getters_widen_and_range_check() {
    let parsed = parse(&sample_writer().write_to_vec()).expect("parses");
    let md = &parsed.metadata;
    assert_eq!(md.get_u32("t.u8").expect("u8 fits u32"), Some(200));
    assert_eq!(
        md.get_u64("t.u32").expect("u32 fits u64"),
        Some(4_000_000_000)
    );
    assert_eq!(md.get_i64("t.i16").expect("fits"), Some(-30_000));
    assert_eq!(md.require_u32("t.u32").expect("fits"), 4_000_000_000);
    assert!(matches!(
        md.get_u32("t.i8"),
        Err(GgufError::WrongType { .. })
    ));
    assert!(matches!(
        md.get_u32("t.u64"),
        Err(GgufError::WrongType { .. })
    ));
    assert!(matches!(
        md.get_i64("t.u64"),
        Err(GgufError::WrongType { .. })
    ));
    assert_eq!(md.get_u32("absent").expect("absent is not an error"), None);
}

#[test]
fn float_getter_accepts_floats_and_integers() {
    let parsed = parse(&sample_writer().write_to_vec()).expect("parses");
    let md = &parsed.metadata;
    assert_eq!(md.require_f32("t.f32").expect("f32"), 1e-6);
    assert_eq!(md.require_f32("t.u16").expect("int"), 60_000.0);
    assert_eq!(md.get_f32("t.f64").expect("f64"), Some(-2.5e300f64 as f32));
    assert!(matches!(
        md.get_f32("t.string"),
        Err(GgufError::WrongType { .. })
    ));
}

#[test]
fn string_bool_and_array_getters_check_types() {
    let parsed = parse(&sample_writer().write_to_vec()).expect("parses");
    let md = &parsed.metadata;
    assert_eq!(md.get_bool("t.bool").expect("bool"), Some(true));
    assert_eq!(md.require_str("t.string").expect("str"), "héllo ▁world");
    match md.require_array("a.string").expect("array") {
        Array::String(v) => assert_eq!(v[2], "▁the"),
        other => panic!("expected a string array, got {other:?}"),
    }
    let err = md.get_str("t.u32").expect_err("u32 is not a string");
    let msg = err.to_string();
    assert!(
        msg.contains("t.u32") && msg.contains("string") && msg.contains("u32"),
        "{msg}"
    );
    assert!(matches!(
        md.get_bool("t.u8"),
        Err(GgufError::WrongType { .. })
    ));
    assert!(matches!(
        md.get_array("t.f32"),
        Err(GgufError::WrongType { .. })
    ));
}

#[test]
fn getter_errors_from_an_opened_file_name_the_file() {
    let tmp = TempFile::new("getters");
    sample_writer().write_file(&tmp.0).expect("write temp file");
    let file = GgufFile::open(&tmp.0).expect("open sample");
    let path = tmp.0.display().to_string();
    let missing = file
        .metadata()
        .require_u32("llama.block_count")
        .expect_err("absent");
    assert!(matches!(&missing, GgufError::MissingKey { key, .. } if key == "llama.block_count"));
    assert!(missing.to_string().contains(&path), "{missing}");
    let wrong = file
        .metadata()
        .require_str("t.bool")
        .expect_err("not a string");
    assert!(wrong.to_string().contains(&path), "{wrong}");
    let no_tensor = file.require_tensor("output.weight").expect_err("absent");
    let msg = no_tensor.to_string();
    assert!(
        msg.contains(&path) && msg.contains("output.weight"),
        "{msg}"
    );
    assert_eq!(no_tensor.path(), Some(tmp.0.as_path()));
}

#[test]
fn display_truncates_long_arrays() {
    let v: Value = (0..1000u32).collect::<Vec<_>>().into();
    let shown = v.to_string();
    assert!(
        shown.starts_with("[0, 1, 2") && shown.ends_with("... (1000 items)]"),
        "{shown}"
    );
    assert!(shown.len() < 80);
}
