//! Per-sequence tile tables over the tile allocator: prefix adoption, growth, sliding-window
//! release and freeing. Only the scheduler calls it; the model only reads the tables.
//!
//! A sequence has one table per KV group (see `model::KvLayout`). Full tiles are keyed by a hash
//! chained over the sequence's tokens (`tiles::chain_key`, SHA-256), mixed with the group index,
//! so a second request with the same prefix finds the same tiles in every group. A key found is
//! not trusted alone: each registered tile keeps its token ids, and a hit counts only when they
//! equal the request's, and its *link* is the tile the request adopted before it: a group-0
//! tile names its parent (the group-0 tile of the block before, and that tile's generation), a
//! tile of another group the group-0 tile of its own block. Since a tile's contents do not
//! change while its generation does not, a hit is a tile computed after exactly the request's
//! tokens, however the keys collide: the hash only indexes, it never vouches. A windowed group's tiles that lie wholly
//! below every future query's window are released (`TileId::RELEASED` in the table); a prefix
//! hit on a windowed group only needs the tiles inside the window of its first new token.
//!
//! A chain starts from a *root*: none for the base model, the key of the LoRA adapters and
//! scales a sequence computes with otherwise (`lora::adapters_key`), hashed in as the first
//! tile's parent. Each registered tile also keeps its root, checked on every hit as its tokens
//! and link are, so two adapters (or an adapter and the base) never share a tile, whatever the
//! keys.

use std::collections::HashMap;
use std::sync::Arc;

use model::KvLayout;

use crate::kv_events::{KvEvent, LoraTag, StoredTile};
use crate::tiles::{chain_key, group_key, KeyFn, PrefixKey, TileAllocator, TileCounts, TileId};

/// `grow` found fewer free or evictable tiles than it needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{needed} tiles needed, {available} available")]
pub struct PoolShort {
    pub needed: usize,
    pub available: usize,
}

/// The tiles one sequence holds.
#[derive(Debug, Default, Clone)]
pub struct SeqTiles {
    /// One table per KV group.
    pub tables: Vec<Vec<TileId>>,
    /// Chain key of each full tile registered so far (group-independent).
    chain: Vec<PrefixKey>,
}

impl SeqTiles {
    /// Tokens whose tile slots exist.
    pub fn capacity(&self, tile_size: usize) -> usize {
        self.tables.first().map_or(0, |t| t.len() * tile_size)
    }

    pub fn is_empty(&self) -> bool {
        self.tables.iter().all(|t| t.is_empty())
    }
}

/// The KV memory manager: the allocator plus the geometry of the groups.
pub struct KvManager {
    alloc: TileAllocator,
    tile_size: usize,
    /// Window of each group (`None` = global).
    windows: Vec<Option<usize>>,
    /// Token ids of each registered tile (`tile_size` per tile), checked on every hit.
    tile_tokens: Vec<u32>,
    /// Each registered tile's link (see the module docs), checked on every hit.
    tile_link: Vec<Link>,
    /// Each registered tile's root (see the module docs; 0 for none), checked on every hit.
    tile_root: Vec<PrefixKey>,
    /// Each registered tile's LoRA adapters, as KV events name them (`tag_root`).
    tile_lora: Vec<Option<Arc<LoraTag>>>,
    /// How KV events name the adapters of each root (`tag_root`).
    root_tags: HashMap<PrefixKey, Arc<LoraTag>>,
    /// Each registered tile's chain key, its parent's, and its group (what a KV tier stores it
    /// under), and whether a tier already has it.
    tile_chain: Vec<(PrefixKey, Option<PrefixKey>, u8)>,
    written: Vec<bool>,
    /// Which tiles to hand to the KV tiers (`take_tier_writes`).
    tier_writes: TierWrites,
    pending: Vec<TierWrite>,
    key_fn: KeyFn,
    /// Changes of the prefix index since `take_events`, when events are on (`set_events`).
    events: Option<Vec<KvEvent>>,
}

