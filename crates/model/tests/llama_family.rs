//! The Llama-family forward passes (llama, qwen2, qwen3, gemma2, gemma3, olmo2, granite, phi3,
//! and the mixture-of-experts qwen3moe, qwen2moe, granitemoe (with and without a shared expert),
//! gpt-oss and olmoe) against
//! llama.cpp, on tiny models the test writes itself.
//!
//! Design: `model::testing::tiny_model_gguf` builds each GGUF in-process from a fixed seed;
//! `scripts/oracle/tiny_models.py` fed the very same bytes to llama.cpp and committed what it
//! computed under `tests/goldens/tiny/<arch>.json`, together with the bytes' sha256. Each test
//! first checks the sha256 (a drifted generator would make the comparison meaningless), then
//! loads the file with `model::load` and runs the golden's prompt and greedy continuation
//! through a `Session`. llama.cpp is never run here.
//!
//! Tolerance: both sides keep K and V in f16; llama.cpp also rounds Q, the attention
//! probabilities and the input of its F16 matmul (`blk.1.ffn_up`) to f16 where we stay in f32,
//! and sums in a different order. On logits spanning about ±13, the largest |ours − llama.cpp|
//! observed (2026-11, x86-64 AVX-512, print them with `--nocapture`) was 1.25e-2 llama,
//! 1.22e-2 qwen2, 8.9e-3 qwen3, 1.50e-2 gemma3. A float64 numpy re-implementation of the four
//! architectures is as far from each side (<= 1.6e-2, almost all of it the f16 KV cache), so
//! that is the noise floor of f16 caches, not a bias of either implementation. The same
//! reference moved by a structural mistake — RoPE halves vs pairs, gemma3's window off by one,
//! its local RoPE base, its sqrt(d_model) embedding scale, an attention scale from d_model
//! instead of head_dim — changes logits by 5 to 17. The bound below is a few times the floor
//! (other SIMD paths sum differently) and two orders of magnitude below those mistakes. Too
//! small to see here: the RMS epsilon and tanh vs erf GELU (< 3e-2 and 4e-3).

use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};

use model::testing::{
    tiny_gguf_arch, tiny_model_gguf, tiny_model_writer, tiny_seed, TINY_ARCHS, TINY_MOE_ARCHS,
    TINY_SEED,
};
use model::{LoadedModel, LogitsWanted, Session};
use serde_json::Value;
use sha2::{Digest, Sha256};

/// Largest accepted |ours − llama.cpp| on any logit.
const LOGIT_TOL: f32 = 5e-2;
/// The same for the mixture-of-experts models, whose Q8_0 (gpt-oss: MXFP4) experts round
/// activations to 8 bits in both implementations, differently (`scripts/oracle/tiny_models.py`
/// measured llama.cpp 6.3e-2 from the float64 reference on qwen3moe, 4.5e-2 on qwen2moe and
/// on gpt-oss; Tessera is 4.1e-2 from llama.cpp on gpt-oss, whose sinks, router bias, YaRN or
/// clamp, each left out, move logits by whole units: see `gpt_oss_matches_llama_cpp`).
const MOE_LOGIT_TOL: f32 = 1e-1;

/// The bound for `arch`; also the greedy margin under which a step is a near-tie.
fn tol(arch: &str) -> f32 {
    if TINY_MOE_ARCHS.contains(&arch) {
        MOE_LOGIT_TOL
    } else {
        LOGIT_TOL
    }
}

/// Every tiny architecture, dense and mixture-of-experts.
fn all_archs() -> impl Iterator<Item = &'static str> {
    TINY_ARCHS.iter().chain(TINY_MOE_ARCHS).copied()
}
/// Tokens per KV tile: small, so the 41-token runs span many tiles and windows cross tiles.
const TILE: usize = 4;
const MAX_LEN: usize = 64;

/// What llama.cpp computed for one tiny model.
struct Golden {
    sha256: String,
    prompt: Vec<u32>,
    prompt_logits: Vec<Vec<f32>>,
    continuation: Vec<u32>,
    continuation_logits: Vec<Vec<f32>>,
    text: String,
    text_tokens: Vec<u32>,
}

fn golden_path(arch: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(format!("../../tests/goldens/tiny/{arch}.json"))
}

