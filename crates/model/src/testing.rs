//! Tiny GGUF models, written by tests, for checking each architecture against llama.cpp.
//!
//! Design: one `TinySpec` per architecture lists the handful of switches that distinguish it
//! (tied output, QKV bias, QK-norm, post-norms, sliding window, head width). From a spec and a
//! seed, `tiny_model_writer` builds a complete GGUF — metadata exactly as llama.cpp's loader
//! reads it, a small SentencePiece ("llama") vocabulary, and random weights — so the same bytes
//! can be fed to llama.cpp (by `scripts/oracle/tiny_models.py`, which stores its logits as
//! goldens) and to our loader (by `tests/llama_family.rs`).
//!
//! Invariants:
//! - The output is a pure function of `(arch, seed)`: weights come from our own SplitMix64 and
//!   only exactly rounded float operations, so the bytes (and their sha256, which the goldens
//!   record) are the same on every platform and every run. Changing anything here changes the
//!   bytes and requires regenerating the goldens.
//! - Matrices are stored as F32 except one F16 matrix per model (`blk.1.ffn_up.weight`), so
//!   the F16 path is exercised too. Dims are in GGUF order: `[input features, output features]`.
//! - Weight scales keep activations of order one and let the blocks, not the embeddings,
//!   dominate the residual stream: matrices are uniform in ±2/sqrt(fan_in) (each projection
//!   slightly amplifies), token embeddings (also the output projection when tied) uniform in
//!   ±0.65. With tied embeddings a residual made mostly of the input token's own embedding
//!   would make every position predict its input token, and errors in the blocks would barely
//!   reach the logits. Gemma scales embeddings by sqrt(d_model), so its post-norm weights sit
//!   near 3 (real Gemma checkpoints also have large post-norm weights); every other norm weight
//!   is in 1 ± 0.25. Logits then spread over a few units, so greedy choices are rarely near-ties.

use gguf::{Array, GgmlType, GgufWriter};

pub mod encoders;
pub mod fullsize;
pub mod kv;
pub mod lora;
mod moe;

use moe::TinyMoe;

/// The dense architectures `tiny_model_gguf` can build (each has llama.cpp goldens).
pub const TINY_ARCHS: &[&str] = &[
    "llama", "qwen2", "qwen3", "gemma2", "gemma3", "olmo2", "granite", "phi3",
];

/// The mixture-of-experts architectures `tiny_model_gguf` can build (each has llama.cpp goldens).
/// `granitemoe-shared` is a `granitemoe` file with a shared expert (Granite MoE Shared).
pub const TINY_MOE_ARCHS: &[&str] = &[
    "qwen3moe",
    "qwen2moe",
    "granitemoe",
    "granitemoe-shared",
    "gpt-oss",
    "olmoe",
];

/// The seed of the committed goldens (`tests/goldens/tiny/`). Chosen among the first few dozen
/// so that in every architecture's 16-token greedy continuation the top two logits of each
/// step are at least 0.1 apart (llama.cpp's numbers): a near-tie would make the greedy
/// comparison hinge on rounding rather than on the model being right.
pub const TINY_SEED: u64 = 7;

