//! Large zeroed buffers in anonymous mappings advised for transparent huge pages.
//!
//! The forward pass streams the repacked weights once per step and reads K/V tiles scattered over
//! a pool of hundreds of MiB. With 4 KiB pages every page is a TLB entry and the hardware
//! prefetchers stop at each page boundary; 2 MiB pages remove both costs. On Linux with THP in
//! `madvise` mode (a common default) only memory that asks gets them, and it must ask before the
//! pages are first touched — so the buffer is mapped zeroed (untouched) and advised at once,
//! which a `Vec` (written on allocation) cannot do. Without a mapping (it failed, or another OS)
//! the buffer is a plain `Vec`.

use std::marker::PhantomData;
use std::ops::{Deref, DerefMut};

/// Types for which all-zero bytes are a valid value and which have no padding or pointers.
///
/// # Safety
/// Implementors must be `repr(C)` or primitive, of plain data, valid for every bit pattern.
pub unsafe trait Plain: Copy + 'static {}

// SAFETY: primitives and f16 are valid for every bit pattern and have no padding.
unsafe impl Plain for u8 {}
// SAFETY: as above.
unsafe impl Plain for u16 {}
// SAFETY: as above.
unsafe impl Plain for f32 {}
// SAFETY: as above.
unsafe impl Plain for half::f16 {}
// SAFETY: `BlockQ8_0` is repr(C) of a [u8; 2] scale and [i8; 32] quants: no padding, any bits.
unsafe impl Plain for crate::quant::BlockQ8_0 {}

/// The bytes of a slice of plain values (native byte order).
pub fn plain_bytes<T: Plain>(s: &[T]) -> &[u8] {
    // SAFETY: `Plain` values have no padding, so every byte of the slice is initialised; a
    // `u8` slice needs no alignment and covers exactly the slice's memory.
    unsafe { std::slice::from_raw_parts(s.as_ptr().cast(), std::mem::size_of_val(s)) }
}

/// The bytes of a slice of plain values, writable: any bytes written make valid values.
pub fn plain_bytes_mut<T: Plain>(s: &mut [T]) -> &mut [u8] {
    // SAFETY: as in `plain_bytes`, and every bit pattern is a valid `T` (`Plain`), so writes
    // through the byte view cannot make an invalid value; `&mut` makes it the only view.
    unsafe { std::slice::from_raw_parts_mut(s.as_mut_ptr().cast(), std::mem::size_of_val(s)) }
}

enum Storage<T> {
    Map(memmap2::MmapMut),
    Heap(Vec<T>),
}

/// A fixed-length zeroed buffer of `T` (see the module docs).
pub struct HugeBuf<T: Plain> {
    storage: Storage<T>,
    len: usize,
    _t: PhantomData<T>,
}

impl<T: Plain> HugeBuf<T> {
    /// `len` zeroed values.
    pub fn zeroed(len: usize) -> HugeBuf<T> {
        let bytes = len
            .checked_mul(std::mem::size_of::<T>())
            .expect("HugeBuf larger than the address space: this is a bug");
        let storage = match memmap2::MmapMut::map_anon(bytes.max(1)) {
            Ok(map) => {
                #[cfg(target_os = "linux")]
                {
                    // Advice only: without THP the mapping keeps small pages.
                    let _ = map.advise(memmap2::Advice::HugePage);
                }
                Storage::Map(map)
            }
            // SAFETY: all-zero bytes are a valid `T` (`Plain`).
            Err(_) => Storage::Heap(vec![unsafe { std::mem::zeroed() }; len]),
        };
        HugeBuf {
            storage,
            len,
            _t: PhantomData,
        }
    }

    /// Faults the pages of bytes `start..start + len` (clamped to the buffer) in, writable,
    /// without changing their contents (`MADV_POPULATE_WRITE`, Linux 5.14+). False when the
    /// buffer cannot be populated this way (no mapping, another OS, an older kernel), so a caller
    /// stops asking; the pages are then faulted in by their first write as before.
    pub fn populate(&self, start: usize, len: usize) -> bool {
        #[cfg(target_os = "linux")]
        if let Storage::Map(m) = &self.storage {
            let start = start.min(m.len());
            let len = len.min(m.len() - start);
            return len == 0
                || m.advise_range(memmap2::Advice::PopulateWrite, start, len)
                    .is_ok();
        }
        let _ = (start, len);
        false
    }

    /// Size in bytes.
    pub fn bytes(&self) -> usize {
        self.len * std::mem::size_of::<T>()
    }

    /// Leaks the buffer, for data that lives as long as the process.
    pub fn leak(self) -> &'static [T] {
        let b: &'static HugeBuf<T> = Box::leak(Box::new(self));
        b
    }
}

