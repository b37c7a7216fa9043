//! The full-size MoE generator (`model::testing::fullsize`, `examples/write_full_size_moe.rs`)
//! at test widths (`MoeShape::shrunk`: the real layout, two layers, narrow, the tiny
//! vocabulary): the file's layout (tensor count, names, types, sizes), that the qwen3moe and
//! gpt-oss files load in Tessera and give finite logits, and that the Zipf and uniform files
//! differ only in their routers. The full-size plans' byte totals are checked in the module's
//! own tests; llama.cpp's loading of 2-layer real-width files is checked by hand.

use std::path::PathBuf;

use gguf::{GgmlType, GgufFile};
use model::testing::fullsize::{self, router, Family, MoeShape, Options, Router, SHAPES};
use model::testing::tiny_tokenizer_metadata;
use model::{LogitsWanted, Session};

fn write(shape: &MoeShape, router: Router, seed: u64) -> (PathBuf, fullsize::Report) {
    let path = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!(
        "fullsize-{}-{router:?}-{seed}-{}.gguf",
        shape.name,
        std::process::id()
    ));
    let file = std::fs::File::create(&path).expect("creates the file");
    let opts = Options { router, seed };
    let out = std::io::BufWriter::new(file);
    let report = fullsize::write(
        shape,
        shape.n_layers,
        &opts,
        &tiny_tokenizer_metadata(),
        out,
    )
    .expect("writes");
    (path, report)
}

/// The type each weight must have (norms, biases, sinks and routers are F32).
fn expected_type(family: Family, name: &str) -> GgmlType {
    let layer: Option<usize> = name
        .strip_prefix("blk.")
        .and_then(|r| r.split('.').next())
        .and_then(|i| i.parse().ok());
    // Layer 1 of 2 is in Q4_K_M's last eighth: its attn_v and ffn_down get Q6_K.
    let more = layer == Some(1);
    let f32_kinds = ["norm", "bias", "sinks", "gate_inp"];
    if f32_kinds.iter().any(|k| name.contains(k)) {
        return GgmlType::F32;
    }
    match family {
        Family::GptOss if name.contains("_exps") => GgmlType::MXFP4,
        Family::GptOss => GgmlType::Q8_0,
        _ if name == "output.weight" => GgmlType::Q6_K,
        _ if more && (name.contains("attn_v") || name.contains("ffn_down_exps")) => GgmlType::Q6_K,
        _ => GgmlType::Q4_K,
    }
}

#[test]
fn layouts_have_the_right_tensors_types_and_sizes() {
    for shape in SHAPES.iter().map(|s| s.shrunk()) {
        let (path, report) = write(&shape, Router::Uniform, 3);
        let f = GgufFile::open(&path).expect("parses");
        let per_layer = if shape.family == Family::GptOss {
            19
        } else {
            12
        };
        assert_eq!(
            f.tensors().len(),
            3 + per_layer * shape.n_layers,
            "{}",
            shape.name
        );
        assert_eq!(report.n_tensors, f.tensors().len());
        let mut end = 0;
        for t in f.tensors() {
            assert_eq!(
                t.ggml_type,
                expected_type(shape.family, &t.name),
                "{}",
                t.name
            );
            let row = t
                .ggml_type
                .row_bytes(t.dims[0] as usize)
                .expect("whole blocks");
            assert_eq!(
                t.n_bytes as u64,
                row as u64 * t.dims[1..].iter().product::<u64>()
            );
            end = end.max(t.offset as usize + t.n_bytes);
        }
        let size = std::fs::metadata(&path).expect("stat").len() as usize;
        assert_eq!(
            size,
            f.data_offset() + end,
            "{}: no trailing bytes",
            shape.name
        );
        assert_eq!(
            report.bytes as usize,
            f.tensors().iter().map(|t| t.n_bytes).sum::<usize>()
        );
        let embd = f.tensor("token_embd.weight").expect("embeddings");
        assert_eq!(embd.dims()[1] as usize, model::testing::tiny_vocab_size());
        let arch = f
            .metadata()
            .require_str("general.architecture")
            .expect("arch");
        let experts = f.metadata().require_u32(&format!("{arch}.expert_count"));
        assert_eq!(experts.ok(), Some(shape.n_expert as u32));
        let _ = std::fs::remove_file(&path);
    }
}

#[test]
fn qwen3moe_and_gpt_oss_files_load_and_give_finite_logits() {
    for shape in SHAPES
        .iter()
        .filter(|s| s.family != Family::Olmoe)
        .map(|s| s.shrunk())
    {
        for router in [Router::Uniform, Router::Zipf] {
            let (path, _) = write(&shape, router, 5);
            let mut m = model::load(&path, 2).expect("loads");
            let _ = std::fs::remove_file(&path);
            let tf = &mut m.transformer;
            let mut session = Session::new(tf, 1, 64, 4);
            let prompt: Vec<u32> = (0..24).map(|i| (i * 37 + 5) % 300).collect();
            let mut logits = Vec::new();
            session
                .run(tf, &[(0, &prompt, LogitsWanted::All)], &mut logits)
                .expect("runs");
            let vocab = model::testing::tiny_vocab_size();
            assert_eq!(logits.len(), prompt.len() * vocab);
            assert!(logits.iter().all(|x| x.is_finite()), "{}", shape.name);
            // Of order one (see the module's scales), and different across the vocabulary.
            let max = logits.iter().fold(0f32, |m, x| m.max(x.abs()));
            let last = &logits[logits.len() - vocab..];
            let spread = last.iter().fold(f32::MIN, |m, &x| m.max(x))
                - last.iter().fold(f32::MAX, |m, &x| m.min(x));
            assert!(
                max < 50.0 && spread > 0.5,
                "{} {router:?}: max {max}, spread {spread}",
                shape.name
            );
        }
    }
}

#[test]
fn zipf_and_uniform_files_differ_only_in_their_routers() {
    for shape in SHAPES.iter().map(|s| s.shrunk()) {
        let (u_path, u) = write(&shape, Router::Uniform, 9);
        let (z_path, z) = write(&shape, Router::Zipf, 9);
        let (uf, zf) = (
            GgufFile::open(&u_path).expect("u"),
            GgufFile::open(&z_path).expect("z"),
        );
        for t in uf.tensors() {
            let (a, b) = (
                uf.tensor(&t.name).expect("u"),
                zf.tensor(&t.name).expect("z"),
            );
            let router = t.name.ends_with("ffn_gate_inp.weight");
            assert_eq!(a.data != b.data, router, "{}: {}", shape.name, t.name);
        }
        // The measured usage: the uniform router's top expert takes far less than the Zipf one's,
        // which follows its targets.
        let targets = router::zipf_targets(shape.n_expert, shape.n_used);
        for ((_, uu), (_, zu)) in u.usage.iter().zip(&z.usage) {
            assert!(
                uu[0] < 0.6 && zu[0] > 0.9,
                "{}: {uu:?} vs {zu:?}",
                shape.name
            );
            for (got, want) in zu.iter().zip(&targets) {
                assert!((got - want).abs() < 0.1, "{}: {zu:?}", shape.name);
            }
        }
        let _ = (std::fs::remove_file(&u_path), std::fs::remove_file(&z_path));
    }
}
