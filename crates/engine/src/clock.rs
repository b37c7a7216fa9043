//! Where the engine reads the time: the system's clock, or a clock a simulation moves by hand.
//!
//! Everything the engine plans with time — step costs, a stream's pace against its TPOT
//! target, first-token deadlines, request timings — reads `Engine`'s `Clock`. A runner that
//! models its step times instead of computing (`ManualClock::advance` by each batch's modelled
//! cost) then lets a test play a whole open-loop workload in a moment, with results that do
//! not depend on how loaded the machine is.

use std::fmt::Debug;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::{Duration, Instant};

/// A source of `Instant`s.
pub trait Clock: Send + Sync + Debug {
    fn now(&self) -> Instant;
}

/// The system's monotonic clock.
#[derive(Clone, Copy, Debug, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Instant {
        Instant::now()
    }
}

/// A clock that stands still until advanced.
#[derive(Debug)]
pub struct ManualClock {
    base: Instant,
    nanos: AtomicU64,
}

impl Default for ManualClock {
    fn default() -> Self {
        ManualClock {
            base: Instant::now(),
            nanos: AtomicU64::new(0),
        }
    }
}

impl ManualClock {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn advance(&self, d: Duration) {
        let n = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        self.nanos.fetch_add(n, Relaxed);
    }

    /// Time since the clock was made.
    pub fn elapsed(&self) -> Duration {
        Duration::from_nanos(self.nanos.load(Relaxed))
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Instant {
        self.base + self.elapsed()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_manual_clock_moves_only_when_advanced() {
        let c = ManualClock::new();
        let t0 = c.now();
        assert_eq!(c.now(), t0);
        c.advance(Duration::from_millis(250));
        assert_eq!(c.now() - t0, Duration::from_millis(250));
        assert_eq!(c.elapsed(), Duration::from_millis(250));
    }
}
