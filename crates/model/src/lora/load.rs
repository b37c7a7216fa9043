//! Reading a LoRA adapter file and checking it against the base model.

use std::collections::BTreeMap;
use std::ops::Range;
use std::path::Path;

use gguf::{GgufFile, TensorView};

use super::{LayerLora, LoraAdapter, LoraPair, Target};
use crate::config::ModelConfig;
use crate::weights::ModelWeights;
use crate::ModelError;

/// Where one adapted weight's update goes: the parts of a layer it feeds (each a target and the
/// rows of `B` that are its outputs: all of them, or a part of a fused projection), or the
/// output head.
enum Place {
    Layer(usize, Vec<(Target, Range<usize>)>),
    Output,
}

/// Loads the adapter at `path` for the model `cfg` / `w` describe, checking it: a GGUF with
/// `general.type = adapter` and `adapter.type = lora` for the model's architecture, every
/// `<weight>.lora_a` with its `<weight>.lora_b`, each weight one of the model's that this
/// forward pass adapts, and shapes `A: [d_in, rank]`, `B: [rank, d_out]` (GGUF order) against
/// the weight's `[d_in, d_out]`. Errors name the adapter file and the tensor.
pub fn load_adapter(
    path: &Path,
    cfg: &ModelConfig,
    w: &ModelWeights,
) -> Result<LoraAdapter, ModelError> {
    let shown = path.display().to_string();
    let in_file = |e: ModelError| ModelError::InFile {
        path: shown.clone(),
        source: Box::new(e),
    };
    let file = GgufFile::open(path)?;
    let alpha = check_metadata(&file, w).map_err(in_file)?;
    let mut adapter = LoraAdapter {
        path: shown.clone(),
        alpha,
        layers: vec![LayerLora::default(); cfg.n_layers],
        output: None,
    };
    for (base, (a, b)) in pair_tensors(&file, &shown)? {
        let bad = |name: &str, problem: String| ModelError::BadTensor {
            path: shown.clone(),
            name: name.to_string(),
            problem,
        };
        let (a, b) = match (a, b) {
            (Some(a), Some(b)) => (a, b),
            (Some(_), None) => return Err(bad(&format!("{base}.lora_b"), "is missing".into())),
            _ => return Err(bad(&format!("{base}.lora_a"), "is missing".into())),
        };
        let place = place(&base, cfg).map_err(|p| bad(&base, p))?;
        let pair = read_pair(&base, a, b, w).map_err(|(n, p)| bad(&n, p))?;
        match place {
            Place::Output => adapter.output = Some(pair),
            Place::Layer(li, parts) => {
                for (t, rows) in parts {
                    let part = split_rows(&pair, rows.clone()).ok_or_else(|| {
                        bad(
                            &base,
                            format!("has {} outputs, fewer than {rows:?}", pair.d_out),
                        )
                    })?;
                    adapter.layers[li].pairs[t as usize] = Some(part);
                }
            }
        }
    }
    if adapter.pairs().next().is_none() {
        return Err(in_file(ModelError::invalid(
            "the adapter holds no lora_a / lora_b tensors",
        )));
    }
    Ok(adapter)
}

/// Checks the adapter's metadata against the model's; returns `adapter.lora.alpha` (0 if absent).
fn check_metadata(file: &GgufFile, w: &ModelWeights) -> Result<f32, ModelError> {
    let md = file.metadata();
    let general_type = md.get_str("general.type")?.unwrap_or("");
    if general_type != "adapter" {
        return Err(ModelError::invalid(format!(
            "not a LoRA adapter: general.type is {general_type:?}, expected \"adapter\""
        )));
    }
    let adapter_type = md.get_str("adapter.type")?.unwrap_or("");
    if adapter_type != "lora" {
        return Err(ModelError::invalid(format!(
            "not a LoRA adapter: adapter.type is {adapter_type:?}, expected \"lora\""
        )));
    }
    let arch = md.get_str("general.architecture")?.unwrap_or("");
    let base = w
        .file
        .metadata()
        .get_str("general.architecture")?
        .unwrap_or("");
    if arch != base {
        return Err(ModelError::invalid(format!(
            "the adapter is for architecture {arch:?}, the model is {base:?}"
        )));
    }
    if md.contains_key("adapter.alora.invocation_tokens") {
        return Err(ModelError::invalid(
            "activated LoRA (adapter.alora.invocation_tokens) is not supported",
        ));
    }
    let alpha = md.get_f32("adapter.lora.alpha")?.unwrap_or(0.0);
    if !alpha.is_finite() {
        return Err(ModelError::invalid(format!(
            "adapter.lora.alpha is {alpha}"
        )));
    }
    Ok(alpha)
}

type Pairs<'f> = BTreeMap<String, (Option<TensorView<'f>>, Option<TensorView<'f>>)>;

/// The file's tensors as `(A, B)` by the base weight's name; `*_norm.weight` tensors are
/// skipped (llama.cpp ignores them too), any other name is refused.
fn pair_tensors<'f>(file: &'f GgufFile, shown: &str) -> Result<Pairs<'f>, ModelError> {
    let mut pairs: Pairs = BTreeMap::new();
    for info in file.tensors() {
        let name = info.name.as_str();
        let view = file.require_tensor(name)?;
        if let Some(base) = name.strip_suffix(".lora_a") {
            pairs.entry(base.to_string()).or_default().0 = Some(view);
        } else if let Some(base) = name.strip_suffix(".lora_b") {
            pairs.entry(base.to_string()).or_default().1 = Some(view);
        } else if !name.ends_with("_norm.weight") {
            return Err(ModelError::BadTensor {
                path: shown.to_string(),
                name: name.to_string(),
                problem: "is neither a .lora_a nor a .lora_b tensor".into(),
            });
        }
    }
    Ok(pairs)
}