/// The seed the goldens of `arch`'s tiny model were made with: [`TINY_SEED`], except for the
/// mixture-of-experts models, whose seeds were searched so that no token of the goldens' runs
/// sits on a routing near-tie.
///
/// With [`TINY_SEED`], one token of the tiny qwen3moe's golden run had its 4th and 5th router
/// probabilities 1e-4 apart in one layer: llama.cpp and Tessera, each rounding differently,
/// picked different experts there (logits 3.7 apart at that one position). Seeds 7 to 39 gave
/// smallest gaps from 2e-5 to 5e-3 (by the float64 reference of
/// `scripts/oracle/tiny_models.py`, over the goldens' 41 tokens, every layer); these are the
/// largest: 5.0e-3 for qwen3moe (seed 23), 2.7e-3 for qwen2moe (seed 34).
///
/// The tiny gpt-oss routes 4 of 8 experts by raw logits, so its near-ties are gaps between the
/// 4th and 5th largest router logits. Among seeds 7 to 299 whose greedy margins all exceed 0.1
/// (float64 reference), seed 290 has the largest smallest gap: 1.2e-2 over the goldens' 41
/// tokens and every layer (seed 7: 2.0e-3); its smallest greedy margin is 0.15.
///
/// The tiny OLMoE picks 8 of 64 experts, so the gaps that matter are between the 8th and 9th
/// largest router logits (the same order as the probabilities). Among seeds 7 to 300 whose
/// greedy margins all exceed 0.1 (float64 reference), seed 114 has the largest smallest gap:
/// 3.1e-3 over the goldens' 41 tokens and every layer (seed 7: 1.0e-3, and its smallest
/// greedy margin is 0.094); its smallest greedy margin is 0.33.
///
/// With [`TINY_SEED`], the tiny olmo2's greedy run had a step whose top two logits were 0.034
/// apart (under `scripts/oracle/tiny_models.py`'s 0.05); seed 10 gives 0.20.
pub fn tiny_seed(arch: &str) -> u64 {
    match arch {
        "qwen3moe" => 23,
        "qwen2moe" => 34,
        "olmo2" => 10,
        "gpt-oss" => 290,
        "olmoe" => 114,
        _ => TINY_SEED,
    }
}

/// Ordinary SentencePiece pieces after the control and byte tokens ("▁" marks a word start).
/// Scores fall with the position in this list, so earlier pieces win merges.
const PIECES: &[&str] = &[
    "▁hello", "▁world", "▁the", "▁tiny", "▁model", "▁he", "▁wor", "▁th", "▁ti", "▁mo", "▁h", "▁w",
    "▁t", "▁m", "▁a", "llo", "ld", "ll", "he", "or", "in", "er", "el", "de", "ny", "od", "▁", "a",
    "b", "c", "d", "e", "f", "g", "h", "i", "j", "k", "l", "m", "n", "o", "p", "q", "r", "s", "t",
    "u", "v", "w", "x", "y", "z", ",", ".",
];

/// llama.cpp's token types.
const TYPE_NORMAL: i32 = 1;
const TYPE_UNKNOWN: i32 = 2;
const TYPE_CONTROL: i32 = 3;
const TYPE_BYTE: i32 = 6;

/// Half-width of the uniform token embeddings (and untied output rows).
const EMBED_HALF_WIDTH: f32 = 0.65;
/// Projection weights are uniform in ±MATRIX_GAIN/sqrt(fan_in).
const MATRIX_GAIN: f32 = 2.0;

const UNK_ID: u32 = 0;
const BOS_ID: u32 = 1;
const EOS_ID: u32 = 2;

/// The shape of one tiny architecture.
#[derive(Clone, Copy, Debug)]
struct TinySpec {
    arch: &'static str,
    n_layers: usize,
    d_model: usize,
    n_heads: usize,
    n_kv_heads: usize,
    head_dim: usize,
    d_ff: usize,
    context: u32,
    rms_eps: f32,
    rope_base: f32,
    /// Write `attention.key_length`/`value_length` (needed when head_dim != d_model/n_heads).
    key_length: bool,
    /// Write `rope.dimension_count` (llama's converter does).
    rope_dims: bool,
    /// A separate `output.weight`; otherwise the embeddings are reused.
    untied_output: bool,
    qkv_bias: bool,
    qk_norm: bool,
    /// OLMo 2, OLMoE: the QK-norm weights span all of Q and of K.
    qk_norm_whole: bool,
    /// OLMo 2: no norms before attention and the MLP.
    no_pre_norms: bool,
    post_norms: bool,
    sliding_window: Option<u32>,
    /// Gemma 2's `attn_logit_softcapping` and `final_logit_softcapping`.
    softcaps: Option<(f32, f32)>,
    /// Granite's `embedding_scale`, `attention.scale`, `residual_scale` and `logit_scale`.
    granite: Option<[f32; 4]>,
    /// Phi 3: fused `attn_qkv` and gate-up `ffn_up`, LongRoPE factors for a context longer
    /// than `PHI3_ORIGINAL_CONTEXT`, and their attention factor.
    phi: bool,
    /// Every layer's FFN is a mixture of experts.
    moe: Option<TinyMoe>,
    /// gpt-oss: YaRN, output-projection biases, sinks, `post_attention_norm` as the FFN norm,
    /// MXFP4 experts with biases (see `moe`).
    gpt_oss: bool,
}

