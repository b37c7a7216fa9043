//! The tiny mixture-of-experts models: their specs, their experts, and the quantized formats
//! their experts are stored in (Q8_0 for the Qwen and Granite models' layer-2 down experts,
//! MXFP4 for the gpt-oss model's last-layer experts).
//!
//! gpt-oss's tiny model is gpt-oss-20b's layout in small: four layers alternating a sliding
//! window of 8 and global attention, Q/K/V and output-projection biases, a sink logit per
//! head, YaRN (factor 4 over an original context of 64, so that of the 16 pairs of a head one
//! keeps its frequency, three are ramped and twelve scaled), the FFN norm stored as
//! `post_attention_norm`, and a router with a bias over eight experts of width 32, four per
//! token, with biases. Its gate and up experts are three times as wide as the other matrices,
//! so that a few percent of their outputs reach SwiGLU-OAI's clamp at 7 (2.3% of the gates,
//! 4.1% of the ups over the goldens' tokens), and its down experts eight times narrower, so
//! that what the experts add stays of the order of what attention adds.
//!
//! Only the last layer's experts are MXFP4 (the released files' format for every expert); the
//! others are F32. An MXFP4 matmul takes its activations rounded to Q8_0, in llama.cpp and in
//! Tessera alike, and that rounding turns the last bits of its input into steps of 1/127 of a
//! block's largest value: upstream of other layers it amplifies the two implementations' f16
//! rounding differences into logit differences of 0.1 to 0.2, with the experts of every layer
//! MXFP4 (llama.cpp moved as far with its own f32 KV cache or flash attention), and flips
//! routing decisions. In the last layer it costs a few hundredths.

use gguf::{GgmlType, GgufWriter};

use super::{
    add_f16, add_f32, add_matrix, dims_u64, fan_in_scale, SplitMix64, TinySpec, GRANITE_SCALES,
};

/// A tiny mixture of experts: `expert_count`, `expert_used_count`, each expert's hidden width,
/// and the shared expert's (Qwen 2 MoE, Granite MoE Shared).
#[derive(Clone, Copy, Debug)]
pub(super) struct TinyMoe {
    pub n_expert: usize,
    pub n_used: usize,
    pub ff: usize,
    pub shared_ff: Option<usize>,
    /// The shared expert has a sigmoid gate (`ffn_gate_inp_shexp`, Qwen 2 MoE's).
    pub shared_gate: bool,
    /// Write the width as `expert_feed_forward_length` too (OLMoE's converter writes it only
    /// as `feed_forward_length`, which is what llama.cpp reads for OLMoE).
    pub ff_key: bool,
}

/// Eight experts of width 32, two per token, no shared expert.
const EIGHT_EXPERTS: TinyMoe = TinyMoe {
    n_expert: 8,
    n_used: 2,
    ff: 32,
    shared_ff: None,
    shared_gate: false,
    ff_key: true,
};

/// The tiny gpt-oss's `rope.scaling.factor` and `rope.scaling.original_context_length`.
const GPT_OSS_YARN: (f32, u32) = (4.0, 64);
/// Its gate and up experts are uniform in ±GAIN/sqrt(d_model), its down experts in
/// ±GAIN/sqrt(width) (see the module header).
const GPT_OSS_GATE_UP_GAIN: f32 = 6.0;
const GPT_OSS_DOWN_GAIN: f32 = 0.25;

