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
fn each_index_runs_its_home_share_first_and_then_the_next_shares_in_turn() {
    // Index t owns share t (chunks n_chunks*t/n .. n_chunks*(t+1)/n) and only then helps with
    // shares t+1, t+2, ... (cyclically), each in increasing order. Which index gets how many
    // chunks depends on scheduling; this order does not, under any schedule: so an index's
    // first chunk lies in its own share unless others finished that share before it began.
    // (With one shared counter an index would begin wherever the others had got to.)
    use std::sync::Mutex;
    for n in [2usize, 3] {
        let pool = Threads::new(n);
        let (len, chunk) = (64usize, 4usize);
        let n_chunks = len / chunk;
        let home = |c: usize| {
            (0..n)
                .find(|&t| c < n_chunks * (t + 1) / n)
                .expect("in a share")
        };
        for _ in 0..50 {
            let runs: Mutex<Vec<Vec<usize>>> = Mutex::new(vec![Vec::new(); n]);
            pool.for_each_range(len, chunk, &|t, r| {
                // A pause makes the indices overlap more often; no assertion depends on it.
                std::thread::sleep(std::time::Duration::from_micros(20));
                runs.lock().expect("not poisoned")[t].push(r.start / chunk);
            });
            let runs = runs.into_inner().expect("not poisoned");
            let mut all: Vec<usize> = runs.iter().flatten().copied().collect();
            all.sort_unstable();
            assert_eq!(all, (0..n_chunks).collect::<Vec<_>>(), "n {n}: {runs:?}");
            for (t, chunks) in runs.iter().enumerate() {
                // (share's distance from t in the visiting order, chunk): strictly increasing.
                let order: Vec<(usize, usize)> =
                    chunks.iter().map(|&c| ((home(c) + n - t) % n, c)).collect();
                assert!(
                    order.windows(2).all(|w| w[0] < w[1]),
                    "n {n}: index {t} ran {chunks:?} (all: {runs:?})"
                );
            }
        }
    }
}
