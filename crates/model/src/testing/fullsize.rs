//! Full-size random-weight mixture-of-experts GGUF files at real shapes, for benchmarks outside
//! CI (`examples/write_full_size_moe.rs`): Qwen3-30B-A3B and OLMoE-1B-7B in a Q4_K_M-like mix,
//! gpt-oss-20b with MXFP4 experts and Q8_0 elsewhere.
//!
//! Design: the file is streamed ([`gguf::GgufStreamWriter`]): a tensor's rows are drawn as raw
//! quantized blocks (`blocks`) into a small buffer and written, so memory stays a few MB however
//! large the file. Each tensor has its own generator seeded from the file's seed and the tensor's
//! index, so the bytes depend only on (shape, layers, router, seed, tokenizer).
//!
//! Scales: matrices have standard deviation 1/sqrt(fan_in), the attention and expert output
//! projections `OUTPUT_GAIN` times that (so each layer adds a little to the residual stream,
//! `router::RESIDUAL_GROWTH`), embeddings 1 with a massive element 0 that every other matrix
//! ignores, norms 1 ± 0.05; so activations stay of order one through every layer and logits of
//! order one. The router is uniform or Zipf-like (`router`); the tokenizer is a real file's
//! (`vocab`).

mod blocks;
pub mod router;
mod vocab;

use std::io::{self, Write};

use gguf::{GgmlType, GgufStreamWriter, Metadata, StreamTensor, Value};

use super::SplitMix64;
use blocks::{push_row, First};

/// How the layers' attention and feed-forward are written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Family {
    /// `qwen3moe`: QK-norm per head, no biases.
    Qwen3Moe,
    /// `gpt-oss`: biases, sinks, sliding window on alternate layers, YaRN, MXFP4 experts.
    GptOss,
    /// `olmoe`: QK-norm over all heads, experts sized by `feed_forward_length`.
    Olmoe,
}

/// A model's shape.
#[derive(Clone, Copy, Debug)]
pub struct MoeShape {
    pub name: &'static str,
    pub family: Family,
    pub n_layers: usize,
    pub d_model: usize,
    pub n_heads: usize,
    pub n_kv_heads: usize,
    pub head_dim: usize,
    pub n_expert: usize,
    pub n_used: usize,
    pub expert_ff: usize,
    /// The dense FFN width the real files state (`feed_forward_length`), unused by MoE layers.
    pub dense_ff: usize,
    /// Vocabulary rows; `None` takes the tokenizer's size.
    pub vocab: Option<usize>,
    pub context: u32,
    pub rope_base: f32,
    pub rms_eps: f32,
}

/// The shapes by name.
pub const SHAPES: &[MoeShape] = &[QWEN3_30B_A3B, GPT_OSS_20B, OLMOE_1B_7B];

pub const QWEN3_30B_A3B: MoeShape = MoeShape {
    name: "qwen3-30b-a3b",
    family: Family::Qwen3Moe,
    n_layers: 48,
    d_model: 2048,
    n_heads: 32,
    n_kv_heads: 4,
    head_dim: 128,
    n_expert: 128,
    n_used: 8,
    expert_ff: 768,
    dense_ff: 6144,
    vocab: Some(151_936),
    context: 32_768,
    rope_base: 1_000_000.0,
    rms_eps: 1e-6,
};

pub const GPT_OSS_20B: MoeShape = MoeShape {
    name: "gpt-oss-20b",
    family: Family::GptOss,
    n_layers: 24,
    d_model: 2880,
    n_heads: 64,
    n_kv_heads: 8,
    head_dim: 64,
    n_expert: 32,
    n_used: 4,
    expert_ff: 2880,
    dense_ff: 2880,
    vocab: Some(201_088),
    context: 131_072,
    rope_base: 150_000.0,
    rms_eps: 1e-5,
};

