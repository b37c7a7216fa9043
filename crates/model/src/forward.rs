//! The transformer forward pass over a ragged batch.
//!
//! A pass that reads like the papers, one method per phase: `embed`, then per layer the
//! attention block (`qkv`: norm → QKV → (QK-norm) → RoPE; `attend`: store K/V in tiles → paged
//! attention; then output projection → (post-norm) → residual) and the MLP block (norm → gated
//! MLP → (post-norm) → residual); then `logits`: the final norm and the output projection for
//! the rows whose logits were asked for.
//!
//! Every matmul runs over all tokens of the batch at once, so each weight is read once per step
//! however many sequences are in it; Q/K/V and gate/up share their input's quantization and one
//! parallel region (`kernels::matmul_shared`). Row results never depend on the other rows (the kernels are
//! batch-invariant and attention only reads its own sequence), so a sequence's logits are the
//! same alone or batched. Buffers live in `Workspace` and only grow.
//!
//! Element-wise work between the matmuls runs on the pool over row ranges (`RowSplit`), each
//! range's rows of every buffer lent to the one call that runs it (`kernels::Shares`), with the
//! pool's home shares: a thread works the same rows step after step.

use std::ops::Range;
use std::sync::Mutex;

use kernels::{matmul, matmul_shared, HugeVec, MatmulScratch, Shares, Threads};

use crate::attention::{attend_all, AttnScratch, ChunkAttention, Heads};
use crate::config::{Activation, ModelConfig, RopeStyle};
use crate::kv::{KvLayout, KvPool, TileId};
use crate::lora::{add_deltas, LoraScratch, Loras, Site, Target};
use crate::moe::{moe_ffn, MoeScratch};
use crate::weights::{Ffn, Matrix, ModelWeights};
use crate::ModelError;
use kernels::{rms_norm_rows, rms_norm_rows_in_place};
use runner::{Batch, LogitsWanted, LoraId};

/// Activations of one forward pass, reused across passes.
#[derive(Default)]
struct Workspace {
    x: HugeVec<f32>,
    h: HugeVec<f32>,
    q: HugeVec<f32>,
    k: HugeVec<f32>,
    v: HugeVec<f32>,
    att: HugeVec<f32>,
    o: HugeVec<f32>,
    gate: HugeVec<f32>,
    up: HugeVec<f32>,
    /// cos/sin per (token, pair) for each distinct RoPE table.
    rope: Vec<Vec<(f32, f32)>>,
    picked: HugeVec<f32>,
    attn: Vec<Mutex<AttnScratch>>,
    moe: MoeScratch,
    mm: MatmulScratch,
    lora: LoraScratch,
}

/// A loaded decoder-only transformer (any architecture `ModelConfig` describes).
pub struct Transformer {
    cfg: ModelConfig,
    w: ModelWeights,
    threads: Threads,
    /// Distinct RoPE tables (frequencies and the factor on cos and sin), and which one each
    /// layer uses.
    rope_tables: Vec<(Vec<f32>, f32)>,
    layer_rope: Vec<usize>,
    ws: Workspace,
    /// The LoRA adapters batches may name.
    loras: Loras,
}

impl Transformer {
    pub fn new(cfg: ModelConfig, w: ModelWeights, threads: Threads) -> Transformer {
        let mut rope_tables: Vec<(Vec<f32>, f32)> = Vec::new();
        let mut layer_rope = Vec::with_capacity(cfg.n_layers);
        for l in &cfg.layers {
            let table = (l.rope_inv_freq.clone(), l.rope_mscale);
            let idx = match rope_tables.iter().position(|t| *t == table) {
                Some(i) => i,
                None => {
                    rope_tables.push(table);
                    rope_tables.len() - 1
                }
            };
            layer_rope.push(idx);
        }
        Transformer {
            cfg,
            w,
            threads,
            rope_tables,
            layer_rope,
            ws: Workspace::default(),
            loras: Loras::default(),
        }
    }

    /// Loads the LoRA adapter at `path`, checked against this model, for chunks to name.
    pub fn load_lora(&mut self, path: &std::path::Path) -> Result<LoraId, ModelError> {
        self.loras.load(path, &self.cfg, &self.w)
    }

