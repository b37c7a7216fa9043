//! The mixture-of-experts architectures (`qwen3moe`, `qwen2moe`, `olmoe`) on tiny random-weight
//! models the test writes itself (`model::testing::tiny_model_gguf(arch, seed)`: 3 layers, 8
//! experts of width 32, 2 per token, one F16 and one Q8_0 expert tensor; qwen2moe adds a shared
//! expert of width 64; olmoe has 64 experts, 8 per token).
//!
//! Design: besides the llama.cpp goldens (`llama_family.rs`), the forward pass is checked
//! against a float64 re-implementation written here from the definitions (Qwen 3 attention with
//! per-head QK-norm, Qwen 2 attention with QKV bias, or OLMoE attention with one QK-norm over
//! all of Q and all of K; NeoX RoPE; per token, softmax over all experts' router logits, the
//! top k, renormalised for qwen3moe only, SwiGLU experts, weighted sum; qwen2moe adds its shared
//! expert times the sigmoid of its gate). The reference reads the tensors straight from the
//! GGUF bytes and runs token by token, one expert at a time, sharing no code with the grouped
//! forward pass.
//!
//! Tolerance: Tessera keeps K and V in f16 and sums in f32, and its Q8_0 matmul (layer 2's down
//! experts) rounds the activations to 8 bits as llama.cpp does; the float64 reference does
//! neither. On logits spanning about +-13, the largest |ours - reference| measured (2026-12,
//! x86-64 AVX-512, `--nocapture` prints it) was 4.8e-2 qwen3moe, 2.9e-2 qwen2moe (olmoe:
//! 1.3e-2, AMD EPYC Zen 4 with AVX-512); with every expert in F32/F16 it was 1.0e-2 and 9.1e-3, the f16-cache floor of the dense tiny models
//! (`llama_family.rs`). The bound, 0.1, is about twice the worst. The test also checks that the
//! reference run with the other top-k normalisation (renormalised for qwen2moe and olmoe, not
//! for qwen3moe: a plausible mistake) moves the logits by more than ten times the bound (it
//! moves them by about 5; olmoe's by 4.0), so the bound can see a routing error.

use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};

use gguf::GgmlType;
use model::testing::{tiny_model_gguf, tiny_model_writer};
use model::{LoadedModel, LogitsWanted, ModelError, Session};

const SEED: u64 = 7;
/// The architectures the float64 reference below implements (Granite MoE's multipliers are
/// checked against llama.cpp in `llama_family.rs`).
const REFERENCE_ARCHS: [&str; 3] = ["qwen3moe", "qwen2moe", "olmoe"];
/// Largest accepted |ours - float64 reference| on any logit (see the header).
const LOGIT_TOL: f64 = 0.1;
const TILE: usize = 4;
const MAX_LEN: usize = 64;

/// Writes `bytes` to a fresh file in this test binary's scratch dir and loads it (each call its
/// own name: tests run in parallel and the model maps the file).
fn load_bytes(name: &str, bytes: &[u8]) -> Result<LoadedModel, ModelError> {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let path = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("{name}-{}-{n}.gguf", std::process::id()));
    std::fs::write(&path, bytes).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let loaded = model::load(&path, 2);
    if cfg!(unix) {
        let _ = std::fs::remove_file(&path);
    }
    loaded
}

/// The tensors and hyper-parameters of the tiny file, as float64.
struct Reference {
    arch: String,
    bytes: Vec<u8>,
    parsed: gguf::Parsed,
    n_layers: usize,
    d: usize,
    n_heads: usize,
    n_kv: usize,
    hd: usize,
    n_expert: usize,
    k: usize,
    ff: usize,
    eps: f64,
    base: f64,
}