/// Granite's `embedding_scale`, `attention.scale`, `residual_scale` and `logit_scale` for
/// the tiny models: milder than Granite 3.x 2B's (12, 1/64, 0.22, 8), which shrink this
/// model's logits until an attention scale four times too large moves them by only 0.07;
/// with these, leaving out any one moves them by far more than the test's tolerance.
const GRANITE_SCALES: [f32; 4] = [2.0, 0.5, 0.5, 1.5];

/// The tiny phi3's `rope.scaling.original_context_length` (its context is 256) and
/// `rope.scaling.attn_factor`.
const PHI3_ORIGINAL_CONTEXT: u32 = 64;
const PHI3_ATTN_FACTOR: f32 = 1.25;

impl TinySpec {
    const BASE: TinySpec = TinySpec {
        arch: "llama",
        n_layers: 3,
        d_model: 64,
        n_heads: 4,
        n_kv_heads: 2,
        head_dim: 16,
        d_ff: 128,
        context: 256,
        rms_eps: 1e-5,
        rope_base: 10_000.0,
        key_length: false,
        rope_dims: false,
        untied_output: false,
        qkv_bias: false,
        qk_norm: false,
        qk_norm_whole: false,
        no_pre_norms: false,
        post_norms: false,
        sliding_window: None,
        softcaps: None,
        granite: None,
        phi: false,
        moe: None,
        gpt_oss: false,
    };

    fn for_arch(arch: &str) -> Option<TinySpec> {
        Self::dense(arch).or_else(|| Self::moe(arch))
    }

    /// The dense architectures.
    fn dense(arch: &str) -> Option<TinySpec> {
        let b = TinySpec::BASE;
        Some(match arch {
            "llama" => TinySpec {
                rope_dims: true,
                untied_output: true,
                ..b
            },
            "qwen2" => TinySpec {
                arch: "qwen2",
                rms_eps: 1e-6,
                rope_base: 1_000_000.0,
                qkv_bias: true,
                ..b
            },
            // Like Qwen3-0.6B, the heads are wider than d_model / n_heads.
            "qwen3" => TinySpec {
                arch: "qwen3",
                head_dim: 32,
                key_length: true,
                rms_eps: 1e-6,
                rope_base: 1_000_000.0,
                qk_norm: true,
                ..b
            },
            // Four layers: sliding-window (8), global, sliding, global. Caps far below Gemma 2's
            // (50, 30), so that they bend this model's scores and logits.
            "gemma2" => TinySpec {
                arch: "gemma2",
                n_layers: 4,
                head_dim: 32,
                key_length: true,
                rms_eps: 1e-6,
                post_norms: true,
                sliding_window: Some(8),
                softcaps: Some((1.5, 4.0)),
                ..b
            },
            // Granite's four multipliers on Llama's layout, tied output.
            "granite" => TinySpec {
                arch: "granite",
                rope_dims: true,
                granite: Some(GRANITE_SCALES),
                ..b
            },
            // Phi-3.5-mini's layout in small: served past its original context, so LongRoPE's
            // long factors apply (in llama.cpp too, at the goldens' 256-token context).
            "phi3" => TinySpec {
                arch: "phi3",
                rope_dims: true,
                untied_output: true,
                phi: true,
                ..b
            },
            // OLMo 2 1B's shape in small: untied output, post-norms only, whole-width QK-norm.
            "olmo2" => TinySpec {
                arch: "olmo2",
                rms_eps: 1e-6,
                rope_base: 500_000.0,
                untied_output: true,
                qk_norm: true,
                qk_norm_whole: true,
                no_pre_norms: true,
                post_norms: true,
                ..b
            },
            // Seven layers so the pattern of six (five sliding, one global) has its global layer
            // at index 5 and starts again; a window of 8 matters in a 24-token prompt.
            "gemma3" => TinySpec {
                arch: "gemma3",
                n_layers: 7,
                head_dim: 32,
                key_length: true,
                rms_eps: 1e-6,
                rope_base: 1_000_000.0,
                qk_norm: true,
                post_norms: true,
                sliding_window: Some(8),
                ..b
            },
            _ => return None,
        })
    }