    /// Drops adapter `id`.
    pub fn unload_lora(&mut self, id: LoraId) -> Result<(), ModelError> {
        self.loras.unload(id)
    }

    /// The loaded adapters.
    pub fn loras(&self) -> &Loras {
        &self.loras
    }

    pub fn config(&self) -> &ModelConfig {
        &self.cfg
    }

    pub fn weights(&self) -> &ModelWeights {
        &self.w
    }

    /// The pool the forward pass runs on.
    pub fn threads(&self) -> &Threads {
        &self.threads
    }

    /// Runs the batch, writing K/V of its tokens into `kv` and the requested logits into
    /// `logits` (`[rows][vocab]`, rows in batch order).
    pub fn forward(
        &mut self,
        batch: &Batch,
        kv: &mut KvPool,
        logits: &mut Vec<f32>,
    ) -> Result<(), ModelError> {
        self.layers(batch, kv)?;
        self.logits(batch, logits);
        Ok(())
    }

    /// Runs the batch like [`Transformer::forward`], but gives back the final-normed hidden
    /// states (`[rows][d_model]`) of the rows whose logits were asked for, in batch order, instead
    /// of their logits: what a decoder used as an embedding model pools.
    pub fn forward_hidden(
        &mut self,
        batch: &Batch,
        kv: &mut KvPool,
        hidden: &mut Vec<f32>,
    ) -> Result<(), ModelError> {
        self.layers(batch, kv)?;
        let rows = self.final_norm(batch);
        hidden.clear();
        hidden.extend_from_slice(&self.ws.h[..rows * self.cfg.d_model]);
        Ok(())
    }

    /// Checks the batch, then embeds it and runs every layer, leaving the residual in `ws.x`.
    fn layers(&mut self, batch: &Batch, kv: &mut KvPool) -> Result<(), ModelError> {
        check_batch(batch, kv.layout(), &self.cfg)?;
        self.ws.lora.plan.build(batch, &self.loras)?;
        self.embed(batch)?;
        let rows = RowSplit::new(&self.threads, batch.tokens.len());
        for li in 0..self.w.layers.len() {
            self.attention_block(li, batch, kv, rows);
            self.mlp_block(li, rows);
        }
        Ok(())
    }

    /// The batch's token embeddings into `ws.x` (scaled for Gemma), and the cos/sin of their
    /// positions for every RoPE table into `ws.rope`.
    fn embed(&mut self, batch: &Batch) -> Result<(), ModelError> {
        let (cfg, ws) = (&self.cfg, &mut self.ws);
        let (n, d) = (batch.tokens.len(), cfg.d_model);
        let x = ws.x.sized(n * d);
        let row_bytes = self.w.embed.row_bytes();
        for (i, &tok) in batch.tokens.iter().enumerate() {
            let t = tok as usize;
            let src = &self.w.embed.data[t * row_bytes..(t + 1) * row_bytes];
            let dst = &mut x[i * d..(i + 1) * d];
            kernels::dequantize_row(self.w.embed.ty, src, dst).map_err(ModelError::kernel)?;
            if cfg.embed_scale != 1.0 {
                dst.iter_mut().for_each(|v| *v *= cfg.embed_scale);
            }
        }
        fill_rope(&mut ws.rope, &self.rope_tables, batch);
        Ok(())
    }

