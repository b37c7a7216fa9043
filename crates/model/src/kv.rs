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
//! Layout of each of `k` and `v`: `[tile][layer_in_group][slot][kv_dim]`, stored as f16 (the
//! default), f32, or Q8_0 blocks of 32 values (`KvDtype`).
//! Invariant: `k` and `v` each hold `n_tiles * tile_elems()` values.

use half::f16;
use half::slice::HalfFloatSliceExt;
use kernels::quant::legacy::{dequantize_q8_0, quantize_row_q8_0};
use kernels::quant::{BlockQ8_0, QK8_0};
use kernels::HugeBuf;

use crate::config::ModelConfig;
use crate::ModelError;
pub use runner::{KvDtype, KvGroup, KvLayout, TileId};

impl ModelConfig {
    /// The model's KV layout: how its layers map onto KV groups and tiles of `tile_size`.
    pub fn kv_layout(&self, tile_size: usize) -> KvLayout {
        layout_for(self, tile_size)
    }
}

/// Groups layers by window, then cuts each kind into groups of `gcd(counts)` layers so all
/// groups (and so all tiles) have the same size.
fn layout_for(cfg: &ModelConfig, tile_size: usize) -> KvLayout {
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
        dtype: KvDtype::F16,
    }
}

// The runner crate sizes Q8_0 KV storage without the kernels: its block must be the kernels'.
const _: () = assert!(runner::Q8_0_BLOCK_VALUES == QK8_0);
const _: () = assert!(runner::Q8_0_BLOCK_BYTES == std::mem::size_of::<BlockQ8_0>());