impl TinySpec {
    /// The mixtures of experts.
    pub(super) fn moe(arch: &str) -> Option<TinySpec> {
        let b = TinySpec::BASE;
        Some(match arch {
            // Qwen 3 attention; eight experts of width 32, two per token.
            "qwen3moe" => TinySpec {
                arch: "qwen3moe",
                head_dim: 32,
                key_length: true,
                rms_eps: 1e-6,
                rope_base: 1_000_000.0,
                qk_norm: true,
                moe: Some(EIGHT_EXPERTS),
                ..b
            },
            // Qwen 2 attention (QKV bias, untied output); eight experts of width 32, two per
            // token, and a shared expert of width 64.
            "qwen2moe" => TinySpec {
                arch: "qwen2moe",
                rms_eps: 1e-6,
                rope_base: 1_000_000.0,
                qkv_bias: true,
                untied_output: true,
                moe: Some(TinyMoe {
                    shared_ff: Some(64),
                    shared_gate: true,
                    ..EIGHT_EXPERTS
                }),
                ..b
            },
            // Granite's multipliers over eight experts of width 32, two per token (Granite MoE files give
            // the experts' width as `feed_forward_length`).
            "granitemoe" => TinySpec {
                arch: "granitemoe",
                rope_dims: true,
                d_ff: 32,
                granite: Some(GRANITE_SCALES),
                moe: Some(EIGHT_EXPERTS),
                ..b
            },
            // Granite MoE Shared (a `granitemoe` file): the same, plus a shared expert of width
            // 64 without a gate.
            "granitemoe-shared" => TinySpec {
                arch: "granitemoe",
                rope_dims: true,
                d_ff: 32,
                granite: Some(GRANITE_SCALES),
                moe: Some(TinyMoe {
                    shared_ff: Some(64),
                    ..EIGHT_EXPERTS
                }),
                ..b
            },
            // See the module header; heads of 32 (wider than d_model / n_heads, as gpt-oss's
            // 64 are), RoPE base 150000 as gpt-oss's.
            "gpt-oss" => TinySpec {
                arch: "gpt-oss",
                n_layers: 4,
                head_dim: 32,
                key_length: true,
                d_ff: 32,
                rope_base: 150_000.0,
                qkv_bias: true,
                untied_output: true,
                sliding_window: Some(8),
                gpt_oss: true,
                moe: Some(TinyMoe {
                    n_used: 4,
                    ..EIGHT_EXPERTS
                }),
                ..b
            },
            // OLMoE-1B-7B's layout in small: pre-norms, one QK-norm over all of Q and of K
            // (as wide as d_model: llama.cpp's OLMoE has as many KV heads as query heads),
            // untied output, RMS epsilon 1e-5 and RoPE base 10000 as its converter writes
            // them; 64 experts of width 32 (the width as `feed_forward_length`), 8 per token,
            // not renormalised.
            "olmoe" => TinySpec {
                arch: "olmoe",
                n_kv_heads: 4,
                d_ff: 32,
                untied_output: true,
                qk_norm: true,
                qk_norm_whole: true,
                moe: Some(OLMOE_EXPERTS),
                ..b
            },
            _ => return None,
        })
    }
}

/// The tiny OLMoE's experts: OLMoE-1B-7B's count and top-k (64, 8).
const OLMOE_EXPERTS: TinyMoe = TinyMoe {
    n_expert: 64,
    n_used: 8,
    ff: 32,
    shared_ff: None,
    shared_gate: false,
    ff_key: false,
};

/// gpt-oss's YaRN keys.
pub(super) fn write_gpt_oss_hparams(w: &mut GgufWriter, s: &TinySpec) {
    let key = |k: &str| format!("{}.{k}", s.arch);
    w.add_metadata(key("rope.scaling.type"), "yarn");
    w.add_metadata(key("rope.scaling.factor"), GPT_OSS_YARN.0);
    w.add_metadata(key("rope.scaling.original_context_length"), GPT_OSS_YARN.1);
}

/// gpt-oss's attention extras of layer `i`: the output projection's bias and the heads' sinks.
pub(super) fn write_gpt_oss_attention(
    w: &mut GgufWriter,
    s: &TinySpec,
    i: usize,
    rng: &mut SplitMix64,
) {
    let n = |t: &str| format!("blk.{i}.{t}");
    add_f32(
        w,
        &n("attn_output.bias"),
        &[s.d_model],
        rng.fill(s.d_model, 0.0, 0.1),
    );
    // Sinks in [-0.5, 2.5]: of the order of the largest scores, so they take a real share.
    add_f32(
        w,
        &n("attn_sinks.weight"),
        &[s.n_heads],
        rng.fill(s.n_heads, 1.0, 1.5),
    );
}