impl Reference {
    fn new(bytes: Vec<u8>) -> Reference {
        let parsed = gguf::parse(&bytes).expect("tiny file parses");
        let md = &parsed.metadata;
        let arch = md
            .require_str("general.architecture")
            .expect("architecture")
            .to_string();
        let u = |k: &str| {
            md.require_u32(&format!("{arch}.{k}"))
                .unwrap_or_else(|e| panic!("{k}: {e}")) as usize
        };
        let f = |k: &str| {
            md.require_f32(&format!("{arch}.{k}"))
                .unwrap_or_else(|e| panic!("{k}: {e}")) as f64
        };
        let hd = match md.get_u32(&format!("{arch}.attention.key_length")) {
            Ok(Some(v)) => v as usize,
            _ => u("embedding_length") / u("attention.head_count"),
        };
        Reference {
            n_layers: u("block_count"),
            d: u("embedding_length"),
            n_heads: u("attention.head_count"),
            n_kv: u("attention.head_count_kv"),
            hd,
            n_expert: u("expert_count"),
            k: u("expert_used_count"),
            // OLMoE gives the experts' width as `feed_forward_length` only.
            ff: match md.get_u32(&format!("{arch}.expert_feed_forward_length")) {
                Ok(Some(v)) => v as usize,
                _ => u("feed_forward_length"),
            },
            eps: f("attention.layer_norm_rms_epsilon"),
            base: f("rope.freq_base"),
            arch,
            parsed,
            bytes,
        }
    }

    /// Every value of tensor `name`, in file order.
    fn t(&self, name: &str) -> Vec<f64> {
        self.opt(name)
            .unwrap_or_else(|| panic!("tensor {name} missing"))
    }

