//! `Shares`: the parts it lends are the ranges asked for, each lent once, also across the pool.

use std::sync::atomic::{AtomicUsize, Ordering};

use kernels::{Shares, Threads};

#[test]
fn rows_lend_each_range_of_for_each_range_to_its_call() {
    for threads in [1usize, 2, 3, 5] {
        let pool = Threads::new(threads);
        for n in [0usize, 1, 4, 7, 33] {
            let width = 3;
            let chunk = n.div_ceil(threads).max(1);
            let mut buf = vec![0usize; n * width];
            let calls = AtomicUsize::new(0);
            {
                let shares = Shares::rows(&mut buf, width, chunk);
                pool.for_each_range(n, chunk, &|_, r| {
                    let rows = shares.take_rows(&r);
                    assert_eq!(rows.len(), r.len() * width);
                    for (i, v) in rows.iter_mut().enumerate() {
                        *v += r.start * width + i + 1;
                    }
                    calls.fetch_add(1, Ordering::Relaxed);
                });
            }
            assert_eq!(calls.load(Ordering::Relaxed), n.div_ceil(chunk));
            let want: Vec<usize> = (1..=n * width).collect();
            assert_eq!(buf, want, "threads {threads}, rows {n}");
        }
    }
}

#[test]
fn new_lends_the_ranges_asked_for_in_any_order() {
    let mut buf: Vec<u32> = (0..20).collect();
    let ranges = [12..15, 0..3, 7..7, 3..7, 16..20];
    let shares = Shares::new(&mut buf, &ranges);
    for (i, r) in ranges.iter().enumerate() {
        let part = shares.take(i);
        let want: Vec<u32> = (r.start as u32..r.end as u32).collect();
        assert_eq!(part, &want[..], "part {i}");
        part.iter_mut().for_each(|v| *v += 100);
    }
    drop(shares);
    let lent = |i: usize| ranges.iter().any(|r| r.contains(&i));
    for (i, v) in buf.iter().enumerate() {
        let want = i as u32 + if lent(i) { 100 } else { 0 };
        assert_eq!(*v, want, "element {i}");
    }
}

#[test]
#[should_panic(expected = "overlap")]
fn overlapping_parts_are_refused() {
    let mut buf = [0u8; 10];
    let _ = Shares::new(&mut buf, &[0..4, 3..6]);
}

#[test]
#[should_panic(expected = "out of bounds")]
fn a_part_past_the_buffer_is_refused() {
    let mut buf = [0u8; 10];
    let _ = Shares::new(&mut buf, &[0..2, 8..11]);
}

#[test]
#[should_panic(expected = "taken twice")]
fn a_part_is_lent_once() {
    let mut buf = [0u8; 10];
    let shares = Shares::rows(&mut buf, 2, 2);
    let _ = shares.take_rows(&(2..4));
    let _ = shares.take_rows(&(2..4));
}

#[test]
#[should_panic(expected = "not a part's range")]
fn rows_that_are_not_a_part_are_refused() {
    let mut buf = [0u8; 10];
    let shares = Shares::rows(&mut buf, 2, 2);
    let _ = shares.take_rows(&(2..3));
}
