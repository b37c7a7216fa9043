//! Encoders: embedding models and rerankers (BERT, nomic-bert), whole inputs in, one vector (or
//! score) per input out.
//!
//! An [`Encoder`] runs many inputs in one call: the inputs' tokens are rows of one batch, every
//! matmul takes all of them at once (each weight read once per call), and attention is
//! bidirectional within each input only. An input's result never depends on the other inputs
//! (the kernels are batch invariant and attention reads only the input's own rows). Buffers
//! live in the encoder and only grow, to the largest batch seen. No KV cache: an input is
//! computed whole, in one call.
//!
//! Pooling is the file's (`<arch>.pooling_type`) unless the caller asks otherwise; embeddings
//! are L2-normalised on request, as llama-server does by default. Rank pooling runs the
//! classifier head on the first token and returns its raw score(s), never normalised.

mod attention;
mod bert;
mod config;
mod decoder;
mod embedder;

use std::ops::Range;
use std::path::Path;

use kernels::{HugeVec, Threads};

pub use config::{model_kind, Dtype, EncoderArch, EncoderConfig, ModelKind, Pooling};
pub use decoder::DecoderEmbedder;
pub use embedder::Embedder;

use attention::{AttnScratch, Shape};
use bert::{BertWeights, LinScratch, Qkv};

use crate::ModelError;

/// Activations of one call, reused across calls.
#[derive(Default)]
struct Workspace {
    x: HugeVec<f32>,
    qkv: HugeVec<f32>,
    q: HugeVec<f32>,
    k: HugeVec<f32>,
    v: HugeVec<f32>,
    att: HugeVec<f32>,
    o: HugeVec<f32>,
    up: HugeVec<f32>,
    gate: HugeVec<f32>,
    pooled: HugeVec<f32>,
    pos_row: HugeVec<f32>,
    rope: Vec<(f32, f32)>,
    attn: AttnScratch,
    mm: LinScratch,
}

/// A loaded encoder.
pub struct Encoder {
    cfg: EncoderConfig,
    w: BertWeights,
    threads: Threads,
    ws: Workspace,
}

impl Encoder {
    /// Builds the encoder of an opened GGUF file (weights stay views of its mmap, or are
    /// rounded to BF16 as `dtype` says). Anything but a supported, non-causal BERT-family file
    /// is an error naming the file and the problem.
    pub fn load(
        file: gguf::GgufFile,
        threads: Threads,
        dtype: Dtype,
    ) -> Result<Encoder, ModelError> {
        let path = file.path().display().to_string();
        let in_file = |e: ModelError| match e {
            e @ (ModelError::InFile { .. }
            | ModelError::MissingTensor { .. }
            | ModelError::BadTensor { .. }) => e,
            e => ModelError::InFile {
                path: path.clone(),
                source: Box::new(e),
            },
        };
        let cfg = EncoderConfig::from_metadata(file.metadata()).map_err(in_file)?;
        let w = BertWeights::load(file, &cfg, dtype.bf16()).map_err(in_file)?;
        Ok(Encoder {
            cfg,
            w,
            threads,
            ws: Workspace::default(),
        })
    }

    pub fn config(&self) -> &EncoderConfig {
        &self.cfg
    }

    /// Width of an embedding.
    pub fn n_embd(&self) -> usize {
        self.cfg.d_model
    }

    /// The longest input, in tokens (the context the model was trained for).
    pub fn max_positions(&self) -> usize {
        self.cfg.context_length
    }

    /// The pooling the file asks for.
    pub fn pooling(&self) -> Pooling {
        self.cfg.pooling
    }

    /// Whether the file is a reranker: rank pooling with a classifier head.
    pub fn is_reranker(&self) -> bool {
        self.cfg.pooling == Pooling::Rank && self.w.cls.is_some()
    }

    /// Scores per input under rank pooling (0 without a classifier head).
    pub fn n_scores(&self) -> usize {
        self.w.cls.as_ref().map_or(0, |c| c.n_out)
    }

    /// Whether every projection of every layer computes in BF16 (`Dtype::Bfloat16`, or `Auto`
    /// on a CPU with AVX-512 BF16); a float matrix whose columns are not a multiple of 32 stays
    /// f32, and so do quantized ones.
    pub fn bf16(&self) -> bool {
        self.w.layers.iter().all(|l| {
            let qkv = match &l.qkv {
                Qkv::Fused(f) => f.bf16.is_some(),
                Qkv::Split(s) => s.iter().all(|p| p.bf16.is_some()),
            };
            qkv && l.out.bf16.is_some()
                && l.up.bf16.is_some()
                && l.down.bf16.is_some()
                && l.gate.as_ref().is_none_or(|g| g.bf16.is_some())
        })
    }

