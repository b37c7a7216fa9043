//! Seeded randomized tests of the tile allocator and the KV manager against shadow models.
//!
//! After every operation: `check()` passes, total = free + cached + in use, every tile's
//! reference count equals the number of holders the shadow model knows of, and every holder
//! finds in its tile the contents it expects — the exact prefix of tokens for a full tile, or
//! contents private to it for a tile still being filled. Two holders that did not share a tile
//! expect different contents, so a tile handed to two owners fails the check. At the end
//! everything is freed and nothing may stay in use. With prefix caching, the KV events are
//! applied to a subscriber's map as they come, and that map equals the tiles that hold a key.

mod common;

use std::collections::HashMap;

use common::SplitMix64;

use engine::kv_events::{KvEvent, StoredTile};
use engine::kv_manager::{KvManager, SeqTiles};
use engine::tiles::{TileAllocator, TileId};
use model::kv::{KvDtype, KvGroup};
use model::KvLayout;

#[test]
fn random_allocator_operations_keep_every_invariant() {
    const N: usize = 48;
    let mut rng = SplitMix64::new(7);
    let mut a = TileAllocator::new(N, true);
    // Shadow: holders of each tile, and the key each tile was registered with.
    let mut held: Vec<TileId> = Vec::new();
    let mut key_of: HashMap<u32, u128> = HashMap::new();
    for op in 0..150_000 {
        match rng.below(10) {
            0..=3 => match a.allocate() {
                Some(t) => {
                    assert!(!held.contains(&t), "op {op}: tile {t:?} handed out twice");
                    key_of.remove(&t.0); // its cached contents were evicted
                    held.push(t);
                }
                None => assert_eq!(a.available(), 0),
            },
            4..=5 if !held.is_empty() => {
                let i = rng.below(held.len());
                let t = held.swap_remove(i);
                a.release(t);
            }
            6 if !held.is_empty() => {
                let t = held[rng.below(held.len())];
                let key = (rng.next_u64() % 64) as u128;
                a.register(t, key);
                if a.lookup(key) == Some(t) {
                    key_of.entry(t.0).or_insert(key);
                }
            }
            _ => {
                // A prefix lookup, shared if found.
                let key = (rng.next_u64() % 64) as u128;
                match a.lookup(key) {
                    Some(t) => {
                        assert_eq!(key_of.get(&t.0), Some(&key), "op {op}: wrong tile for key");
                        a.acquire(t);
                        held.push(t);
                    }
                    None => assert!(!key_of.values().any(|&k| k == key)),
                }
            }
        }
        a.check().unwrap_or_else(|e| panic!("op {op}: {e}"));
        let c = a.counts();
        assert_eq!(c.total, c.free + c.cached + c.in_use);
        for t in 0..N as u32 {
            let holders = held.iter().filter(|h| h.0 == t).count() as u32;
            assert_eq!(a.ref_count(TileId(t)), holders, "op {op}: tile {t}");
        }
        assert_eq!(
            c.cached,
            (0..N as u32)
                .filter(|t| a.ref_count(TileId(*t)) == 0 && key_of.contains_key(t))
                .count()
        );
    }
    for t in held.drain(..) {
        a.release(t);
    }
    a.check().expect("invariants");
    assert_eq!(a.counts().in_use, 0);
}

const TS: usize = 4;
const WINDOW: usize = 7;
const N_TILES: usize = 120;

fn layout() -> KvLayout {
    let windows = [None, Some(WINDOW), Some(WINDOW)];
    KvLayout {
        tile_size: TS,
        kv_dim: 1,
        groups: windows
            .iter()
            .enumerate()
            .map(|(i, &window)| KvGroup {
                layers: vec![i],
                window,
            })
            .collect(),
        layer_slot: (0..3).map(|i| (i, 0)).collect(),
        dtype: KvDtype::F16,
    }
}

/// What a holder expects its tile to hold.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Content {
    /// A full tile of group `g` whose tokens end the prefix `tokens`.
    Full(usize, Vec<u32>),
    /// A tile being filled by sequence `uid` at table entry (g, i).
    Private(u64, usize, usize),
}

struct ShadowSeq {
    uid: u64,
    tokens: Vec<u32>,
    computed: usize,
    tiles: SeqTiles,
}

impl ShadowSeq {
    fn expected(&self, g: usize, i: usize) -> Content {
        if (i + 1) * TS <= self.computed {
            Content::Full(g, self.tokens[..(i + 1) * TS].to_vec())
        } else {
            Content::Private(self.uid, g, i)
        }
    }
}