fn gcd(a: usize, b: usize) -> usize {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

/// Values of K or of V in one storage type.
/// (In huge-page buffers: attention reads tiles scattered over the whole pool.)
enum Store {
    F32(HugeBuf<f32>),
    F16(HugeBuf<f16>),
    Q8(HugeBuf<BlockQ8_0>),
}

impl Store {
    fn new(dtype: KvDtype, n: usize) -> Store {
        match dtype {
            KvDtype::F32 => Store::F32(HugeBuf::zeroed(n)),
            KvDtype::F16 => Store::F16(HugeBuf::zeroed(n)),
            KvDtype::Q8_0 => Store::Q8(HugeBuf::zeroed(n / QK8_0)),
        }
    }

    fn bytes(&self) -> usize {
        match self {
            Store::F32(b) => b.bytes(),
            Store::F16(b) => b.bytes(),
            Store::Q8(b) => b.bytes(),
        }
    }

    /// Faults in bytes `at..at + len` (see `HugeBuf::populate`).
    fn populate(&self, at: usize, len: usize) -> bool {
        match self {
            Store::F32(b) => b.populate(at, len),
            Store::F16(b) => b.populate(at, len),
            Store::Q8(b) => b.populate(at, len),
        }
    }

    /// Writes `src` at value offset `at` (a multiple of 32 for Q8_0).
    fn write(&mut self, at: usize, src: &[f32]) {
        match self {
            Store::F32(v) => v[at..at + src.len()].copy_from_slice(src),
            Store::F16(v) => {
                kernels::f32_to_f16_row(src, v[at..at + src.len()].reinterpret_cast_mut())
            }
            Store::Q8(v) => {
                quantize_row_q8_0(src, &mut v[at / QK8_0..(at + src.len()) / QK8_0]);
            }
        }
    }

    /// Copies `len` values from offset `src` to offset `dst` (multiples of 32 for Q8_0).
    fn copy(&mut self, src: usize, dst: usize, len: usize) {
        match self {
            Store::F32(v) => v.copy_within(src..src + len, dst),
            Store::F16(v) => v.copy_within(src..src + len, dst),
            Store::Q8(v) => v.copy_within(src / QK8_0..(src + len) / QK8_0, dst / QK8_0),
        }
    }

    /// The bytes of `len` values from offset `at` (multiples of 32 for Q8_0).
    fn raw(&self, at: usize, len: usize) -> &[u8] {
        match self {
            Store::F32(v) => kernels::plain_bytes(&v[at..at + len]),
            Store::F16(v) => kernels::plain_bytes(&v[at..at + len]),
            Store::Q8(v) => kernels::plain_bytes(&v[at / QK8_0..(at + len) / QK8_0]),
        }
    }

    /// `raw`, writable.
    fn raw_mut(&mut self, at: usize, len: usize) -> &mut [u8] {
        match self {
            Store::F32(v) => kernels::plain_bytes_mut(&mut v[at..at + len]),
            Store::F16(v) => kernels::plain_bytes_mut(&mut v[at..at + len]),
            Store::Q8(v) => kernels::plain_bytes_mut(&mut v[at / QK8_0..(at + len) / QK8_0]),
        }
    }

    /// `len` values from offset `at` as f16 bits, if stored as f16.
    fn f16_bits(&self, at: usize, len: usize) -> Option<&[u16]> {
        match self {
            Store::F16(v) => Some(v[at..at + len].reinterpret_cast()),
            _ => None,
        }
    }

    /// Reads `dst.len()` values from value offset `at` as f32.
    fn read(&self, at: usize, dst: &mut [f32]) {
        match self {
            Store::F32(v) => dst.copy_from_slice(&v[at..at + dst.len()]),
            // The kernels' F16C loop (half's slice conversion calls out per 8 values).
            Store::F16(v) => kernels::f16_to_f32_row(v[at..at + dst.len()].reinterpret_cast(), dst),
            Store::Q8(v) => dequantize_q8_0(&v[at / QK8_0..(at + dst.len()) / QK8_0], dst),
        }
    }
}

/// First bytes of an exported tile.
const TILE_MAGIC: &[u8; 4] = b"TKVT";
/// Version of the exported tile layout; bumped whenever the bytes would mean something else.
const TILE_FORMAT_VERSION: u16 = 1;
/// magic (4), version (2), storage type (1), reserved (1), tile size, layers, row length (4 each).
const TILE_HEADER: usize = 20;

// Exported values are written in native byte order, which is the documented little-endian.
#[cfg(not(target_endian = "little"))]
compile_error!("KvPool::export_tile writes native byte order and documents little-endian");

/// The preallocated K/V storage. It never grows after construction.
pub struct KvPool {
    layout: KvLayout,
    n_tiles: usize,
    k: Store,
    v: Store,
    /// Bytes of K, then of V, already faulted in by `populate` (see there).
    populated: usize,
}

impl KvPool {
    pub fn new(layout: KvLayout, n_tiles: usize) -> KvPool {
        let elems = n_tiles * layout.tile_elems();
        KvPool {
            k: Store::new(layout.dtype, elems),
            v: Store::new(layout.dtype, elems),
            layout,
            n_tiles,
            populated: 0,
        }
    }

    /// Faults in up to `max_bytes` more of the pool's memory, K first and then V, without
    /// changing what it holds; true while some is left.
    ///
    /// A fresh pool's pages are cleared by the kernel when first written, and K/V writes do
    /// that in the middle of a step (about 2% of a 16-client profile, 3% of a prefill, until
    /// every tile has been used once). The engine calls this while it has nothing to run, so the
    /// cost is paid in idle time instead; a pool that cannot be populated (see
    /// `HugeBuf::populate`) reports done at once and keeps faulting on first write.
    pub fn populate(&mut self, max_bytes: usize) -> bool {
        let (kb, vb) = (self.k.bytes(), self.v.bytes());
        let total = kb + vb;
        let mut left = max_bytes;
        while left > 0 && self.populated < total {
            let (store, at, end) = if self.populated < kb {
                (&self.k, self.populated, kb)
            } else {
                (&self.v, self.populated - kb, vb)
            };
            let n = left.min(end - at);
            if !store.populate(at, n) {
                self.populated = total;
                break;
            }
            self.populated += n;
            left -= n;
        }
        self.populated < total
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

    /// Start of (tile, layer-in-group, slot) in values.
    #[inline]
    fn offset(&self, tile: TileId, in_group: usize, slot: usize) -> usize {
        let l = &self.layout;
        ((tile.0 as usize * l.layers_per_group() + in_group) * l.tile_size + slot) * l.kv_dim
    }

    /// Writes one token's K and V for a layer.
    pub fn store(&mut self, tile: TileId, in_group: usize, slot: usize, k: &[f32], v: &[f32]) {
        let o = self.offset(tile, in_group, slot);
        self.k.write(o, k);
        self.v.write(o, v);
    }

    /// Copies tile `src`'s K and V (every layer it holds) over tile `dst`: how a forked
    /// sequence gets its own copy of a shared, partly filled tile.
    pub fn copy_tile(&mut self, src: TileId, dst: TileId) {
        let len = self.layout.tile_elems();
        let (s, d) = (self.offset(src, 0, 0), self.offset(dst, 0, 0));
        self.k.copy(s, d, len);
        self.v.copy(s, d, len);
    }

    /// The header of an exported tile: what a tile's bytes must match to be imported.
    fn tile_header(&self) -> [u8; TILE_HEADER] {
        let l = &self.layout;
        let mut h = [0u8; TILE_HEADER];
        h[..4].copy_from_slice(TILE_MAGIC);
        h[4..6].copy_from_slice(&TILE_FORMAT_VERSION.to_le_bytes());
        h[6] = match l.dtype {
            KvDtype::F32 => 0,
            KvDtype::F16 => 1,
            KvDtype::Q8_0 => 2,
        };
        for (i, v) in [l.tile_size, l.layers_per_group(), l.kv_dim]
            .into_iter()
            .enumerate()
        {
            h[8 + 4 * i..12 + 4 * i].copy_from_slice(&(v as u32).to_le_bytes());
        }
        h
    }

    /// Bytes `export_tile` writes per tile.
    pub fn exported_tile_bytes(&self) -> usize {
        TILE_HEADER + self.layout.tile_bytes()
    }

    /// Appends tile `tile`'s contents to `out`: a header (magic `TKVT`, format version, storage
    /// type, tile size, layers per group, K/V row length), then K and then V of every layer of
    /// the tile as stored (`[layer_in_group][slot][kv_dim]`, little-endian values; Q8_0 as its
    /// 34-byte blocks). Any pool with the same header reads it back with `import_tile`.
    pub fn export_tile(&self, tile: TileId, out: &mut Vec<u8>) {
        let (at, len) = (self.offset(tile, 0, 0), self.layout.tile_elems());
        out.reserve(self.exported_tile_bytes());
        out.extend_from_slice(&self.tile_header());
        out.extend_from_slice(self.k.raw(at, len));
        out.extend_from_slice(self.v.raw(at, len));
    }

    /// Overwrites tile `tile` with bytes from `export_tile`. Bytes of another format version,
    /// storage type or geometry, or of the wrong length, are refused and the tile is untouched.
    pub fn import_tile(&mut self, tile: TileId, bytes: &[u8]) -> Result<(), ModelError> {
        if tile.0 as usize >= self.n_tiles {
            return Err(ModelError::invalid(format!(
                "tile {} is outside the pool of {}",
                tile.0, self.n_tiles
            )));
        }
        if bytes.len() != self.exported_tile_bytes() {
            return Err(ModelError::invalid(format!(
                "an exported tile of this pool has {} bytes, not {}",
                self.exported_tile_bytes(),
                bytes.len()
            )));
        }
        if bytes[..TILE_HEADER] != self.tile_header() {
            return Err(ModelError::invalid(
                "the tile's header (format version, storage type or geometry) differs from the pool's",
            ));
        }
        let (at, len) = (self.offset(tile, 0, 0), self.layout.tile_elems());
        let (k, v) = bytes[TILE_HEADER..].split_at(self.layout.tile_bytes() / 2);
        self.k.raw_mut(at, len).copy_from_slice(k);
        self.v.raw_mut(at, len).copy_from_slice(v);
        Ok(())
    }

    /// K of the first `n` slots of one tile and layer, as f32 `[n][kv_dim]`.
    #[inline]
    pub fn read_keys(&self, tile: TileId, in_group: usize, n: usize, out: &mut [f32]) {
        let o = self.offset(tile, in_group, 0);
        self.k.read(o, &mut out[..n * self.layout.kv_dim]);
    }

    /// V of the first `n` slots of one tile and layer, as f32 `[n][kv_dim]`.
    #[inline]
    pub fn read_values(&self, tile: TileId, in_group: usize, n: usize, out: &mut [f32]) {
        let o = self.offset(tile, in_group, 0);
        self.v.read(o, &mut out[..n * self.layout.kv_dim]);
    }

    /// K of the first `n` slots of one tile and layer as raw f16 bits `[n][kv_dim]`, when the
    /// pool stores f16 (for kernels that convert as they load).
    #[inline]
    pub fn keys_f16(&self, tile: TileId, in_group: usize, n: usize) -> Option<&[u16]> {
        let o = self.offset(tile, in_group, 0);
        self.k.f16_bits(o, n * self.layout.kv_dim)
    }

    /// V counterpart of [`KvPool::keys_f16`].
    #[inline]
    pub fn values_f16(&self, tile: TileId, in_group: usize, n: usize) -> Option<&[u16]> {
        let o = self.offset(tile, in_group, 0);
        self.v.f16_bits(o, n * self.layout.kv_dim)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One global group of two layers.
    fn two_layers(tile_size: usize, kv_dim: usize, dtype: KvDtype) -> KvLayout {
        KvLayout {
            tile_size,
            kv_dim,
            groups: vec![KvGroup {
                layers: vec![0, 1],
                window: None,
            }],
            layer_slot: vec![(0, 0), (0, 1)],
            dtype,
        }
    }

    #[test]
    fn copy_tile_copies_every_layer_of_the_tile_in_every_storage_type() {
        for dtype in [KvDtype::F32, KvDtype::F16, KvDtype::Q8_0] {
            let mut pool = KvPool::new(two_layers(4, 64, dtype), 3);
            let row = |l: usize, s: usize, kv: f32| -> Vec<f32> {
                (0..64)
                    .map(|i| kv + (l * 100 + s * 10 + i) as f32 / 64.0)
                    .collect()
            };
            for l in 0..2 {
                for s in 0..4 {
                    pool.store(TileId(1), l, s, &row(l, s, 1.0), &row(l, s, -1.0));
                    pool.store(TileId(2), l, s, &row(l, s, 9.0), &row(l, s, 9.0));
                }
            }
            pool.copy_tile(TileId(1), TileId(0));
            let read = |pool: &KvPool, t: u32, l: usize| {
                let (mut k, mut v) = (vec![0.0; 4 * 64], vec![0.0; 4 * 64]);
                pool.read_keys(TileId(t), l, 4, &mut k);
                pool.read_values(TileId(t), l, 4, &mut v);
                (k, v)
            };
            for l in 0..2 {
                assert_eq!(read(&pool, 0, l), read(&pool, 1, l), "{dtype:?} layer {l}");
                assert_ne!(
                    read(&pool, 0, l),
                    read(&pool, 2, l),
                    "{dtype:?}: tile 2 untouched"
                );
            }
        }
    }

    #[test]
    fn an_exported_tile_imports_into_another_pool_bit_for_bit() {
        for dtype in [KvDtype::F32, KvDtype::F16, KvDtype::Q8_0] {
            let mut a = KvPool::new(two_layers(4, 64, dtype), 3);
            let mut b = KvPool::new(two_layers(4, 64, dtype), 5);
            for l in 0..2 {
                for s in 0..4 {
                    let row: Vec<f32> = (0..64)
                        .map(|i| (l * 1000 + s * 64 + i) as f32 * 0.37)
                        .collect();
                    a.store(
                        TileId(2),
                        l,
                        s,
                        &row,
                        &row.iter().map(|x| -x).collect::<Vec<_>>(),
                    );
                }
            }
            let mut bytes = Vec::new();
            a.export_tile(TileId(2), &mut bytes);
            assert_eq!(bytes.len(), a.exported_tile_bytes());
            assert_eq!(&bytes[..4], b"TKVT");
            b.import_tile(TileId(4), &bytes)
                .expect("same layout imports");
            let mut again = Vec::new();
            b.export_tile(TileId(4), &mut again);
            assert_eq!(bytes, again, "{dtype:?}");
            for l in 0..2 {
                let (mut ka, mut kb) = (vec![0.0; 4 * 64], vec![0.0; 4 * 64]);
                a.read_keys(TileId(2), l, 4, &mut ka);
                b.read_keys(TileId(4), l, 4, &mut kb);
                assert_eq!(ka, kb, "{dtype:?} layer {l}");
                a.read_values(TileId(2), l, 4, &mut ka);
                b.read_values(TileId(4), l, 4, &mut kb);
                assert_eq!(ka, kb, "{dtype:?} layer {l}");
            }
        }
    }

    #[test]
    fn tiles_of_another_layout_or_length_are_refused_and_change_nothing() {
        let mut src = Vec::new();
        KvPool::new(two_layers(4, 64, KvDtype::F16), 1).export_tile(TileId(0), &mut src);
        let mut pool = KvPool::new(two_layers(4, 64, KvDtype::F32), 2);
        let row = vec![1.5; 64];
        pool.store(TileId(1), 0, 0, &row, &row);
        let mut before = Vec::new();
        pool.export_tile(TileId(1), &mut before);
        let other_geometry = {
            let mut b = Vec::new();
            KvPool::new(two_layers(8, 32, KvDtype::F32), 1).export_tile(TileId(0), &mut b);
            b
        };
        let mut newer = before.clone();
        newer[4] += 1;
        for (what, bytes) in [
            ("another storage type", &src[..]),
            ("another geometry of the same size", &other_geometry[..]),
            ("another format version", &newer[..]),
            ("a truncated tile", &before[..before.len() - 1]),
        ] {
            assert!(pool.import_tile(TileId(1), bytes).is_err(), "{what}");
        }
        assert!(
            pool.import_tile(TileId(9), &before).is_err(),
            "a tile outside the pool"
        );
        let mut after = Vec::new();
        pool.export_tile(TileId(1), &mut after);
        assert_eq!(before, after);
    }

    #[test]
    fn populating_in_steps_ends_and_keeps_what_the_pool_holds() {
        // 200 tiles of 16 KiB each for K and for V: 3.1 MiB apiece, so steps cross the K/V seam.
        let mut pool = KvPool::new(two_layers(16, 256, KvDtype::F16), 200);
        let row: Vec<f32> = (0..256).map(|i| i as f32 / 8.0).collect();
        pool.store(TileId(3), 1, 5, &row, &row);
        pool.store(TileId(199), 0, 15, &row, &row);
        let mut calls = 0;
        while pool.populate(1 << 20) {
            calls += 1;
            assert!(calls <= 8, "7 steps of 1 MiB cover 6.25 MiB");
        }
        assert!(!pool.populate(1 << 20), "done stays done");
        for (t, l, s) in [(3, 1, 5), (199, 0, 15)] {
            let (mut k, mut v) = (vec![0.0; 16 * 256], vec![0.0; 16 * 256]);
            pool.read_keys(TileId(t), l, 16, &mut k);
            pool.read_values(TileId(t), l, 16, &mut v);
            assert_eq!(&k[s * 256..(s + 1) * 256], &row[..]);
            assert_eq!(&v[s * 256..(s + 1) * 256], &row[..]);
        }
    }
}