pub const OLMOE_1B_7B: MoeShape = MoeShape {
    name: "olmoe-1b-7b",
    family: Family::Olmoe,
    n_layers: 16,
    d_model: 2048,
    n_heads: 16,
    n_kv_heads: 16,
    head_dim: 128,
    n_expert: 64,
    n_used: 8,
    expert_ff: 1024,
    dense_ff: 1024,
    vocab: Some(50_304),
    context: 4096,
    rope_base: 10_000.0,
    rms_eps: 1e-5,
};

/// gpt-oss's sliding window, YaRN factor and original context.
const GPT_OSS_WINDOW: u32 = 128;
const GPT_OSS_YARN: (f32, u32) = (32.0, 4096);
/// Output projections (attention output, expert down) at this fraction of 1/sqrt(fan_in).
const OUTPUT_GAIN: f32 = 0.5;
/// Rows are drawn into a buffer of about this many bytes before each write.
const CHUNK_BYTES: usize = 4 << 20;

impl MoeShape {
    pub fn named(name: &str) -> Option<MoeShape> {
        SHAPES.iter().find(|s| s.name == name).copied()
    }

    /// The same layout at a width tests can afford: a handful of heads and experts, narrow
    /// layers, the tokenizer's own vocabulary, two layers.
    pub fn shrunk(self) -> MoeShape {
        let gpt = self.family == Family::GptOss;
        MoeShape {
            n_layers: 2,
            d_model: if gpt { 320 } else { 256 },
            n_heads: 8,
            n_kv_heads: if self.family == Family::Olmoe { 8 } else { 2 },
            head_dim: if self.family == Family::Olmoe { 32 } else { 64 },
            n_expert: 16,
            n_used: 4,
            expert_ff: if gpt { 320 } else { 256 },
            dense_ff: 512,
            vocab: None,
            ..self
        }
    }

    fn q_dim(&self) -> usize {
        self.n_heads * self.head_dim
    }

    fn kv_dim(&self) -> usize {
        self.n_kv_heads * self.head_dim
    }

    fn arch(&self) -> &'static str {
        match self.family {
            Family::Qwen3Moe => "qwen3moe",
            Family::GptOss => "gpt-oss",
            Family::Olmoe => "olmoe",
        }
    }
}

/// The router a file gets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Router {
    Uniform,
    Zipf,
}

/// What to write beyond the shape.
#[derive(Clone, Copy, Debug)]
pub struct Options {
    pub router: Router,
    pub seed: u64,
}

/// llama.cpp's Q4_K_M rule for the layers whose `attn_v` and `ffn_down` get more bits: the
/// first and last eighth, and every third layer between.
fn more_bits(i: usize, n: usize) -> bool {
    i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2
}

/// How a tensor's values are drawn.
#[derive(Clone, Copy, Debug)]
enum Fill {
    /// Rows of standard deviation `sd`, element 0 as given.
    Rows {
        sd: f32,
        first: First,
    },
    /// RMS-norm weights: 1 ± 0.05, element 0 exactly 1.
    Norm,
    /// Uniform in ±`half`.
    Uniform {
        half: f32,
    },
    Zeros,
    /// Layer `layer`'s router.
    Router {
        layer: usize,
    },
}

/// One tensor of the file and how to fill it.
#[derive(Clone, Debug)]
pub struct Planned {
    pub tensor: StreamTensor,
    fill: Fill,
}

fn plan_tensor(name: &str, dims: &[usize], ty: GgmlType, fill: Fill) -> Planned {
    let dims: Vec<u64> = dims.iter().map(|&d| d as u64).collect();
    Planned {
        tensor: StreamTensor::new(name, &dims, ty),
        fill,
    }
}

/// A projection from `cols` to `rows` (times `experts` when given), ignoring dimension 0 of its
/// input when that input is the residual stream.
fn matrix(
    name: &str,
    cols: usize,
    rows: usize,
    experts: Option<usize>,
    ty: GgmlType,
    gain: f32,
    from_residual: bool,
) -> Planned {
    let sd = gain / (cols as f32).sqrt();
    let first = if from_residual {
        First::Quiet
    } else {
        First::Plain
    };
    let dims: Vec<usize> = [cols, rows].into_iter().chain(experts).collect();
    plan_tensor(name, &dims, ty, Fill::Rows { sd, first })
}