fn first_visible(g: usize, pos: usize, release: bool) -> usize {
    if g == 0 || !release {
        0
    } else {
        (pos + 1).saturating_sub(WINDOW) / TS
    }
}

struct World {
    kv: KvManager,
    seqs: Vec<ShadowSeq>,
    content: HashMap<TileId, Content>,
    release: bool,
    next_uid: u64,
    /// How often the interesting cases happened (so the test cannot pass vacuously).
    prefix_hits: usize,
    evictions: usize,
    grow_failures: usize,
    forks: usize,
    speculations: usize,
    /// What a subscriber to the KV events holds: (group, key) → the stored tile.
    subscriber: HashMap<(usize, u128), StoredTile>,
    stored_events: usize,
    removed_events: usize,
}

impl World {
    /// Records the contents of tiles that became full or were newly allocated.
    fn note_contents(&mut self, s: usize) {
        let seq = &self.seqs[s];
        for (g, table) in seq.tiles.tables.iter().enumerate() {
            for (i, &t) in table.iter().enumerate() {
                if t == TileId::RELEASED {
                    continue;
                }
                let want = seq.expected(g, i);
                let have = self.content.get(&t);
                // A private tile may be filled; a fresh tile takes its owner's contents.
                let fresh_or_filled = match have {
                    None => true,
                    Some(Content::Private(u, gg, ii)) => (*u, *gg, *ii) == (seq.uid, g, i),
                    Some(Content::Full(..)) => false,
                };
                if fresh_or_filled {
                    self.content.insert(t, want);
                }
            }
        }
    }

    /// Applies the KV events since the last call to the subscriber's map, as a router would;
    /// every `compare_every` ops (and at `usize::MAX`) the map must equal the prefix index.
    fn apply_events(&mut self, op: usize) {
        for e in self.kv.take_events() {
            match e {
                KvEvent::Stored(t) => {
                    self.stored_events += 1;
                    let old = self.subscriber.insert((t.group, t.key), t);
                    assert!(
                        old.is_none(),
                        "op {op}: a key stored twice without a removal"
                    );
                }
                KvEvent::Removed { group, key } => {
                    self.removed_events += 1;
                    let old = self.subscriber.remove(&(group, key));
                    assert!(old.is_some(), "op {op}: removal of a key never stored");
                }
                KvEvent::AllCleared => self.subscriber.clear(),
            }
        }
        if op.is_multiple_of(7) || op == usize::MAX {
            let mut index = self.kv.registered();
            let mut mirror: Vec<StoredTile> = self.subscriber.values().cloned().collect();
            index.sort_by_key(|t| (t.group, t.key));
            mirror.sort_by_key(|t| (t.group, t.key));
            assert_eq!(
                mirror, index,
                "op {op}: the events' index differs from the pool's"
            );
        }
    }

    fn check(&self, op: usize) {
        self.kv.check().unwrap_or_else(|e| panic!("op {op}: {e}"));
        let c = self.kv.counts();
        assert_eq!(c.total, c.free + c.cached + c.in_use, "op {op}");
        let mut holders: HashMap<TileId, u32> = HashMap::new();
        for seq in &self.seqs {
            let len = seq.tiles.tables[0].len();
            for (g, table) in seq.tiles.tables.iter().enumerate() {
                assert_eq!(table.len(), len, "op {op}: tables of one sequence differ");
                let lo = first_visible(g, seq.computed, self.release);
                for (i, &t) in table.iter().enumerate() {
                    if t == TileId::RELEASED {
                        assert!(i < lo, "op {op}: a tile still in view was released");
                        continue;
                    }
                    *holders.entry(t).or_insert(0) += 1;
                    assert_eq!(
                        self.content.get(&t),
                        Some(&seq.expected(g, i)),
                        "op {op}: seq {} group {g} entry {i} tile {t:?}",
                        seq.uid
                    );
                }
            }
        }
        for t in 0..N_TILES as u32 {
            let t = TileId(t);
            let n = holders.get(&t).copied().unwrap_or(0);
            assert_eq!(self.kv.ref_count(t), n, "op {op}: tile {t:?}");
        }
    }

