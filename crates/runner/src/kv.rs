//! Tiles and KV layouts: what a runner's KV storage is addressed by, and its geometry.
//!
//! Layers are split into *KV groups* of equal size. Each group has its own tile table per
//! sequence, so layers with a sliding window can drop old tiles while global layers keep theirs
//! (Gemma 3 270M: 3 global layers form one group, the 15 local layers five more). Groups all have
//! the same number of layers, so every tile has the same byte size and one pool serves them all.

use crate::RunError;

/// Values in one Q8_0 block (ggml's: 32 int8 values and one f16 scale).
pub const Q8_0_BLOCK_VALUES: usize = 32;
/// Bytes of one Q8_0 block.
pub const Q8_0_BLOCK_BYTES: usize = 34;

/// Index of a tile in the pool.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TileId(pub u32);

impl TileId {
    /// Marks a tile-table entry whose tile was released (out of every future query's window).
    pub const RELEASED: TileId = TileId(u32::MAX);
}

/// How K and V values are stored.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum KvDtype {
    F32,
    #[default]
    F16,
    /// ggml Q8_0: blocks of 32 int8 values with one f16 scale (34 bytes per 32 values).
    Q8_0,
}

impl KvDtype {
    pub fn parse(s: &str) -> Option<KvDtype> {
        match s {
            "f32" => Some(KvDtype::F32),
            "f16" => Some(KvDtype::F16),
            "q8_0" => Some(KvDtype::Q8_0),
            _ => None,
        }
    }

    /// Bytes used by `n` values (`n` a multiple of 32 for Q8_0).
    pub fn bytes(self, n: usize) -> usize {
        match self {
            KvDtype::F32 => 4 * n,
            KvDtype::F16 => 2 * n,
            KvDtype::Q8_0 => n / Q8_0_BLOCK_VALUES * Q8_0_BLOCK_BYTES,
        }
    }
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
    pub dtype: KvDtype,
}

impl KvLayout {
    /// The same layout with another storage type; Q8_0 needs rows of whole 32-value blocks.
    pub fn with_dtype(mut self, dtype: KvDtype) -> Result<KvLayout, RunError> {
        if dtype == KvDtype::Q8_0 && !self.kv_dim.is_multiple_of(Q8_0_BLOCK_VALUES) {
            return Err(RunError::Layout(format!(
                "q8_0 KV needs a K/V row of a multiple of 32 values, not {}",
                self.kv_dim
            )));
        }
        self.dtype = dtype;
        Ok(self)
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
        2 * self.dtype.bytes(self.tile_elems())
    }
}