/// When full tiles are handed to the KV tiers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TierWrites {
    /// No tiers.
    Off,
    /// When evicted from the pool (the default with tiers).
    OnEvict,
    /// As soon as registered (other replicas can use them at once), and when evicted if not yet.
    WriteThrough,
}

/// A full tile to write to the KV tiers: which it is and what it holds. Its contents must be
/// read (`Runner::export_tile`) before the tile is written again: the engine takes these right
/// after planning, forking and importing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TierWrite {
    pub tile: TileId,
    pub chain: PrefixKey,
    pub parent: Option<PrefixKey>,
    pub group: usize,
    pub tokens: Vec<u32>,
}

/// Which full tile of which prefix a tile holds: its block's chain key, the one before, its
/// chain's root (the adapters it was computed with), its KV group and its token ids.
#[derive(Clone, Copy, Debug)]
pub struct TileFacts<'a> {
    pub chain: PrefixKey,
    pub parent: Option<PrefixKey>,
    pub root: Option<PrefixKey>,
    pub group: usize,
    pub block: &'a [u32],
}

/// What the pool holds of a prompt (`KvManager::probe`).
#[derive(Clone, Debug, Default)]
pub struct PrefixProbe {
    /// Leading full tiles found in every group that needs them.
    pub hit: usize,
    /// Chain key of every full tile of the prompt (all but the last token).
    pub chain: Vec<PrefixKey>,
    /// Group-0 tile of each block found (at least `hit` of them).
    pub anchors: Vec<TileId>,
}

/// Where a tile sits in a chain: its tokens and the chain's root.
#[derive(Clone, Copy)]
struct Place<'a> {
    block: &'a [u32],
    root: Option<PrefixKey>,
}

/// A tile id and its generation (`TileAllocator::generation`); `NO_LINK` for a first tile.
type Link = (u32, u32);
const NO_LINK: Link = (u32::MAX, 0);

impl KvManager {
    pub fn new(layout: &KvLayout, n_tiles: usize, prefix_caching: bool) -> KvManager {
        let (tile_tokens, tile_link, tile_chain) = if prefix_caching {
            (
                vec![0; n_tiles * layout.tile_size],
                vec![NO_LINK; n_tiles],
                vec![(0, None, 0); n_tiles],
            )
        } else {
            (Vec::new(), Vec::new(), Vec::new())
        };
        let tile_root = if prefix_caching {
            vec![0; n_tiles]
        } else {
            Vec::new()
        };
        KvManager {
            alloc: TileAllocator::new(n_tiles, prefix_caching),
            tile_size: layout.tile_size,
            windows: layout.groups.iter().map(|g| g.window).collect(),
            tile_tokens,
            tile_link,
            tile_lora: if prefix_caching {
                vec![None; n_tiles]
            } else {
                Vec::new()
            },
            root_tags: HashMap::new(),
            tile_root,
            tile_chain,
            written: if prefix_caching {
                vec![false; n_tiles]
            } else {
                Vec::new()
            },
            tier_writes: TierWrites::Off,
            pending: Vec::new(),
            key_fn: chain_key,
            events: None,
        }
    }

    /// Computes chain keys with `f` instead of `tiles::chain_key`: for tests that need keys to
    /// collide (a hit must then still be refused when the tile's tokens differ).
    #[doc(hidden)]
    pub fn with_key_fn(mut self, f: KeyFn) -> KvManager {
        self.set_key_fn(f);
        self
    }

    /// `with_key_fn` in place (before any tile is registered).
    #[doc(hidden)]
    pub fn set_key_fn(&mut self, f: KeyFn) {
        self.key_fn = f;
    }

    /// The tile registered under chain key `key` in group `g`, if it holds exactly `block`,
    /// links to `link` and has root `root` (see the module docs).
    fn find(&self, key: PrefixKey, g: usize, at: Place, link: Link) -> Option<TileId> {
        let t = self.alloc.lookup(group_key(key, g))?;
        let i = t.0 as usize;
        let holds = self.tile_tokens[i * self.tile_size..(i + 1) * self.tile_size] == *at.block;
        let rooted = self.tile_root[i] == at.root.unwrap_or(0);
        (holds && rooted && self.tile_link[i] == link).then_some(t)
    }

