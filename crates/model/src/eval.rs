//! Perplexity, computed the way `llama-perplexity -c N` does, so the two can be compared.
//!
//! The token stream is cut into windows of `n_ctx` tokens; each window's first token is replaced
//! by BOS (only for a model whose `add_bos_token` is set, as llama.cpp does: Qwen2.5's windows
//! keep their first text token) and the window runs on a fresh cache. The second half of each window is scored: for
//! j in n_ctx/2 .. n_ctx-1, the negative log-likelihood of token j+1 given tokens 0..=j.

use crate::forward::Transformer;
use crate::kv::KvDtype;
use crate::session::Session;
use crate::ModelError;
use runner::LogitsWanted;

/// Result of a perplexity run.
#[derive(Clone, Debug)]
pub struct Perplexity {
    pub ppl: f64,
    /// llama.cpp's error estimate: PPL * sqrt(var(nll) / (count - 1)).
    pub ppl_error: f64,
    pub n_chunks: usize,
    pub n_scored: usize,
    /// Sum of the NLL of each chunk.
    pub chunk_nll: Vec<f64>,
}

/// Runs the perplexity procedure over `tokens` (which should start with BOS when `bos` is
/// given), calling `progress(done, total)` after each window. `bos` replaces each window's first
/// token; pass `None` for a model that adds no BOS.
pub fn perplexity(
    model: &mut Transformer,
    tokens: &[u32],
    bos: Option<u32>,
    n_ctx: usize,
    kv_dtype: KvDtype,
    mut progress: impl FnMut(usize, usize),
) -> Result<Perplexity, ModelError> {
    if n_ctx < 4 {
        return Err(ModelError::BadBatch(
            "perplexity needs a context of at least 4".into(),
        ));
    }
    let n_chunks = tokens.len() / n_ctx;
    let first = n_ctx / 2;
    let vocab = model.config().vocab_size;
    let layout = model.config().kv_layout(16).with_dtype(kv_dtype)?;
    let mut session = Session::with_layout(layout, 1, n_ctx);
    let (mut sum, mut sum_sq, mut count) = (0.0f64, 0.0f64, 0usize);
    let mut chunk_nll = Vec::with_capacity(n_chunks);
    let mut logits = Vec::new();
    for c in 0..n_chunks {
        let mut window = tokens[c * n_ctx..(c + 1) * n_ctx].to_vec();
        if let Some(bos) = bos {
            window[0] = bos;
        }
        session.reset(0);
        // The first half only fills the cache; the second half's logits are scored.
        session.run(
            model,
            &[(0, &window[..first], LogitsWanted::None)],
            &mut logits,
        )?;
        session.run(
            model,
            &[(0, &window[first..], LogitsWanted::All)],
            &mut logits,
        )?;
        let mut chunk = 0.0;
        for j in first..n_ctx - 1 {
            let row = &logits[(j - first) * vocab..(j - first + 1) * vocab];
            let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
            let sum_exp: f64 = row.iter().map(|&l| ((l - max) as f64).exp()).sum();
            let nll = (max as f64 + sum_exp.ln()) - row[window[j + 1] as usize] as f64;
            chunk += nll;
            sum += nll;
            sum_sq += nll * nll;
            count += 1;
        }
        chunk_nll.push(chunk);
        progress(c + 1, n_chunks);
    }
    let mean = sum / count.max(1) as f64;
    let ppl = mean.exp();
    let var = (sum_sq / count.max(1) as f64 - mean * mean).max(0.0);
    let ppl_error = ppl * (var / (count.max(2) - 1) as f64).sqrt();
    Ok(Perplexity {
        ppl,
        ppl_error,
        n_chunks,
        n_scored: count,
        chunk_nll,
    })
}