fn read_golden(arch: &str) -> Golden {
    let path = golden_path(arch);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "{}: {e} (run scripts/oracle/tiny_models.py)",
            path.display()
        )
    });
    let v: Value =
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: bad JSON: {e}", path.display()));
    let field = |k: &str| {
        v.get(k)
            .unwrap_or_else(|| panic!("{arch} golden lacks {k:?}"))
    };
    let ids = |k: &str| -> Vec<u32> {
        let list = field(k)
            .as_array()
            .unwrap_or_else(|| panic!("{k} is not a list"));
        list.iter()
            .map(|x| x.as_u64().and_then(|x| u32::try_from(x).ok()))
            .collect::<Option<_>>()
            .unwrap_or_else(|| panic!("{arch} golden {k}: not token ids"))
    };
    let rows = |k: &str| -> Vec<Vec<f32>> {
        let list = field(k)
            .as_array()
            .unwrap_or_else(|| panic!("{k} is not a list"));
        list.iter()
            .map(|r| {
                let r = r.as_array()?;
                r.iter().map(|x| x.as_f64().map(|x| x as f32)).collect()
            })
            .collect::<Option<_>>()
            .unwrap_or_else(|| panic!("{arch} golden {k}: not rows of numbers"))
    };
    let string = |k: &str| field(k).as_str().map(str::to_string).unwrap_or_default();
    Golden {
        sha256: string("sha256"),
        prompt: ids("prompt"),
        prompt_logits: rows("prompt_logits"),
        continuation: ids("continuation"),
        continuation_logits: rows("continuation_logits"),
        text: string("text"),
        text_tokens: ids("text_tokens"),
    }
}

fn hex_sha256(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Writes `bytes` to a fresh file in this test binary's scratch dir and loads it. Each call
/// gets its own name: tests run in parallel, and rewriting a file another test has mapped
/// would change (or truncate) the bytes under it.
fn load_bytes(name: &str, bytes: &[u8]) -> Result<LoadedModel, model::ModelError> {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let path = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("{name}-{}-{n}.gguf", std::process::id()));
    std::fs::write(&path, bytes).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let loaded = model::load(&path, 1);
    // The model maps the file; on Unix the mapping outlives the directory entry.
    if cfg!(unix) {
        let _ = std::fs::remove_file(&path);
    }
    loaded
}

/// The tiny model of `arch`, after checking it is the one the golden was computed from.
fn load_tiny(arch: &str, golden: &Golden) -> LoadedModel {
    let bytes = tiny_model_gguf(arch, tiny_seed(arch));
    let sha = hex_sha256(&bytes);
    assert_eq!(
        sha, golden.sha256,
        "tiny {arch} GGUF no longer matches its golden: crates/model/src/testing.rs changed \
         what it writes; regenerate with scripts/oracle/tiny_models.py"
    );
    match load_bytes(&format!("tiny-{arch}"), &bytes) {
        Ok(m) => m,
        Err(e) => panic!("loading tiny {arch}: {e}"),
    }
}

/// The worst logit disagreement seen so far.
#[derive(Default)]
struct MaxDiff {
    diff: f32,
    at: String,
}

impl MaxDiff {
    /// Folds in one row of logits, `what` naming it for the report.
    fn row(&mut self, what: &str, ours: &[f32], theirs: &[f32]) {
        assert_eq!(ours.len(), theirs.len(), "{what}: vocab size differs");
        for (i, (a, b)) in ours.iter().zip(theirs).enumerate() {
            let d = (a - b).abs();
            // A NaN must fail the check, so the first one sticks.
            if !self.diff.is_nan() && (d.is_nan() || d > self.diff) {
                self.diff = d;
                self.at = format!("{what}, token {i}: ours {a}, llama.cpp {b}");
            }
        }
    }

    fn check(&self, arch: &str) {
        eprintln!(
            "{arch}: max |logit diff| vs llama.cpp = {:.2e} ({})",
            self.diff, self.at
        );
        let tol = tol(arch);
        assert!(
            self.diff <= tol,
            "{arch}: logits differ from llama.cpp by {} > {tol} at {}",
            self.diff,
            self.at
        );
    }
}

fn argmax(row: &[f32]) -> u32 {
    let mut best = 0;
    for (i, &x) in row.iter().enumerate() {
        if x > row[best] {
            best = i;
        }
    }
    best as u32
}

