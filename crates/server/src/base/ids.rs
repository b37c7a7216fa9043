//! Object ids and wall-clock time as responses report them.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::{SystemTime, UNIX_EPOCH};

/// An object id: the prefix, the time and a process-wide counter (unique per process).
pub fn new_id(prefix: &str) -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    format!(
        "{prefix}{nanos:x}{:04x}",
        NEXT.fetch_add(1, Relaxed) & 0xffff
    )
}

/// Seconds since the Unix epoch (`created` fields).
pub fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}