    fn q_dim(&self) -> usize {
        self.n_heads * self.head_dim
    }

    fn kv_dim(&self) -> usize {
        self.n_kv_heads * self.head_dim
    }
}

/// SplitMix64: tiny, seedable, and identical everywhere.
struct SplitMix64(u64);

impl SplitMix64 {
    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in [-1, 1), from the top 24 bits (exact in f32).
    fn next_signed(&mut self) -> f32 {
        let unit = (self.next_u64() >> 40) as f32 / (1u32 << 24) as f32;
        2.0 * unit - 1.0
    }

    /// `n` values uniform in [centre - half_width, centre + half_width).
    fn fill(&mut self, n: usize, centre: f32, half_width: f32) -> Vec<f32> {
        (0..n)
            .map(|_| centre + half_width * self.next_signed())
            .collect()
    }
}

/// The GGUF architecture (`general.architecture`) of tiny model `name`: the name itself, except
/// for variants such as `granitemoe-shared` (a `granitemoe` file).
pub fn tiny_gguf_arch(name: &str) -> Option<&'static str> {
    TinySpec::for_arch(name).map(|s| s.arch)
}

/// The complete GGUF file of a tiny `arch` model (one of [`TINY_ARCHS`]) with weights drawn
/// from `seed`.
///
/// # Panics
/// If `arch` is not one of [`TINY_ARCHS`]: that is a mistake in the calling test.
pub fn tiny_model_gguf(arch: &str, seed: u64) -> Vec<u8> {
    match tiny_model_writer(arch, seed) {
        Some(w) => w.write_to_vec(),
        None => panic!(
            "no tiny model for {arch:?} (have: {}, {})",
            TINY_ARCHS.join(", "),
            TINY_MOE_ARCHS.join(", ")
        ),
    }
}

/// The writer behind [`tiny_model_gguf`], for tests that alter the file before writing it;
/// `None` for an architecture not in [`TINY_ARCHS`].
pub fn tiny_model_writer(arch: &str, seed: u64) -> Option<GgufWriter> {
    let spec = TinySpec::for_arch(arch)?;
    let mut w = GgufWriter::new();
    write_hparams(&mut w, &spec);
    write_vocab(&mut w);
    write_weights(&mut w, &spec, &mut SplitMix64(seed));
    Some(w)
}

/// A tiny Qwen3 converted as an embedding model, Qwen3-Embedding's way: the tiny `qwen3` file
/// with `qwen3.pooling_type` = 3 (last token).
pub fn tiny_qwen3_embedding_gguf(seed: u64) -> Vec<u8> {
    let mut w = tiny_model_writer("qwen3", seed).unwrap_or_else(|| panic!("tiny qwen3"));
    w.add_metadata("qwen3.pooling_type", 3u32);
    w.write_to_vec()
}

/// The tiny vocabulary's `tokenizer.*` metadata (a tokenizer source for `fullsize` in tests).
pub fn tiny_tokenizer_metadata() -> gguf::Metadata {
    let mut w = GgufWriter::new();
    write_vocab(&mut w);
    match gguf::parse(&w.write_to_vec()) {
        Ok(parsed) => parsed.metadata,
        Err(e) => panic!("the tiny vocabulary does not parse: {e}"),
    }
}

/// Token ids of the tiny vocabulary's `<s>` and `</s>`.
pub fn tiny_bos_eos() -> (u32, u32) {
    (BOS_ID, EOS_ID)
}