/// Layer `i`'s router and stacked experts (GGUF dims `[input, output, expert]`).
pub(super) fn write_experts(
    w: &mut GgufWriter,
    s: &TinySpec,
    i: usize,
    moe: TinyMoe,
    rng: &mut SplitMix64,
) {
    if s.gpt_oss {
        write_gpt_oss_experts(w, s, i, moe, rng);
    } else {
        write_plain_experts(w, i, s.d_model, moe, rng);
    }
}

/// The Qwen and Granite experts, then the shared expert if any; layer 1's up experts are F16,
/// layer 2's down experts Q8_0 (the quantized path real MoE files take), the rest F32.
fn write_plain_experts(w: &mut GgufWriter, i: usize, d: usize, moe: TinyMoe, rng: &mut SplitMix64) {
    let (n_expert, ff) = (moe.n_expert, moe.ff);
    let n = |t: &str| format!("blk.{i}.{t}");
    add_matrix(w, &n("ffn_gate_inp.weight"), d, n_expert, rng);
    let gate = rng.fill(d * ff * n_expert, 0.0, fan_in_scale(d));
    add_f32(w, &n("ffn_gate_exps.weight"), &[d, ff, n_expert], gate);
    let up = rng.fill(d * ff * n_expert, 0.0, fan_in_scale(d));
    if i == 1 {
        add_f16(w, &n("ffn_up_exps.weight"), &[d, ff, n_expert], &up);
    } else {
        add_f32(w, &n("ffn_up_exps.weight"), &[d, ff, n_expert], up);
    }
    let down = rng.fill(ff * d * n_expert, 0.0, fan_in_scale(ff));
    if i == 2 {
        add_q8_0(w, &n("ffn_down_exps.weight"), &[ff, d, n_expert], &down);
    } else {
        add_f32(w, &n("ffn_down_exps.weight"), &[ff, d, n_expert], down);
    }
    if let Some(sff) = moe.shared_ff {
        if moe.shared_gate {
            let gate_inp = rng.fill(d, 0.0, fan_in_scale(d));
            add_f32(w, &n("ffn_gate_inp_shexp.weight"), &[d], gate_inp);
        }
        add_matrix(w, &n("ffn_gate_shexp.weight"), d, sff, rng);
        add_matrix(w, &n("ffn_up_shexp.weight"), d, sff, rng);
        add_matrix(w, &n("ffn_down_shexp.weight"), sff, d, rng);
    }
}

/// gpt-oss's router with its bias, and experts each with a bias per output row; the last
/// layer's experts are MXFP4, the others F32 (see the module header).
fn write_gpt_oss_experts(
    w: &mut GgufWriter,
    s: &TinySpec,
    i: usize,
    moe: TinyMoe,
    rng: &mut SplitMix64,
) {
    let (d, ne, ff) = (s.d_model, moe.n_expert, moe.ff);
    let n = |t: &str| format!("blk.{i}.{t}");
    let add_experts = |w: &mut GgufWriter, name: &str, dims: &[usize], values: Vec<f32>| match i + 1
        == s.n_layers
    {
        true => add_mxfp4(w, name, dims, &values),
        false => add_f32(w, name, dims, values),
    };
    add_matrix(w, &n("ffn_gate_inp.weight"), d, ne, rng);
    add_f32(w, &n("ffn_gate_inp.bias"), &[ne], rng.fill(ne, 0.0, 0.5));
    let wide = GPT_OSS_GATE_UP_GAIN / (d as f32).sqrt();
    for proj in ["gate", "up"] {
        let m = rng.fill(d * ff * ne, 0.0, wide);
        add_experts(w, &n(&format!("ffn_{proj}_exps.weight")), &[d, ff, ne], m);
        let bias = rng.fill(ff * ne, 0.0, 0.25);
        add_f32(w, &n(&format!("ffn_{proj}_exps.bias")), &[ff, ne], bias);
    }
    let down = rng.fill(ff * d * ne, 0.0, GPT_OSS_DOWN_GAIN / (ff as f32).sqrt());
    add_experts(w, &n("ffn_down_exps.weight"), &[ff, d, ne], down);
    add_f32(
        w,
        &n("ffn_down_exps.bias"),
        &[d, ne],
        rng.fill(d * ne, 0.0, 0.25),
    );
}