    /// Layer `li`'s attention half: `qkv`, `attend`, then the output projection, (post-norm)
    /// and the residual into `ws.x`; leaves the FFN norm of the new residual in `ws.h`.
    fn attention_block(&mut self, li: usize, batch: &Batch, kv: &mut KvPool, rows: RowSplit) {
        self.qkv(li, rows);
        self.attend(li, batch, kv, rows.n);
        let (cfg, lw, th, ws) = (&self.cfg, &self.w.layers[li], &self.threads, &mut self.ws);
        let (n, d, eps, qd) = (rows.n, cfg.d_model, cfg.rms_eps, cfg.q_dim());
        let o = ws.o.sized(n * d);
        mm(th, &lw.wo, &ws.att[..n * qd], n, o, &mut ws.mm);
        let (site, att) = (Site::Layer(li), &ws.att[..n * qd]);
        add_deltas(
            th,
            &self.loras,
            &mut ws.lora,
            site,
            att,
            qd,
            &[Target::O],
            &mut [o],
        );
        let o = &mut ws.o[..n * d];
        if let Some(b) = &lw.bo {
            o.chunks_exact_mut(d).for_each(|r| kernels::add(r, b));
        }
        let (or, xr, hr) = (
            rows.cut(o, d),
            rows.cut(&mut ws.x[..n * d], d),
            rows.cut(ws.h.sized(n * d), d),
        );
        rows.run(th, &|r| {
            let (o, x, h) = (or.take_rows(&r), xr.take_rows(&r), hr.take_rows(&r));
            if let Some(pn) = &lw.post_attn_norm {
                rms_norm_rows_in_place(o, pn, eps);
            }
            scale_residual(o, cfg.residual_scale);
            kernels::add(x, o);
            pre_norm(x, lw.ffn_norm.as_deref(), eps, h);
        });
    }

    /// Layer `li`'s queries, keys and values of every token into `ws.q/k/v`: norm, the three
    /// projections in one parallel region (their input quantized once), biases, then per row
    /// (QK-norm) and RoPE.
    fn qkv(&mut self, li: usize, rows: RowSplit) {
        let (cfg, lw, th, ws) = (&self.cfg, &self.w.layers[li], &self.threads, &mut self.ws);
        let (n, d, qd, kvd, eps) = (rows.n, cfg.d_model, cfg.q_dim(), cfg.kv_dim(), cfg.rms_eps);
        {
            let h = rows.cut(ws.h.sized(n * d), d);
            let x = &ws.x[..n * d];
            rows.run(th, &|r| {
                let h = h.take_rows(&r);
                pre_norm(&x[r.start * d..r.end * d], lw.attn_norm.as_deref(), eps, h);
            });
        }
        let q = ws.q.sized(n * qd);
        let k = ws.k.sized(n * kvd);
        let v = ws.v.sized(n * kvd);
        matmul_shared(
            th,
            [&lw.wq.weights(), &lw.wk.weights(), &lw.wv.weights()],
            &ws.h[..n * d],
            n,
            [&mut *q, &mut *k, &mut *v],
            &mut ws.mm,
        );
        add_deltas(
            th,
            &self.loras,
            &mut ws.lora,
            Site::Layer(li),
            &ws.h[..n * d],
            d,
            &[Target::Q, Target::K, Target::V],
            &mut [&mut *q, &mut *k, &mut *v],
        );
        for (buf, bias) in [(&mut *q, &lw.bq), (&mut *k, &lw.bk), (&mut *v, &lw.bv)] {
            if let Some(b) = bias {
                buf.chunks_exact_mut(b.len())
                    .for_each(|r| kernels::add(r, b));
            }
        }
        let rope = &ws.rope[self.layer_rope[li]];
        let pairs = rope.len() / n;
        let (qr, kr) = (rows.cut(q, qd), rows.cut(k, kvd));
        rows.run(th, &|r| {
            let (q, k) = (qr.take_rows(&r), kr.take_rows(&r));
            if let (Some(qn), Some(kn)) = (&lw.q_norm, &lw.k_norm) {
                // Each head is a row of `head_dim` values.
                rms_norm_rows_in_place(q, qn, eps);
                rms_norm_rows_in_place(k, kn, eps);
            }
            let cs = &rope[r.start * pairs..r.end * pairs];
            apply_rope(q, cs, r.len(), cfg.head_dim, cfg.rope_style);
            apply_rope(k, cs, r.len(), cfg.head_dim, cfg.rope_style);
        });
    }

