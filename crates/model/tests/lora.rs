//! LoRA adapters on the tiny models: mixed batches, scales, merging, and the errors of bad
//! adapter files. The adapters are written by `model::testing::lora` (rank 8 on q, v and
//! ffn_down unless a test says otherwise) into a temporary directory.

use std::path::{Path, PathBuf};

use model::testing::lora::{tiny_lora_gguf, tiny_lora_writer, TINY_LORA_RANK};
use model::testing::{tiny_model_gguf, tiny_model_writer, TINY_SEED};
use model::{LoadedModel, LogitsWanted, LoraId, LoraUse, Session, Transformer};

const TILE: usize = 4;
const MAX_LEN: usize = 48;

/// A directory of its own per test, removed at the end.
struct TempDir(PathBuf);

impl TempDir {
    fn new(name: &str) -> TempDir {
        let dir = std::env::temp_dir().join(format!("tessera-lora-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        TempDir(dir)
    }

    fn write(&self, name: &str, bytes: &[u8]) -> PathBuf {
        let path = self.0.join(name);
        std::fs::write(&path, bytes).expect("write temp file");
        path
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn load_tiny(dir: &TempDir, arch: &str) -> (PathBuf, LoadedModel) {
    let path = dir.write(
        &format!("tiny-{arch}.gguf"),
        &tiny_model_gguf(arch, TINY_SEED),
    );
    let m = model::load(&path, 2).expect("tiny model loads");
    (path, m)
}

/// A prompt of `n` tokens drawn from `salt` (never a control token).
fn prompt(n: usize, salt: usize) -> Vec<u32> {
    (0..n)
        .map(|i| ((7 * i * i + 13 * i + 5 * salt + 3) % 300 + 3) as u32)
        .collect()
}

/// Logits of `prompt` (every position) then of three decoded tokens, the sequence alone.
fn run_alone(tf: &mut Transformer, loras: &[LoraUse], prompt: &[u32]) -> Vec<Vec<f32>> {
    let mut s = Session::new(tf, 1, MAX_LEN, TILE);
    s.set_loras(0, loras);
    let mut out = Vec::new();
    let mut logits = Vec::new();
    s.run(tf, &[(0, prompt, LogitsWanted::All)], &mut logits)
        .expect("prompt runs");
    out.push(logits.clone());
    for t in [5u32, 77, 200] {
        s.run(tf, &[(0, &[t], LogitsWanted::Last)], &mut logits)
            .expect("decode runs");
        out.push(logits.clone());
    }
    out
}

/// 16 sequences over 4 adapters and the base, in one batch per step, against each alone.
fn check_mixed_batch(arch: &str) {
    let dir = TempDir::new(&format!("mixed-{arch}"));
    let (_, m) = load_tiny(&dir, arch);
    let mut tf = m.transformer;
    let ids: Vec<LoraId> = (0..4)
        .map(|i| {
            let p = dir.write(&format!("a{i}.gguf"), &tiny_lora_gguf(arch, 100 + i));
            tf.load_lora(&p).expect("adapter loads")
        })
        .collect();
    let use_of = |id: LoraId, scale: f32| LoraUse { id, scale };
    // Sequence i: adapter i % 5 (4: the base), scales 1 and 0.5; two take two adapters.
    let loras: Vec<Vec<LoraUse>> = (0..16)
        .map(|i| match (i, i % 5) {
            (3, _) => vec![use_of(ids[2], 0.5), use_of(ids[0], 1.0)],
            (12, _) => vec![use_of(ids[0], 1.0), use_of(ids[2], 0.5)],
            (_, 4) => vec![],
            (_, a) => vec![use_of(ids[a], if i < 8 { 1.0 } else { 0.5 })],
        })
        .collect();
    let prompts: Vec<Vec<u32>> = (0..16).map(|i| prompt(3 + i % 7, i)).collect();
    let alone: Vec<_> = (0..16)
        .map(|i| run_alone(&mut tf, &loras[i], &prompts[i]))
        .collect();
    for i in [0, 3, 8] {
        let base = run_alone(&mut tf, &[], &prompts[i]);
        assert!(
            max_diff(&base[0], &alone[i][0]) > 0.1,
            "{arch}: seq {i}'s adapter does nothing"
        );
    }

    let vocab = tf.config().vocab_size;
    let mut s = Session::new(&tf, 16, MAX_LEN, TILE);
    for (i, l) in loras.iter().enumerate() {
        s.set_loras(i, l);
    }
    let mut logits = Vec::new();
    let work: Vec<_> = (0..16)
        .map(|i| (i, &prompts[i][..], LogitsWanted::All))
        .collect();
    s.run(&mut tf, &work, &mut logits)
        .expect("batched prompts run");
    let mut row = 0;
    for (i, p) in prompts.iter().enumerate() {
        let got = &logits[row * vocab..(row + p.len()) * vocab];
        assert!(
            got == &alone[i][0][..],
            "{arch}: sequence {i}'s prompt logits differ"
        );
        row += p.len();
    }
    for (step, t) in [5u32, 77, 200].into_iter().enumerate() {
        // Reversed order at the second step: the rows of an adapter are not contiguous.
        let order: Vec<usize> = match step {
            1 => (0..16).rev().collect(),
            _ => (0..16).collect(),
        };
        let toks = [t];
        let work: Vec<_> = order
            .iter()
            .map(|&i| (i, &toks[..], LogitsWanted::Last))
            .collect();
        s.run(&mut tf, &work, &mut logits)
            .expect("batched decode runs");
        for (r, &i) in order.iter().enumerate() {
            let got = &logits[r * vocab..(r + 1) * vocab];
            assert!(
                got == &alone[i][step + 1][..],
                "{arch}: seq {i} step {step} differs"
            );
        }
    }
}

#[test]
fn a_batch_over_four_adapters_and_the_base_gives_each_sequence_its_logits_alone() {
    // Untied output, tied output with QKV bias, sliding windows with post-norms.
    for arch in ["llama", "qwen2", "gemma3"] {
        check_mixed_batch(arch);
    }
}

fn max_diff(a: &[f32], b: &[f32]) -> f32 {
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

/// Greedy continuation of `n` tokens.
fn greedy(tf: &mut Transformer, loras: &[LoraUse], prompt: &[u32], n: usize) -> Vec<u32> {
    let mut s = Session::new(tf, 1, MAX_LEN, TILE);
    s.set_loras(0, loras);
    let mut logits = s.prefill(tf, 0, prompt, 64).expect("prefill");
    let mut out = Vec::new();
    for _ in 0..n {
        let t = model::sampler::argmax(&logits);
        out.push(t);
        s.run(tf, &[(0, &[t], LogitsWanted::Last)], &mut logits)
            .expect("decode");
    }
    out
}

#[test]
fn an_adapter_changes_logits_and_greedy_output_and_scale_zero_is_the_base() {
    let dir = TempDir::new("scales");
    for arch in ["llama", "qwen2", "gemma2"] {
        let (_, m) = load_tiny(&dir, arch);
        let mut tf = m.transformer;
        let a = dir.write(&format!("{arch}-a.gguf"), &tiny_lora_gguf(arch, 1));
        let id = tf.load_lora(&a).expect("adapter loads");
        let p = prompt(12, 1);
        let at = |scale: f32| [LoraUse { id, scale }];
        let base = run_alone(&mut tf, &[], &p);
        let zero = run_alone(&mut tf, &at(0.0), &p);
        let half = run_alone(&mut tf, &at(0.5), &p);
        let full = run_alone(&mut tf, &at(1.0), &p);
        assert!(zero == base, "{arch}: scale 0 must be the base");
        let (d_half, d_full) = (max_diff(&half[0], &base[0]), max_diff(&full[0], &base[0]));
        assert!(
            d_full > 1.0,
            "{arch}: the adapter barely moves the logits ({d_full})"
        );
        assert!(
            d_half > 0.1 && d_half < d_full,
            "{arch}: scale 0.5 moves {d_half}, 1 {d_full}"
        );
        let g_base = greedy(&mut tf, &[], &p, 16);
        assert_ne!(
            g_base,
            greedy(&mut tf, &at(1.0), &p, 16),
            "{arch}: same greedy tokens"
        );
        // Unloaded: a batch naming it is refused, and the id is not given out again.
        tf.unload_lora(id).expect("unloads");
        let mut s = Session::new(&tf, 1, MAX_LEN, TILE);
        s.set_loras(0, &at(1.0));
        let mut logits = Vec::new();
        let err = s.run(&mut tf, &[(0, &p, LogitsWanted::Last)], &mut logits);
        assert!(format!("{:?}", err.err()).contains("not loaded"), "{arch}");
        assert_ne!(tf.load_lora(&a).expect("loads again"), id);
    }
}

/// Largest |merged − unmerged| accepted: the tiny llama's touched weights are F32 (summation
/// order only: ~1e-5 seen) except `blk.1.ffn_up`, F16, where the merged weight is rounded to
/// f16 again (about 1e-3 relative on each weight; ~3e-3 seen on logits spanning about ±13).
const MERGE_TOL: f32 = 2e-2;

#[test]
fn merging_an_adapter_equals_applying_it() {
    let dir = TempDir::new("merge");
    let (path, m) = load_tiny(&dir, "llama");
    let mut tf = m.transformer;
    let targets = ["attn_q", "attn_output", "ffn_up", "ffn_down", "output"];
    let w = tiny_lora_writer("llama", 5, &targets, TINY_LORA_RANK, 16.0).expect("writer");
    let a = dir.write("merge.gguf", &w.write_to_vec());
    let id = tf.load_lora(&a).expect("adapter loads");
    let scale = 0.7;
    let p = prompt(20, 3);
    let unmerged = run_alone(&mut tf, &[LoraUse { id, scale }], &p);
    let base = run_alone(&mut tf, &[], &p);
    let mut merged = model::load_merged(&path, 2, &[(a.as_path(), scale)])
        .expect("merged model loads")
        .transformer;
    let got = run_alone(&mut merged, &[], &p);
    for (step, (g, u)) in got.iter().zip(&unmerged).enumerate() {
        let d = max_diff(g, u);
        eprintln!("step {step}: max |merged - unmerged| = {d:.2e}");
        assert!(d < MERGE_TOL, "step {step}: merged is {d} from unmerged");
        assert!(
            max_diff(g, &base[step]) > 1.0,
            "step {step}: the merge changed nothing"
        );
    }
}

/// The error of loading `bytes` as an adapter of the tiny `arch` model.
fn load_error(dir: &TempDir, arch: &str, name: &str, bytes: &[u8]) -> (PathBuf, String) {
    let (_, m) = load_tiny(dir, arch);
    let mut tf = m.transformer;
    let path = dir.write(name, bytes);
    let err = tf.load_lora(&path).expect_err("bad adapter refused");
    (path, err.to_string())
}

fn assert_names(msg: &str, path: &Path, what: &[&str]) {
    assert!(
        msg.contains(&path.display().to_string()),
        "no file in {msg:?}"
    );
    for w in what {
        assert!(msg.contains(w), "{w:?} not in {msg:?}");
    }
}

#[test]
fn bad_adapters_are_refused_naming_the_file_and_the_tensor() {
    let dir = TempDir::new("errors");
    let lora = |arch: &str, targets: &[&str], rank: usize| {
        tiny_lora_writer(arch, 1, targets, rank, 16.0).expect("writer")
    };
    // Another architecture's adapter.
    let (p, e) = load_error(&dir, "llama", "qwen2.gguf", &tiny_lora_gguf("qwen2", 1));
    assert_names(&e, &p, &["architecture", "qwen2", "llama"]);
    // A model file, not an adapter.
    let (p, e) = load_error(&dir, "llama", "model.gguf", &tiny_model_gguf("llama", 1));
    assert_names(&e, &p, &["not a LoRA adapter", "general.type"]);
    // A weight the model does not have: a layer past the last, the head of a tied model.
    let mut w = lora("llama", &["attn_q"], 8);
    let a = vec![0u8; 64 * 8 * 4];
    w.add_tensor(
        "blk.9.attn_q.weight.lora_a",
        &[64, 8],
        gguf::GgmlType::F32,
        a.clone(),
    );
    w.add_tensor(
        "blk.9.attn_q.weight.lora_b",
        &[8, 64],
        gguf::GgmlType::F32,
        a.clone(),
    );
    let (p, e) = load_error(&dir, "llama", "layer.gguf", &w.write_to_vec());
    assert_names(&e, &p, &["blk.9.attn_q.weight", "layer 9"]);
    let mut w = lora("qwen2", &["attn_q"], 8);
    w.add_tensor(
        "output.weight.lora_a",
        &[64, 8],
        gguf::GgmlType::F32,
        a.clone(),
    );
    w.add_tensor(
        "output.weight.lora_b",
        &[8, 64],
        gguf::GgmlType::F32,
        a.clone(),
    );
    let (p, e) = load_error(&dir, "qwen2", "tied.gguf", &w.write_to_vec());
    assert_names(
        &e,
        &p,
        &["output.weight", "does not exist in the base model"],
    );
    // An unknown tensor name, and a lone lora_a.
    let mut w = lora("llama", &["attn_q"], 8);
    w.add_tensor(
        "blk.0.attn_q.weight.scales",
        &[8],
        gguf::GgmlType::F32,
        vec![0; 32],
    );
    let (p, e) = load_error(&dir, "llama", "suffix.gguf", &w.write_to_vec());
    assert_names(&e, &p, &["blk.0.attn_q.weight.scales"]);
    let mut w = lora("llama", &["attn_q"], 8);
    w.remove_tensor("blk.2.attn_q.weight.lora_b");
    let (p, e) = load_error(&dir, "llama", "lone.gguf", &w.write_to_vec());
    assert_names(&e, &p, &["blk.2.attn_q.weight.lora_b", "missing"]);
    // Shapes: B of another rank than A; A of another width than the weight.
    let mut w = lora("llama", &["attn_v"], 8);
    w.remove_tensor("blk.1.attn_v.weight.lora_b");
    w.add_tensor(
        "blk.1.attn_v.weight.lora_b",
        &[4, 32],
        gguf::GgmlType::F32,
        vec![0; 512],
    );
    let (p, e) = load_error(&dir, "llama", "rank.gguf", &w.write_to_vec());
    assert_names(&e, &p, &["blk.1.attn_v.weight.lora_b", "[4, 32]", "rank 8"]);
    let mut w = lora("llama", &["attn_v"], 8);
    w.remove_tensor("blk.0.attn_v.weight.lora_a");
    w.add_tensor(
        "blk.0.attn_v.weight.lora_a",
        &[32, 8],
        gguf::GgmlType::F32,
        vec![0; 1024],
    );
    let (p, e) = load_error(&dir, "llama", "width.gguf", &w.write_to_vec());
    assert_names(
        &e,
        &p,
        &["blk.0.attn_v.weight.lora_a", "[32, 8]", "[64, rank]"],
    );
}

#[test]
fn adapters_on_expert_weights_and_embeddings_are_refused_by_name() {
    let dir = TempDir::new("moe");
    let mut w = gguf::GgufWriter::new();
    w.add_metadata("general.architecture", "qwen3moe");
    w.add_metadata("general.type", "adapter");
    w.add_metadata("adapter.type", "lora");
    w.add_metadata("adapter.lora.alpha", 16.0f32);
    let z = |n: usize| vec![0u8; n * 4];
    let exps = "blk.0.ffn_down_exps.weight";
    w.add_tensor(
        format!("{exps}.lora_a"),
        &[32, 8],
        gguf::GgmlType::F32,
        z(256),
    );
    w.add_tensor(
        format!("{exps}.lora_b"),
        &[8, 64],
        gguf::GgmlType::F32,
        z(512),
    );
    let (p, e) = load_error(&dir, "qwen3moe", "exps.gguf", &w.write_to_vec());
    assert_names(&e, &p, &[exps, "mixture-of-experts"]);
    let mut w = tiny_lora_writer("llama", 1, &["attn_q"], 8, 16.0).expect("writer");
    let (vocab, d) = (model::testing::tiny_vocab_size(), 64usize);
    w.add_tensor(
        "token_embd.weight.lora_a",
        &[vocab as u64, 8],
        gguf::GgmlType::F32,
        z(vocab * 8),
    );
    w.add_tensor(
        "token_embd.weight.lora_b",
        &[8, d as u64],
        gguf::GgmlType::F32,
        z(8 * d),
    );
    let (p, e) = load_error(&dir, "llama", "embd.gguf", &w.write_to_vec());
    assert_names(&e, &p, &["token_embd.weight", "token embeddings"]);
    // The tiny writer itself makes no adapter for a mixture of experts.
    assert!(tiny_model_writer("qwen3moe", 1).is_some());
    assert!(tiny_lora_writer("qwen3moe", 1, &["ffn_down"], 8, 16.0).is_none());
}
