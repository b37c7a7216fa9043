//! A mutable buffer cut into disjoint parts, each lent once to whichever of the pool's calls
//! runs the work it belongs to.
//!
//! [`Threads::for_each_range`](crate::Threads::for_each_range) gives each range of work to
//! exactly one call, but which thread makes that call only shows at run time (a thread done with
//! its home share helps with the others'). [`Shares`] lets that call take its range's part of an
//! output as a plain `&mut [T]`, whatever thread it runs on, so the home-share assignment stays
//! the pool's alone.
//!
//! Design: the buffer is cut up front with `split_at_mut` / `chunks_mut`, so the parts are
//! disjoint by construction, and each part waits in its own `Mutex<Option<&mut [T]>>` until
//! [`Shares::take`] moves it out. No unsafe code: overlapping parts cannot be built (the
//! constructor panics), and a part taken twice panics instead of aliasing. The cost is one
//! allocation per `Shares` and one uncontended lock per part taken.

use std::ops::Range;
use std::sync::{Mutex, MutexGuard};

/// Disjoint parts of one `&mut [T]`, each taken at most once, from any thread.
pub struct Shares<'a, T> {
    parts: Vec<Mutex<Option<&'a mut [T]>>>,
    /// For [`Shares::rows`]: rows per part and elements per row (1 and 1 for [`Shares::new`]).
    chunk: usize,
    width: usize,
}

impl<'a, T: Send> Shares<'a, T> {
    /// Part `i` is `buf[ranges[i].clone()]`. The ranges may come in any order and leave gaps.
    ///
    /// Panics if two ranges overlap or one reaches past the buffer.
    pub fn new(buf: &'a mut [T], ranges: &[Range<usize>]) -> Self {
        let mut order: Vec<usize> = (0..ranges.len()).collect();
        order.sort_unstable_by_key(|&i| ranges[i].start);
        let mut parts: Vec<Mutex<Option<&'a mut [T]>>> =
            ranges.iter().map(|_| Mutex::new(None)).collect();
        let (mut rest, mut at) = (buf, 0);
        for i in order {
            let r = &ranges[i];
            assert!(
                at <= r.start && r.start <= r.end,
                "Shares::new: parts overlap or are reversed"
            );
            let tail = std::mem::take(&mut rest).split_at_mut(r.start - at).1;
            assert!(
                r.len() <= tail.len(),
                "Shares::new: a part is out of bounds"
            );
            let (part, tail) = tail.split_at_mut(r.len());
            parts[i] = Mutex::new(Some(part));
            (rest, at) = (tail, r.end);
        }
        Shares {
            parts,
            chunk: 1,
            width: 1,
        }
    }

    /// `buf` as rows of `width` elements, part `c` holding rows `c * chunk..(c + 1) * chunk`
    /// (the last part shorter): the ranges `Threads::for_each_range(rows, chunk, ..)` hands
    /// out, each of which [`Shares::take_rows`] then lends.
    ///
    /// Panics unless `width > 0`, `chunk > 0` and `buf` holds whole rows.
    pub fn rows(buf: &'a mut [T], width: usize, chunk: usize) -> Self {
        assert!(
            width > 0 && chunk > 0 && buf.len().is_multiple_of(width),
            "Shares::rows: shapes"
        );
        Shares {
            parts: buf
                .chunks_mut(chunk * width)
                .map(|p| Mutex::new(Some(p)))
                .collect(),
            chunk,
            width,
        }
    }

    /// Part `i`. Panics if it was taken already (or does not exist).
    pub fn take(&self, i: usize) -> &'a mut [T] {
        lock(&self.parts[i])
            .take()
            .expect("Shares::take: a part was taken twice; this is a bug")
    }

    /// The rows `r` of a [`Shares::rows`] buffer, which must be one of its parts' ranges.
    pub fn take_rows(&self, r: &Range<usize>) -> &'a mut [T] {
        assert!(
            r.start.is_multiple_of(self.chunk),
            "Shares::take_rows: not a part's range"
        );
        let part = self.take(r.start / self.chunk);
        assert_eq!(
            part.len(),
            r.len() * self.width,
            "Shares::take_rows: not a part's range"
        );
        part
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A part is only moved out whole, so a holder that panicked left nothing half done.
    m.lock().unwrap_or_else(|e| e.into_inner())
}
