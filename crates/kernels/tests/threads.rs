//! The worker pool: every index runs once per job, jobs can borrow the caller's stack, panics
//! propagate, and the pool survives many jobs.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use kernels::Threads;

#[test]
fn run_calls_every_worker_index_exactly_once() {
    for n in 1..=4 {
        let pool = Threads::new(n);
        assert_eq!(pool.n(), n);
        let seen = Mutex::new(vec![0u32; n]);
        pool.run(&|i| seen.lock().expect("not poisoned")[i] += 1);
        assert_eq!(*seen.lock().expect("not poisoned"), vec![1; n]);
    }
}

#[test]
fn pool_of_zero_behaves_as_one() {
    assert_eq!(Threads::new(0).n(), 1);
}

#[test]
fn many_back_to_back_jobs_all_complete() {
    let pool = Threads::new(3);
    let total = AtomicUsize::new(0);
    for _ in 0..2000 {
        pool.run(&|i| {
            total.fetch_add(i + 1, Ordering::Relaxed);
        });
    }
    assert_eq!(total.load(Ordering::Relaxed), 2000 * 6);
}

#[test]
fn a_panicking_worker_is_reported_and_the_pool_still_works() {
    let pool = Threads::new(2);
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        pool.run(&|i| {
            if i == 1 {
                panic!("boom");
            }
        })
    }));
    assert!(r.is_err());
    let hits = AtomicUsize::new(0);
    pool.run(&|_| {
        hits.fetch_add(1, Ordering::Relaxed);
    });
    assert_eq!(hits.load(Ordering::Relaxed), 2);
}

#[test]
fn a_panic_on_the_calling_thread_waits_for_started_calls_first() {
    let pool = Threads::new(3);
    let started = AtomicUsize::new(0);
    let finished = AtomicUsize::new(0);
    for _ in 0..20 {
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            pool.run(&|i| {
                if i == 0 {
                    std::thread::sleep(std::time::Duration::from_millis(1));
                    panic!("caller fails");
                }
                started.fetch_add(1, Ordering::SeqCst);
                std::thread::sleep(std::time::Duration::from_millis(5));
                finished.fetch_add(1, Ordering::SeqCst);
            })
        }));
        assert!(r.is_err());
        // Every call that began had finished before run() unwound, so the borrows of the
        // counters were never dangling.
        assert_eq!(
            started.load(Ordering::SeqCst),
            finished.load(Ordering::SeqCst)
        );
    }
}

#[test]
fn every_index_runs_even_when_workers_are_slow_to_start() {
    // Indices a worker has not claimed by the time the caller is done run on the caller.
    let pool = Threads::new(4);
    for _ in 0..200 {
        let seen = Mutex::new(vec![0u32; 4]);
        pool.run(&|i| seen.lock().expect("not poisoned")[i] += 1);
        assert_eq!(*seen.lock().expect("not poisoned"), vec![1; 4]);
    }
}

#[test]
fn a_nested_run_from_inside_a_job_completes_on_the_calling_thread() {
    let pool = Threads::new(2);
    let inner_calls = AtomicUsize::new(0);
    pool.run(&|_| {
        pool.run(&|_| {
            inner_calls.fetch_add(1, Ordering::Relaxed);
        });
    });
    // Two outer indices, each running both inner indices.
    assert_eq!(inner_calls.load(Ordering::Relaxed), 4);
}

#[test]
fn for_each_range_covers_every_index_once_in_chunk_sized_ranges() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    for n in [1usize, 2, 3, 17] {
        let pool = Threads::new(n);
        for (len, chunk) in [
            (0usize, 4usize),
            (1, 4),
            (2, 1),
            (10, 3),
            (64, 16),
            (100, 7),
            (1000, 1),
            (5, 0),
        ] {
            let hits: Vec<AtomicUsize> = (0..len).map(|_| AtomicUsize::new(0)).collect();
            let calls = AtomicUsize::new(0);
            let f = |_t: usize, r: std::ops::Range<usize>| {
                assert!(r.len() <= chunk.max(1) || len <= chunk.max(1), "{r:?}");
                assert_eq!(r.start % chunk.max(1), 0, "{r:?}");
                calls.fetch_add(1, Ordering::Relaxed);
                for i in r {
                    hits[i].fetch_add(1, Ordering::Relaxed);
                }
            };
            pool.for_each_range(len, chunk, &f);
            assert!(
                hits.iter().all(|h| h.load(Ordering::Relaxed) == 1),
                "n {n} len {len} chunk {chunk}"
            );
            assert_eq!(calls.load(Ordering::Relaxed), len.div_ceil(chunk.max(1)));
        }
    }
}

#[test]
fn each_thread_starts_at_its_home_share() {
    // Index t begins at the start of share t, whichever thread runs it (the caller takes an
    // index a worker has not begun), so every thread's first range starts a share: 0 or 32.
    // (With one shared counter the second thread would begin wherever the first had got to.)
    use std::collections::HashMap;
    use std::sync::Mutex;
    let pool = Threads::new(2);
    for _ in 0..50 {
        let firsts: Mutex<HashMap<std::thread::ThreadId, usize>> = Mutex::new(HashMap::new());
        pool.for_each_range(64, 4, &|_, r| {
            std::thread::sleep(std::time::Duration::from_micros(50));
            let mut m = firsts.lock().expect("not poisoned");
            m.entry(std::thread::current().id()).or_insert(r.start);
        });
        let m = firsts.into_inner().expect("not poisoned");
        assert!(m.values().all(|&s| s == 0 || s == 32), "{m:?}");
    }
}
