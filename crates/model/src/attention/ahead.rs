//! `Ahead`: the cache lines of the next K or V tile, asked for a share at a time while the
//! current tile is computed.
//!
//! Design: a decode reads each K/V row once, from memory. The kernel makes an `Ahead` for the
//! tile after the one it is on (after the last K tile, the first V tile) and tells it how far
//! through the current tile its loops are (`upto(num, den)`, also through
//! [`kernels::attn::Progress`] from inside the V sums); `Ahead` then asks for that fraction of
//! the next tile's lines into L2. Prefetches are hints: they never fault and never change a
//! result, only when the data arrives.
//!
//! Invariant: each line is asked for at most once (`next` only moves forward), and once the
//! caller reaches `num == den` every line of the rows has been asked for, the last partly filled
//! one included.

use std::cell::Cell;

/// The cache lines of the next tile's f16 rows, asked for into L2 a share at a time as the
/// loops over the current tile progress (`upto`). A decode reads its K/V from memory, and the
/// hardware prefetchers alone left it streaming at ~5 GB/s per thread; a whole tile's
/// prefetches issued at once stall the loads behind them. Criterion attention (cold K/V):
/// `decode_16x512_18_layers` 11.2-11.6 ms with the whole next tile asked for at the start of
/// each tile, 5.8-6.4 ms spread; `decode_16x128_18_layers` 2.4-2.8 -> 1.6-1.9 ms. Into L1
/// gained less, and asking for every tile of the task up front was worse (12.2-12.6 ms).
pub(super) struct Ahead {
    /// First line's address and the end of the rows (0, 0 when there is nothing to fetch).
    start: usize,
    end: usize,
    /// The next line not yet asked for.
    next: Cell<usize>,
}

impl Ahead {
    /// Nothing to ask for.
    pub(super) fn none() -> Ahead {
        Ahead {
            start: 0,
            end: 0,
            next: Cell::new(0),
        }
    }

    pub(super) fn of(rows: Option<&[u16]>) -> Ahead {
        let Some(r) = rows else {
            return Ahead::none();
        };
        let start = r.as_ptr() as usize & !63;
        Ahead {
            start,
            end: r.as_ptr_range().end as usize,
            next: Cell::new(start),
        }
    }

    /// Asks for the lines of the first `num / den` of the rows not yet asked for (the last,
    /// partly filled line included when `num == den`).
    #[inline(always)]
    pub(super) fn upto(&self, num: usize, den: usize) {
        let target = self.start + (self.end - self.start) * num / den.max(1);
        let mut line = self.next.get();
        #[cfg(target_arch = "x86_64")]
        while line < target {
            use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T1};
            // SAFETY: a prefetch is a hint and never faults, whatever the address.
            unsafe { _mm_prefetch::<_MM_HINT_T1>(line as *const i8) };
            line += 64;
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            line = line.max(target);
        }
        self.next.set(line);
    }
}

impl kernels::attn::Progress for Ahead {
    #[inline(always)]
    fn upto(&self, num: usize, den: usize) {
        Ahead::upto(self, num, den);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ahead_asks_for_each_line_once_and_the_last_partial_one() {
        // 200 f16 values from 6 bytes into a line: 400 bytes over 7 lines.
        let buf = vec![0u16; 300];
        let at = (64 - (buf.as_ptr() as usize % 64)) % 64 / 2 + 3;
        let rows = &buf[at..at + 200];
        let a = Ahead::of(Some(rows));
        let first = rows.as_ptr() as usize & !63;
        assert_eq!(a.next.get(), first);
        a.upto(1, 2);
        let half = a.next.get();
        assert!(half > first && half < rows.as_ptr_range().end as usize);
        a.upto(1, 4);
        assert_eq!(a.next.get(), half, "a smaller share asks for nothing more");
        a.upto(1, 1);
        assert_eq!((a.next.get() - first) / 64, 7);
        let none = Ahead::none();
        none.upto(1, 1);
        assert_eq!(none.next.get(), 0);
    }
}
