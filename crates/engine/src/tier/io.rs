//! The tier I/O thread: every read and write of every tier happens here, never on the engine
//! thread.
//!
//! The engine hands it writes (tiles evicted from the pool) through a bounded queue — when the
//! tiers are slow and the queue is full, a write is dropped and counted, never waited for — and
//! fetches (the blocks of a new prompt after its pool hit) through a queue of their own, served
//! first. A fetch asks the tiers in order (disk, then Redis for what disk lacks) for the tiles
//! of the global KV groups of every block, keeps the leading run of blocks found whole, then
//! the windowed groups' tiles that the end of that run can see; each value is verified against
//! what the tile must be (`format::decode`) before it is returned.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender, SyncSender, TryRecvError};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::format::{decode, encode, TierTile, TileMeta};
use super::{KvTier, TierKey};
use crate::sequence::SeqId;
use crate::stats::Histogram;

/// Writes that may wait in the queue; beyond it they are dropped.
const WRITE_QUEUE: usize = 1024;

/// Counters of one tier (exported as metrics, labelled by `name`).
pub struct TierCounters {
    pub name: &'static str,
    /// Tiles asked for, and found (verified).
    pub lookups: AtomicU64,
    pub hits: AtomicU64,
    pub bytes_read: AtomicU64,
    pub bytes_written: AtomicU64,
    /// Errors of the store (unreachable, full, …) and values that did not verify.
    pub errors: AtomicU64,
    pub rejected: AtomicU64,
    /// Seconds per fetch from this tier.
    pub load_seconds: Histogram,
    logged: AtomicBool,
}

/// Counters of every tier, plus the writes dropped because the queue was full, the fetches
/// the engine did not make because recomputing was estimated faster, and the tiles imported.
pub struct TierStats {
    pub tiers: Vec<TierCounters>,
    pub write_drops: AtomicU64,
    pub skipped_fetches: AtomicU64,
    pub imported_tiles: AtomicU64,
}

/// A fetch: the tiles of consecutive blocks of one prompt, from block `first_block` on.
pub struct FetchJob {
    pub id: SeqId,
    pub first_block: usize,
    /// Per block, per KV group: what the tile must be.
    pub blocks: Vec<Vec<TileMeta>>,
}

/// What a fetch found: for the leading run of blocks found whole, each group's tile bytes
/// (`None` for a windowed group's tile that is not needed or not found).
pub struct FetchResult {
    pub id: SeqId,
    pub first_block: usize,
    pub tiles: Vec<Vec<Option<Vec<u8>>>>,
    pub elapsed: Duration,
}

/// The handle the engine holds.
pub struct TierIo {
    writes: SyncSender<TierTile>,
    fetches: Sender<FetchJob>,
    results: Receiver<FetchResult>,
    stats: Arc<TierStats>,
    /// Disconnected when the I/O thread has ended (after the queued writes).
    done: Receiver<()>,
}

impl TierIo {
    /// Starts the I/O thread over `tiers` (asked in order) for a KV layout with these group
    /// windows and tile size.
    pub fn start(
        tiers: Vec<Box<dyn KvTier>>,
        windows: Vec<Option<usize>>,
        tile_size: usize,
    ) -> std::io::Result<TierIo> {
        const LOAD_BOUNDS: &[f64] = &[0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0];
        let stats = Arc::new(TierStats {
            tiers: tiers
                .iter()
                .map(|t| TierCounters {
                    name: t.name(),
                    lookups: AtomicU64::new(0),
                    hits: AtomicU64::new(0),
                    bytes_read: AtomicU64::new(0),
                    bytes_written: AtomicU64::new(0),
                    errors: AtomicU64::new(0),
                    rejected: AtomicU64::new(0),
                    load_seconds: Histogram::new(LOAD_BOUNDS),
                    logged: AtomicBool::new(false),
                })
                .collect(),
            write_drops: AtomicU64::new(0),
            skipped_fetches: AtomicU64::new(0),
            imported_tiles: AtomicU64::new(0),
        });
        let (wtx, wrx) = mpsc::sync_channel(WRITE_QUEUE);
        let (ftx, frx) = mpsc::channel();
        let (rtx, rrx) = mpsc::channel();
        let (done_tx, done_rx) = mpsc::channel::<()>();
        let worker = Worker {
            tiers,
            windows,
            tile_size,
            stats: stats.clone(),
        };
        std::thread::Builder::new()
            .name("tessera-kv-tiers".into())
            .spawn(move || {
                let _done = done_tx;
                worker.run(wrx, frx, rtx)
            })?;
        Ok(TierIo {
            writes: wtx,
            fetches: ftx,
            results: rrx,
            stats,
            done: done_rx,
        })
    }

