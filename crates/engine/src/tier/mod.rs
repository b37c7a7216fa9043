//! KV tiers: full tiles kept outside the runner's pool — on local disk, in Redis — so a prefix
//! computed once survives evictions and restarts, and is shared by replicas.
//!
//! Planning never touches bytes and moving bytes never plans (vLLM's connector split): the
//! engine decides which tiles to write (evicted from the pool) and which to look for (the
//! blocks of a new prompt after its pool hit); a `KvTier` only stores and returns opaque
//! values under keys, on the tier I/O thread (`io`), never on the engine thread.
//!
//! A key (`TierKey`) is SHA-256 over a namespace — the model file's fingerprint, the KV storage
//! type, tile size and geometry (`TierNamespace`) — the KV group and the tile's chain key (itself
//! a hash chained over every token of the prefix), so keys of different models, formats or
//! prefixes cannot meet. A value (`format`) carries a header with the key, the tile's token ids,
//! its parent's chain key, the byte length and a checksum; a value that does not verify in every
//! field is a miss, never used.

pub mod disk;
pub mod format;
pub mod io;
pub mod redis;

use std::fmt;

pub use format::{TierTile, TileMeta};
pub use io::{FetchJob, FetchResult, TierCounters, TierIo, TierStats};

/// Identifies one tile's contents across processes and machines (see the module docs).
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TierKey(pub [u8; 32]);

impl TierKey {
    /// Lower-case hex, for file names and Redis keys.
    pub fn hex(&self) -> String {
        self.0.iter().map(|b| format!("{b:02x}")).collect()
    }

    /// The key a hex string (`hex`) stands for.
    pub fn from_hex(s: &str) -> Option<TierKey> {
        if s.len() != 64 || !s.is_ascii() {
            return None;
        }
        let mut k = [0u8; 32];
        for (i, b) in k.iter_mut().enumerate() {
            *b = u8::from_str_radix(&s[2 * i..2 * i + 2], 16).ok()?;
        }
        Some(TierKey(k))
    }
}

impl fmt::Debug for TierKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "TierKey({}…)", &self.hex()[..12])
    }
}

/// What makes tiles of one server interchangeable with another's: the model file, and how K/V
/// are stored. Two servers share tier entries exactly when their namespaces are equal.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TierNamespace(pub [u8; 32]);

impl TierNamespace {
    /// The namespace of a model file's fingerprint (e.g. SHA-256 of the file) and a KV layout.
    pub fn new(model_fingerprint: &[u8; 32], layout: &model::KvLayout) -> TierNamespace {
        use sha2::{Digest, Sha256};
        let mut h = Sha256::new();
        h.update(b"tessera-kv-tier-v1");
        h.update(model_fingerprint);
        h.update(format!("{:?}", layout.dtype).as_bytes());
        for v in [
            layout.tile_size,
            layout.kv_dim,
            layout.layers_per_group(),
            layout.groups.len(),
        ] {
            h.update((v as u64).to_le_bytes());
        }
        TierNamespace(h.finalize().into())
    }

    /// The key of the tile of KV group `group` whose prefix has chain key `chain`.
    pub fn key(&self, group: usize, chain: u128) -> TierKey {
        use sha2::{Digest, Sha256};
        let mut h = Sha256::new();
        h.update(self.0);
        h.update((group as u64).to_le_bytes());
        h.update(chain.to_le_bytes());
        TierKey(h.finalize().into())
    }
}

/// Why a tier could not do what it was asked; the engine counts it, logs it once and
/// recomputes (a tier is never needed for a correct answer).
#[derive(Debug, thiserror::Error)]
pub enum TierError {
    #[error("{tier}: {what}: {source}")]
    Io {
        tier: &'static str,
        what: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{0}: {1}")]
    Other(&'static str, String),
}

/// A store of tile values under keys. Implementations are called from the tier I/O thread
/// only; they may block.
pub trait KvTier: Send {
    /// Short name for metrics and logs (`disk`, `redis`).
    fn name(&self) -> &'static str;

    /// The values stored under `keys` (`None` where absent), in order; one round trip where the
    /// store allows (a prefix's tiles are asked for together).
    fn get(&mut self, keys: &[TierKey]) -> Result<Vec<Option<Vec<u8>>>, TierError>;

    /// Stores `value` under `key` (replacing any).
    fn put(&mut self, key: &TierKey, value: &[u8]) -> Result<(), TierError>;
}
