//! The engine's side of the KV tiers: what to write, what to look for, and bringing found tiles
//! into the pool.
//!
//! - Writes: tiles the pool evicts (or, with write-through, tiles as soon as they are full)
//!   are read out of the runner (`Runner::export_tile`) right after the planning, forking or
//!   importing that chose them — before anything overwrites them — and queued for the tier I/O
//!   thread, which drops writes rather than letting them pile up.
//! - Reads: a new request whose prompt has full tiles beyond what the pool holds waits outside
//!   the scheduler ("parked") while the I/O thread fetches those tiles. The other sequences'
//!   steps go on meanwhile. When the fetch returns, its tiles are imported into free pool tiles
//!   and registered (as cached, with the links that vouch for them), and the request is queued:
//!   its admission then adopts them as any prefix hit, and they count as cached prompt tokens.
//! - A fetch that would take longer than recomputing its tokens is not made: the engine keeps a
//!   moving average of the time per fetched tile and compares it with the measured prefill
//!   cost (`StepCost`), and still makes one fetch in `PROBE_EVERY` to keep the average fresh.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::Ordering::Relaxed;
use std::time::Instant;

use crate::engine::Engine;
use crate::error::StartError;
use crate::kv_manager::{PrefixProbe, TierWrite, TierWrites, TileFacts};
use crate::runner::{Runner, RunnerFacts};
use crate::scheduler::AddError;
use crate::sequence::{SeqId, Sequence};
use crate::tier::disk::DiskTier;
use crate::tier::{FetchJob, FetchResult, KvTier, TierIo, TierNamespace, TierTile, TileMeta};
use crate::tiles::PrefixKey;

/// Fetches made even when recomputing is estimated faster, to keep the estimate fresh: one in
/// this many.
const PROBE_EVERY: u64 = 32;

/// KV tiers to keep full tiles in (`EngineConfig::kv_tiers`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TierConfig {
    /// What makes tiles interchangeable between processes: a fingerprint of the model file
    /// (e.g. SHA-256 of its bytes), mixed with the KV layout into the keys.
    pub model_fingerprint: [u8; 32],
    /// A directory and its size cap in bytes.
    pub disk: Option<(PathBuf, u64)>,
    /// A Redis server (`redis://HOST:PORT/DB`), asked after the disk, and the time its entries
    /// live (`None`: until Redis's own eviction policy drops them).
    pub redis: Option<(String, Option<std::time::Duration>)>,
    /// Write tiles as soon as they are full, not only when evicted (replicas sharing a tier
    /// find each other's prefixes at once).
    pub write_through: bool,
}

/// The engine's tier state.
pub(crate) struct Tiering {
    io: TierIo,
    ns: TierNamespace,
    /// Requests waiting for their fetch, with when it was sent.
    parked: HashMap<SeqId, (Sequence, Instant)>,
    /// Moving average of seconds per fetched tile.
    per_tile: Option<f64>,
    fetches: u64,
}

impl Tiering {
    /// Starts the tier I/O thread over the configured tiers.
    pub fn start(cfg: &TierConfig, facts: &RunnerFacts) -> Result<Tiering, StartError> {
        let mut tiers: Vec<Box<dyn KvTier>> = Vec::new();
        if let Some((dir, cap)) = &cfg.disk {
            let disk = DiskTier::open(dir, *cap).map_err(|e| StartError::Tier(e.to_string()))?;
            tracing::info!(
                "KV disk tier {}: {} tiles, {} MiB",
                dir.display(),
                disk.len(),
                disk.bytes() >> 20
            );
            tiers.push(Box::new(disk));
        }
        if let Some((url, ttl)) = &cfg.redis {
            let redis = crate::tier::redis::RedisTier::open(url, *ttl)
                .map_err(|e| StartError::Tier(e.to_string()))?;
            tiers.push(Box::new(redis));
        }
        let windows = facts.layout.groups.iter().map(|g| g.window).collect();
        let io =
            TierIo::start(tiers, windows, facts.layout.tile_size).map_err(StartError::Thread)?;
        Ok(Tiering {
            io,
            ns: TierNamespace::new(&cfg.model_fingerprint, &facts.layout),
            parked: HashMap::new(),
            per_tile: None,
            fetches: 0,
        })
    }