/// Runs `prompt` in chunks of `chunk` tokens asking for every position's logits.
fn prompt_logits(m: &mut LoadedModel, s: &mut Session, prompt: &[u32], chunk: usize) -> Vec<f32> {
    let (mut all, mut logits) = (Vec::new(), Vec::new());
    for piece in prompt.chunks(chunk) {
        s.run(
            &mut m.transformer,
            &[(0, piece, LogitsWanted::All)],
            &mut logits,
        )
        .unwrap_or_else(|e| panic!("forward pass failed: {e}"));
        all.extend_from_slice(&logits);
    }
    all
}

/// Prompt logits, then the greedy continuation one token at a time, against the golden.
fn check_against_llama_cpp(arch: &str) {
    let golden = read_golden(arch);
    let mut m = load_tiny(arch, &golden);
    let vocab = m.transformer.config().vocab_size;
    let mut s = Session::new(&m.transformer, 1, MAX_LEN, TILE);
    let mut diff = MaxDiff::default();

    let all = prompt_logits(&mut m, &mut s, &golden.prompt, golden.prompt.len());
    assert_eq!(
        all.len(),
        golden.prompt.len() * vocab,
        "{arch}: prompt logit rows"
    );
    for (p, (ours, theirs)) in all.chunks(vocab).zip(&golden.prompt_logits).enumerate() {
        diff.row(&format!("prompt position {p}"), ours, theirs);
    }

    // Teacher-forced on llama.cpp's greedy tokens: our choice must be its choice at every
    // step, except at a near-tie (its top two logits closer than the tolerance).
    let mut ours_row = all[all.len() - vocab..].to_vec();
    let mut theirs_row = golden.prompt_logits.last().expect("prompt logits").clone();
    let mut logits = Vec::new();
    let mut near_ties = 0;
    for (step, theirs) in golden.continuation_logits.iter().enumerate() {
        let want = golden.continuation[step];
        if argmax(&ours_row) != want {
            assert!(
                margin(&theirs_row) < tol(arch),
                "{arch}: greedy continuation departs from llama.cpp at step {step} \
                 (llama.cpp's margin {}; max logit diff so far {} at {})",
                margin(&theirs_row),
                diff.diff,
                diff.at
            );
            near_ties += 1;
        }
        s.run(
            &mut m.transformer,
            &[(0, &[want], LogitsWanted::Last)],
            &mut logits,
        )
        .unwrap_or_else(|e| panic!("{arch}: decode step {step} failed: {e}"));
        diff.row(&format!("continuation step {step}"), &logits, theirs);
        ours_row.clone_from(&logits);
        theirs_row.clone_from(theirs);
    }
    eprintln!("{arch}: {near_ties} near-tie steps chose otherwise");
    diff.check(arch);
}

/// The gap between a row's two largest logits.
fn margin(row: &[f32]) -> f32 {
    let (mut a, mut b) = (f32::NEG_INFINITY, f32::NEG_INFINITY);
    for &x in row {
        if x > a {
            (a, b) = (x, a);
        } else if x > b {
            b = x;
        }
    }
    a - b
}

#[test]
fn llama_matches_llama_cpp() {
    check_against_llama_cpp("llama");
}

#[test]
fn qwen2_matches_llama_cpp() {
    check_against_llama_cpp("qwen2");
}

#[test]
fn qwen3_matches_llama_cpp() {
    check_against_llama_cpp("qwen3");
}

/// Gemma 2's tiny model caps attention scores at 1.5 and logits at 4 (the float64 reference
/// moves by 5.7 without the attention cap), so both soft-caps are checked as well as its
/// alternating windows.
#[test]
fn gemma2_matches_llama_cpp() {
    check_against_llama_cpp("gemma2");
}

/// OLMo 2: no pre-norms, and one QK-norm over all of Q and of K.
#[test]
fn olmo2_matches_llama_cpp() {
    check_against_llama_cpp("olmo2");
}

/// Granite's four multipliers (embeddings, attention, residual, logits); each, left out, moves
/// the float64 reference's logits by 3.4 to 6.1.
#[test]
fn granite_matches_llama_cpp() {
    check_against_llama_cpp("granite");
}

#[test]
fn granitemoe_matches_llama_cpp() {
    check_against_llama_cpp("granitemoe");
}

/// Granite MoE Shared: a `granitemoe` file whose layers add a shared expert without a gate.
#[test]
fn granitemoe_with_a_shared_expert_matches_llama_cpp() {
    check_against_llama_cpp("granitemoe-shared");
}

