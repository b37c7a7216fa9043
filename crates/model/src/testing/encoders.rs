//! Tiny encoder GGUF files, written by tests and by `examples/write_tiny_models.rs`, for
//! checking the encoders against llama.cpp.
//!
//! - `bert`: a reranker (rank pooling, `cls` + `cls.output` head), separate Q/K/V, biases
//!   everywhere, learned positions, GELU FFN.
//! - `nomic-bert`: mean pooling, fused QKV without biases, RoPE (base 1000), SwiGLU FFN; its
//!   token embeddings and layer 1's `ffn_up` are F16.
//!
//! Both use one small WordPiece vocabulary (`tokenizer.ggml.model = bert`, pieces stored as
//! GGUF stores BERT's: U+2581 before word-initial pieces, no `##`), with `[PAD]` `[UNK]` `[CLS]`
//! `[SEP]` `[MASK]` at ids 0-4. Like the decoder tiny models, the bytes are a pure function of
//! `(arch, seed)`.

use gguf::{Array, GgufWriter};

use super::{add_f16, add_f32, add_matrix, fan_in_scale, SplitMix64};

/// The encoder architectures `tiny_encoder_gguf` can build.
pub const TINY_ENCODER_ARCHS: &[&str] = &["bert", "nomic-bert"];

/// Ids of the tiny WordPiece vocabulary's special tokens.
pub const TINY_PAD: u32 = 0;
pub const TINY_UNK: u32 = 1;
pub const TINY_CLS: u32 = 2;
pub const TINY_SEP: u32 = 3;

const D: usize = 32;
const HEADS: usize = 4;
const FF: usize = 64;
const LAYERS: usize = 2;
const CONTEXT: usize = 64;

/// Whole words, then single letters and digits (word-initial and continuation).
const WORDS: &[&str] = &[
    "the", "is", "what", "capital", "of", "france", "paris", "berlin", "germany", "cat", "dog",
    "sat", "on", "mat", "tiny", "model", "hello", "world", "city", "river", "in", "and", "?", ".",
    ",", "!", ":",
];

fn vocab() -> Vec<String> {
    let mut v: Vec<String> = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    v.extend(WORDS.iter().map(|w| format!("\u{2581}{w}")));
    let singles = ('a'..='z').chain('0'..='9');
    v.extend(singles.clone().map(|c| format!("\u{2581}{c}")));
    v.extend(singles.map(|c| c.to_string()));
    v
}

/// Number of tokens in the tiny WordPiece vocabulary.
pub fn tiny_encoder_vocab_size() -> usize {
    vocab().len()
}

/// The complete GGUF file of a tiny encoder (`arch` one of [`TINY_ENCODER_ARCHS`]) with weights
/// drawn from `seed`.
///
/// # Panics
/// If `arch` is not one of them: a mistake in the calling test.
pub fn tiny_encoder_gguf(arch: &str, seed: u64) -> Vec<u8> {
    match tiny_encoder_writer(arch, seed) {
        Some(w) => w.write_to_vec(),
        None => panic!("no tiny encoder for {arch:?} (have: {TINY_ENCODER_ARCHS:?})"),
    }
}

/// The writer behind [`tiny_encoder_gguf`], for tests that alter the file; `None` for an
/// architecture not in [`TINY_ENCODER_ARCHS`].
pub fn tiny_encoder_writer(arch: &str, seed: u64) -> Option<GgufWriter> {
    let nomic = match arch {
        "bert" => false,
        "nomic-bert" => true,
        _ => return None,
    };
    let mut w = GgufWriter::new();
    let key = |k: &str| format!("{arch}.{k}");
    w.add_metadata("general.architecture", arch);
    w.add_metadata("general.name", format!("tiny-{arch}"));
    w.add_metadata(key("block_count"), LAYERS as u32);
    w.add_metadata(key("context_length"), CONTEXT as u32);
    w.add_metadata(key("embedding_length"), D as u32);
    w.add_metadata(key("feed_forward_length"), FF as u32);
    w.add_metadata(key("attention.head_count"), HEADS as u32);
    w.add_metadata(key("attention.layer_norm_epsilon"), 1e-12f32);
    w.add_metadata(key("attention.causal"), false);
    w.add_metadata(key("pooling_type"), if nomic { 1u32 } else { 4u32 });
    if nomic {
        w.add_metadata(key("rope.freq_base"), 1000.0f32);
    }
    write_vocab(&mut w);
    write_weights(&mut w, nomic, &mut SplitMix64(seed));
    Some(w)
}