    /// Layer `li`'s K/V of the batch stored in each sequence's tiles, then paged attention of
    /// `ws.q` against them into `ws.att`.
    fn attend(&mut self, li: usize, batch: &Batch, kv: &mut KvPool, n: usize) {
        let (cfg, ws) = (&self.cfg, &mut self.ws);
        let (qd, kvd) = (cfg.q_dim(), cfg.kv_dim());
        let (k, v) = (&ws.k[..n * kvd], &ws.v[..n * kvd]);
        let (group, in_group) = kv.layout().layer_slot[li];
        let ts = kv.layout().tile_size;
        let window = cfg.layers[li].window;
        let mut chunks = Vec::with_capacity(batch.seqs.len());
        for sc in batch.seqs {
            let table = &sc.tile_tables[group];
            for t in 0..sc.len {
                let pos = sc.start_pos + t;
                let row = sc.first_token + t;
                kv.store(
                    table[pos / ts],
                    in_group,
                    pos % ts,
                    &k[row * kvd..(row + 1) * kvd],
                    &v[row * kvd..(row + 1) * kvd],
                );
            }
            chunks.push(ChunkAttention {
                tiles: table,
                in_group,
                start_pos: sc.start_pos,
                first_row: sc.first_token,
                len: sc.len,
                window,
            });
        }
        let heads = Heads {
            n_heads: cfg.n_heads,
            n_kv_heads: cfg.n_kv_heads,
            head_dim: cfg.head_dim,
            scale: cfg.attn_scale,
            softcap: cfg.attn_softcap,
            sinks: self.w.layers[li].sinks.as_deref(),
        };
        let att = ws.att.sized(n * qd);
        let q = &ws.q[..n * qd];
        attend_all(&self.threads, kv, &chunks, heads, q, att, &mut ws.attn);
    }

    /// Layer `li`'s MLP half on the normed residual in `ws.h`: the FFN (dense or mixture of
    /// experts) into `ws.o`, (post-norm) and the residual.
    fn mlp_block(&mut self, li: usize, rows: RowSplit) {
        let (cfg, lw, th, ws) = (&self.cfg, &self.w.layers[li], &self.threads, &mut self.ws);
        let (n, d, eps) = (rows.n, cfg.d_model, cfg.rms_eps);
        match &lw.ffn {
            Ffn::Moe(mw) => {
                let o = ws.o.sized(n * d);
                moe_ffn(th, mw, &ws.h[..n * d], n, o, &mut ws.moe, &mut ws.mm);
            }
            Ffn::Dense { gate, up, down } => {
                let lora = (&self.loras, Site::Layer(li));
                dense_mlp(th, cfg, [gate, up, down], ws, rows, lora)
            }
        }
        let o = &mut ws.o[..n * d];
        let (or, xr) = (rows.cut(o, d), rows.cut(&mut ws.x[..n * d], d));
        rows.run(th, &|r| {
            let (o, x) = (or.take_rows(&r), xr.take_rows(&r));
            if let Some(pn) = &lw.post_ffn_norm {
                rms_norm_rows_in_place(o, pn, eps);
            }
            scale_residual(o, cfg.residual_scale);
            kernels::add(x, o);
        });
    }

    /// The final norm and the output projection of the rows whose logits were asked for
    /// (gathered first, so only those are normed and projected), then the soft cap.
    fn logits(&mut self, batch: &Batch, logits: &mut Vec<f32>) {
        let rows = self.final_norm(batch);
        let (cfg, ws) = (&self.cfg, &mut self.ws);
        let normed = &ws.h[..rows * cfg.d_model];
        logits.resize(rows * cfg.vocab_size, 0.0);
        mm(
            &self.threads,
            &self.w.output,
            normed,
            rows,
            logits,
            &mut ws.mm,
        );
        let (th, loras) = (&self.threads, &self.loras);
        let out = &mut [&mut logits[..]];
        add_deltas(
            th,
            loras,
            &mut ws.lora,
            Site::Head,
            normed,
            cfg.d_model,
            &[Target::O],
            out,
        );
        if cfg.final_logit_softcap > 0.0 {
            let c = cfg.final_logit_softcap;
            logits.iter_mut().for_each(|v| *v = c * (*v / c).tanh());
        }
        if cfg.logit_scale != 1.0 {
            let inv = 1.0 / cfg.logit_scale;
            logits.iter_mut().for_each(|v| *v *= inv);
        }
    }

