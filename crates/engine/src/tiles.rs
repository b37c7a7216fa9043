//! The tile allocator: reference counts, the prefix index and LRU eviction over one fixed pool.
//!
//! It knows nothing of models or sequences: a tile is an index with a reference count and, once
//! its tokens are all computed, a *prefix key* (a SHA-256 chained from the parent tile's key and
//! the tile's own token ids, cut to 128 bits; see `chain_key`). Design, after vLLM's and
//! mistral.rs' block pools:
//!
//! - Every tile whose count is 0 sits in one free list, threaded through the tiles by index (no
//!   per-node allocation), in least-recently-released order. `allocate` takes the head in O(1).
//! - A released tile keeps its key and stays in the prefix index ("cached") until it is taken
//!   for reuse: then, and only then, its key is dropped (eviction).
//! - Callers release a sequence's tiles tail first, so a chain's tail is evicted before its head.
//!
//! Invariants (checked by `check`, exercised by a seeded 100k-operation test):
//! total = free + cached + in_use; a tile is in the free list iff its count is 0; the index maps
//! a key to exactly the tile that holds it.

use std::collections::HashMap;

pub use model::TileId;

/// Hash of a tile's tokens chained with its parent's key (and the KV group).
pub type PrefixKey = u128;

/// How chain keys are computed: `chain_key` everywhere but in tests that need collisions.
pub type KeyFn = fn(Option<PrefixKey>, &[u32]) -> PrefixKey;

const NIL: u32 = u32::MAX;

/// Counts for metrics and invariant checks.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TileCounts {
    pub total: usize,
    /// Count 0, no key: never used or already evicted.
    pub free: usize,
    /// Count 0 with a key: reusable by a prefix hit until evicted.
    pub cached: usize,
    /// Count > 0.
    pub in_use: usize,
}

/// Allocation state of every tile of the pool.
pub struct TileAllocator {
    refs: Vec<u32>,
    /// Times each tile was handed out: a tile's contents are the same while this is.
    generation: Vec<u32>,
    key: Vec<Option<PrefixKey>>,
    index: HashMap<PrefixKey, TileId>,
    prev: Vec<u32>,
    next: Vec<u32>,
    head: u32,
    tail: u32,
    n_cached: usize,
    n_zero: usize,
    /// Prefix caching on/off; with it off no key is ever stored.
    caching: bool,
}

impl TileAllocator {
    pub fn new(n_tiles: usize, caching: bool) -> TileAllocator {
        assert!(n_tiles < NIL as usize, "pool too large for u32 tile ids");
        let mut a = TileAllocator {
            refs: vec![0; n_tiles],
            generation: vec![0; n_tiles],
            key: vec![None; n_tiles],
            index: HashMap::new(),
            prev: vec![NIL; n_tiles],
            next: vec![NIL; n_tiles],
            head: NIL,
            tail: NIL,
            n_cached: 0,
            n_zero: 0,
            caching,
        };
        for t in 0..n_tiles as u32 {
            a.push_back(t);
        }
        a
    }

    pub fn n_tiles(&self) -> usize {
        self.refs.len()
    }

    /// Whether prefix caching is on.
    pub fn caching(&self) -> bool {
        self.caching
    }

    /// Tiles `allocate` can hand out now (free or cached).
    pub fn available(&self) -> usize {
        self.n_zero
    }

    pub fn counts(&self) -> TileCounts {
        TileCounts {
            total: self.refs.len(),
            free: self.n_zero - self.n_cached,
            cached: self.n_cached,
            in_use: self.refs.len() - self.n_zero,
        }
    }

    /// How many times `t` was handed out by `allocate`: while it stays the same, so do the
    /// tile's contents (a prefix hit only adds references).
    pub fn generation(&self, t: TileId) -> u32 {
        self.generation[t.0 as usize]
    }

    pub fn ref_count(&self, t: TileId) -> u32 {
        self.refs[t.0 as usize]
    }

    /// Takes the least recently released tile (evicting its cached contents), count 1.
    pub fn allocate(&mut self) -> Option<TileId> {
        self.allocate_evicting().map(|(t, _)| t)
    }

    /// `allocate`, also saying whether the tile's cached contents were evicted (it had a key).
    pub fn allocate_evicting(&mut self) -> Option<(TileId, bool)> {
        let t = self.head;
        if t == NIL {
            return None;
        }
        self.unlink(t);
        let evicted = self.key[t as usize].take();
        if let Some(k) = evicted {
            self.index.remove(&k);
            self.n_cached -= 1;
        }
        self.refs[t as usize] = 1;
        self.generation[t as usize] = self.generation[t as usize].wrapping_add(1);
        Some((TileId(t), evicted.is_some()))
    }