    /// Queues a tile to be written; dropped (and counted) when the queue is full.
    pub fn write(&self, tile: TierTile) {
        if self.writes.try_send(tile).is_err() {
            self.stats.write_drops.fetch_add(1, Relaxed);
        }
    }

    /// Queues a tile to be written, waiting for room until `deadline` (a flush at shutdown).
    pub fn write_by(&self, mut tile: TierTile, deadline: Instant) -> bool {
        loop {
            match self.writes.try_send(tile) {
                Ok(()) => return true,
                Err(mpsc::TrySendError::Full(t)) if Instant::now() < deadline => {
                    tile = t;
                    std::thread::sleep(Duration::from_millis(1));
                }
                Err(_) => {
                    self.stats.write_drops.fetch_add(1, Relaxed);
                    return false;
                }
            }
        }
    }

    pub fn fetch(&self, job: FetchJob) {
        let _ = self.fetches.send(job);
    }

    /// A finished fetch, if any.
    pub fn try_result(&self) -> Option<FetchResult> {
        self.results.try_recv().ok()
    }

    pub fn stats(&self) -> &Arc<TierStats> {
        &self.stats
    }

    /// Stops taking work and waits until the queued writes are done, or `deadline`.
    pub fn close(self, deadline: Instant) {
        let TierIo {
            writes,
            fetches,
            done,
            ..
        } = self;
        drop((writes, fetches));
        let left = deadline.saturating_duration_since(Instant::now());
        let _ = done.recv_timeout(left);
    }
}

struct Worker {
    tiers: Vec<Box<dyn KvTier>>,
    windows: Vec<Option<usize>>,
    tile_size: usize,
    stats: Arc<TierStats>,
}

impl Worker {
    fn run(
        mut self,
        writes: Receiver<TierTile>,
        fetches: Receiver<FetchJob>,
        out: Sender<FetchResult>,
    ) {
        let mut fetching = true;
        loop {
            // Fetches first: a prompt waits on them. Once the engine is gone, the queued writes
            // are still done.
            match fetches.try_recv() {
                Ok(job) => {
                    let r = self.fetch(job);
                    let _ = out.send(r);
                    continue;
                }
                Err(TryRecvError::Disconnected) => fetching = false,
                Err(TryRecvError::Empty) => {}
            }
            if !fetching {
                match writes.recv() {
                    Ok(tile) => self.write(&tile),
                    Err(_) => return,
                }
                continue;
            }
            match writes.recv_timeout(Duration::from_millis(2)) {
                Ok(tile) => self.write(&tile),
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => return,
            }
        }
    }

    fn fault(&self, tier: usize, e: &dyn std::fmt::Display) {
        let c = &self.stats.tiers[tier];
        c.errors.fetch_add(1, Relaxed);
        if !c.logged.swap(true, Relaxed) {
            tracing::warn!("KV tier {}: {e} (further errors are only counted)", c.name);
        }
    }