    /// Gathers the rows whose logits were asked for and writes their final norm into `ws.h`;
    /// returns how many rows.
    fn final_norm(&mut self, batch: &Batch) -> usize {
        let (cfg, ws) = (&self.cfg, &mut self.ws);
        let d = cfg.d_model;
        let rows = batch.n_logit_rows();
        let picked = ws.picked.sized(rows * d);
        let mut r = 0;
        for sc in batch.seqs {
            let range = match sc.logits {
                LogitsWanted::None => continue,
                LogitsWanted::Last => sc.first_token + sc.len - 1..sc.first_token + sc.len,
                LogitsWanted::All => sc.first_token..sc.first_token + sc.len,
            };
            for t in range {
                picked[r * d..(r + 1) * d].copy_from_slice(&ws.x[t * d..(t + 1) * d]);
                r += 1;
            }
        }
        let normed = ws.h.sized(rows * d);
        rms_norm_rows(picked, &self.w.output_norm, cfg.rms_eps, normed);
        rows
    }
}

/// The gated MLP of the `rows.n` rows of `ws.h` into `ws.o`: gate and up in one parallel
/// region, the activation times up, then the down projection.
/// `lora`: the adapters and the layer, for their products added after each matmul.
fn dense_mlp(
    th: &Threads,
    cfg: &ModelConfig,
    w: [&Matrix; 3],
    ws: &mut Workspace,
    rows: RowSplit,
    lora: (&Loras, Site),
) {
    let (n, d, ff) = (rows.n, cfg.d_model, cfg.d_ff);
    let gate = ws.gate.sized(n * ff);
    let up = ws.up.sized(n * ff);
    matmul_shared(
        th,
        [&w[0].weights(), &w[1].weights()],
        &ws.h[..n * d],
        n,
        [&mut *gate, &mut *up],
        &mut ws.mm,
    );
    let (h, targets) = (&ws.h[..n * d], [Target::Gate, Target::Up]);
    let outs = &mut [&mut *gate, &mut *up];
    add_deltas(th, lora.0, &mut ws.lora, lora.1, h, d, &targets, outs);
    {
        let (gr, up) = (rows.cut(gate, ff), &*up);
        rows.run(th, &|r| {
            let gate = gr.take_rows(&r);
            let up = &up[r.start * ff..r.end * ff];
            match cfg.activation {
                Activation::Silu => kernels::silu_mul(gate, up),
                Activation::GeluTanh => {
                    // ggml's f16 table, as llama.cpp computes it.
                    kernels::gelu_tanh(gate);
                    kernels::mul(gate, up);
                }
                Activation::SwigluOai => {
                    kernels::swiglu_oai(gate, up, Activation::OAI_ALPHA, Activation::OAI_LIMIT)
                }
            }
        });
    }
    let o = ws.o.sized(n * d);
    mm(th, w[2], &ws.gate[..n * ff], n, o, &mut ws.mm);
    let act = &ws.gate[..n * ff];
    add_deltas(
        th,
        lora.0,
        &mut ws.lora,
        lora.1,
        act,
        ff,
        &[Target::Down],
        &mut [o],
    );
}

fn mm(th: &Threads, w: &Matrix, x: &[f32], n: usize, out: &mut [f32], s: &mut MatmulScratch) {
    matmul(th, &w.weights(), x, n, out, s);
}

/// Rejects a batch the forward pass cannot run, before touching anything.
fn check_batch(batch: &Batch, layout: &KvLayout, cfg: &ModelConfig) -> Result<(), ModelError> {
    let bad = |m: String| Err(ModelError::BadBatch(m));
    if let Some(&t) = batch.tokens.iter().find(|&&t| t as usize >= cfg.vocab_size) {
        return bad(format!(
            "token id {t} is outside the vocabulary ({})",
            cfg.vocab_size
        ));
    }
    let mut covered = 0;
    for (i, s) in batch.seqs.iter().enumerate() {
        if s.len == 0 || s.first_token != covered {
            return bad(format!(
                "sequence {i}: chunks must be non-empty and consecutive"
            ));
        }
        covered += s.len;
        if s.tile_tables.len() != layout.groups.len() {
            return bad(format!(
                "sequence {i}: one tile table per KV group is needed"
            ));
        }
        let need = (s.start_pos + s.len).div_ceil(layout.tile_size);
        for (g, table) in s.tile_tables.iter().enumerate() {
            if table.len() < need {
                return bad(format!("sequence {i}: tile table {g} too short"));
            }
            let first_new = s.start_pos / layout.tile_size;
            if table[first_new..need].contains(&TileId::RELEASED) {
                return bad(format!("sequence {i}: a tile being written was released"));
            }
        }
    }
    if covered != batch.tokens.len() {
        return bad("sequence chunks do not cover the batch's tokens".into());
    }
    Ok(())
}