    /// The link to tile `t` as it is now (`NO_LINK` for none).
    fn link_to(&self, t: Option<TileId>) -> Link {
        t.map_or(NO_LINK, |t| (t.0, self.alloc.generation(t)))
    }

    /// The link a tile of group `g` at a block whose group-0 tile is `anchor`, after group-0
    /// tile `parent`, must have.
    fn expected_link(&self, g: usize, anchor: TileId, parent: Option<TileId>) -> Link {
        if g == 0 {
            self.link_to(parent)
        } else {
            self.link_to(Some(anchor))
        }
    }

    /// With `false`, windowed groups keep every tile, as global ones do (the model still reads
    /// only its window). For comparisons and measurements; release is the default.
    pub fn with_window_release(mut self, on: bool) -> KvManager {
        if !on {
            self.windows.iter_mut().for_each(|w| *w = None);
        }
        self
    }

    /// Whether full tiles are registered for reuse (prefix caching on).
    pub fn caching(&self) -> bool {
        self.alloc.caching()
    }

    /// References held on tile `t` (for invariant checks).
    pub fn ref_count(&self, t: TileId) -> u32 {
        self.alloc.ref_count(t)
    }

    pub fn tile_size(&self) -> usize {
        self.tile_size
    }

    pub fn counts(&self) -> TileCounts {
        self.alloc.counts()
    }

    pub fn check(&self) -> Result<(), String> {
        self.alloc.check()
    }

    pub fn n_groups(&self) -> usize {
        self.windows.len()
    }

    /// The most tiles a sequence of `len` tokens can hold at once when prefilled in chunks of
    /// at most `chunk` tokens (windowed groups keep only their window plus the chunk).
    pub fn max_tiles_for(&self, len: usize, chunk: usize) -> usize {
        let ts = self.tile_size;
        self.windows
            .iter()
            .map(|w| {
                let all = len.div_ceil(ts);
                match w {
                    None => all,
                    Some(w) => all.min((w + chunk.max(1)).div_ceil(ts) + 1),
                }
            })
            .sum()
    }

    /// Whether a request of `len` tokens could ever fit in the whole pool.
    pub fn fits_pool(&self, len: usize, chunk: usize) -> bool {
        self.max_tiles_for(len, chunk) <= self.alloc.n_tiles()
    }

    /// What the pool holds of `tokens` (never all of them: at least one token is left to
    /// compute), without taking anything.
    /// `root` is the chain's root (the module docs): none for the base model.
    pub fn probe(&self, tokens: &[u32], root: Option<PrefixKey>) -> PrefixProbe {
        let ts = self.tile_size;
        let max_full = tokens.len().saturating_sub(1) / ts;
        let block = |i: usize| Place {
            block: &tokens[i * ts..(i + 1) * ts],
            root,
        };
        let mut p = PrefixProbe {
            hit: 0,
            chain: Vec::with_capacity(max_full),
            anchors: Vec::new(),
        };
        // Group-0 tiles are found in every case (they vouch for the others); the hit lasts as
        // long as the global groups find theirs.
        let mut global = true;
        for i in 0..max_full {
            let key = (self.key_fn)(p.chain.last().copied().or(root), block(i).block);
            p.chain.push(key);
            if p.anchors.len() < i || !self.caching() {
                continue; // keys only, for the rest
            }
            let parent = p.anchors.last().copied();
            let Some(anchor) = self.find(key, 0, block(i), self.link_to(parent)) else {
                continue;
            };
            p.anchors.push(anchor);
            global = global
                && (1..self.n_groups())
                    .filter(|&g| self.windows[g].is_none())
                    .all(|g| {
                        let link = self.expected_link(g, anchor, parent);
                        self.find(key, g, block(i), link).is_some()
                    });
            if global {
                p.hit = i + 1;
            }
        }
        // Shrink until every windowed group has the tiles the first new token can see.
        while p.hit > 0 && !self.windows_cached(&p, tokens, root, p.hit) {
            p.hit -= 1;
        }
        p
    }