    /// The pool the encoder runs on.
    pub fn threads(&self) -> &Threads {
        &self.threads
    }

    /// Runs whole inputs (token ids, with their `[CLS]`/`[SEP]`) in one batch and returns one
    /// result per input: `n_embd()` floats for mean / cls / last pooling, `n_embd()` per token for
    /// `None`, `n_scores()` raw scores for `Rank`. `normalize` L2-normalises each embedding
    /// (each token's under `None`; never the scores).
    ///
    /// Errors: an empty input, one longer than `max_positions()`, an id outside the vocabulary,
    /// or rank pooling on a file without a classifier head.
    pub fn embed_batch(
        &mut self,
        inputs: &[&[u32]],
        pooling: Pooling,
        normalize: bool,
    ) -> Result<Vec<Vec<f32>>, ModelError> {
        let spans = self.check(inputs, pooling)?;
        let n = spans.last().map_or(0, |s| s.end);
        if n == 0 {
            return Ok(Vec::new());
        }
        self.embed(inputs, &spans)?;
        for li in 0..self.w.layers.len() {
            self.layer(li, &spans);
        }
        Ok(self.pool(&spans, pooling, normalize))
    }

    /// Each input's rows in the batch, after checking the inputs.
    fn check(&self, inputs: &[&[u32]], pooling: Pooling) -> Result<Vec<Range<usize>>, ModelError> {
        if pooling == Pooling::Rank && self.w.cls.is_none() {
            return Err(ModelError::BadBatch(
                "rank pooling needs a classifier head (cls / cls.output tensors), which this \
                 model does not have"
                    .into(),
            ));
        }
        let mut spans = Vec::with_capacity(inputs.len());
        let mut at = 0;
        for (i, ids) in inputs.iter().enumerate() {
            if ids.is_empty() {
                return Err(ModelError::BadBatch(format!("input {i} has no tokens")));
            }
            if ids.len() > self.cfg.context_length {
                return Err(ModelError::BadBatch(format!(
                    "input {i} has {} tokens, more than the model's {} positions",
                    ids.len(),
                    self.cfg.context_length
                )));
            }
            if let Some(&t) = ids.iter().find(|&&t| t as usize >= self.cfg.vocab_size) {
                return Err(ModelError::BadBatch(format!(
                    "input {i}: token id {t} is outside the vocabulary ({})",
                    self.cfg.vocab_size
                )));
            }
            spans.push(at..at + ids.len());
            at += ids.len();
        }
        Ok(spans)
    }

    /// Token (+ type 0, + position) embeddings and their LayerNorm into `ws.x`; RoPE tables.
    fn embed(&mut self, inputs: &[&[u32]], spans: &[Range<usize>]) -> Result<(), ModelError> {
        let (cfg, w, ws) = (&self.cfg, &self.w, &mut self.ws);
        let d = cfg.d_model;
        let n = spans.last().map_or(0, |s| s.end);
        let x = ws.x.sized(n * d);
        let pos_row = ws.pos_row.sized(d);
        for (ids, span) in inputs.iter().zip(spans) {
            for (p, (&tok, r)) in ids.iter().zip(span.clone()).enumerate() {
                let dst = &mut x[r * d..(r + 1) * d];
                let rb = w.tok_embd.row_bytes();
                let t = tok as usize;
                kernels::dequantize_row(w.tok_embd.ty, &w.tok_embd.data[t * rb..(t + 1) * rb], dst)
                    .map_err(ModelError::kernel)?;
                if let Some(t0) = &w.type0 {
                    kernels::add(dst, t0);
                }
                if let Some(pe) = &w.pos_embd {
                    let rb = pe.row_bytes();
                    kernels::dequantize_row(pe.ty, &pe.data[p * rb..(p + 1) * rb], pos_row)
                        .map_err(ModelError::kernel)?;
                    kernels::add(dst, pos_row);
                }
            }
        }
        w.embd_norm.apply(x, cfg.eps);
        ws.rope.clear();
        if !cfg.rope_inv_freq.is_empty() {
            for span in spans {
                for p in 0..span.len() {
                    ws.rope.extend(cfg.rope_inv_freq.iter().map(|f| {
                        let theta = p as f32 * f;
                        (theta.cos(), theta.sin())
                    }));
                }
            }
        }
        Ok(())
    }