/// cos/sin of every (token, frequency) for each distinct RoPE table, times its factor.
fn fill_rope(out: &mut Vec<Vec<(f32, f32)>>, tables: &[(Vec<f32>, f32)], batch: &Batch) {
    out.resize_with(tables.len(), Vec::new);
    for (dst, (freqs, m)) in out.iter_mut().zip(tables) {
        dst.clear();
        for s in batch.seqs {
            for t in 0..s.len {
                let p = (s.start_pos + t) as f32;
                dst.extend(freqs.iter().map(|f| {
                    let theta = p * f;
                    match *m == 1.0 {
                        true => (theta.cos(), theta.sin()),
                        false => (theta.cos() * m, theta.sin() * m),
                    }
                }));
            }
        }
    }
}

/// Rotates every head of each of the `n` tokens in `x` (`[n][heads*head_dim]`); `cs` holds
/// `n * pairs` (cos, sin) entries. With partial rotary (`pairs < head_dim/2`) the tail of each
/// head is left as is.
fn apply_rope(x: &mut [f32], cs: &[(f32, f32)], n: usize, head_dim: usize, style: RopeStyle) {
    if n == 0 || cs.is_empty() {
        return;
    }
    let pairs = cs.len() / n;
    let row = x.len() / n;
    for t in 0..n {
        let tcs = &cs[t * pairs..(t + 1) * pairs];
        for head in x[t * row..(t + 1) * row].chunks_exact_mut(head_dim) {
            for (i, &(c, s)) in tcs.iter().enumerate() {
                let (ia, ib) = match style {
                    RopeStyle::Neox => (i, i + pairs),
                    RopeStyle::Interleaved => (2 * i, 2 * i + 1),
                };
                let (a, b) = (head[ia], head[ib]);
                head[ia] = a * c - b * s;
                head[ib] = a * s + b * c;
            }
        }
    }
}

/// How element-wise work between matmuls is cut into row ranges: one range on the caller when
/// there are too few rows to pay for the hand-off (or one thread), else one range per thread,
/// each a home share of `Threads::for_each_range` (a thread takes the same rows step after step,
/// and in decode attends the same sequences). Every row gets the same operations either way.
#[derive(Clone, Copy)]
struct RowSplit {
    /// Rows of the batch.
    n: usize,
    /// Rows per range.
    chunk: usize,
}

impl RowSplit {
    fn new(threads: &Threads, n: usize) -> RowSplit {
        const MIN_ROWS: usize = 4;
        let chunk = if n < MIN_ROWS || threads.n() == 1 {
            n.max(1)
        } else {
            n.div_ceil(threads.n())
        };
        RowSplit { n, chunk }
    }

    /// `buf` (`[n][width]`) cut into this split's ranges, each lent to the call that runs it.
    fn cut<'a>(&self, buf: &'a mut [f32], width: usize) -> Shares<'a, f32> {
        Shares::rows(&mut buf[..self.n * width], width, self.chunk)
    }

    /// Runs `f` once per range, covering `0..n`.
    fn run(&self, threads: &Threads, f: &(dyn Fn(Range<usize>) + Sync)) {
        if self.chunk >= self.n {
            if self.n > 0 {
                f(0..self.n);
            }
        } else {
            threads.for_each_range(self.n, self.chunk, &|_, r| f(r));
        }
    }
}

/// Granite: what a block adds to the residual, times `scale` (1: unchanged).
fn scale_residual(o: &mut [f32], scale: f32) {
    if scale != 1.0 {
        o.iter_mut().for_each(|v| *v *= scale);
    }
}

/// The rows of `x` RMS-normed by `weight` into `h`, or copied when the model has no pre-norms
/// (OLMo 2).
fn pre_norm(x: &[f32], weight: Option<&[f32]>, eps: f32, h: &mut [f32]) {
    match weight {
        Some(w) => rms_norm_rows(x, w, eps, h),
        None => h.copy_from_slice(x),
    }
}