    /// Finds the longest run of cached full tiles for `tokens` (never all of them: at least one
    /// token is left to compute), adopts them into a fresh `SeqTiles` and returns it with the
    /// number of tokens it covers.
    pub fn adopt_prefix(&mut self, tokens: &[u32], root: Option<PrefixKey>) -> (SeqTiles, usize) {
        let ts = self.tile_size;
        let mut seq = SeqTiles {
            tables: vec![Vec::new(); self.n_groups()],
            chain: Vec::new(),
        };
        let PrefixProbe {
            hit,
            mut chain,
            anchors,
        } = self.probe(tokens, root);
        let block = |i: usize| Place {
            block: &tokens[i * ts..(i + 1) * ts],
            root,
        };
        for g in 0..self.n_groups() {
            let lo = self.first_visible_tile(g, hit * ts);
            for (i, key) in chain.iter().enumerate().take(hit) {
                let t = if i < lo {
                    TileId::RELEASED
                } else {
                    let parent = i.checked_sub(1).map(|p| anchors[p]);
                    let link = self.expected_link(g, anchors[i], parent);
                    let t = self
                        .find(*key, g, block(i), link)
                        .expect("checked above: this is a bug");
                    self.alloc.acquire(t);
                    t
                };
                seq.tables[g].push(t);
            }
        }
        chain.truncate(hit);
        seq.chain = chain;
        (seq, hit * ts)
    }

    /// First tile index of group `g` that a query at `pos` (or later) can see.
    fn first_visible_tile(&self, g: usize, pos: usize) -> usize {
        match self.windows[g] {
            None => 0,
            Some(w) => (pos + 1).saturating_sub(w) / self.tile_size,
        }
    }

    fn windows_cached(
        &self,
        p: &PrefixProbe,
        tokens: &[u32],
        root: Option<PrefixKey>,
        hit: usize,
    ) -> bool {
        let ts = self.tile_size;
        let anchors = &p.anchors;
        (0..self.n_groups()).all(|g| {
            let lo = self.first_visible_tile(g, hit * ts);
            (lo..hit).all(|i| {
                let link = self.expected_link(g, anchors[i], i.checked_sub(1).map(|p| anchors[p]));
                let at = Place {
                    block: &tokens[i * ts..(i + 1) * ts],
                    root,
                };
                self.find(p.chain[i], g, at, link).is_some()
            })
        })
    }

    /// Tiles needed to grow `seq` to hold `new_len` tokens.
    pub fn tiles_needed(&self, seq: &SeqTiles, new_len: usize) -> usize {
        let want = new_len.div_ceil(self.tile_size);
        seq.tables
            .iter()
            .map(|t| want.saturating_sub(t.len()))
            .sum()
    }

    pub fn available(&self) -> usize {
        self.alloc.available()
    }

    /// Grows every table of `seq` to cover `new_len` tokens. On failure nothing is allocated.
    pub fn grow(&mut self, seq: &mut SeqTiles, new_len: usize) -> Result<(), PoolShort> {
        let needed = self.tiles_needed(seq, new_len);
        let available = self.alloc.available();
        if needed > available {
            return Err(PoolShort { needed, available });
        }
        let want = new_len.div_ceil(self.tile_size);
        for table in seq.tables.iter_mut() {
            while table.len() < want {
                let t = self
                    .take_tile()
                    .expect("availability checked above: this is a bug");
                table.push(t);
            }
        }
        Ok(())
    }

