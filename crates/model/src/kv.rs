//! The KV pool: storage for keys and values, addressed by tile.
//!
//! The model owns no cache. It reads and writes K and V through the tile tables of the batch it
//! is given; this file only defines where a (tile, layer, slot) lives in one preallocated pool.
//! Who owns which tile is the tile manager's business (engine crate), not ours.
//!
//! Layers are split into *KV groups* of equal size. Each group has its own tile table per
//! sequence, so layers with a sliding window can drop old tiles while global layers keep theirs
//! (Gemma 3 270M: 3 global layers form one group, the 15 local layers five more). Groups all have
//! the same number of layers, so every tile has the same byte size and one pool serves them all.
//!
//! Layout of each of `k` and `v`: `[tile][layer_in_group][slot][kv_dim]`, f16.
//! Invariant: `k.len() == v.len() == n_tiles * tile_elems()`.

use half::f16;

use crate::config::ModelConfig;

/// Index of a tile in the pool.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TileId(pub u32);

impl TileId {
    /// Marks a tile-table entry whose tile was released (out of every future query's window).
    pub const RELEASED: TileId = TileId(u32::MAX);
}

/// A group of layers that share tile tables.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KvGroup {
    /// Layers of this group, ascending.
    pub layers: Vec<usize>,
    /// The sliding window shared by every layer of the group, if any.
    pub window: Option<usize>,
}

/// How the model's layers map onto KV groups and tiles.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KvLayout {
    /// Tokens per tile.
    pub tile_size: usize,
    /// K (or V) floats per token per layer.
    pub kv_dim: usize,
    pub groups: Vec<KvGroup>,
    /// For each layer: (group index, index inside the group).
    pub layer_slot: Vec<(usize, usize)>,
}

impl KvLayout {
    /// Groups layers by window, then cuts each kind into groups of `gcd(counts)` layers so all
    /// groups (and so all tiles) have the same size.
    pub fn new(cfg: &ModelConfig, tile_size: usize) -> KvLayout {
        let mut kinds: Vec<(Option<usize>, Vec<usize>)> = Vec::new();
        for (i, l) in cfg.layers.iter().enumerate() {
            match kinds.iter_mut().find(|(w, _)| *w == l.window) {
                Some((_, layers)) => layers.push(i),
                None => kinds.push((l.window, vec![i])),
            }
        }
        let per_group = kinds.iter().map(|(_, l)| l.len()).fold(0, gcd).max(1);
        let mut groups = Vec::new();
        let mut layer_slot = vec![(0, 0); cfg.n_layers];
        // Global (window-less) groups first: group 0 is the one every architecture has.
        kinds.sort_by_key(|(w, _)| w.unwrap_or(0));
        for (window, layers) in kinds {
            for chunk in layers.chunks(per_group) {
                for (j, &l) in chunk.iter().enumerate() {
                    layer_slot[l] = (groups.len(), j);
                }
                groups.push(KvGroup {
                    layers: chunk.to_vec(),
                    window,
                });
            }
        }
        KvLayout {
            tile_size: tile_size.max(1),
            kv_dim: cfg.kv_dim(),
            groups,
            layer_slot,
        }
    }

    pub fn layers_per_group(&self) -> usize {
        self.groups.first().map_or(0, |g| g.layers.len())
    }

    /// f16 elements of K (or of V) in one tile.
    pub fn tile_elems(&self) -> usize {
        self.layers_per_group() * self.tile_size * self.kv_dim
    }

    /// Bytes of K plus V in one tile.
    pub fn tile_bytes(&self) -> usize {
        2 * self.tile_elems() * std::mem::size_of::<f16>()
    }
}

fn gcd(a: usize, b: usize) -> usize {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

/// The preallocated K/V storage. It never grows after construction.
pub struct KvPool {
    layout: KvLayout,
    n_tiles: usize,
    k: Vec<f16>,
    v: Vec<f16>,
}

impl KvPool {
    pub fn new(layout: KvLayout, n_tiles: usize) -> KvPool {
        let elems = n_tiles * layout.tile_elems();
        KvPool {
            layout,
            n_tiles,
            k: vec![f16::ZERO; elems],
            v: vec![f16::ZERO; elems],
        }
    }

    /// A pool sized to hold about `bytes` of KV.
    pub fn with_bytes(layout: KvLayout, bytes: usize) -> KvPool {
        let n = bytes / layout.tile_bytes().max(1);
        KvPool::new(layout, n)
    }

    pub fn layout(&self) -> &KvLayout {
        &self.layout
    }

    pub fn n_tiles(&self) -> usize {
        self.n_tiles
    }

    /// Start of (tile, layer-in-group, slot) in `k`/`v`.
    #[inline]
    fn offset(&self, tile: TileId, in_group: usize, slot: usize) -> usize {
        let l = &self.layout;
        ((tile.0 as usize * l.layers_per_group() + in_group) * l.tile_size + slot) * l.kv_dim
    }

    /// Writes one token's K and V for a layer.
    pub fn store(&mut self, tile: TileId, in_group: usize, slot: usize, k: &[f32], v: &[f32]) {
        let o = self.offset(tile, in_group, slot);
        let d = self.layout.kv_dim;
        for (dst, src) in self.k[o..o + d].iter_mut().zip(k) {
            *dst = f16::from_f32(*src);
        }
        for (dst, src) in self.v[o..o + d].iter_mut().zip(v) {
            *dst = f16::from_f32(*src);
        }
    }

    /// K and V of `n` consecutive slots of one tile and layer: `[n][kv_dim]` each.
    #[inline]
    pub fn tile_rows(
        &self,
        tile: TileId,
        in_group: usize,
        first_slot: usize,
        n: usize,
    ) -> (&[f16], &[f16]) {
        let o = self.offset(tile, in_group, first_slot);
        let len = n * self.layout.kv_dim;
        (&self.k[o..o + len], &self.v[o..o + len])
    }
}
