//! Tiny LoRA adapters for the tiny models, in llama.cpp's GGUF adapter format.
//!
//! `tiny_lora_gguf(arch, seed)` adapts every layer's `attn_q`, `attn_v` and `ffn_down`
//! ([`TINY_LORA_TARGETS`]) at rank 8 with alpha 16 (a factor alpha / rank = 2), strong enough
//! that the tiny models' greedy continuations change. Like the models, the bytes are a pure
//! function of the arguments (SplitMix64, exactly rounded operations). `A` is uniform in
//! ±1/sqrt(d_in) and `B` in ±`LORA_B_HALF_WIDTH`/sqrt(rank), so `B·A·x` is of the order of the
//! base weight's own output; one `lora_a` (`blk.1.attn_v`) is stored as F16, the rest F32.

use gguf::GgufWriter;

use super::{add_f16, add_f32, SplitMix64, TinySpec};

/// The weights the tiny adapters change, in every layer.
pub const TINY_LORA_TARGETS: &[&str] = &["attn_q", "attn_v", "ffn_down"];
/// The tiny adapters' rank and alpha.
pub const TINY_LORA_RANK: usize = 8;
pub const TINY_LORA_ALPHA: f32 = 16.0;
/// The tiny models with llama.cpp goldens of an adapter (`tests/goldens/tiny/lora_<arch>.json`,
/// from `scripts/oracle/tiny_lora.py`): untied output, QKV bias with tied output, QK-norm,
/// sliding windows with post-norms.
pub const TINY_LORA_ARCHS: &[&str] = &["llama", "qwen2", "qwen3", "gemma3"];
/// The seed of the golden adapter of `arch`: searched among 1 to 9 for the largest smallest gap
/// between the top two logits of llama.cpp's greedy steps at scales 1 and 0.5 (a near-tie
/// makes the greedy comparison hinge on rounding). Gaps of llama.cpp's runs: llama 0.042,
/// qwen2 0.093, qwen3 0.053, gemma3 0.142 (no seed of 1 to 9 gave llama 0.05 at both scales).
pub fn tiny_lora_seed(arch: &str) -> u64 {
    match arch {
        "qwen3" => 9,
        "gemma3" => 3,
        _ => 2,
    }
}
/// Half-width of `B`'s entries, times 1/sqrt(rank).
const LORA_B_HALF_WIDTH: f32 = 1.0;

/// `(d_in, d_out)` of weight `target` of a layer of `s` (or of the untied output head), or
/// `None` for a name it does not know.
fn target_dims(s: &TinySpec, target: &str) -> Option<(usize, usize)> {
    let (d, q, kv, ff) = (s.d_model, s.q_dim(), s.kv_dim(), s.d_ff);
    Some(match target {
        "output" if s.untied_output => (d, super::tiny_vocab_size()),
        "attn_q" => (d, q),
        "attn_k" | "attn_v" => (d, kv),
        "attn_output" => (q, d),
        "ffn_gate" | "ffn_up" => (d, ff),
        "ffn_down" => (ff, d),
        _ => return None,
    })
}

/// The adapter file of [`tiny_lora_writer`] with the default targets, rank and alpha.
///
/// # Panics
/// If `arch` is not a dense tiny architecture (a mistake in the calling test).
pub fn tiny_lora_gguf(arch: &str, seed: u64) -> Vec<u8> {
    tiny_lora_writer(
        arch,
        seed,
        TINY_LORA_TARGETS,
        TINY_LORA_RANK,
        TINY_LORA_ALPHA,
    )
    .unwrap_or_else(|| panic!("no tiny LoRA for {arch:?} with {TINY_LORA_TARGETS:?}"))
    .write_to_vec()
}

/// A LoRA adapter for the tiny `arch` model: rank `rank`, `adapter.lora.alpha` = `alpha`, on
/// weight `t` of every layer for each `t` in `targets` (`attn_q`, `attn_k`, `attn_v`,
/// `attn_output`, `ffn_gate`, `ffn_up`, `ffn_down`; `output`: the untied output head, once),
/// values drawn from `seed`. `None` for an
/// architecture without those separate weights (mixtures of experts, Phi 3's fused ones) or an
/// unknown target. The writer is returned so tests can break it on purpose.
pub fn tiny_lora_writer(
    arch: &str,
    seed: u64,
    targets: &[&str],
    rank: usize,
    alpha: f32,
) -> Option<GgufWriter> {
    let s = TinySpec::dense(arch).filter(|s| !s.phi)?;
    let dims: Vec<(usize, usize)> = targets
        .iter()
        .map(|t| target_dims(&s, t))
        .collect::<Option<_>>()?;
    let mut w = GgufWriter::new();
    w.add_metadata("general.architecture", s.arch);
    w.add_metadata("general.type", "adapter");
    w.add_metadata("general.name", format!("tiny-{}-lora", s.arch));
    w.add_metadata("adapter.type", "lora");
    w.add_metadata("adapter.lora.alpha", alpha);
    let mut rng = SplitMix64(seed ^ 0x4c6f_5241);
    for i in 0..s.n_layers {
        for (t, &(d_in, d_out)) in targets.iter().zip(&dims) {
            let name = match *t {
                "output" if i > 0 => continue,
                "output" => "output.weight".to_string(),
                _ => format!("blk.{i}.{t}.weight"),
            };
            let a = rng.fill(rank * d_in, 0.0, 1.0 / (d_in as f32).sqrt());
            let b = rng.fill(d_out * rank, 0.0, LORA_B_HALF_WIDTH / (rank as f32).sqrt());
            if i == 1 && *t == "attn_v" {
                add_f16(&mut w, &format!("{name}.lora_a"), &[d_in, rank], &a);
            } else {
                add_f32(&mut w, &format!("{name}.lora_a"), &[d_in, rank], a);
            }
            add_f32(&mut w, &format!("{name}.lora_b"), &[rank, d_out], b);
        }
    }
    Some(w)
}