/// Every tensor of the file, in file order, for `n_layers` layers and a `vocab`-token vocabulary.
pub fn plan(s: &MoeShape, n_layers: usize, vocab: usize) -> Vec<Planned> {
    let (d, gpt) = (s.d_model, s.family == Family::GptOss);
    let (dense, big) = match gpt {
        true => (GgmlType::Q8_0, GgmlType::Q8_0),
        false => (GgmlType::Q4_K, GgmlType::Q6_K),
    };
    let embed = Fill::Rows {
        sd: 1.0,
        first: First::Massive,
    };
    let mut p = vec![plan_tensor("token_embd.weight", &[d, vocab], dense, embed)];
    for i in 0..n_layers {
        let n = |t: &str| format!("blk.{i}.{t}");
        let more = !gpt && more_bits(i, s.n_layers);
        let v_ty = if more { big } else { dense };
        p.push(plan_tensor(
            &n("attn_norm.weight"),
            &[d],
            GgmlType::F32,
            Fill::Norm,
        ));
        p.push(matrix(
            &n("attn_q.weight"),
            d,
            s.q_dim(),
            None,
            dense,
            1.0,
            true,
        ));
        p.push(matrix(
            &n("attn_k.weight"),
            d,
            s.kv_dim(),
            None,
            dense,
            1.0,
            true,
        ));
        p.push(matrix(
            &n("attn_v.weight"),
            d,
            s.kv_dim(),
            None,
            v_ty,
            1.0,
            true,
        ));
        layer_attention_extras(&mut p, s, i);
        p.push(matrix(
            &n("attn_output.weight"),
            s.q_dim(),
            d,
            None,
            dense,
            OUTPUT_GAIN,
            false,
        ));
        if gpt {
            p.push(plan_tensor(
                &n("attn_output.bias"),
                &[d],
                GgmlType::F32,
                Fill::Uniform { half: 0.02 },
            ));
            p.push(plan_tensor(
                &n("attn_sinks.weight"),
                &[s.n_heads],
                GgmlType::F32,
                Fill::Uniform { half: 1.0 },
            ));
            p.push(plan_tensor(
                &n("post_attention_norm.weight"),
                &[d],
                GgmlType::F32,
                Fill::Norm,
            ));
        } else {
            p.push(plan_tensor(
                &n("ffn_norm.weight"),
                &[d],
                GgmlType::F32,
                Fill::Norm,
            ));
        }
        layer_experts(&mut p, s, i, more);
    }
    p.push(plan_tensor(
        "output_norm.weight",
        &[d],
        GgmlType::F32,
        Fill::Norm,
    ));
    let out_ty = if gpt { GgmlType::Q8_0 } else { GgmlType::Q6_K };
    p.push(matrix("output.weight", d, vocab, None, out_ty, 1.0, true));
    p
}

/// Q/K/V biases (gpt-oss) or QK-norm weights (per head for Qwen 3, over all heads for OLMoE).
fn layer_attention_extras(p: &mut Vec<Planned>, s: &MoeShape, i: usize) {
    let n = |t: &str| format!("blk.{i}.{t}");
    let f32t = GgmlType::F32;
    match s.family {
        Family::GptOss => {
            let bias = Fill::Uniform { half: 0.02 };
            p.push(plan_tensor(&n("attn_q.bias"), &[s.q_dim()], f32t, bias));
            p.push(plan_tensor(&n("attn_k.bias"), &[s.kv_dim()], f32t, bias));
            p.push(plan_tensor(&n("attn_v.bias"), &[s.kv_dim()], f32t, bias));
        }
        Family::Qwen3Moe => {
            p.push(plan_tensor(
                &n("attn_q_norm.weight"),
                &[s.head_dim],
                f32t,
                Fill::Norm,
            ));
            p.push(plan_tensor(
                &n("attn_k_norm.weight"),
                &[s.head_dim],
                f32t,
                Fill::Norm,
            ));
        }
        Family::Olmoe => {
            p.push(plan_tensor(
                &n("attn_q_norm.weight"),
                &[s.q_dim()],
                f32t,
                Fill::Norm,
            ));
            p.push(plan_tensor(
                &n("attn_k_norm.weight"),
                &[s.kv_dim()],
                f32t,
                Fill::Norm,
            ));
        }
    }
}