/// Phi 3: fused QKV and gate-up projections, LongRoPE's long factors and attention factor.
#[test]
fn phi3_matches_llama_cpp() {
    check_against_llama_cpp("phi3");
}

#[test]
fn gemma3_matches_llama_cpp() {
    check_against_llama_cpp("gemma3");
}

#[test]
fn qwen3moe_matches_llama_cpp() {
    check_against_llama_cpp("qwen3moe");
}

#[test]
fn qwen2moe_matches_llama_cpp() {
    check_against_llama_cpp("qwen2moe");
}

/// OLMoE: pre-norms, one QK-norm over all of Q and of K, and 64 experts of which each token
/// takes 8, weighted by their softmax probabilities over all 64, not renormalised. Measured
/// 8.97e-3 from llama.cpp here and in the chunked, ragged and batch-of-16 tests (AMD EPYC Zen 4,
/// AVX-512), under `MOE_LOGIT_TOL`; renormalising the picked weights departs from llama.cpp's
/// greedy tokens, with logits 3.8 apart.
#[test]
fn olmoe_matches_llama_cpp() {
    check_against_llama_cpp("olmoe");
}

/// gpt-oss: Q/K/V and output biases, a sink logit per head, every even layer a sliding window,
/// YaRN, the router's and the experts' biases, softmax over the top-k logits, SwiGLU-OAI on
/// MXFP4 experts.
#[test]
fn gpt_oss_matches_llama_cpp() {
    check_against_llama_cpp("gpt-oss");
}

/// Sixteen sequences in one batch, each a different prefix of the golden prompt (so the MoE
/// layers route many tokens of many sequences to each expert at once): every row must be
/// llama.cpp's for its own position.
#[test]
fn a_batch_of_sixteen_sequences_matches_llama_cpp() {
    for arch in all_archs() {
        let g = read_golden(arch);
        let mut m = load_tiny(arch, &g);
        let vocab = m.transformer.config().vocab_size;
        let mut s = Session::new(&m.transformer, 16, MAX_LEN, TILE);
        let lens: Vec<usize> = (0..16).map(|i| g.prompt.len() - (i * 5) % 17).collect();
        let work: Vec<(usize, &[u32], LogitsWanted)> = lens
            .iter()
            .enumerate()
            .map(|(i, &n)| (i, &g.prompt[..n], LogitsWanted::All))
            .collect();
        let mut logits = Vec::new();
        s.run(&mut m.transformer, &work, &mut logits)
            .unwrap_or_else(|e| panic!("{arch}: forward pass failed: {e}"));
        assert_eq!(logits.len(), lens.iter().sum::<usize>() * vocab);
        let mut diff = MaxDiff::default();
        let mut rows = logits.chunks(vocab);
        for (i, &n) in lens.iter().enumerate() {
            for (p, theirs) in g.prompt_logits[..n].iter().enumerate() {
                let ours = rows.next().expect("a row per token");
                diff.row(&format!("sequence {i}, position {p}"), ours, theirs);
            }
        }
        diff.check(arch);
    }
}

/// Chunk boundaries (here every 5 tokens, across tiles of 4 and gemma3's window of 8) must
/// not change any position's logits.
#[test]
fn chunked_prompt_matches_llama_cpp() {
    for arch in all_archs() {
        let golden = read_golden(arch);
        let mut m = load_tiny(arch, &golden);
        let vocab = m.transformer.config().vocab_size;
        let mut s = Session::new(&m.transformer, 1, MAX_LEN, TILE);
        let all = prompt_logits(&mut m, &mut s, &golden.prompt, 5);
        assert_eq!(
            all.len(),
            golden.prompt.len() * vocab,
            "{arch}: prompt logit rows"
        );
        let mut diff = MaxDiff::default();
        for (p, (ours, theirs)) in all.chunks(vocab).zip(&golden.prompt_logits).enumerate() {
            diff.row(&format!("chunked prompt position {p}"), ours, theirs);
        }
        diff.check(arch);
    }
}