    /// A second set of tables for a sequence forked from `parent` after its first `computed`
    /// tokens: full tiles are shared (one more reference each), a partly filled last tile gets a
    /// fresh tile, returned as a (source, copy) pair whose contents the caller copies in the
    /// pool. Released (out-of-window) entries stay released. On failure nothing is taken.
    pub fn fork(
        &mut self,
        parent: &SeqTiles,
        computed: usize,
    ) -> Result<(SeqTiles, Vec<(TileId, TileId)>), PoolShort> {
        let ts = self.tile_size;
        let full = computed / ts;
        let partial = !computed.is_multiple_of(ts);
        let needed = if partial {
            parent
                .tables
                .iter()
                .filter(|t| t.get(full).is_some_and(|&id| id != TileId::RELEASED))
                .count()
        } else {
            0
        };
        let available = self.alloc.available();
        if needed > available {
            return Err(PoolShort { needed, available });
        }
        let mut copies = Vec::new();
        let mut tables = Vec::with_capacity(parent.tables.len());
        for table in &parent.tables {
            let mut own = Vec::with_capacity(computed.div_ceil(ts));
            for (i, &t) in table.iter().enumerate().take(computed.div_ceil(ts)) {
                if t == TileId::RELEASED {
                    own.push(t);
                } else if i < full {
                    self.alloc.acquire(t);
                    own.push(t);
                } else {
                    let c = self
                        .take_tile()
                        .expect("availability checked above: this is a bug");
                    copies.push((t, c));
                    own.push(c);
                }
            }
            tables.push(own);
        }
        let mut chain = parent.chain.clone();
        chain.truncate(full);
        Ok((SeqTiles { tables, chain }, copies))
    }

    /// Releases windowed tiles that no query at `next_pos` or later can see.
    pub fn release_out_of_window(&mut self, seq: &mut SeqTiles, next_pos: usize) {
        for g in 0..self.n_groups() {
            let lo = self.first_visible_tile(g, next_pos);
            let table = &mut seq.tables[g];
            for t in table.iter_mut().take(lo) {
                if *t != TileId::RELEASED {
                    self.alloc.release(*t);
                    *t = TileId::RELEASED;
                }
            }
        }
    }

    /// Frees the table entries past those that hold positions `0..len`, tail first: the tiles a
    /// multi-token step took for drafted tokens that were not accepted. Such a tile was never
    /// registered (only tiles full of computed, accepted tokens are), so nothing of the rejected
    /// tokens stays findable.
    pub fn truncate(&mut self, seq: &mut SeqTiles, len: usize) {
        let keep = len.div_ceil(self.tile_size);
        let longest = seq.tables.iter().map(Vec::len).max().unwrap_or(0);
        for i in (keep..longest).rev() {
            for table in &seq.tables {
                if let Some(&t) = table.get(i) {
                    if t != TileId::RELEASED {
                        self.alloc.release(t);
                    }
                }
            }
        }
        for table in seq.tables.iter_mut() {
            table.truncate(keep);
        }
        seq.chain.truncate(len / self.tile_size);
    }

    /// Registers the tiles that became full now that `tokens[..computed]` are in the cache,
    /// computed with the adapters whose key is `root` (none: the base model).
    pub fn register_full(
        &mut self,
        seq: &mut SeqTiles,
        tokens: &[u32],
        computed: usize,
        root: Option<PrefixKey>,
    ) {
        let ts = self.tile_size;
        let full = computed.min(tokens.len()) / ts;
        while seq.chain.len() < full {
            let i = seq.chain.len();
            let block = &tokens[i * ts..(i + 1) * ts];
            let key = (self.key_fn)(seq.chain.last().copied().or(root), block);
            seq.chain.push(key);
            // Tiles are vouched for by the registered group-0 tile of their block, and that
            // one by the registered group-0 tile before it: without those, none is registered.
            let anchor = seq.tables[0][i];
            let parent = i.checked_sub(1).map(|p| seq.tables[0][p]);
            let vouched = |this: &Self, t: TileId, k: PrefixKey| {
                t != TileId::RELEASED && this.alloc.lookup(group_key(k, 0)) == Some(t)
            };
            if !parent.is_none_or(|p| vouched(self, p, seq.chain[i - 1])) {
                continue;
            }
            for g in 0..self.n_groups() {
                let t = seq.tables[g][i];
                if g > 0 && !vouched(self, anchor, key) {
                    break;
                }
                if t != TileId::RELEASED && self.alloc.register(t, group_key(key, g)) {
                    let link = self.expected_link(g, anchor, parent);
                    let facts = TileFacts {
                        chain: key,
                        parent: i.checked_sub(1).map(|p| seq.chain[p]),
                        root,
                        group: g,
                        block,
                    };
                    self.note_registered(t, &facts, link, false);
                    if self.tier_writes == TierWrites::WriteThrough {
                        self.pending.push(self.tier_write(t));
                        self.written[t.0 as usize] = true;
                    }
                }
            }
        }
    }