impl<T: Plain> Deref for HugeBuf<T> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        match &self.storage {
            // SAFETY: the mapping is page-aligned (enough for any `T`), holds `len` values'
            // bytes, all valid `T`s (`Plain`), and lives as long as `self`.
            Storage::Map(m) => unsafe { std::slice::from_raw_parts(m.as_ptr().cast(), self.len) },
            Storage::Heap(v) => v,
        }
    }
}

impl<T: Plain> DerefMut for HugeBuf<T> {
    fn deref_mut(&mut self) -> &mut [T] {
        match &mut self.storage {
            // SAFETY: as in `deref`, and `&mut self` makes this the only view.
            Storage::Map(m) => unsafe {
                std::slice::from_raw_parts_mut(m.as_mut_ptr().cast(), self.len)
            },
            Storage::Heap(v) => v,
        }
    }
}

/// A growable buffer of plain values in huge-page advised memory (see the module docs), for
/// the forward pass's activations: its matmuls store 16 x 16 sum tiles whose rows lie one
/// output row (often several KiB) apart, so with 4 KiB pages each tile store touches sixteen
/// pages (on an AMX Xeon, `throughput --prompt 1024` on a BF16 model prefilled 1081-1195 tok/s
/// with these buffers against 928-995 with `Vec`s; docs/GOODPUT.md).
///
/// It reads as its first `len()` values; [`HugeVec::sized`] grows it, keeping the values it had.
pub struct HugeVec<T: Plain> {
    buf: Option<HugeBuf<T>>,
    len: usize,
}

impl<T: Plain> Default for HugeVec<T> {
    fn default() -> Self {
        HugeVec { buf: None, len: 0 }
    }
}

impl<T: Plain> HugeVec<T> {
    /// The first `n` values, the buffer grown (new values zero, old ones kept) if it is shorter.
    pub fn sized(&mut self, n: usize) -> &mut [T] {
        if self.len < n {
            let cap = self.buf.as_ref().map_or(0, |b| b.len());
            if cap < n {
                let mut grown = HugeBuf::zeroed(n.max(cap.saturating_mul(2)));
                if let Some(old) = &self.buf {
                    grown[..self.len].copy_from_slice(&old[..self.len]);
                }
                self.buf = Some(grown);
            }
            self.len = n;
        }
        &mut self[..n]
    }
}

impl<T: Plain> Deref for HugeVec<T> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        self.buf.as_ref().map_or(&[], |b| &b[..self.len])
    }
}

impl<T: Plain> DerefMut for HugeVec<T> {
    fn deref_mut(&mut self) -> &mut [T] {
        let len = self.len;
        match &mut self.buf {
            Some(b) => &mut b[..len],
            None => &mut [],
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffers_are_zeroed_writable_and_sized() {
        for len in [0, 1, 1000, (4 << 20) + 3] {
            let mut b = HugeBuf::<f32>::zeroed(len);
            assert_eq!(b.len(), len);
            assert!(b.iter().all(|&x| x == 0.0));
            if len > 0 {
                b[len - 1] = 2.5;
                assert_eq!(b[len - 1], 2.5);
            }
        }
        let s = HugeBuf::<u8>::zeroed(10).leak();
        assert_eq!(s, &[0u8; 10]);
    }

    #[test]
    fn populating_keeps_contents() {
        let mut b = HugeBuf::<u16>::zeroed(3 << 20);
        b[5] = 7;
        b[(2 << 20) + 1] = 9;
        let whole = b.bytes();
        assert_eq!(whole, 6 << 20);
        // Where the OS cannot populate (no mapping, not Linux, an old kernel) it says so.
        let ok = b.populate(0, 4 << 20) && b.populate(4 << 20, whole) && b.populate(whole, 10);
        if cfg!(target_os = "linux") && !ok {
            eprintln!("MADV_POPULATE_WRITE refused here; contents still checked");
        }
        assert_eq!(b[5], 7);
        assert_eq!(b[(2 << 20) + 1], 9);
        assert_eq!(b.iter().map(|&v| u64::from(v)).sum::<u64>(), 16);
        let s = HugeBuf::<u8>::zeroed(10).leak();
        assert_eq!(s, &[0u8; 10]);
    }

    #[test]
    fn growing_keeps_values_and_zeroes_the_new_ones() {
        let mut v = HugeVec::<f32>::default();
        assert!(v.is_empty());
        v.sized(3).copy_from_slice(&[1.0, 2.0, 3.0]);
        assert_eq!(v.sized(2), &[1.0, 2.0]);
        assert_eq!(v.len(), 3, "asking for fewer values keeps the length");
        let grown = v.sized(5000);
        assert_eq!(&grown[..4], &[1.0, 2.0, 3.0, 0.0]);
        assert!(grown[3..].iter().all(|&x| x == 0.0));
        grown[4999] = 7.0;
        v.sized(20000)[10] = 1.0;
        assert_eq!((v.len(), v[4999], v[10], v[0]), (20000, 7.0, 1.0, 1.0));
    }
}