    pub fn stats(&self) -> &std::sync::Arc<crate::tier::TierStats> {
        self.io.stats()
    }

    pub fn parked(&self) -> usize {
        self.parked.len()
    }

    pub fn unpark(&mut self, id: SeqId) -> Option<Sequence> {
        self.parked.remove(&id).map(|(s, _)| s)
    }

    /// Stops the I/O thread once its queued writes are done (or at `deadline`).
    pub fn close(self, deadline: Instant) {
        self.io.close(deadline);
    }
}

impl<R: Runner> Engine<R> {
    /// Queues `seq`, first fetching the full tiles of its prompt that the pool lacks when the
    /// tiers may have them and fetching is estimated to beat recomputing.
    pub(crate) fn add_via_tiers(&mut self, seq: Sequence) -> Result<(), AddError> {
        let Some(t) = self.tiers.as_mut() else {
            return self.sched.add(seq);
        };
        if seq.wants_prompt_logits {
            return self.sched.add(seq);
        }
        self.sched.check_fits(seq.max_total_len)?;
        let probe = self.sched.probe_prefix(&seq.tokens, seq.lora_key);
        let missing = probe.chain.len() - probe.hit;
        if missing == 0 {
            return self.sched.add(seq);
        }
        let ts = self.sched.tile_size();
        let groups = self.sched.n_groups();
        let recompute = self
            .cost
            .per_prefill_token()
            .map(|p| p * (missing * ts) as f64);
        let fetch = t.per_tile.map(|s| s * (missing * groups) as f64);
        t.fetches += 1;
        if let (Some(r), Some(f)) = (recompute, fetch) {
            if f > r && t.fetches % PROBE_EVERY != 0 {
                t.io.stats().skipped_fetches.fetch_add(1, Relaxed);
                return self.sched.add(seq);
            }
        }
        let job = fetch_job(&t.ns, seq.id, &seq.tokens, &probe, ts, groups);
        t.io.fetch(job);
        t.parked.insert(seq.id, (seq, Instant::now()));
        Ok(())
    }

    /// Takes the finished fetches: imports their tiles and queues their requests.
    pub(crate) fn poll_tiers(&mut self) {
        loop {
            let Some(t) = self.tiers.as_mut() else {
                return;
            };
            let Some(res) = t.io.try_result() else {
                return;
            };
            let Some((seq, _)) = t.parked.remove(&res.id) else {
                continue; // the request ended meanwhile
            };
            let fetched: usize = res.tiles.iter().flatten().filter(|x| x.is_some()).count();
            if fetched > 0 {
                let s = res.elapsed.as_secs_f64() / fetched as f64;
                t.per_tile = Some(t.per_tile.map_or(s, |o| o + 0.2 * (s - o)));
            }
            self.import(&seq.tokens, seq.lora_key, res);
            let id = seq.id;
            if let Err(e) = self.sched.add(seq) {
                self.fail_one(id, &format!("queueing after the KV tier fetch: {e}"));
            }
        }
    }