    /// The tile `allocate` would hand out next, and whether that would evict cached contents.
    pub fn peek(&self) -> Option<(TileId, bool)> {
        (self.head != NIL).then(|| (TileId(self.head), self.key[self.head as usize].is_some()))
    }

    /// Whether `t` holds a key (registered, in use or cached).
    pub fn is_registered(&self, t: TileId) -> bool {
        self.key[t.0 as usize].is_some()
    }

    /// The key `t` holds, if any.
    pub fn key(&self, t: TileId) -> Option<PrefixKey> {
        self.key[t.0 as usize]
    }

    /// The cached or in-use tile holding `key`, if any.
    pub fn lookup(&self, key: PrefixKey) -> Option<TileId> {
        self.index.get(&key).copied()
    }

    /// Adds a reference (a prefix hit, or a child sharing its parent's tile).
    pub fn acquire(&mut self, t: TileId) {
        let i = t.0 as usize;
        if self.refs[i] == 0 {
            self.unlink(t.0);
            if self.key[i].is_some() {
                self.n_cached -= 1;
            }
        }
        self.refs[i] += 1;
    }

    /// Drops a reference; at 0 the tile goes to the back of the free list, keeping its key.
    pub fn release(&mut self, t: TileId) {
        let i = t.0 as usize;
        assert!(
            self.refs[i] > 0,
            "tile {} released more often than acquired: this is a bug",
            t.0
        );
        self.refs[i] -= 1;
        if self.refs[i] == 0 {
            if self.key[i].is_some() {
                self.n_cached += 1;
            }
            self.push_back(t.0);
        }
    }

    /// Records that tile `t` (in use, full, computed) holds the tokens `key` stands for, and
    /// returns whether it was recorded: not when caching is off, the tile already has a key, or
    /// another tile already holds that key (the index keeps the first one).
    pub fn register(&mut self, t: TileId, key: PrefixKey) -> bool {
        let i = t.0 as usize;
        if !self.caching || self.key[i].is_some() || self.index.contains_key(&key) {
            return false;
        }
        debug_assert!(self.refs[i] > 0, "only a tile in use can be registered");
        self.key[i] = Some(key);
        self.index.insert(key, t);
        true
    }

    fn push_back(&mut self, t: u32) {
        self.prev[t as usize] = self.tail;
        self.next[t as usize] = NIL;
        if self.tail == NIL {
            self.head = t;
        } else {
            self.next[self.tail as usize] = t;
        }
        self.tail = t;
        self.n_zero += 1;
    }

    fn unlink(&mut self, t: u32) {
        let (p, n) = (self.prev[t as usize], self.next[t as usize]);
        if p == NIL {
            self.head = n;
        } else {
            self.next[p as usize] = n;
        }
        if n == NIL {
            self.tail = p;
        } else {
            self.prev[n as usize] = p;
        }
        self.prev[t as usize] = NIL;
        self.next[t as usize] = NIL;
        self.n_zero -= 1;
    }

    /// Verifies every invariant; returns a description of the first broken one.
    pub fn check(&self) -> Result<(), String> {
        let mut in_list = vec![false; self.refs.len()];
        let (mut t, mut prev, mut len) = (self.head, NIL, 0usize);
        while t != NIL {
            if in_list[t as usize] {
                return Err(format!("free list has a cycle at {t}"));
            }
            in_list[t as usize] = true;
            if self.prev[t as usize] != prev {
                return Err(format!("bad back link at {t}"));
            }
            prev = t;
            t = self.next[t as usize];
            len += 1;
        }
        if prev != self.tail || len != self.n_zero {
            return Err("free list tail or length mismatch".into());
        }
        for (i, &r) in self.refs.iter().enumerate() {
            if (r == 0) != in_list[i] {
                return Err(format!(
                    "tile {i}: count {r} but in free list = {}",
                    in_list[i]
                ));
            }
        }
        let cached = (0..self.refs.len())
            .filter(|&i| self.refs[i] == 0 && self.key[i].is_some())
            .count();
        if cached != self.n_cached {
            return Err(format!("cached count {} != {cached}", self.n_cached));
        }
        let keyed = self.key.iter().filter(|k| k.is_some()).count();
        if keyed != self.index.len() {
            return Err("index size differs from keyed tiles".into());
        }
        for (k, t) in &self.index {
            if self.key[t.0 as usize] != Some(*k) {
                return Err(format!(
                    "index maps a key to tile {} which holds another",
                    t.0
                ));
            }
        }
        let c = self.counts();
        if c.free + c.cached + c.in_use != c.total {
            return Err("free + cached + in use != total".into());
        }
        Ok(())
    }
}