    fn opt(&self, name: &str) -> Option<Vec<f64>> {
        let info = self.parsed.tensors.iter().find(|t| t.name == name)?;
        let n: u64 = info.dims.iter().product();
        let start = self.parsed.data_offset + info.offset as usize;
        Some(match info.ggml_type {
            GgmlType::F32 => self.bytes[start..start + 4 * n as usize]
                .chunks_exact(4)
                .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]) as f64)
                .collect(),
            GgmlType::F16 => self.bytes[start..start + 2 * n as usize]
                .chunks_exact(2)
                .map(|b| half::f16::from_le_bytes([b[0], b[1]]).to_f64())
                .collect(),
            // Blocks of an f16 scale and 32 signed bytes.
            GgmlType::Q8_0 => self.bytes[start..start + 34 * n as usize / 32]
                .chunks_exact(34)
                .flat_map(|b| {
                    let scale = half::f16::from_le_bytes([b[0], b[1]]).to_f64();
                    b[2..].iter().map(move |&q| scale * (q as i8) as f64)
                })
                .collect(),
            other => panic!("{name}: reference reads F32/F16/Q8_0 only, not {other:?}"),
        })
    }

    /// Per-token logits of `tokens` as one sequence from position 0.
    fn logits(&self, tokens: &[u32], norm_topk: bool) -> Vec<Vec<f64>> {
        let d = self.d;
        let embd = self.t("token_embd.weight");
        let mut x: Vec<Vec<f64>> = tokens
            .iter()
            .map(|&t| embd[t as usize * d..(t as usize + 1) * d].to_vec())
            .collect();
        for l in 0..self.n_layers {
            let n = |s: &str| format!("blk.{l}.{s}");
            let h: Vec<Vec<f64>> = x
                .iter()
                .map(|r| rms(r, &self.t(&n("attn_norm.weight")), self.eps))
                .collect();
            let att = self.attention(l, &h);
            let wo = self.t(&n("attn_output.weight"));
            for (xr, a) in x.iter_mut().zip(&att) {
                add(xr, &matvec(&wo, a, d));
            }
            let fnorm = self.t(&n("ffn_norm.weight"));
            for xr in x.iter_mut() {
                let y = self.moe(l, &rms(xr, &fnorm, self.eps), norm_topk);
                add(xr, &y);
            }
        }
        let onorm = self.t("output_norm.weight");
        let vocab = embd.len() / d;
        let out = self.opt("output.weight").unwrap_or(embd);
        x.iter()
            .map(|r| matvec(&out, &rms(r, &onorm, self.eps), vocab))
            .collect()
    }

    fn attention(&self, l: usize, h: &[Vec<f64>]) -> Vec<Vec<f64>> {
        let n = |s: &str| format!("blk.{l}.{s}");
        let (hd, nh, nkv) = (self.hd, self.n_heads, self.n_kv);
        let (wq, wk, wv) = (
            self.t(&n("attn_q.weight")),
            self.t(&n("attn_k.weight")),
            self.t(&n("attn_v.weight")),
        );
        let (qn, kn) = (
            self.opt(&n("attn_q_norm.weight")),
            self.opt(&n("attn_k_norm.weight")),
        );
        let proj = |w: &[f64], bias: &str, r: &[f64], rows: usize| -> Vec<f64> {
            let mut y = matvec(w, r, rows);
            if let Some(b) = self.opt(&n(bias)) {
                add(&mut y, &b);
            }
            y
        };
        // OLMoE: one norm over the whole projection, then RoPE per head.
        let whole = self.arch == "olmoe";
        let head_prep = |v: Vec<f64>, norm: &Option<Vec<f64>>, pos: usize| -> Vec<f64> {
            let v = match norm {
                Some(w) if whole => rms(&v, w, self.eps),
                _ => v,
            };
            v.chunks_exact(hd)
                .flat_map(|head| match norm {
                    Some(w) if !whole => rope(&rms(head, w, self.eps), pos, self.base),
                    _ => rope(head, pos, self.base),
                })
                .collect::<Vec<_>>()
        };
        let q: Vec<Vec<f64>> = h
            .iter()
            .enumerate()
            .map(|(p, r)| head_prep(proj(&wq, "attn_q.bias", r, nh * hd), &qn, p))
            .collect();
        let k: Vec<Vec<f64>> = h
            .iter()
            .enumerate()
            .map(|(p, r)| head_prep(proj(&wk, "attn_k.bias", r, nkv * hd), &kn, p))
            .collect();
        let v: Vec<Vec<f64>> = h
            .iter()
            .map(|r| proj(&wv, "attn_v.bias", r, nkv * hd))
            .collect();
        let scale = 1.0 / (hd as f64).sqrt();
        (0..h.len())
            .map(|t| {
                let mut out = vec![0.0; nh * hd];
                for head in 0..nh {
                    let g = head / (nh / nkv);
                    let qh = &q[t][head * hd..(head + 1) * hd];
                    let s: Vec<f64> = (0..=t)
                        .map(|u| scale * dot(qh, &k[u][g * hd..(g + 1) * hd]))
                        .collect();
                    let p = softmax(&s);
                    for (u, pu) in p.iter().enumerate() {
                        for i in 0..hd {
                            out[head * hd + i] += pu * v[u][g * hd + i];
                        }
                    }
                }
                out
            })
            .collect()
    }

    /// One token's MoE FFN, expert by expert.
    fn moe(&self, l: usize, h: &[f64], norm_topk: bool) -> Vec<f64> {
        let n = |s: &str| format!("blk.{l}.{s}");
        let (d, ff) = (self.d, self.ff);
        let probs = softmax(&matvec(
            &self.t(&n("ffn_gate_inp.weight")),
            h,
            self.n_expert,
        ));
        let mut order: Vec<usize> = (0..self.n_expert).collect();
        order.sort_by(|&a, &b| probs[b].total_cmp(&probs[a]));
        let picked = &order[..self.k];
        let total: f64 = picked.iter().map(|&e| probs[e]).sum();
        let (g, u, dn) = (
            self.t(&n("ffn_gate_exps.weight")),
            self.t(&n("ffn_up_exps.weight")),
            self.t(&n("ffn_down_exps.weight")),
        );
        let mut out = vec![0.0; d];
        for &e in picked {
            let w = if norm_topk {
                probs[e] / total
            } else {
                probs[e]
            };
            let gate = matvec(&g[e * ff * d..(e + 1) * ff * d], h, ff);
            let up = matvec(&u[e * ff * d..(e + 1) * ff * d], h, ff);
            let a: Vec<f64> = gate
                .iter()
                .zip(&up)
                .map(|(g, u)| g / (1.0 + (-g).exp()) * u)
                .collect();
            let y = matvec(&dn[e * d * ff..(e + 1) * d * ff], &a, d);
            out.iter_mut().zip(&y).for_each(|(o, y)| *o += w * y);
        }
        if let Some(gi) = self.opt(&n("ffn_gate_inp_shexp.weight")) {
            let g = self.t(&n("ffn_gate_shexp.weight"));
            let sff = g.len() / d;
            let gate = matvec(&g, h, sff);
            let up = matvec(&self.t(&n("ffn_up_shexp.weight")), h, sff);
            let a: Vec<f64> = gate
                .iter()
                .zip(&up)
                .map(|(g, u)| g / (1.0 + (-g).exp()) * u)
                .collect();
            let y = matvec(&self.t(&n("ffn_down_shexp.weight")), &a, d);
            let scale = 1.0 / (1.0 + (-dot(&gi, h)).exp());
            out.iter_mut().zip(&y).for_each(|(o, y)| *o += scale * y);
        }
        out
    }

    /// Whether the architecture renormalises the picked experts' weights.
    fn norm_topk(&self) -> bool {
        self.arch == "qwen3moe"
    }
}