    /// Brings a fetch's tiles into the pool as cached tiles (see the module docs).
    fn import(&mut self, tokens: &[u32], root: Option<PrefixKey>, res: FetchResult) {
        let ts = self.sched.tile_size();
        // The pool may have changed since the fetch was sent: look again.
        let probe = self.sched.probe_prefix(tokens, root);
        let h = res.first_block;
        if probe.anchors.len() < h {
            return; // the blocks before the fetched ones are gone
        }
        let mut parent_anchor = h.checked_sub(1).map(|p| probe.anchors[p]);
        let mut imported = 0u64;
        'blocks: for (i, groups) in res.tiles.iter().enumerate() {
            let b = h + i;
            let block = &tokens[b * ts..(b + 1) * ts];
            let (chain, parent) = (probe.chain[b], b.checked_sub(1).map(|p| probe.chain[p]));
            let mut anchor = None;
            for (g, bytes) in groups.iter().enumerate() {
                let Some(bytes) = bytes else { continue };
                let Some(tile) = self.sched.kv_mut().import_slot() else {
                    break 'blocks; // every tile is in use
                };
                self.flush_tier_writes(); // the tile's old contents first
                if let Err(e) = self.runner.import_tile(tile, bytes) {
                    tracing::warn!("importing a KV tier tile: {e}");
                    self.sched.kv_mut().release_tile(tile);
                    break 'blocks;
                }
                let a = anchor.unwrap_or(tile);
                let facts = TileFacts {
                    chain,
                    parent,
                    root,
                    group: g,
                    block,
                };
                let kv = self.sched.kv_mut();
                if !kv.finish_import(tile, &facts, a, parent_anchor) {
                    if g == 0 {
                        break 'blocks; // nothing after it can be vouched for
                    }
                    continue;
                }
                imported += 1;
                anchor = Some(a);
            }
            if anchor.is_none() {
                break;
            }
            parent_anchor = anchor;
        }
        if let Some(t) = &self.tiers {
            t.io.stats().imported_tiles.fetch_add(imported, Relaxed);
        }
    }

    /// Reads out the tiles the pool has chosen to write to the tiers and queues them.
    pub(crate) fn flush_tier_writes(&mut self) {
        let Some(t) = self.tiers.as_mut() else {
            return;
        };
        for w in self.sched.kv_mut().take_tier_writes() {
            t.io.write(read_out(&self.runner, &t.ns, w));
        }
    }

    /// Writes every full tile no tier has yet (at shutdown), then stops the tier I/O thread
    /// once that is done or at `deadline`.
    pub fn close_tiers(&mut self, deadline: Instant) {
        let Some(t) = self.tiers.take() else {
            return;
        };
        let writes = self.sched.kv_mut().unwritten();
        let n = writes.len();
        for w in writes {
            if !t.io.write_by(read_out(&self.runner, &t.ns, w), deadline) {
                break;
            }
        }
        tracing::info!("KV tiers: {n} tiles written at shutdown");
        t.close(deadline);
    }
}

/// Tile `w` read out of the runner, keyed for the tiers.
fn read_out<R: Runner>(runner: &R, ns: &TierNamespace, w: TierWrite) -> TierTile {
    let mut bytes = Vec::new();
    runner.export_tile(w.tile, &mut bytes);
    TierTile {
        meta: TileMeta {
            key: ns.key(w.group, w.chain),
            parent: w.parent,
            tokens: w.tokens,
        },
        bytes,
    }
}

/// The fetch of the tiles of `tokens` after the pool's hit.
fn fetch_job(
    ns: &TierNamespace,
    id: SeqId,
    tokens: &[u32],
    probe: &PrefixProbe,
    ts: usize,
    groups: usize,
) -> FetchJob {
    let blocks = (probe.hit..probe.chain.len())
        .map(|b| {
            let parent = b.checked_sub(1).map(|p| probe.chain[p]);
            (0..groups)
                .map(|g| TileMeta {
                    key: ns.key(g, probe.chain[b]),
                    parent,
                    tokens: tokens[b * ts..(b + 1) * ts].to_vec(),
                })
                .collect()
        })
        .collect();
    FetchJob {
        id,
        first_block: probe.hit,
        blocks,
    }
}

/// How the pool hands tiles to the tiers under `cfg`.
pub(crate) fn tier_writes(cfg: &TierConfig) -> TierWrites {
    if cfg.write_through {
        TierWrites::WriteThrough
    } else {
        TierWrites::OnEvict
    }
}
