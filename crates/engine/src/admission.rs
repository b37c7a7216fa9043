//! Admission control: how many submitted requests wait for their first step.
//!
//! The handle counts a request in when it accepts it (`Admission::reserve`) and hands it a
//! `WaitSlot`; the slot travels with the request to the engine, which drops it when the request
//! is first scheduled (or forks), ends, or is refused. Dropping the slot counts the request
//! out, so no path can forget to: a request lost anywhere still gives its place back. (The
//! metrics gauge of waiting requests is separate: it is the scheduler's view, published each
//! step.)

use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::sync::Arc;

/// The count of admitted requests not yet scheduled, with its limit.
#[derive(Clone, Debug)]
pub struct Admission {
    waiting: Arc<AtomicUsize>,
    limit: usize,
}

/// One request's place in the count; given back on drop.
#[derive(Debug)]
pub struct WaitSlot(Arc<AtomicUsize>);

impl Drop for WaitSlot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Relaxed);
    }
}

impl Admission {
    pub fn new(limit: usize) -> Admission {
        Admission {
            waiting: Arc::new(AtomicUsize::new(0)),
            limit,
        }
    }

    /// Places for `n` more requests, all or none: `Err(waiting)` when they would pass the limit.
    pub fn reserve(&self, n: usize) -> Result<Vec<WaitSlot>, usize> {
        let limit = self.limit;
        self.waiting
            .fetch_update(Relaxed, Relaxed, |w| (w + n <= limit).then_some(w + n))
            .map(|_| (0..n).map(|_| WaitSlot(self.waiting.clone())).collect())
    }

    /// Requests admitted and not yet scheduled.
    pub fn waiting(&self) -> usize {
        self.waiting.load(Relaxed)
    }

    pub fn limit(&self) -> usize {
        self.limit
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn places_are_given_back_when_their_slots_drop_and_the_limit_holds() {
        let a = Admission::new(3);
        let two = a.reserve(2).expect("room for two");
        assert_eq!(a.waiting(), 2);
        assert_eq!(a.reserve(2).err(), Some(2), "all or none");
        let one = a.reserve(1).expect("room for one");
        assert_eq!(a.waiting(), 3);
        drop(two);
        assert_eq!(a.waiting(), 1);
        drop(one);
        assert_eq!(a.waiting(), 0);
        assert_eq!(a.reserve(4).err(), Some(0));
    }
}