/// `[rows][cols]` row-major matrix times `x`.
fn matvec(m: &[f64], x: &[f64], rows: usize) -> Vec<f64> {
    m[..rows * x.len()]
        .chunks_exact(x.len())
        .map(|r| dot(r, x))
        .collect()
}

fn dot(a: &[f64], b: &[f64]) -> f64 {
    a.iter().zip(b).map(|(a, b)| a * b).sum()
}

fn add(a: &mut [f64], b: &[f64]) {
    a.iter_mut().zip(b).for_each(|(a, b)| *a += b);
}

fn rms(x: &[f64], w: &[f64], eps: f64) -> Vec<f64> {
    let ms = x.iter().map(|v| v * v).sum::<f64>() / x.len() as f64;
    let s = 1.0 / (ms + eps).sqrt();
    x.iter().zip(w).map(|(v, w)| v * s * w).collect()
}

fn softmax(x: &[f64]) -> Vec<f64> {
    let m = x.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let e: Vec<f64> = x.iter().map(|v| (v - m).exp()).collect();
    let s: f64 = e.iter().sum();
    e.iter().map(|v| v / s).collect()
}

/// NeoX RoPE of one head: pairs (i, i + hd/2).
fn rope(head: &[f64], pos: usize, base: f64) -> Vec<f64> {
    let half = head.len() / 2;
    let mut out = head.to_vec();
    for i in 0..half {
        let theta = pos as f64 * base.powf(-((2 * i) as f64) / head.len() as f64);
        let (c, s) = (theta.cos(), theta.sin());
        out[i] = head[i] * c - head[i + half] * s;
        out[i + half] = head[i] * s + head[i + half] * c;
    }
    out
}

fn max_diff(ours: &[f32], reference: &[Vec<f64>]) -> f64 {
    let vocab = reference[0].len();
    assert_eq!(ours.len(), reference.len() * vocab, "logit rows");
    ours.chunks_exact(vocab)
        .zip(reference)
        .flat_map(|(o, r)| o.iter().zip(r).map(|(o, r)| (*o as f64 - r).abs()))
        .fold(0.0, f64::max)
}

const PROMPT: &[u32] = &[
    1, 270, 295, 14, 300, 77, 301, 260, 299, 5, 180, 310, 263, 42, 271, 303,
];

#[test]
fn tiny_moe_models_load_with_their_expert_layout() {
    for (arch, experts, norm_topk, shared_ff, qk_norm) in [
        ("qwen3moe", (8, 2), true, None, true),
        ("qwen2moe", (8, 2), false, Some(64), false),
        ("olmoe", (64, 8), false, None, true),
    ] {
        let m = load_bytes("moe-load", &tiny_model_gguf(arch, SEED)).expect("loads");
        let cfg = m.transformer.config();
        let spec = cfg.moe.unwrap_or_else(|| panic!("{arch} has no MoE spec"));
        assert_eq!(
            (spec.n_expert, spec.n_used, spec.d_ff_exp),
            (experts.0, experts.1, 32),
            "{arch}"
        );
        assert_eq!(
            (spec.norm_topk, spec.shared_ff),
            (norm_topk, shared_ff),
            "{arch}"
        );
        assert_eq!((cfg.qk_norm, cfg.qkv_bias), (qk_norm, !qk_norm), "{arch}");
        assert_eq!(cfg.qk_norm_whole, arch == "olmoe", "{arch}");
    }
}