/// Q8_0: per 32 values, an f16 scale `max|x| / 127` and 32 signed bytes `round(x / scale)`.
/// `values.len()` must be a multiple of 32.
fn add_q8_0(w: &mut GgufWriter, name: &str, dims: &[usize], values: &[f32]) {
    let mut bytes = Vec::with_capacity(values.len() / 32 * 34);
    for block in values.chunks_exact(32) {
        let amax = block.iter().fold(0.0f32, |m, v| m.max(v.abs()));
        let scale = amax / 127.0;
        let inv = if scale > 0.0 { 1.0 / scale } else { 0.0 };
        bytes.extend(half::f16::from_f32(scale).to_le_bytes());
        bytes.extend(block.iter().map(|v| (v * inv).round() as i8 as u8));
    }
    w.add_tensor(name, &dims_u64(dims), GgmlType::Q8_0, bytes);
}

/// MXFP4's E2M1 values, doubled (the scale below is half the block's power of two).
const MXFP4_VALUES: [f32; 16] = [
    0.0, 1.0, 2.0, 3.0, 4.0, 6.0, 8.0, 12.0, 0.0, -1.0, -2.0, -3.0, -4.0, -6.0, -8.0, -12.0,
];

/// MXFP4 as gguf-py quantizes it: per 32 values, an E8M0 exponent byte `e` with
/// `2^(e - 128) = 2^floor(log2 max|x|) / 8` (so the largest value lands on 8 or 12 times it)
/// and 32 nibbles, each the index of the nearest `MXFP4_VALUES[k] * 2^(e - 128)` (the first on
/// a tie); byte `j` holds value `j` in its low nibble and value `j + 16` in its high one.
/// `values.len()` must be a multiple of 32 and every block's largest |x| zero or at least
/// 2^-123.
fn add_mxfp4(w: &mut GgufWriter, name: &str, dims: &[usize], values: &[f32]) {
    let mut bytes = Vec::with_capacity(values.len() / 32 * 17);
    for block in values.chunks_exact(32) {
        let amax = block.iter().fold(0.0f32, |m, v| m.max(v.abs()));
        // floor(log2 amax) from the exponent bits, exactly.
        let e: u8 = match amax > 0.0 {
            true => (((amax.to_bits() >> 23) & 0xff) as i32 - 127 - 2 + 127) as u8,
            false => 0,
        };
        let d = f32::from_bits(((e as u32).saturating_sub(1)) << 23);
        let q: Vec<u8> = block
            .iter()
            .map(|&x| {
                let err = |k: usize| (d * MXFP4_VALUES[k] - x).abs();
                (0..16).fold(0, |best, k| if err(k) < err(best) { k } else { best }) as u8
            })
            .collect();
        bytes.push(e);
        bytes.extend((0..16).map(|j| q[j] | (q[j + 16] << 4)));
    }
    w.add_tensor(name, &dims_u64(dims), GgmlType::MXFP4, bytes);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mxfp4_blocks_decode_to_the_nearest_grid_values() {
        let mut rng = SplitMix64(5);
        let values = rng.fill(64, 0.0, 0.3);
        let mut w = GgufWriter::new();
        add_mxfp4(&mut w, "t", &[64], &values);
        let bytes = w.write_to_vec();
        let parsed = gguf::parse(&bytes).expect("parses");
        let t = &parsed.tensors[0];
        let start = parsed.data_offset + t.offset as usize;
        let mut decoded = vec![0.0f32; 64];
        kernels::dequantize_row(GgmlType::MXFP4, &bytes[start..start + 34], &mut decoded)
            .expect("dequantizes");
        for (block, dec) in values.chunks(32).zip(decoded.chunks(32)) {
            let amax = block.iter().fold(0.0f32, |m, v| m.max(v.abs()));
            let step = 2f32.powi(amax.log2().floor() as i32) / 8.0;
            for (x, y) in block.iter().zip(dec) {
                // The grid's widest gap is 4 steps (between 8 and 12), and the largest values
                // (up to 16 steps) round down to 12.
                assert!((x - y).abs() <= 4.0 * step, "{x} decoded as {y}");
            }
            assert!(dec.iter().any(|y| *y != 0.0));
        }
    }
}