    /// One post-norm layer over all rows.
    fn layer(&mut self, li: usize, spans: &[Range<usize>]) {
        let (cfg, th, ws) = (&self.cfg, &self.threads, &mut self.ws);
        let lw = &self.w.layers[li];
        let (d, ff, eps) = (cfg.d_model, cfg.d_ff, cfg.eps);
        let n = spans.last().map_or(0, |s| s.end);
        let (x, mm) = (&ws.x[..n * d], &mut ws.mm);
        let q = ws.q.sized(n * d);
        let k = ws.k.sized(n * d);
        let v = ws.v.sized(n * d);
        match &lw.qkv {
            Qkv::Fused(f) => {
                let qkv = ws.qkv.sized(n * 3 * d);
                f.apply(th, x, n, qkv, mm);
                for (r, row) in qkv.chunks_exact(3 * d).enumerate() {
                    q[r * d..(r + 1) * d].copy_from_slice(&row[..d]);
                    k[r * d..(r + 1) * d].copy_from_slice(&row[d..2 * d]);
                    v[r * d..(r + 1) * d].copy_from_slice(&row[2 * d..]);
                }
            }
            Qkv::Split(split) => {
                let [wq, wk, wv] = &**split;
                wq.apply(th, x, n, q, mm);
                wk.apply(th, x, n, k, mm);
                wv.apply(th, x, n, v, mm);
            }
        }
        if !ws.rope.is_empty() {
            rope_neox(q, &ws.rope, cfg.head_dim);
            rope_neox(k, &ws.rope, cfg.head_dim);
        }
        let shape = Shape {
            n_heads: cfg.n_heads,
            head_dim: cfg.head_dim,
            scale: 1.0 / (cfg.head_dim as f32).sqrt(),
        };
        let att = ws.att.sized(n * d);
        attention::attend(th, spans, shape, [&*q, &*k, &*v], att, &mut ws.attn);
        let o = ws.o.sized(n * d);
        lw.out.apply(th, att, n, o, mm);
        let x = &mut ws.x[..n * d];
        kernels::add(x, o);
        lw.attn_norm.apply(x, eps);
        let up = ws.up.sized(n * ff);
        lw.up.apply(th, x, n, up, mm);
        match &lw.gate {
            Some(g) => {
                let gate = ws.gate.sized(n * ff);
                g.apply(th, x, n, gate, mm);
                kernels::silu_mul(gate, up);
                lw.down.apply(th, gate, n, o, mm);
            }
            None => {
                kernels::gelu_tanh(up);
                lw.down.apply(th, up, n, o, mm);
            }
        }
        kernels::add(x, o);
        lw.out_norm.apply(x, eps);
    }

    /// Each input's result from the final states in `ws.x`.
    fn pool(&mut self, spans: &[Range<usize>], pooling: Pooling, normalize: bool) -> Vec<Vec<f32>> {
        let d = self.cfg.d_model;
        let x = &self.ws.x;
        let rows = |r: Range<usize>| &x[r.start * d..r.end * d];
        let mut out: Vec<Vec<f32>> = spans
            .iter()
            .map(|s| match pooling {
                Pooling::None => rows(s.clone()).to_vec(),
                Pooling::Mean => mean_rows(rows(s.clone()), d),
                Pooling::Cls | Pooling::Rank => rows(s.start..s.start + 1).to_vec(),
                Pooling::Last => rows(s.end - 1..s.end).to_vec(),
            })
            .collect();
        if pooling == Pooling::Rank {
            return self.classify(out);
        }
        if normalize {
            for v in &mut out {
                v.chunks_exact_mut(d).for_each(l2_normalize);
            }
        }
        out
    }

    /// The classifier head over the inputs' first-token states: one batched matmul per stage.
    fn classify(&mut self, cls_rows: Vec<Vec<f32>>) -> Vec<Vec<f32>> {
        let (d, m) = (self.cfg.d_model, cls_rows.len());
        let Some(head) = &self.w.cls else {
            return cls_rows;
        };
        let (th, ws) = (&self.threads, &mut self.ws);
        let x = ws.pooled.sized(m * d);
        for (dst, src) in x.chunks_exact_mut(d).zip(&cls_rows) {
            dst.copy_from_slice(src);
        }
        let h = ws.o.sized(m * d);
        let mut cur: &[f32] = x;
        if let Some(dense) = &head.dense {
            dense.apply(th, cur, m, h, &mut ws.mm);
            h.iter_mut().for_each(|v| *v = v.tanh());
            cur = h;
        }
        match &head.out {
            Some(o) => {
                let mut scores = vec![0.0; m * head.n_out];
                o.apply(th, cur, m, &mut scores, &mut ws.mm);
                scores
                    .chunks_exact(head.n_out)
                    .map(<[f32]>::to_vec)
                    .collect()
            }
            None => cur.chunks_exact(d).map(<[f32]>::to_vec).collect(),
        }
    }
}