#[test]
fn prompt_logits_match_a_float64_per_token_reference() {
    for arch in REFERENCE_ARCHS {
        let bytes = tiny_model_gguf(arch, SEED);
        let reference = Reference::new(bytes.clone());
        let mut m = load_bytes("moe-ref", &bytes).expect("loads");
        let tf = &mut m.transformer;
        let mut session = Session::new(tf, 1, MAX_LEN, TILE);
        let mut logits = Vec::new();
        session
            .run(tf, &[(0, PROMPT, LogitsWanted::All)], &mut logits)
            .expect("runs");
        let norm = reference.norm_topk();
        let diff = max_diff(&logits, &reference.logits(PROMPT, norm));
        println!("{arch}: max |ours - f64 reference| = {diff:.3e}");
        assert!(diff <= LOGIT_TOL, "{arch}: max logit difference {diff}");
        let gap = max_diff(&logits, &reference.logits(PROMPT, !norm));
        println!("{arch}: with the other top-k normalisation the reference moves by {gap:.3e}");
        assert!(
            gap > 10.0 * LOGIT_TOL,
            "{arch}: the bound cannot see a routing error"
        );
    }
}

#[test]
fn logits_are_bit_identical_alone_and_batched_with_other_lengths() {
    for arch in REFERENCE_ARCHS {
        batch_invariance(arch);
    }
}

fn batch_invariance(arch: &str) {
    let mut m = load_bytes("moe-batch", &tiny_model_gguf(arch, SEED)).expect("loads");
    let tf = &mut m.transformer;
    let vocab = tf.config().vocab_size;
    let (a, b, c) = (&PROMPT[..11], &PROMPT[3..], &PROMPT[..2]);
    let mut logits = Vec::new();
    let (mut alone, mut b_prompt) = (Vec::new(), Vec::new());
    for s in [a, b, c] {
        let mut session = Session::new(tf, 1, MAX_LEN, TILE);
        session
            .run(tf, &[(0, s, LogitsWanted::All)], &mut logits)
            .expect("runs");
        if s == b {
            b_prompt = logits.clone();
        }
        session
            .run(tf, &[(0, &[300], LogitsWanted::All)], &mut logits)
            .expect("runs");
        alone.push(logits.clone());
    }
    let mut session = Session::new(tf, 3, MAX_LEN, TILE);
    session
        .run(
            tf,
            &[
                (1, b, LogitsWanted::All),
                (0, a, LogitsWanted::None),
                (2, c, LogitsWanted::None),
            ],
            &mut logits,
        )
        .expect("runs");
    assert!(
        logits == b_prompt,
        "{arch}: prompt logits differ when prefilled beside other sequences"
    );
    session
        .run(
            tf,
            &[
                (2, &[300], LogitsWanted::All),
                (0, &[300], LogitsWanted::All),
                (1, &[300], LogitsWanted::All),
            ],
            &mut logits,
        )
        .expect("runs");
    for (i, seq) in [2, 0, 1].into_iter().enumerate() {
        assert!(
            logits[i * vocab..(i + 1) * vocab] == alone[seq][..],
            "{arch}: sequence {seq}'s decode logits differ when batched"
        );
    }
}

fn load_error(w: &gguf::GgufWriter) -> String {
    match load_bytes("moe-bad", &w.write_to_vec()) {
        Ok(_) => panic!("a broken MoE file was accepted"),
        Err(e) => format!("{e}"),
    }
}

fn writer() -> gguf::GgufWriter {
    tiny_model_writer("qwen3moe", SEED).expect("qwen3moe is a tiny arch")
}

#[test]
fn an_expert_count_that_disagrees_with_the_tensors_is_refused_naming_the_tensor() {
    let mut w = writer();
    w.add_metadata("qwen3moe.expert_count", 4u32);
    let msg = load_error(&w);
    assert!(msg.contains("blk.0.ffn_gate_inp.weight"), "{msg}");
}

#[test]
fn more_experts_used_than_exist_is_refused_naming_both_keys() {
    let mut w = writer();
    w.add_metadata("qwen3moe.expert_used_count", 9u32);
    let msg = load_error(&w);
    assert!(msg.contains("qwen3moe.expert_used_count"), "{msg}");
    assert!(msg.contains("qwen3moe.expert_count"), "{msg}");
}

#[test]
fn a_missing_expert_tensor_is_refused_naming_it() {
    let mut w = writer();
    assert!(w.remove_tensor("blk.2.ffn_down_exps.weight"));
    let msg = load_error(&w);
    assert!(msg.contains("blk.2.ffn_down_exps.weight"), "{msg}");
}