    fn write(&mut self, tile: &TierTile) {
        let value = encode(tile);
        for i in 0..self.tiers.len() {
            match self.tiers[i].put(&tile.meta.key, &value) {
                Ok(()) => {
                    let c = &self.stats.tiers[i];
                    c.bytes_written.fetch_add(value.len() as u64, Relaxed);
                    c.logged.store(false, Relaxed); // it works again: say so next time it fails
                }
                Err(e) => self.fault(i, &e),
            }
        }
    }

    /// Gets and verifies the tiles `want` names (in order), each from the first tier that has
    /// it.
    fn get(&mut self, want: &[&TileMeta]) -> Vec<Option<Vec<u8>>> {
        let mut found: Vec<Option<Vec<u8>>> = vec![None; want.len()];
        for i in 0..self.tiers.len() {
            let missing: Vec<usize> = (0..want.len()).filter(|&j| found[j].is_none()).collect();
            if missing.is_empty() {
                break;
            }
            let keys: Vec<TierKey> = missing.iter().map(|&j| want[j].key).collect();
            let t0 = Instant::now();
            let got = match self.tiers[i].get(&keys) {
                Ok(v) => v,
                Err(e) => {
                    self.fault(i, &e);
                    continue;
                }
            };
            let c = &self.stats.tiers[i];
            c.load_seconds.observe(t0.elapsed().as_secs_f64());
            c.lookups.fetch_add(keys.len() as u64, Relaxed);
            for (&j, value) in missing.iter().zip(got) {
                let Some(value) = value else { continue };
                c.bytes_read.fetch_add(value.len() as u64, Relaxed);
                match decode(&value, want[j]) {
                    Some(bytes) => {
                        c.hits.fetch_add(1, Relaxed);
                        found[j] = Some(bytes);
                    }
                    None => {
                        c.rejected.fetch_add(1, Relaxed);
                    }
                }
            }
        }
        found
    }

    /// First block index (absolute) of group `g` that a query at `pos` can see.
    fn first_visible(&self, g: usize, pos: usize) -> usize {
        self.windows[g].map_or(0, |w| (pos + 1).saturating_sub(w) / self.tile_size)
    }

    fn fetch(&mut self, job: FetchJob) -> FetchResult {
        let t0 = Instant::now();
        let n = job.blocks.len();
        let groups = self.windows.len();
        let h = job.first_block;
        let mut tiles: Vec<Vec<Option<Vec<u8>>>> = vec![vec![None; groups]; n];
        // Global groups of every block, and the windowed tiles the whole run's end would see.
        let mut want = Vec::new();
        for (i, block) in job.blocks.iter().enumerate() {
            for (g, meta) in block.iter().enumerate().take(groups) {
                let global = self.windows[g].is_none();
                if global || h + i >= self.first_visible(g, (h + n) * self.tile_size) {
                    want.push((i, g, meta));
                }
            }
        }
        let metas: Vec<&TileMeta> = want.iter().map(|w| w.2).collect();
        for ((i, g, _), v) in want.iter().zip(self.get(&metas)) {
            tiles[*i][*g] = v;
        }
        let run = (0..n)
            .take_while(|&i| {
                (0..groups).all(|g| self.windows[g].is_some() || tiles[i][g].is_some())
            })
            .count();
        tiles.truncate(run);
        if run < n && run > 0 {
            // The run ended early: the windowed tiles its own end sees.
            let mut want = Vec::new();
            for (i, block) in job.blocks.iter().enumerate().take(run) {
                for (g, meta) in block.iter().enumerate().take(groups) {
                    let seen = h + i >= self.first_visible(g, (h + run) * self.tile_size);
                    if self.windows[g].is_some() && seen && tiles[i][g].is_none() {
                        want.push((i, g, meta));
                    }
                }
            }
            let metas: Vec<&TileMeta> = want.iter().map(|w| w.2).collect();
            for ((i, g, _), v) in want.iter().zip(self.get(&metas)) {
                tiles[*i][*g] = v;
            }
        }
        FetchResult {
            id: job.id,
            first_block: h,
            tiles,
            elapsed: t0.elapsed(),
        }
    }
}
