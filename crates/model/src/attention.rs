//! Paged attention: queries of one sequence chunk against K/V read through its tile table.
//!
//! Tiles are the outer loop: each tile's K and V rows are converted from f16 once and then
//! used by every query of the chunk that can see them, with an online (streaming) softmax per
//! (query, head). Nothing is copied into a contiguous per-sequence buffer, and the result for a
//! query depends only on its own sequence's KV: the same whatever else is in the batch.
//!
//! Visibility: a query at position p sees key positions `lo(p)..=p`, where `lo(p) = 0` on a
//! global layer and `p + 1 - window` on a sliding-window layer (llama.cpp's "standard" SWA).

use crate::kv::{KvPool, TileId};

/// Per-call description of one chunk's attention on one layer.
pub struct ChunkAttention<'a> {
    /// The layer's tile table (its KV group's) for this sequence.
    pub tiles: &'a [TileId],
    /// The layer's index inside its KV group.
    pub in_group: usize,
    /// Position of the chunk's first query.
    pub start_pos: usize,
    /// Number of queries.
    pub len: usize,
    pub window: Option<usize>,
    pub n_heads: usize,
    pub n_kv_heads: usize,
    pub head_dim: usize,
    /// Multiplies q.k before the softmax.
    pub scale: f32,
}

/// Reusable buffers for `attend`; grown, never shrunk.
#[derive(Default)]
pub struct AttnScratch {
    k: Vec<f32>,
    v: Vec<f32>,
    /// Running max per (query, head).
    m: Vec<f32>,
    /// Running sum of exp per (query, head).
    l: Vec<f32>,
}

fn grow(v: &mut Vec<f32>, n: usize) {
    if v.len() < n {
        v.resize(n, 0.0);
    }
}

/// Computes `out[t][h*head_dim..]` for each query `t` of the chunk. `q` is `[len][n_heads*head_dim]`
/// (RoPE applied); `out` has the same shape.
pub fn attend(a: &ChunkAttention, pool: &KvPool, q: &[f32], out: &mut [f32], s: &mut AttnScratch) {
    let layout = pool.layout();
    let ts = layout.tile_size;
    let kv_dim = layout.kv_dim;
    let hd = a.head_dim;
    let q_dim = a.n_heads * hd;
    let group = a.n_heads / a.n_kv_heads;
    let last_pos = a.start_pos + a.len - 1;
    let lo = |p: usize| a.window.map_or(0, |w| (p + 1).saturating_sub(w));

    grow(&mut s.k, ts * kv_dim);
    grow(&mut s.v, ts * kv_dim);
    grow(&mut s.m, a.len * a.n_heads);
    grow(&mut s.l, a.len * a.n_heads);
    s.m[..a.len * a.n_heads].fill(f32::NEG_INFINITY);
    s.l[..a.len * a.n_heads].fill(0.0);
    out[..a.len * q_dim].fill(0.0);

    let first_tile = lo(a.start_pos) / ts;
    for ti in first_tile..=last_pos / ts {
        let tile = a.tiles[ti];
        let tile_start = ti * ts;
        let n_slots = ts.min(last_pos + 1 - tile_start);
        if tile == TileId::RELEASED {
            // Only reachable for positions below every query's window (checked by debug builds).
            debug_assert!(tile_start + ts <= lo(a.start_pos));
            continue;
        }
        let (kh, vh) = pool.tile_rows(tile, a.in_group, 0, n_slots);
        let kf = &mut s.k[..n_slots * kv_dim];
        let vf = &mut s.v[..n_slots * kv_dim];
        for (d, x) in kf.iter_mut().zip(kh) {
            *d = x.to_f32();
        }
        for (d, x) in vf.iter_mut().zip(vh) {
            *d = x.to_f32();
        }
        for t in 0..a.len {
            let p = a.start_pos + t;
            // Slots of this tile that query t sees.
            let s_lo = lo(p).max(tile_start) - tile_start;
            let s_hi = (p + 1).min(tile_start + n_slots);
            if s_hi <= tile_start + s_lo {
                continue;
            }
            let s_hi = s_hi - tile_start;
            for h in 0..a.n_heads {
                let g = h / group;
                let qh = &q[t * q_dim + h * hd..t * q_dim + (h + 1) * hd];
                let oh = &mut out[t * q_dim + h * hd..t * q_dim + (h + 1) * hd];
                let st = t * a.n_heads + h;
                let (mut m, mut l) = (s.m[st], s.l[st]);
                for slot in s_lo..s_hi {
                    let kr = &kf[slot * kv_dim + g * hd..slot * kv_dim + (g + 1) * hd];
                    let score = dot(qh, kr) * a.scale;
                    let vr = &vf[slot * kv_dim + g * hd..slot * kv_dim + (g + 1) * hd];
                    if score > m {
                        // Rescale what was accumulated under the old max.
                        let c = (m - score).exp();
                        l *= c;
                        for o in oh.iter_mut() {
                            *o *= c;
                        }
                        m = score;
                    }
                    let w = (score - m).exp();
                    l += w;
                    for (o, x) in oh.iter_mut().zip(vr) {
                        *o += w * x;
                    }
                }
                s.m[st] = m;
                s.l[st] = l;
            }
        }
    }
    for t in 0..a.len {
        for h in 0..a.n_heads {
            let l = s.l[t * a.n_heads + h];
            let inv = if l > 0.0 { 1.0 / l } else { 0.0 };
            for o in &mut out[t * q_dim + h * hd..t * q_dim + (h + 1) * hd] {
                *o *= inv;
            }
        }
    }
}

#[inline]
fn dot(a: &[f32], b: &[f32]) -> f32 {
    // Eight independent partial sums let the compiler vectorize without reassociation.
    let mut acc = [0.0f32; 8];
    let chunks = a.len() / 8;
    for c in 0..chunks {
        for j in 0..8 {
            acc[j] += a[c * 8 + j] * b[c * 8 + j];
        }
    }
    let mut sum = 0.0;
    for i in chunks * 8..a.len() {
        sum += a[i] * b[i];
    }
    acc.iter().sum::<f32>() + sum
}