/// Two sequences sharing batches, one lagging: a whole prompt next to a partial one, then a
/// prompt's remainder next to a decode step, then decode steps at different positions. Every
/// row must still be llama.cpp's for its own sequence and position.
#[test]
fn ragged_batches_of_two_sequences_match_llama_cpp() {
    for arch in all_archs() {
        let g = read_golden(arch);
        let mut m = load_tiny(arch, &g);
        let vocab = m.transformer.config().vocab_size;
        let mut s = Session::new(&m.transformer, 2, MAX_LEN, TILE);
        let mut diff = MaxDiff::default();
        let mut logits = Vec::new();
        let mut run = |s: &mut Session, work: &[(usize, &[u32], LogitsWanted)]| {
            s.run(&mut m.transformer, work, &mut logits)
                .unwrap_or_else(|e| panic!("{arch}: forward pass failed: {e}"));
            logits
                .chunks(vocab)
                .map(<[f32]>::to_vec)
                .collect::<Vec<_>>()
        };
        let (p, split) = (&g.prompt[..], 13);

        let rows = run(
            &mut s,
            &[
                (0, p, LogitsWanted::All),
                (1, &p[..split], LogitsWanted::All),
            ],
        );
        assert_eq!(rows.len(), p.len() + split, "{arch}: batch 1 logit rows");
        let want = g.prompt_logits.iter().chain(&g.prompt_logits[..split]);
        for (i, (ours, theirs)) in rows.iter().zip(want).enumerate() {
            diff.row(&format!("batch 1, row {i}"), ours, theirs);
        }

        let first = &g.continuation[..1];
        let rows = run(
            &mut s,
            &[
                (1, &p[split..], LogitsWanted::All),
                (0, first, LogitsWanted::Last),
            ],
        );
        let want = g.prompt_logits[split..]
            .iter()
            .chain(&g.continuation_logits[..1]);
        for (i, (ours, theirs)) in rows.iter().zip(want).enumerate() {
            diff.row(&format!("batch 2, row {i}"), ours, theirs);
        }

        // Sequence 1 replays the golden continuation one step behind sequence 0.
        for step in 1..g.continuation.len() {
            let (lead, lag) = (
                &g.continuation[step..=step],
                &g.continuation[step - 1..step],
            );
            let rows = run(
                &mut s,
                &[(0, lead, LogitsWanted::Last), (1, lag, LogitsWanted::Last)],
            );
            assert_eq!(rows.len(), 2, "{arch}: decode {step} logit rows");
            diff.row(
                &format!("decode {step}, seq 0"),
                &rows[0],
                &g.continuation_logits[step],
            );
            diff.row(
                &format!("decode {step}, seq 1"),
                &rows[1],
                &g.continuation_logits[step - 1],
            );
        }
        diff.check(arch);
    }
}

#[test]
fn gemma3_tiny_has_one_global_layer_in_six() {
    let golden = read_golden("gemma3");
    let m = load_tiny("gemma3", &golden);
    let windows: Vec<Option<usize>> = m
        .transformer
        .config()
        .layers
        .iter()
        .map(|l| l.window)
        .collect();
    let w = Some(8);
    assert_eq!(windows, [w, w, w, w, w, None, w]);
}

#[test]
fn gemma2_tiny_slides_every_other_layer_and_caps_its_scores() {
    let golden = read_golden("gemma2");
    let m = load_tiny("gemma2", &golden);
    let cfg = m.transformer.config();
    let windows: Vec<Option<usize>> = cfg.layers.iter().map(|l| l.window).collect();
    assert_eq!(windows, [Some(8), None, Some(8), None]);
    assert_eq!((cfg.attn_softcap, cfg.final_logit_softcap), (1.5, 4.0));
    assert_eq!(cfg.attn_scale, 1.0 / 32f32.sqrt(), "1/sqrt(head_dim)");
}

#[test]
fn gpt_oss_tiny_slides_every_other_layer_with_yarn_on_all() {
    let golden = read_golden("gpt-oss");
    let m = load_tiny("gpt-oss", &golden);
    let cfg = m.transformer.config();
    let windows: Vec<Option<usize>> = cfg.layers.iter().map(|l| l.window).collect();
    assert_eq!(windows, [Some(8), None, Some(8), None]);
    // YaRN factor 4: cos and sin times 1 + 0.1 ln 4 on the sliding layers too.
    let mscale = 1.0 + 0.1 * 4f32.ln();
    for l in &cfg.layers {
        assert!((l.rope_mscale - mscale).abs() < 1e-6, "{}", l.rope_mscale);
        assert_eq!(l.rope_inv_freq, cfg.layers[1].rope_inv_freq);
    }
    assert!(cfg.attn_sinks && cfg.attn_out_bias);
    assert_eq!(cfg.attn_scale, 1.0 / 32f32.sqrt(), "1/sqrt(rope dims)");
    let moe = cfg.moe.expect("gpt-oss is a mixture of experts");
    assert!(moe.biases && moe.softmax_after_topk);
    assert_eq!((moe.n_expert, moe.n_used), (8, 4));
}