/// Number of tokens in the tiny vocabulary.
pub fn tiny_vocab_size() -> usize {
    3 + 256 + PIECES.len()
}

fn write_hparams(w: &mut GgufWriter, s: &TinySpec) {
    let key = |k: &str| format!("{}.{k}", s.arch);
    w.add_metadata("general.architecture", s.arch);
    // llama.cpp gives a model named like "phi3" the special tokens of Phi 3's vocabulary
    // (`<|endoftext|>`), which the tiny one lacks.
    let name = match s.phi {
        true => "tiny-phi-three".to_string(),
        false => format!("tiny-{}", s.arch),
    };
    w.add_metadata("general.name", name);
    w.add_metadata(key("block_count"), s.n_layers as u32);
    w.add_metadata(key("context_length"), s.context);
    w.add_metadata(key("embedding_length"), s.d_model as u32);
    w.add_metadata(key("feed_forward_length"), s.d_ff as u32);
    w.add_metadata(key("attention.head_count"), s.n_heads as u32);
    w.add_metadata(key("attention.head_count_kv"), s.n_kv_heads as u32);
    w.add_metadata(key("attention.layer_norm_rms_epsilon"), s.rms_eps);
    w.add_metadata(key("rope.freq_base"), s.rope_base);
    if s.rope_dims {
        w.add_metadata(key("rope.dimension_count"), s.head_dim as u32);
    }
    if s.key_length {
        w.add_metadata(key("attention.key_length"), s.head_dim as u32);
        w.add_metadata(key("attention.value_length"), s.head_dim as u32);
    }
    if let Some(moe) = s.moe {
        w.add_metadata(key("expert_count"), moe.n_expert as u32);
        w.add_metadata(key("expert_used_count"), moe.n_used as u32);
        if moe.ff_key {
            w.add_metadata(key("expert_feed_forward_length"), moe.ff as u32);
        }
        if let Some(sff) = moe.shared_ff {
            w.add_metadata(key("expert_shared_feed_forward_length"), sff as u32);
        }
    }
    if let Some(window) = s.sliding_window {
        w.add_metadata(key("attention.sliding_window"), window);
    }
    if s.phi {
        w.add_metadata(
            key("rope.scaling.original_context_length"),
            PHI3_ORIGINAL_CONTEXT,
        );
        w.add_metadata(key("rope.scaling.attn_factor"), PHI3_ATTN_FACTOR);
    }
    if let Some([embedding, attention, residual, logit]) = s.granite {
        w.add_metadata(key("embedding_scale"), embedding);
        w.add_metadata(key("attention.scale"), attention);
        w.add_metadata(key("residual_scale"), residual);
        w.add_metadata(key("logit_scale"), logit);
    }
    if let Some((attn, last)) = s.softcaps {
        w.add_metadata(key("attn_logit_softcapping"), attn);
        w.add_metadata(key("final_logit_softcapping"), last);
    }
    if s.gpt_oss {
        moe::write_gpt_oss_hparams(w, s);
    }
}

/// A SentencePiece vocabulary llama.cpp accepts: `<unk>`, `<s>`, `</s>`, the 256 byte tokens
/// (so any text can be encoded by byte fallback) and a few ordinary pieces.
fn write_vocab(w: &mut GgufWriter) {
    let mut tokens = vec!["<unk>".to_string(), "<s>".to_string(), "</s>".to_string()];
    let mut types = vec![TYPE_UNKNOWN, TYPE_CONTROL, TYPE_CONTROL];
    tokens.extend((0..=255u8).map(|b| format!("<0x{b:02X}>")));
    types.resize(types.len() + 256, TYPE_BYTE);
    tokens.extend(PIECES.iter().map(|p| p.to_string()));
    types.resize(types.len() + PIECES.len(), TYPE_NORMAL);
    let mut scores = vec![0.0f32; 3 + 256];
    scores.extend((0..PIECES.len()).map(|i| -(i as f32) - 1.0));

    w.add_metadata("tokenizer.ggml.model", "llama");
    w.add_metadata("tokenizer.ggml.tokens", Array::String(tokens));
    w.add_metadata("tokenizer.ggml.scores", scores);
    w.add_metadata("tokenizer.ggml.token_type", types);
    w.add_metadata("tokenizer.ggml.unknown_token_id", UNK_ID);
    w.add_metadata("tokenizer.ggml.bos_token_id", BOS_ID);
    w.add_metadata("tokenizer.ggml.eos_token_id", EOS_ID);
    w.add_metadata("tokenizer.ggml.add_bos_token", true);
    w.add_metadata("tokenizer.ggml.add_eos_token", false);
}