    /// Records what registered tile `t` holds (`facts`), its link, and whether a tier has it.
    fn note_registered(&mut self, t: TileId, facts: &TileFacts, link: Link, written: bool) {
        let (i, ts) = (t.0 as usize, self.tile_size);
        self.tile_tokens[i * ts..(i + 1) * ts].copy_from_slice(facts.block);
        self.tile_link[i] = link;
        self.tile_root[i] = facts.root.unwrap_or(0);
        self.tile_lora[i] = facts.root.and_then(|r| self.root_tags.get(&r).cloned());
        self.tile_chain[i] = (facts.chain, facts.parent, facts.group as u8);
        self.written[i] = written;
        if let Some(events) = self.events.as_mut() {
            events.push(KvEvent::Stored(StoredTile {
                group: facts.group,
                window: self.windows[facts.group],
                key: group_key(facts.chain, facts.group),
                parent: facts.parent.map(|p| group_key(p, facts.group)),
                tokens: facts.block.to_vec(),
                lora: self.tile_lora[i].clone(),
            }));
        }
    }

    /// Names the LoRA adapters whose key is `root` for the KV events of the tiles registered
    /// under it from now on.
    pub fn tag_root(&mut self, root: PrefixKey, tag: LoraTag) {
        if self.caching() {
            self.root_tags.entry(root).or_insert_with(|| Arc::new(tag));
        }
    }

    /// Forgets the names of the roots `keep` refuses (tiles already registered keep theirs).
    pub fn retain_root_tags(&mut self, keep: impl Fn(PrefixKey) -> bool) {
        self.root_tags.retain(|&k, _| keep(k));
    }

    /// How many roots have names (`tag_root`).
    pub fn root_tags(&self) -> usize {
        self.root_tags.len()
    }

    /// Notes prefix index changes from now on (`take_events`), or stops. Events need the
    /// prefix cache: without it nothing is ever registered, and this does nothing.
    pub fn set_events(&mut self, on: bool) {
        self.events = (on && self.caching()).then(Vec::new);
    }

    /// The prefix index changes since the last call (empty when events are off).
    pub fn take_events(&mut self) -> Vec<KvEvent> {
        self.events.as_mut().map(std::mem::take).unwrap_or_default()
    }

    /// Every tile that holds a key, as a `Stored` event described it, in tile order.
    pub fn registered(&self) -> Vec<StoredTile> {
        let ts = self.tile_size;
        (0..self.alloc.n_tiles() as u32)
            .map(TileId)
            .filter(|&t| self.alloc.is_registered(t))
            .map(|t| {
                let i = t.0 as usize;
                let (chain, parent, g) = self.tile_chain[i];
                let g = g as usize;
                StoredTile {
                    group: g,
                    window: self.windows[g],
                    key: group_key(chain, g),
                    parent: parent.map(|p| group_key(p, g)),
                    tokens: self.tile_tokens[i * ts..(i + 1) * ts].to_vec(),
                    lora: self.tile_lora[i].clone(),
                }
            })
            .collect()
    }

