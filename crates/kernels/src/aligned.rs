//! A growable buffer of `u16` values whose start is 64-byte aligned.
//!
//! AMX loads a tile as sixteen 64-byte rows; a row that starts off a cache line touches two lines,
//! and on the Xeon we measured such loads ran about six times slower than aligned ones (a plain
//! `Vec<u16>` of this size starts 16 bytes past a page). BF16 weights rounded at load and the
//! packed activation tiles live in this buffer so every tile row is one cache line.

use std::ops::{Deref, DerefMut};

/// Values per 64-byte line.
const LINE: usize = 32;

#[repr(C, align(64))]
#[derive(Clone, Copy, Debug)]
struct Line([u16; LINE]);

/// `len` values in 64-byte aligned storage (see the module docs).
#[derive(Clone, Debug, Default)]
pub struct AlignedU16 {
    lines: Vec<Line>,
    len: usize,
}

impl AlignedU16 {
    /// `len` zeros.
    pub fn zeroed(len: usize) -> AlignedU16 {
        AlignedU16 {
            lines: vec![Line([0; LINE]); len.div_ceil(LINE)],
            len,
        }
    }

    /// Sets the length to `len`; values past the old length are zero.
    pub fn resize(&mut self, len: usize) {
        if len > self.len {
            let keep = self.len;
            self.lines.resize(len.div_ceil(LINE), Line([0; LINE]));
            self.len = len;
            self[keep..].fill(0);
        } else {
            self.len = len;
        }
    }
}

impl Deref for AlignedU16 {
    type Target = [u16];

    fn deref(&self) -> &[u16] {
        // SAFETY: `lines` holds at least `len` initialised u16 values contiguously (a `Line` is
        // exactly 32 of them, no padding), and the slice borrows `self`.
        unsafe { std::slice::from_raw_parts(self.lines.as_ptr().cast(), self.len) }
    }
}

impl DerefMut for AlignedU16 {
    fn deref_mut(&mut self) -> &mut [u16] {
        // SAFETY: as in `deref`, with the unique borrow of `self`.
        unsafe { std::slice::from_raw_parts_mut(self.lines.as_mut_ptr().cast(), self.len) }
    }
}

#[cfg(test)]
mod tests {
    use super::AlignedU16;

    #[test]
    fn starts_on_a_cache_line_and_grows_with_zeros() {
        let mut v = AlignedU16::zeroed(40);
        assert_eq!(v.len(), 40);
        assert_eq!(v.as_ptr() as usize % 64, 0);
        v.fill(7);
        v.resize(10);
        assert_eq!(&v[..], &[7; 10]);
        v.resize(1000);
        assert_eq!(v.as_ptr() as usize % 64, 0);
        assert_eq!(&v[..10], &[7; 10]);
        assert!(
            v[10..].iter().all(|&x| x == 0),
            "values past the old length are zero"
        );
        assert!(AlignedU16::default().is_empty());
    }
}