/// The router and the stacked experts (with gpt-oss's biases).
fn layer_experts(p: &mut Vec<Planned>, s: &MoeShape, i: usize, more: bool) {
    let n = |t: &str| format!("blk.{i}.{t}");
    let (d, ne, ff) = (s.d_model, s.n_expert, s.expert_ff);
    let gpt = s.family == Family::GptOss;
    p.push(plan_tensor(
        &n("ffn_gate_inp.weight"),
        &[d, ne],
        GgmlType::F32,
        Fill::Router { layer: i },
    ));
    if gpt {
        p.push(plan_tensor(
            &n("ffn_gate_inp.bias"),
            &[ne],
            GgmlType::F32,
            Fill::Zeros,
        ));
    }
    let (gate_up, down) = match (gpt, more) {
        (true, _) => (GgmlType::MXFP4, GgmlType::MXFP4),
        (false, true) => (GgmlType::Q4_K, GgmlType::Q6_K),
        (false, false) => (GgmlType::Q4_K, GgmlType::Q4_K),
    };
    let bias = Fill::Uniform { half: 0.02 };
    for proj in ["gate", "up"] {
        p.push(matrix(
            &n(&format!("ffn_{proj}_exps.weight")),
            d,
            ff,
            Some(ne),
            gate_up,
            1.0,
            true,
        ));
        if gpt {
            p.push(plan_tensor(
                &n(&format!("ffn_{proj}_exps.bias")),
                &[ff, ne],
                GgmlType::F32,
                bias,
            ));
        }
    }
    p.push(matrix(
        &n("ffn_down_exps.weight"),
        ff,
        d,
        Some(ne),
        down,
        OUTPUT_GAIN,
        false,
    ));
    if gpt {
        p.push(plan_tensor(
            &n("ffn_down_exps.bias"),
            &[d, ne],
            GgmlType::F32,
            bias,
        ));
    }
}

/// The metadata: hyper-parameters as llama.cpp reads them, then the tokenizer's entries.
pub fn metadata(
    s: &MoeShape,
    n_layers: usize,
    opts: &Options,
    tokenizer: Vec<(String, Value)>,
) -> Metadata {
    let mut md = Metadata::new();
    let arch = s.arch();
    let mut put = |k: &str, v: Value| {
        md.insert(k, v);
    };
    let key = |k: &str| format!("{arch}.{k}");
    put("general.architecture", arch.into());
    let router = if opts.router == Router::Zipf {
        "zipf"
    } else {
        "uniform"
    };
    put(
        "general.name",
        format!(
            "random-weight {} ({router} router, seed {})",
            s.name, opts.seed
        )
        .as_str()
        .into(),
    );
    let u = |x: usize| Value::U32(x as u32);
    put(&key("block_count"), u(n_layers));
    put(&key("context_length"), Value::U32(s.context));
    put(&key("embedding_length"), u(s.d_model));
    // OLMoE's experts are `feed_forward_length` wide.
    let ff = if s.family == Family::Olmoe {
        s.expert_ff
    } else {
        s.dense_ff
    };
    put(&key("feed_forward_length"), u(ff));
    put(&key("attention.head_count"), u(s.n_heads));
    put(&key("attention.head_count_kv"), u(s.n_kv_heads));
    put(
        &key("attention.layer_norm_rms_epsilon"),
        Value::F32(s.rms_eps),
    );
    put(&key("rope.freq_base"), Value::F32(s.rope_base));
    if s.family != Family::Olmoe {
        put(&key("attention.key_length"), u(s.head_dim));
        put(&key("attention.value_length"), u(s.head_dim));
        put(&key("expert_feed_forward_length"), u(s.expert_ff));
    }
    put(&key("expert_count"), u(s.n_expert));
    put(&key("expert_used_count"), u(s.n_used));
    if s.family == Family::GptOss {
        put(&key("attention.sliding_window"), Value::U32(GPT_OSS_WINDOW));
        put(&key("rope.scaling.type"), "yarn".into());
        put(&key("rope.scaling.factor"), Value::F32(GPT_OSS_YARN.0));
        put(
            &key("rope.scaling.original_context_length"),
            Value::U32(GPT_OSS_YARN.1),
        );
    }
    for (k, v) in tokenizer {
        put(&k, v);
    }
    md
}