fn write_weights(w: &mut GgufWriter, s: &TinySpec, rng: &mut SplitMix64) {
    let (d, q, kv, ff, hd) = (s.d_model, s.q_dim(), s.kv_dim(), s.d_ff, s.head_dim);
    let vocab = tiny_vocab_size();
    add_f32(
        w,
        "token_embd.weight",
        &[d, vocab],
        rng.fill(d * vocab, 0.0, EMBED_HALF_WIDTH),
    );
    for i in 0..s.n_layers {
        let n = |t: &str| format!("blk.{i}.{t}");
        if !s.no_pre_norms {
            add_f32(w, &n("attn_norm.weight"), &[d], norm(rng, d));
        }
        if s.phi {
            add_matrix(w, &n("attn_qkv.weight"), d, q + 2 * kv, rng);
        } else {
            add_matrix(w, &n("attn_q.weight"), d, q, rng);
            add_matrix(w, &n("attn_k.weight"), d, kv, rng);
            add_matrix(w, &n("attn_v.weight"), d, kv, rng);
        }
        if s.qkv_bias {
            add_f32(w, &n("attn_q.bias"), &[q], rng.fill(q, 0.0, 0.1));
            add_f32(w, &n("attn_k.bias"), &[kv], rng.fill(kv, 0.0, 0.1));
            add_f32(w, &n("attn_v.bias"), &[kv], rng.fill(kv, 0.0, 0.1));
        }
        if s.qk_norm {
            let (qn, kn) = if s.qk_norm_whole { (q, kv) } else { (hd, hd) };
            add_f32(w, &n("attn_q_norm.weight"), &[qn], norm(rng, qn));
            add_f32(w, &n("attn_k_norm.weight"), &[kn], norm(rng, kn));
        }
        add_matrix(w, &n("attn_output.weight"), q, d, rng);
        if s.gpt_oss {
            moe::write_gpt_oss_attention(w, s, i, rng);
        }
        if s.post_norms {
            add_f32(w, &n("post_attention_norm.weight"), &[d], post_norm(rng, d));
        }
        if s.gpt_oss {
            // llama.cpp's name for gpt-oss's norm before the FFN.
            add_f32(w, &n("post_attention_norm.weight"), &[d], norm(rng, d));
        } else if !s.no_pre_norms {
            add_f32(w, &n("ffn_norm.weight"), &[d], norm(rng, d));
        }
        if let Some(moe) = s.moe {
            moe::write_experts(w, s, i, moe, rng);
            continue;
        }
        if s.phi {
            add_matrix(w, &n("ffn_up.weight"), d, 2 * ff, rng);
        } else {
            add_matrix(w, &n("ffn_gate.weight"), d, ff, rng);
            if i == 1 {
                let up = rng.fill(d * ff, 0.0, fan_in_scale(d));
                add_f16(w, &n("ffn_up.weight"), &[d, ff], &up);
            } else {
                add_matrix(w, &n("ffn_up.weight"), d, ff, rng);
            }
        }
        add_matrix(w, &n("ffn_down.weight"), ff, d, rng);
        if s.post_norms {
            add_f32(w, &n("post_ffw_norm.weight"), &[d], post_norm(rng, d));
        }
    }
    if s.phi {
        // Factors that bend every frequency, the long ones more.
        let half = hd / 2;
        let long: Vec<f32> = (0..half).map(|i| 1.0 + 0.75 * i as f32).collect();
        let short: Vec<f32> = (0..half).map(|i| 1.0 + 0.1 * i as f32).collect();
        add_f32(w, "rope_factors_long.weight", &[half], long);
        add_f32(w, "rope_factors_short.weight", &[half], short);
    }
    add_f32(w, "output_norm.weight", &[d], norm(rng, d));
    if s.untied_output {
        let out = rng.fill(d * vocab, 0.0, EMBED_HALF_WIDTH);
        add_f32(w, "output.weight", &[d, vocab], out);
    }
}