    fn new_seq(&mut self, rng: &mut SplitMix64, bases: &[Vec<u32>]) {
        let base = &bases[rng.below(bases.len())];
        let keep = rng.below(base.len() + 1);
        let mut tokens = base[..keep].to_vec();
        let total = (keep + 1 + rng.below(40)).min(100);
        while tokens.len() < total {
            tokens.push(rng.below(5) as u32);
        }
        let (tiles, hit) = self.kv.adopt_prefix(&tokens, None);
        assert_eq!(hit % TS, 0);
        assert!(hit < tokens.len(), "at least one token is left to compute");
        self.prefix_hits += usize::from(hit > 0);
        self.seqs.push(ShadowSeq {
            uid: self.next_uid,
            tokens,
            computed: hit,
            tiles,
        });
        self.next_uid += 1;
    }

    /// Forks sequence `s` after its computed tokens (an `n` > 1 request): the child continues
    /// with tokens of its own.
    fn fork(&mut self, rng: &mut SplitMix64, s: usize) {
        let parent = &self.seqs[s];
        if parent.computed == 0 {
            return;
        }
        let mut tokens = parent.tokens[..parent.computed].to_vec();
        for _ in 0..1 + rng.below(20) {
            tokens.push(rng.below(5) as u32);
        }
        let before = self.kv.counts();
        match self.kv.fork(&parent.tiles, parent.computed) {
            Ok((tiles, copies)) => {
                let partial = !parent.computed.is_multiple_of(TS);
                assert_eq!(copies.len(), if partial { 3 } else { 0 });
                for (src, dst) in &copies {
                    assert_eq!(
                        parent
                            .tiles
                            .tables
                            .iter()
                            .filter(|t| t.contains(src))
                            .count(),
                        1
                    );
                    self.content.remove(dst); // a fresh tile: it holds the child's copy
                }
                let computed = parent.computed;
                self.seqs.push(ShadowSeq {
                    uid: self.next_uid,
                    tokens,
                    computed,
                    tiles,
                });
                self.next_uid += 1;
                self.forks += 1;
                self.note_contents(self.seqs.len() - 1);
            }
            Err(e) => {
                assert!(e.needed > e.available, "{e}");
                assert_eq!(self.kv.counts(), before, "a failed fork takes nothing");
            }
        }
    }

    fn advance(&mut self, rng: &mut SplitMix64, s: usize) {
        let seq = &mut self.seqs[s];
        let left = seq.tokens.len() - seq.computed;
        if left == 0 {
            return;
        }
        let k = 1 + rng.below(left.min(12));
        self.kv.release_out_of_window(&mut seq.tiles, seq.computed);
        let before = seq.tiles.tables[0].len();
        let needed = self.kv.tiles_needed(&seq.tiles, seq.computed + k);
        let available = self.kv.available();
        let cached_before = self.kv.counts().cached;
        match self.kv.grow(&mut seq.tiles, seq.computed + k) {
            Ok(()) => {
                assert!(needed <= available);
                self.evictions += usize::from(self.kv.counts().cached < cached_before);
                seq.computed += k;
                self.kv
                    .register_full(&mut seq.tiles, &seq.tokens, seq.computed, None);
                // Newly allocated tiles were free or cached: forget what they held.
                for table in &seq.tiles.tables {
                    for &t in &table[before..] {
                        self.content.remove(&t);
                    }
                }
                self.note_contents(s);
            }
            Err(e) => {
                assert!(needed > available, "{e}");
                self.grow_failures += 1;
                assert_eq!(
                    seq.tiles.tables[0].len(),
                    before,
                    "a failed grow allocates nothing"
                );
            }
        }
    }
}

impl World {
    /// A multi-token step: the sequence computes its next position and `k` drafted ones, then
    /// keeps only the positions of an agreeing prefix; the tiles taken for the rest are freed.
    /// (The shadow's tokens are the truth, so a position computed for a rejected token holds
    /// private contents, like a tile being filled.)
    fn speculate(&mut self, rng: &mut SplitMix64, s: usize) {
        let seq = &mut self.seqs[s];
        if seq.computed + 1 >= seq.tokens.len() {
            return;
        }
        let k = 1 + rng.below(8);
        self.kv.release_out_of_window(&mut seq.tiles, seq.computed);
        let before = seq.tiles.tables[0].len();
        if self.kv.grow(&mut seq.tiles, seq.computed + 1 + k).is_err() {
            self.grow_failures += 1;
            return;
        }
        for table in &seq.tiles.tables {
            for &t in &table[before..] {
                self.content.remove(&t);
            }
        }
        let accepted = rng.below(k + 1);
        seq.computed = (seq.computed + 1 + accepted).min(seq.tokens.len() - 1);
        self.kv
            .register_full(&mut seq.tiles, &seq.tokens, seq.computed, None);
        self.kv.truncate(&mut seq.tiles, seq.computed + 1);
        let want = (seq.computed + 1).div_ceil(TS);
        assert!(seq.tiles.tables.iter().all(|t| t.len() <= want));
        self.speculations += 1;
        self.note_contents(s);
    }
}