fn write_vocab(w: &mut GgufWriter) {
    let tokens = vocab();
    let mut types = vec![3i32, 2, 3, 3, 3];
    types.resize(tokens.len(), 1);
    w.add_metadata("tokenizer.ggml.model", "bert");
    w.add_metadata("tokenizer.ggml.tokens", Array::String(tokens));
    w.add_metadata("tokenizer.ggml.token_type", types);
    w.add_metadata("tokenizer.ggml.token_type_count", 2u32);
    w.add_metadata("tokenizer.ggml.bos_token_id", TINY_CLS);
    w.add_metadata("tokenizer.ggml.eos_token_id", TINY_SEP);
    w.add_metadata("tokenizer.ggml.seperator_token_id", TINY_SEP);
    w.add_metadata("tokenizer.ggml.unknown_token_id", TINY_UNK);
    w.add_metadata("tokenizer.ggml.padding_token_id", TINY_PAD);
}

/// LayerNorm weight near one and bias near zero.
fn add_norm(w: &mut GgufWriter, name: &str, rng: &mut SplitMix64) {
    add_f32(w, &format!("{name}.weight"), &[D], rng.fill(D, 1.0, 0.25));
    add_f32(w, &format!("{name}.bias"), &[D], rng.fill(D, 0.0, 0.1));
}

fn add_linear(
    w: &mut GgufWriter,
    name: &str,
    cols_in: usize,
    rows: usize,
    bias: bool,
    rng: &mut SplitMix64,
) {
    add_matrix(w, &format!("{name}.weight"), cols_in, rows, rng);
    if bias {
        add_f32(
            w,
            &format!("{name}.bias"),
            &[rows],
            rng.fill(rows, 0.0, 0.1),
        );
    }
}

fn write_weights(w: &mut GgufWriter, nomic: bool, rng: &mut SplitMix64) {
    let n_vocab = tiny_encoder_vocab_size();
    let embd = rng.fill(D * n_vocab, 0.0, 1.0);
    if nomic {
        add_f16(w, "token_embd.weight", &[D, n_vocab], &embd);
    } else {
        add_f32(w, "token_embd.weight", &[D, n_vocab], embd);
    }
    add_f32(w, "token_types.weight", &[D, 2], rng.fill(2 * D, 0.0, 0.5));
    if !nomic {
        add_f32(
            w,
            "position_embd.weight",
            &[D, CONTEXT],
            rng.fill(D * CONTEXT, 0.0, 0.5),
        );
    }
    add_norm(w, "token_embd_norm", rng);
    let bias = !nomic;
    for i in 0..LAYERS {
        let n = |t: &str| format!("blk.{i}.{t}");
        if nomic {
            add_linear(w, &n("attn_qkv"), D, 3 * D, false, rng);
        } else {
            for t in ["attn_q", "attn_k", "attn_v"] {
                add_linear(w, &n(t), D, D, true, rng);
            }
        }
        add_linear(w, &n("attn_output"), D, D, bias, rng);
        add_norm(w, &n("attn_output_norm"), rng);
        if nomic && i == 1 {
            let up = rng.fill(D * FF, 0.0, fan_in_scale(D));
            add_f16(w, &n("ffn_up.weight"), &[D, FF], &up);
        } else {
            add_linear(w, &n("ffn_up"), D, FF, bias, rng);
        }
        if nomic {
            add_linear(w, &n("ffn_gate"), D, FF, false, rng);
        }
        add_linear(w, &n("ffn_down"), FF, D, bias, rng);
        add_norm(w, &n("layer_output_norm"), rng);
    }
    if !nomic {
        add_linear(w, "cls", D, D, true, rng);
        add_linear(w, "cls.output", D, 1, true, rng);
    }
}