/// RMS-norm weights near one (GGUF Gemma files store 1 + w, so this holds for Gemma too).
fn norm(rng: &mut SplitMix64, n: usize) -> Vec<f32> {
    rng.fill(n, 1.0, 0.25)
}

/// Gemma's post-attention and post-MLP norm weights (see the module header).
fn post_norm(rng: &mut SplitMix64, n: usize) -> Vec<f32> {
    rng.fill(n, 3.0, 0.5)
}

fn fan_in_scale(fan_in: usize) -> f32 {
    MATRIX_GAIN / (fan_in as f32).sqrt()
}

/// A `cols_in -> rows_out` projection, GGUF dims `[cols_in, rows_out]`.
fn add_matrix(
    w: &mut GgufWriter,
    name: &str,
    cols_in: usize,
    rows_out: usize,
    rng: &mut SplitMix64,
) {
    let values = rng.fill(cols_in * rows_out, 0.0, fan_in_scale(cols_in));
    add_f32(w, name, &[cols_in, rows_out], values);
}

fn add_f32(w: &mut GgufWriter, name: &str, dims: &[usize], values: Vec<f32>) {
    let bytes = values.iter().flat_map(|v| v.to_le_bytes()).collect();
    w.add_tensor(name, &dims_u64(dims), GgmlType::F32, bytes);
}

fn add_f16(w: &mut GgufWriter, name: &str, dims: &[usize], values: &[f32]) {
    let bytes = values
        .iter()
        .flat_map(|&v| half::f16::from_f32(v).to_le_bytes())
        .collect();
    w.add_tensor(name, &dims_u64(dims), GgmlType::F16, bytes);
}

fn dims_u64(dims: &[usize]) -> Vec<u64> {
    dims.iter().map(|&x| x as u64).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_seed_gives_same_bytes_and_other_seed_differs() {
        for arch in TINY_ARCHS.iter().chain(TINY_MOE_ARCHS) {
            let a = tiny_model_gguf(arch, 7);
            assert_eq!(a, tiny_model_gguf(arch, 7), "{arch}");
            assert_ne!(a, tiny_model_gguf(arch, 8), "{arch}");
        }
    }

    #[test]
    fn tiny_files_parse_with_the_declared_vocab_and_layers() {
        for arch in TINY_ARCHS.iter().chain(TINY_MOE_ARCHS) {
            let bytes = tiny_model_gguf(arch, 1);
            let parsed = gguf::parse(&bytes).expect("tiny model must parse");
            let md = &parsed.metadata;
            let spec = TinySpec::for_arch(arch).expect("listed arch has a spec");
            assert_eq!(md.require_str("general.architecture").ok(), Some(spec.arch));
            let tokens = md.require_array("tokenizer.ggml.tokens").map(|a| a.len());
            assert_eq!(tokens.ok(), Some(tiny_vocab_size()));
            let blocks = md.require_u32(&format!("{}.block_count", spec.arch));
            assert_eq!(blocks.ok(), Some(spec.n_layers as u32));
        }
    }

    #[test]
    fn unknown_arch_has_no_writer() {
        assert!(tiny_model_writer("mamba", 1).is_none());
    }

    #[test]
    fn signed_uniform_stays_in_range_and_is_centred() {
        let mut rng = SplitMix64(3);
        let v = rng.fill(10_000, 0.0, 1.0);
        assert!(v.iter().all(|x| (-1.0..1.0).contains(x)));
        let mean = v.iter().sum::<f32>() / v.len() as f32;
        assert!(mean.abs() < 0.05, "mean {mean}");
    }
}