/// Which part of the model the weight `base` is, or why it cannot be adapted.
fn place(base: &str, cfg: &ModelConfig) -> Result<Place, String> {
    const SUPPORTED: &str = "LoRA is supported on attn_q/k/v/qkv, attn_output, ffn_gate/up/down \
                             and output weights";
    if base == "output.weight" {
        return Ok(Place::Output);
    }
    if base == "token_embd.weight" {
        return Err(format!(
            "LoRA on the token embeddings is not supported ({SUPPORTED})"
        ));
    }
    let Some((li, rest)) = base
        .strip_prefix("blk.")
        .and_then(|s| s.split_once('.'))
        .and_then(|(i, rest)| Some((i.parse::<usize>().ok()?, rest)))
    else {
        return Err(format!("is not a weight of the base model ({SUPPORTED})"));
    };
    if li >= cfg.n_layers {
        return Err(format!(
            "layer {li} does not exist in the base model ({} layers)",
            cfg.n_layers
        ));
    }
    if rest.contains("_exps") {
        return Err("LoRA on mixture-of-experts expert weights is not supported".into());
    }
    let (q, kv, ff) = (cfg.q_dim(), cfg.kv_dim(), cfg.d_ff);
    let all = 0..usize::MAX;
    let parts = match rest {
        "attn_q.weight" => vec![(Target::Q, all)],
        "attn_k.weight" => vec![(Target::K, all)],
        "attn_v.weight" => vec![(Target::V, all)],
        "attn_qkv.weight" => vec![
            (Target::Q, 0..q),
            (Target::K, q..q + kv),
            (Target::V, q + kv..q + 2 * kv),
        ],
        "attn_output.weight" => vec![(Target::O, all)],
        "ffn_gate.weight" => vec![(Target::Gate, all)],
        "ffn_up.weight" if cfg.fused_gate_up => {
            vec![(Target::Gate, 0..ff), (Target::Up, ff..2 * ff)]
        }
        "ffn_up.weight" => vec![(Target::Up, all)],
        "ffn_down.weight" => vec![(Target::Down, all)],
        _ => {
            return Err(format!(
                "LoRA on this weight is not supported ({SUPPORTED})"
            ))
        }
    };
    Ok(Place::Layer(li, parts))
}

/// `A` and `B` of weight `base`, shapes checked against the base tensor and dequantized; on
/// error, the tensor's name and the problem.
fn read_pair(
    base: &str,
    a: TensorView,
    b: TensorView,
    w: &ModelWeights,
) -> Result<LoraPair, (String, String)> {
    let Some(bt) = w.file.tensor(base) else {
        return Err((
            base.to_string(),
            "does not exist in the base model (an adapter for another model?)".into(),
        ));
    };
    let matrix_dims = |d: &[u64]| match d {
        [c, r, rest @ ..] if rest.iter().all(|&x| x == 1) => Some((*c as usize, *r as usize)),
        _ => None,
    };
    let Some((d_in, d_out)) = matrix_dims(bt.dims()) else {
        return Err((
            base.to_string(),
            format!("the base weight has shape {:?}", bt.dims()),
        ));
    };
    let (a_name, b_name) = (format!("{base}.lora_a"), format!("{base}.lora_b"));
    let (a_dims, b_dims) = (a.dims(), b.dims());
    let a_shape = matrix_dims(a_dims).filter(|&(c, r)| c == d_in && r > 0);
    let Some((_, rank)) = a_shape else {
        let want = format!("[{d_in}, rank] (the base weight is [{d_in}, {d_out}])");
        return Err((a_name, format!("shape {a_dims:?}, expected {want}")));
    };
    if matrix_dims(b_dims) != Some((rank, d_out)) {
        let want = format!("[{rank}, {d_out}] (rank {rank} from lora_a)");
        return Err((b_name, format!("shape {b_dims:?}, expected {want}")));
    }
    Ok(LoraPair::new(
        rank,
        d_in,
        d_out,
        dequantize(&a).map_err(|p| (a_name, p))?,
        dequantize(&b).map_err(|p| (b_name, p))?,
    ))
}

/// A tensor's values as f32 (rows are whole blocks, so the data is one run of blocks).
fn dequantize(t: &TensorView) -> Result<Vec<f32>, String> {
    let mut out = vec![0.0; t.info.n_elements() as usize];
    kernels::dequantize_row(t.ggml_type(), t.data, &mut out).map_err(|e| e.to_string())?;
    if let Some(i) = out.iter().position(|v| !v.is_finite()) {
        return Err(format!("value {i} is {}", out[i]));
    }
    Ok(out)
}

/// The pair restricted to output rows `rows` (`0..usize::MAX`: all), or `None` when the pair
/// has fewer outputs.
fn split_rows(p: &LoraPair, rows: Range<usize>) -> Option<LoraPair> {
    let rows = match rows.end {
        usize::MAX => 0..p.d_out,
        _ => rows,
    };
    if rows.end > p.d_out {
        return None;
    }
    Some(LoraPair::new(
        p.rank,
        p.d_in,
        rows.len(),
        p.a.clone(),
        p.b[rows.start * p.rank..rows.end * p.rank].to_vec(),
    ))
}