/// What [`write`] reports: bytes written, and per fitted or measured layer the router's usage
/// by rank on fresh modelled hidden states.
#[derive(Debug, Default)]
pub struct Report {
    pub bytes: u64,
    pub n_tensors: usize,
    /// (layer, shares of the most to least used expert).
    pub usage: Vec<(usize, Vec<f32>)>,
}

/// Writes the whole file to `out`: `n_layers` layers of `shape` (at most its own count), the
/// tokenizer entries of `tokenizer` (cut to the shape's vocabulary).
pub fn write(
    shape: &MoeShape,
    n_layers: usize,
    opts: &Options,
    tokenizer: &Metadata,
    out: impl Write,
) -> Result<Report, String> {
    let (entries, vocab) = vocab::tokenizer_entries(tokenizer, shape.vocab)?;
    let md = metadata(shape, n_layers, opts, entries);
    let planned = plan(shape, n_layers, vocab);
    let specs = planned.iter().map(|p| p.tensor.clone()).collect();
    let io = |e: io::Error| e.to_string();
    let mut w = GgufStreamWriter::new(out, &md, specs).map_err(io)?;
    let mut routers = Routers::new(shape, n_layers, opts);
    let mut report = Report {
        n_tensors: planned.len(),
        ..Report::default()
    };
    for (idx, p) in planned.iter().enumerate() {
        let mut rng = SplitMix64(opts.seed ^ (idx as u64 + 1).wrapping_mul(0xA24B_AED4_963E_E407));
        w.write_tensor(|out, n| {
            report.bytes += n as u64;
            fill_tensor(&p.tensor, p.fill, &mut rng, &mut routers, out)
        })
        .map_err(io)?;
    }
    w.finish().map_err(io)?;
    report.usage = routers.measured;
    Ok(report)
}

/// Writes one tensor's values, in chunks of about [`CHUNK_BYTES`].
fn fill_tensor(
    t: &StreamTensor,
    fill: Fill,
    rng: &mut SplitMix64,
    routers: &mut Routers,
    out: &mut dyn Write,
) -> io::Result<()> {
    let cols = t.dims[0] as usize;
    let rows = t.dims[1..].iter().product::<u64>() as usize;
    let f32s = |v: Vec<f32>| -> Vec<u8> { v.iter().flat_map(|x| x.to_le_bytes()).collect() };
    match fill {
        Fill::Rows { sd, first } => {
            let mut buf = Vec::with_capacity(CHUNK_BYTES + t.ty.row_bytes(cols).unwrap_or(0));
            for _ in 0..rows {
                push_row(t.ty, cols, sd, first, rng, &mut buf);
                if buf.len() >= CHUNK_BYTES {
                    out.write_all(&buf)?;
                    buf.clear();
                }
            }
            out.write_all(&buf)
        }
        Fill::Norm => {
            let mut v = rng.fill(cols * rows, 1.0, 0.05);
            v[0] = 1.0;
            out.write_all(&f32s(v))
        }
        Fill::Uniform { half } => out.write_all(&f32s(rng.fill(cols * rows, 0.0, half))),
        Fill::Zeros => out.write_all(&vec![0u8; cols * rows * 4]),
        Fill::Router { layer } => out.write_all(&f32s(routers.router(layer, rng))),
    }
}