#[test]
fn a_missing_shared_expert_tensor_or_width_is_refused_naming_it() {
    let mut w = tiny_model_writer("qwen2moe", SEED).expect("qwen2moe is a tiny arch");
    assert!(w.remove_tensor("blk.0.ffn_gate_inp_shexp.weight"));
    let msg = load_error(&w);
    assert!(msg.contains("blk.0.ffn_gate_inp_shexp.weight"), "{msg}");
    let mut w = tiny_model_writer("qwen2moe", SEED).expect("qwen2moe is a tiny arch");
    assert!(w.remove_metadata("qwen2moe.expert_shared_feed_forward_length"));
    let msg = load_error(&w);
    assert!(
        msg.contains("qwen2moe.expert_shared_feed_forward_length"),
        "{msg}"
    );
}

/// Granite MoE Shared: its shared expert's tensors are required once the width is set, and a
/// file that sets the width without them is refused naming the missing tensor.
#[test]
fn a_granite_shared_expert_without_its_tensors_is_refused_naming_one() {
    let mut w = tiny_model_writer("granitemoe-shared", SEED).expect("a tiny model");
    assert!(w.remove_tensor("blk.1.ffn_up_shexp.weight"));
    let msg = load_error(&w);
    assert!(msg.contains("blk.1.ffn_up_shexp.weight"), "{msg}");
    // Without the width, the same file loads as plain Granite MoE (its extra tensors unread).
    let mut w = tiny_model_writer("granitemoe-shared", SEED).expect("a tiny model");
    assert!(w.remove_metadata("granitemoe.expert_shared_feed_forward_length"));
    let loaded = load_bytes("granite-no-width", &w.write_to_vec()).map(|_| ());
    assert!(loaded.is_ok(), "{loaded:?}");
}

#[test]
fn a_missing_expert_count_is_refused_naming_the_key() {
    let mut w = writer();
    assert!(w.remove_metadata("qwen3moe.expert_count"));
    let msg = load_error(&w);
    assert!(msg.contains("qwen3moe.expert_count"), "{msg}");
}

#[test]
fn an_expert_tensor_of_the_wrong_shape_is_refused_naming_it() {
    let mut w = writer();
    assert!(w.remove_tensor("blk.1.ffn_up_exps.weight"));
    let zeros = vec![0u8; 64 * 32 * 7 * 4];
    w.add_tensor(
        "blk.1.ffn_up_exps.weight",
        &[64, 32, 7],
        GgmlType::F32,
        zeros,
    );
    let msg = load_error(&w);
    assert!(msg.contains("blk.1.ffn_up_exps.weight"), "{msg}");
}

/// OLMoE: an expert count the tensors do not have (fewer or more), a missing
/// `feed_forward_length` (its experts' width), a missing output projection (llama.cpp ties
/// none to the embeddings) and a tensor its layout would not apply are refused, each naming
/// what is wrong.
#[test]
fn olmoe_files_that_disagree_with_their_layout_are_refused_naming_why() {
    let olmoe = || tiny_model_writer("olmoe", SEED).expect("olmoe is a tiny arch");
    for count in [32u32, 65, 128] {
        let mut w = olmoe();
        w.add_metadata("olmoe.expert_count", count);
        let msg = load_error(&w);
        assert!(msg.contains("blk.0.ffn_gate_inp.weight"), "{count}: {msg}");
    }
    let mut w = olmoe();
    assert!(w.remove_metadata("olmoe.feed_forward_length"));
    let msg = load_error(&w);
    assert!(msg.contains("olmoe.feed_forward_length"), "{msg}");
    let mut w = olmoe();
    assert!(w.remove_tensor("output.weight"));
    let msg = load_error(&w);
    assert!(msg.contains("output.weight"), "{msg}");
    let mut w = olmoe();
    let bias = [0.5f32; 64].iter().flat_map(|v| v.to_le_bytes()).collect();
    w.add_tensor("blk.2.ffn_gate_inp.bias", &[64], GgmlType::F32, bias);
    let msg = load_error(&w);
    assert!(msg.contains("blk.2.ffn_gate_inp.bias"), "{msg}");
}