/// Rotates every head of every row with its position's (cos, sin) pairs, NeoX style
/// (x[i], x[i + hd/2]).
fn rope_neox(x: &mut [f32], cs: &[(f32, f32)], hd: usize) {
    let pairs = hd / 2;
    let n = cs.len() / pairs;
    let width = x.len() / n.max(1);
    for (row, tcs) in x.chunks_exact_mut(width).zip(cs.chunks_exact(pairs)) {
        for head in row.chunks_exact_mut(hd) {
            for (i, &(c, s)) in tcs.iter().enumerate() {
                let (a, b) = (head[i], head[i + pairs]);
                head[i] = a * c - b * s;
                head[i + pairs] = a * s + b * c;
            }
        }
    }
}

/// The mean of `x`'s rows of `d` values, summed in row order.
fn mean_rows(x: &[f32], d: usize) -> Vec<f32> {
    let n = x.len() / d;
    let mut out = vec![0.0f32; d];
    for row in x.chunks_exact(d) {
        kernels::add(&mut out, row);
    }
    let inv = 1.0 / n as f32;
    out.iter_mut().for_each(|v| *v *= inv);
    out
}

/// `v / |v|` (the sum of squares in f64, as llama.cpp's `common_embd_normalize`); a zero
/// vector stays zero.
fn l2_normalize(v: &mut [f32]) {
    let sum: f64 = v.iter().map(|&x| f64::from(x) * f64::from(x)).sum();
    let norm = sum.sqrt();
    let scale = if norm > 0.0 { (1.0 / norm) as f32 } else { 0.0 };
    v.iter_mut().for_each(|x| *x *= scale);
}

/// An embedding model of either kind and its tokenizer, loaded from a GGUF file.
pub struct LoadedEmbedder {
    pub tokenizer: tokenizer::Tokenizer,
    pub embedder: Box<dyn Embedder>,
}

/// Opens `path` and loads it as an embedding model on `threads` workers: an encoder, or a
/// decoder whose hidden states are pooled (its `pooling()` is the file's
/// `<arch>.pooling_type`, else last-token, as Qwen3-Embedding's). `dtype` is the encoder's
/// arithmetic; a decoder computes in its own block formats, so any `dtype` but `Auto` on one
/// is an error.
pub fn load_embedder(
    path: &Path,
    threads: usize,
    dtype: Dtype,
) -> Result<LoadedEmbedder, ModelError> {
    let file = gguf::GgufFile::open(path)?;
    if model_kind(file.metadata())? == ModelKind::Encoder {
        drop(file);
        let m = load_encoder(path, threads, dtype)?;
        return Ok(LoadedEmbedder {
            tokenizer: m.tokenizer,
            embedder: Box::new(m.encoder),
        });
    }
    let arch = file
        .metadata()
        .require_str("general.architecture")?
        .to_string();
    if dtype != Dtype::Auto {
        return Err(ModelError::InFile {
            path: path.display().to_string(),
            source: Box::new(ModelError::Invalid(format!(
                "dtype {} applies to encoders (nomic-bert, bert); this is a {arch} decoder, \
                 which computes in its own block formats",
                dtype.name()
            ))),
        });
    }
    let from_file = file
        .metadata()
        .get_u32(&format!("{arch}.pooling_type"))?
        .and_then(Pooling::from_gguf)
        .filter(|&p| p != Pooling::None);
    drop(file);
    let m = crate::load(path, threads)?;
    let pooling = from_file.unwrap_or(Pooling::Last);
    Ok(LoadedEmbedder {
        tokenizer: m.tokenizer,
        embedder: Box::new(DecoderEmbedder::new(m.transformer, pooling)),
    })
}

/// An encoder and its tokenizer, loaded from a GGUF file.
pub struct LoadedEncoder {
    pub tokenizer: tokenizer::Tokenizer,
    pub encoder: Encoder,
}

/// Opens `path` and loads its tokenizer and encoder on `threads` workers, its float projections
/// computing as `dtype` says.
pub fn load_encoder(
    path: &Path,
    threads: usize,
    dtype: Dtype,
) -> Result<LoadedEncoder, ModelError> {
    let file = gguf::GgufFile::open(path)?;
    let tokenizer =
        tokenizer::Tokenizer::from_metadata(file.metadata()).map_err(|e| ModelError::InFile {
            path: path.display().to_string(),
            source: Box::new(e.into()),
        })?;
    let encoder = Encoder::load(file, Threads::new(threads.max(1)), dtype)?;
    Ok(LoadedEncoder { tokenizer, encoder })
}