/// gpt-oss's MXFP4 experts (the tiny model's last layer) are repacked at load for the batched
/// kernels where the CPU has them, as the other packable formats are; `gpt_oss_matches_llama_cpp`
/// checks what they compute.
#[test]
fn gpt_oss_mxfp4_experts_are_packed_at_load() {
    let golden = read_golden("gpt-oss");
    let m = load_tiny("gpt-oss", &golden);
    let weights = m.transformer.weights();
    let last = weights.layers.last().expect("layers");
    let model::weights::Ffn::Moe(moe) = &last.ffn else {
        panic!("gpt-oss's FFN is a mixture of experts")
    };
    let want = if kernels::isa() >= kernels::Isa::Avx2 {
        kernels::Layout::X16
    } else {
        kernels::Layout::RowMajor
    };
    for e in [&moe.gate, &moe.up, &moe.down] {
        assert_eq!(e.ty, gguf::GgmlType::MXFP4);
        assert_eq!(e.layout, want, "{}x{}", e.rows, e.cols);
    }
}

/// The error of loading `arch`'s tiny file after `edit`; panics if it loads.
fn refusal(arch: &str, edit: impl FnOnce(&mut gguf::GgufWriter)) -> String {
    let mut w = tiny_model_writer(arch, tiny_seed(arch)).expect("a tiny arch");
    edit(&mut w);
    match load_bytes(&format!("tiny-{arch}-edited"), &w.write_to_vec()) {
        Ok(_) => panic!("the edited tiny {arch} was accepted"),
        Err(e) => e.to_string(),
    }
}

/// gpt-oss's sinks and biases are required where llama.cpp requires them, and refused by name
/// in an architecture that would ignore them.
#[test]
fn gpt_oss_tensors_are_required_there_and_refused_elsewhere() {
    for t in [
        "attn_sinks.weight",
        "attn_output.bias",
        "ffn_gate_inp.bias",
        "ffn_down_exps.bias",
    ] {
        let name = format!("blk.2.{t}");
        let msg = refusal("gpt-oss", |w| assert!(w.remove_tensor(&name), "{name}"));
        assert!(msg.contains(&name), "missing {name}: {msg}");
    }
    let msg = refusal("gpt-oss", |w| {
        assert!(w.remove_metadata("gpt-oss.attention.sliding_window"));
    });
    assert!(msg.contains("gpt-oss.attention.sliding_window"), "{msg}");
    let msg = refusal("qwen3moe", |w| {
        let sinks = [0.5f32; 4].iter().flat_map(|v| v.to_le_bytes()).collect();
        w.add_tensor("blk.1.attn_sinks.weight", &[4], gguf::GgmlType::F32, sinks);
    });
    assert!(msg.contains("blk.1.attn_sinks.weight"), "{msg}");
}

#[test]
fn tokenizer_matches_llama_cpp_on_tiny_vocab() {
    for arch in all_archs() {
        let golden = read_golden(arch);
        let m = load_tiny(arch, &golden);
        let ids = m.tokenizer.encode(&golden.text, true, false);
        assert_eq!(
            ids, golden.text_tokens,
            "{arch}: tokens of {:?}",
            golden.text
        );
    }
}

#[test]
fn unknown_architecture_is_refused_naming_it_and_the_supported_ones() {
    let mut w = tiny_model_writer("llama", TINY_SEED).expect("llama is a tiny arch");
    w.add_metadata("general.architecture", "mamba");
    let msg = match load_bytes("tiny-mamba", &w.write_to_vec()) {
        Ok(_) => panic!("an architecture named mamba was accepted"),
        Err(e) => e.to_string(),
    };
    assert!(
        msg.contains("\"mamba\""),
        "error does not name the architecture: {msg}"
    );
    for name in TINY_ARCHS.iter().chain(TINY_MOE_ARCHS) {
        let arch = tiny_gguf_arch(name).expect("a tiny model has an architecture");
        assert!(msg.contains(arch), "error does not list {arch}: {msg}");
    }
}