/// Key of a full tile: SHA-256 over its parent's key (or a fixed seed for a sequence's first
/// tile) and its token ids, cut to 128 bits. Deterministic across runs, processes and machines
/// (a KV tier shares keys between replicas), and a prompt cannot be crafted to collide with
/// another user's prefix: finding two token sequences with one key takes about 2^64 hashes.
/// A hit is still checked against the tile's stored token ids (`KvManager`).
pub fn chain_key(parent: Option<PrefixKey>, tokens: &[u32]) -> PrefixKey {
    use sha2::{Digest, Sha256};
    let mut h = Sha256::new();
    match parent {
        Some(p) => h.update(p.to_le_bytes()),
        None => h.update(b"tessera-prefix-v1"),
    }
    for &t in tokens {
        h.update(t.to_le_bytes());
    }
    let d = h.finalize();
    let mut k = [0u8; 16];
    k.copy_from_slice(&d[..16]);
    u128::from_le_bytes(k)
}

/// The key of a chain's tile in KV group `group`: the chain key with the group mixed in, so a
/// prefix finds its tile in every group (group 0's is the chain key itself).
pub fn group_key(chain: PrefixKey, group: usize) -> PrefixKey {
    // An odd multiplier spreads consecutive groups over all 128 bits.
    chain ^ (group as u128).wrapping_mul(0x9E37_79B9_7F4A_7C15_F39C_C060_5CED_C835)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn released_tiles_stay_cached_until_reallocated() {
        let mut a = TileAllocator::new(2, true);
        let t = a.allocate().expect("free tile");
        a.register(t, 7);
        a.release(t);
        assert_eq!(a.counts().cached, 1);
        assert_eq!(a.lookup(7), Some(t));
        // The other, never-used tile goes first (least recently released).
        let u = a.allocate().expect("free tile");
        assert_ne!(u, t);
        assert_eq!(a.lookup(7), Some(t));
        let w = a.allocate().expect("cached tile is evictable");
        assert_eq!(w, t);
        assert_eq!(a.lookup(7), None);
        assert!(a.allocate().is_none());
        a.check().expect("invariants");
    }

    #[test]
    fn eviction_takes_a_chains_tail_before_its_head() {
        let mut a = TileAllocator::new(3, true);
        let chain: Vec<TileId> = (0..3).map(|_| a.allocate().expect("tile")).collect();
        for (i, &t) in chain.iter().enumerate() {
            a.register(t, i as u128 + 100);
        }
        for &t in chain.iter().rev() {
            a.release(t);
        }
        assert_eq!(a.allocate(), Some(chain[2]));
        assert_eq!(a.allocate(), Some(chain[1]));
    }

    #[test]
    fn a_prefix_hit_revives_a_cached_tile() {
        let mut a = TileAllocator::new(1, true);
        let t = a.allocate().expect("tile");
        a.register(t, 1);
        a.release(t);
        let hit = a.lookup(1).expect("cached");
        a.acquire(hit);
        assert_eq!(a.counts().in_use, 1);
        assert!(a.allocate().is_none());
        a.check().expect("invariants");
    }

    #[test]
    fn no_prefix_cache_means_no_keys() {
        let mut a = TileAllocator::new(1, false);
        let t = a.allocate().expect("tile");
        a.register(t, 1);
        assert_eq!(a.lookup(1), None);
    }

    #[test]
    fn chain_keys_depend_on_parent_group_and_tokens() {
        let k = chain_key(None, &[1, 2]);
        assert_ne!(k, chain_key(Some(k), &[1, 2]));
        assert_ne!(k, group_key(k, 1));
        assert_eq!(k, group_key(k, 0));
        assert_ne!(group_key(k, 1), group_key(k, 2));
        assert_ne!(k, chain_key(None, &[2, 1]));
        assert_ne!(k, chain_key(None, &[1, 2, 0]));
        assert_eq!(k, chain_key(None, &[1, 2]));
        // The key is SHA-256's, so it is the same on every machine and in every process.
        assert_eq!(
            chain_key(None, &[]),
            0x7e2a_5c12_d445_522c_5aea_7f12_3273_5ea2
        );
    }
}