/// Targets, rank and alpha of the adapter [`real_lora_gguf`] writes for a real model.
pub const REAL_LORA_TARGETS: &[&str] = &["attn_q", "attn_v", "ffn_down"];
pub const REAL_LORA_RANK: usize = 8;
pub const REAL_LORA_ALPHA: f32 = 16.0;
/// The seed and strength of the adapter of the Qwen2.5-Coder-0.5B LoRA goldens
/// (`tests/goldens/qwen2.5-coder-0.5b_lora_greedy.json`, `scripts/oracle/qwen_lora_goldens.py`).
pub const QWEN_LORA_SEED: u64 = 0;
pub const QWEN_LORA_STRENGTH: f32 = 0.2;

/// A random LoRA adapter for a real model, in llama.cpp's format: rank [`REAL_LORA_RANK`],
/// alpha [`REAL_LORA_ALPHA`], on weight `t` of every layer for each `t` of
/// [`REAL_LORA_TARGETS`] the model has (`blk.N.t.weight`, shapes read from `model`'s tensor
/// table; nothing else of the model is read). `A` is uniform in ±1/sqrt(d_in) and `B` in
/// ±`strength`/sqrt(rank), both F32 and drawn from `seed` by SplitMix64 with exactly rounded
/// operations only, so the bytes (and their sha256, which the goldens record) are a pure
/// function of the tensor table, `seed` and `strength`. For an input of RMS `r` the update
/// `alpha / rank * B·A·x` has an RMS of about `2/3 * strength * r`.
///
/// `None` when the model has none of the targets.
pub fn real_lora_gguf(model: &gguf::GgufFile, seed: u64, strength: f32) -> Option<Vec<u8>> {
    let arch = model
        .metadata()
        .get_str("general.architecture")
        .ok()
        .flatten()?;
    let mut w = GgufWriter::new();
    w.add_metadata("general.architecture", arch);
    w.add_metadata("general.type", "adapter");
    w.add_metadata(
        "general.name",
        format!("random rank-{REAL_LORA_RANK} LoRA (seed {seed}, strength {strength})"),
    );
    w.add_metadata("adapter.type", "lora");
    w.add_metadata("adapter.lora.alpha", REAL_LORA_ALPHA);
    let mut rng = SplitMix64(seed ^ 0x5265_614c);
    let rank = REAL_LORA_RANK;
    let mut n = 0;
    for t in model.tensors() {
        let parts: Vec<&str> = t.name.split('.').collect();
        let [blk, layer, target, "weight"] = parts[..] else {
            continue;
        };
        let targeted = REAL_LORA_TARGETS.contains(&target);
        if blk != "blk" || layer.parse::<u32>().is_err() || !targeted || t.dims.len() != 2 {
            continue;
        }
        let (Ok(d_in), Ok(d_out)) = (usize::try_from(t.dims[0]), usize::try_from(t.dims[1])) else {
            continue;
        };
        let a = rng.fill(rank * d_in, 0.0, 1.0 / (d_in as f32).sqrt());
        let b = rng.fill(d_out * rank, 0.0, strength / (rank as f32).sqrt());
        add_f32(&mut w, &format!("{}.lora_a", t.name), &[d_in, rank], a);
        add_f32(&mut w, &format!("{}.lora_b", t.name), &[rank, d_out], b);
        n += 1;
    }
    (n > 0).then(|| w.write_to_vec())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn adapters_parse_with_llama_cpp_shapes_and_seeds_differ() {
        let bytes = tiny_lora_gguf("llama", 1);
        assert_eq!(bytes, tiny_lora_gguf("llama", 1));
        assert_ne!(bytes, tiny_lora_gguf("llama", 2));
        let parsed = gguf::parse(&bytes).expect("tiny adapter parses");
        assert_eq!(
            parsed.metadata.require_str("general.type").ok(),
            Some("adapter")
        );
        let a = parsed
            .tensors
            .iter()
            .find(|t| t.name == "blk.0.ffn_down.weight.lora_a")
            .expect("ffn_down A");
        assert_eq!(a.dims, vec![128, TINY_LORA_RANK as u64]);
        assert!(tiny_lora_writer("qwen3moe", 1, TINY_LORA_TARGETS, 8, 16.0).is_none());
        assert!(tiny_lora_writer("llama", 1, &["router"], 8, 16.0).is_none());
    }
}