    /// Hands full tiles to the KV tiers from now on (`TierWrites`).
    pub fn set_tier_writes(&mut self, w: TierWrites) {
        self.tier_writes = if self.caching() { w } else { TierWrites::Off };
    }

    /// The tiles to write to the KV tiers since the last call (evicted, or with write-through
    /// newly registered), whose contents the runner still holds.
    pub fn take_tier_writes(&mut self) -> Vec<TierWrite> {
        std::mem::take(&mut self.pending)
    }

    /// Every registered tile no tier has yet (for a flush at shutdown); marks them written.
    pub fn unwritten(&mut self) -> Vec<TierWrite> {
        if self.tier_writes == TierWrites::Off {
            return Vec::new();
        }
        let ids: Vec<TileId> = (0..self.alloc.n_tiles() as u32)
            .map(TileId)
            .filter(|&t| self.alloc.is_registered(t) && !self.written[t.0 as usize])
            .collect();
        ids.into_iter()
            .map(|t| {
                self.written[t.0 as usize] = true;
                self.tier_write(t)
            })
            .collect()
    }

    fn tier_write(&self, t: TileId) -> TierWrite {
        let (i, ts) = (t.0 as usize, self.tile_size);
        let (chain, parent, group) = self.tile_chain[i];
        TierWrite {
            tile: t,
            chain,
            parent,
            group: group as usize,
            tokens: self.tile_tokens[i * ts..(i + 1) * ts].to_vec(),
        }
    }

    /// Takes a tile (`TileAllocator::allocate`), first noting a cached tile it evicts for the
    /// KV tiers when they do not have it yet.
    fn take_tile(&mut self) -> Option<TileId> {
        if let Some((t, true)) = self.alloc.peek() {
            if self.tier_writes != TierWrites::Off && !self.written[t.0 as usize] {
                self.pending.push(self.tier_write(t));
            }
            if let (Some(events), Some(key)) = (self.events.as_mut(), self.alloc.key(t)) {
                let group = self.tile_chain[t.0 as usize].2 as usize;
                events.push(KvEvent::Removed { group, key });
            }
        }
        self.alloc.allocate()
    }

    /// Gives back a tile taken with `import_slot` that could not be filled.
    pub fn release_tile(&mut self, t: TileId) {
        self.alloc.release(t);
    }

    /// A tile to import a KV tier's contents into (taking one evicts as `grow` does); `None`
    /// when every tile is in use.
    pub fn import_slot(&mut self) -> Option<TileId> {
        self.take_tile()
    }

    /// Registers imported tile `t` as the tile `facts` describes, vouched for by `anchor` (its
    /// block's group-0 tile; `t` itself in group 0) after `parent_anchor`, and leaves it
    /// cached. Returns false (and frees `t`) when it cannot be registered: its key is already
    /// held, or its anchors are not registered.
    pub fn finish_import(
        &mut self,
        t: TileId,
        facts: &TileFacts,
        anchor: TileId,
        parent_anchor: Option<TileId>,
    ) -> bool {
        let TileFacts {
            chain,
            parent,
            group: g,
            ..
        } = *facts;
        let vouched =
            |this: &Self, a: TileId, k: PrefixKey| this.alloc.lookup(group_key(k, 0)) == Some(a);
        let parent_ok = match (parent, parent_anchor) {
            (None, None) => true,
            (Some(p), Some(a)) => vouched(self, a, p),
            _ => false,
        };
        let anchor_ok = g == 0 || vouched(self, anchor, chain);
        let ok = parent_ok && anchor_ok && self.alloc.register(t, group_key(chain, g));
        if ok {
            let link = self.expected_link(g, anchor, parent_anchor);
            self.note_registered(t, facts, link, true);
        }
        self.alloc.release(t);
        ok
    }

    /// Releases every tile of `seq`, tail first (across all groups), so chains are evicted
    /// tail first.
    pub fn free(&mut self, seq: &mut SeqTiles) {
        self.truncate(seq, 0);
    }
}
