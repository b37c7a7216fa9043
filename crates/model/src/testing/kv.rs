//! KV pools filled with deterministic values, for the attention tests and benches.

use crate::kv::{KvDtype, KvGroup, KvLayout, KvPool, TileId};

/// `n` values in -1..=1 spread by `seed`.
pub fn ramp(n: usize, seed: usize) -> Vec<f32> {
    (0..n)
        .map(|i| ((i * 7919 + seed * 104_729) % 2001) as f32 / 1000.0 - 1.0)
        .collect()
}

/// An f16 pool of one layer holding `seqs` sequences of `len` tokens, K/V rows `kv_dim` wide in
/// tiles of `tile_size` (each sequence's tiles adjacent), and their tile tables.
pub fn filled_pool(
    tile_size: usize,
    kv_dim: usize,
    seqs: usize,
    len: usize,
) -> (KvPool, Vec<Vec<TileId>>) {
    filled_pool_of(KvDtype::F16, tile_size, kv_dim, seqs, len)
}

/// [`filled_pool`] storing `dtype` (Q8_0 needs `kv_dim` a multiple of 32).
pub fn filled_pool_of(
    dtype: KvDtype,
    tile_size: usize,
    kv_dim: usize,
    seqs: usize,
    len: usize,
) -> (KvPool, Vec<Vec<TileId>>) {
    let layout = KvLayout {
        tile_size,
        kv_dim,
        groups: vec![KvGroup {
            layers: vec![0],
            window: None,
        }],
        layer_slot: vec![(0, 0)],
        dtype,
    };
    let per_seq = len.div_ceil(tile_size);
    let mut pool = KvPool::new(layout, seqs * per_seq);
    let mut tables = Vec::new();
    for s in 0..seqs {
        let table: Vec<TileId> = (0..per_seq)
            .map(|t| TileId((s * per_seq + t) as u32))
            .collect();
        for pos in 0..len {
            let k = ramp(kv_dim, s * 10_000 + pos);
            let v = ramp(kv_dim, s * 10_000 + pos + 5);
            pool.store(table[pos / tile_size], 0, pos % tile_size, &k, &v);
        }
        tables.push(table);
    }
    (pool, tables)
}