fn random_kv_manager_run(seed: u64, release: bool, caching: bool) {
    random_kv_manager_run_with(seed, release, caching, None);
}

/// A key that collides all the time: only the tile's first token, out of 5, and not even the
/// parent's key. The stored tokens and links must still keep every prefix apart.
fn colliding_key(_parent: Option<u128>, tokens: &[u32]) -> u128 {
    tokens.first().map_or(0, |&t| u128::from(t % 5))
}

fn random_kv_manager_run_with(
    seed: u64,
    release: bool,
    caching: bool,
    key_fn: Option<engine::tiles::KeyFn>,
) {
    let mut rng = SplitMix64::new(seed);
    let bases: Vec<Vec<u32>> = (0..4)
        .map(|_| (0..60).map(|_| rng.below(5) as u32).collect())
        .collect();
    let mut w = World {
        kv: {
            let mut kv = KvManager::new(&layout(), N_TILES, caching).with_window_release(release);
            kv.set_events(true);
            match key_fn {
                Some(f) => kv.with_key_fn(f),
                None => kv,
            }
        },
        seqs: Vec::new(),
        content: HashMap::new(),
        release,
        next_uid: 0,
        prefix_hits: 0,
        evictions: 0,
        grow_failures: 0,
        forks: 0,
        speculations: 0,
        subscriber: HashMap::new(),
        stored_events: 0,
        removed_events: 0,
    };
    for op in 0..100_000 {
        let r = rng.below(20);
        if w.seqs.is_empty() || (r < 3 && w.seqs.len() < 10) {
            w.new_seq(&mut rng, &bases);
        } else if r < 12 {
            let s = rng.below(w.seqs.len());
            w.advance(&mut rng, s);
        } else if r < 14 {
            let s = rng.below(w.seqs.len());
            w.speculate(&mut rng, s);
        } else if r < 15 {
            if w.seqs.len() < 10 {
                let s = rng.below(w.seqs.len());
                w.fork(&mut rng, s);
            }
        } else if r < 17 {
            let s = rng.below(w.seqs.len());
            let seq = &mut w.seqs[s];
            w.kv.release_out_of_window(&mut seq.tiles, seq.computed);
        } else {
            let s = rng.below(w.seqs.len());
            let mut seq = w.seqs.swap_remove(s);
            w.kv.free(&mut seq.tiles);
            assert!(seq.tiles.is_empty());
        }
        w.check(op);
        w.apply_events(op);
    }
    for mut seq in w.seqs.drain(..) {
        w.kv.free(&mut seq.tiles);
    }
    w.check(usize::MAX);
    w.apply_events(usize::MAX);
    assert_eq!(w.kv.counts().in_use, 0);
    let (hits, evictions, failures) = (w.prefix_hits, w.evictions, w.grow_failures);
    eprintln!(
        "prefix hits {hits}, evictions {evictions}, failed grows {failures}, forks {}",
        w.forks
    );
    assert!(failures > 100 && w.forks > 1000 && w.speculations > 1000);
    eprintln!(
        "events: {} stored, {} removed",
        w.stored_events, w.removed_events
    );
    if caching {
        let least = if key_fn.is_some() { 100 } else { 1000 };
        assert!(hits > least && evictions > 1000);
        assert!(w.stored_events > 1000 && w.removed_events > 1000);
    } else {
        assert_eq!(w.stored_events + w.removed_events, 0);
    }
}

#[test]
fn colliding_keys_never_share_a_tile_between_different_prefixes() {
    random_kv_manager_run_with(4, true, true, Some(colliding_key));
}

#[test]
fn random_kv_manager_operations_keep_every_invariant() {
    random_kv_manager_run(1, true, true);
}

#[test]
fn random_kv_manager_operations_without_window_release_keep_every_invariant() {
    random_kv_manager_run(2, false, true);
}

#[test]
fn random_kv_manager_operations_without_prefix_caching_keep_every_invariant() {
    random_kv_manager_run(3, true, false);
}