/// Builds each layer's router and measures the first and last layers'.
struct Routers {
    d: usize,
    k: usize,
    n_expert: usize,
    n_layers: usize,
    router: Router,
    fit: router::HiddenModel,
    fresh: router::HiddenModel,
    measured: Vec<(usize, Vec<f32>)>,
}

impl Routers {
    fn new(s: &MoeShape, n_layers: usize, opts: &Options) -> Routers {
        let embed_ty = if s.family == Family::GptOss {
            GgmlType::Q8_0
        } else {
            GgmlType::Q4_K
        };
        let n_fit = if opts.router == Router::Zipf {
            router::N_MEASURE
        } else {
            0
        };
        Routers {
            d: s.d_model,
            k: s.n_used,
            n_expert: s.n_expert,
            n_layers,
            router: opts.router,
            fit: router::HiddenModel::new(embed_ty, s.d_model, n_fit, opts.seed ^ 0xF17),
            fresh: router::HiddenModel::new(
                embed_ty,
                s.d_model,
                router::N_MEASURE,
                opts.seed ^ 0xF2E5,
            ),
            measured: Vec::new(),
        }
    }

    /// Layer `layer`'s router rows (`n_expert` rows of `d`).
    fn router(&mut self, layer: usize, rng: &mut SplitMix64) -> Vec<f32> {
        let mut w = router::random_rows(self.n_expert, self.d, rng);
        if self.router == Router::Zipf {
            // A random permutation: which expert is the most popular differs by layer.
            let mut rank_of: Vec<usize> = (0..self.n_expert).collect();
            for i in (1..rank_of.len()).rev() {
                rank_of.swap(i, (rng.next_u64() % (i as u64 + 1)) as usize);
            }
            router::fit_zipf(&mut w, self.d, self.k, &rank_of, &self.fit.states(layer));
        }
        if layer == 0 || layer + 1 == self.n_layers {
            let usage = router::usage_by_rank(&w, self.d, self.k, &self.fresh.states(layer));
            self.measured.push((layer, usage));
        }
        w
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn q4_k_m_gives_more_bits_to_half_the_layers() {
        let n = (0..48).filter(|&i| more_bits(i, 48)).count();
        assert_eq!(n, 24);
        assert!(more_bits(0, 48) && more_bits(47, 48) && !more_bits(6, 48) && more_bits(8, 48));
    }

    #[test]
    fn full_size_plans_have_the_real_sizes() {
        let gib = |s: &MoeShape, vocab: usize| {
            let p = plan(s, s.n_layers, vocab);
            p.iter()
                .map(|t| t.tensor.n_bytes().expect("whole blocks") as f64)
                .sum::<f64>()
                / (1u64 << 30) as f64
        };
        let (qwen, gpt, olmoe) = (
            gib(&QWEN3_30B_A3B, 151_936),
            gib(&GPT_OSS_20B, 201_088),
            gib(&OLMOE_1B_7B, 50_304),
        );
        // Released files: Qwen3-30B-A3B Q4_K_M about 17 GiB, gpt-oss-20b MXFP4 about 11.3 GiB,
        // OLMoE-1B-7B Q4_K_M about 3.9 GiB.
        assert!((16.0..18.5).contains(&qwen), "qwen3-30b-a3b: {qwen:.2} GiB");
        assert!((10.5..12.5).contains(&gpt), "gpt-oss-20b: {gpt:.2} GiB");
        assert!((3.4..4.4).contains(&olmoe), "olmoe-1b-7b: {olmoe:.2} GiB");
        let p = plan(&QWEN3_30B_A3B, 48, 151_936);
        assert_eq!(p.len(), 3 + 48 * 12); // as the released files
    }
}
