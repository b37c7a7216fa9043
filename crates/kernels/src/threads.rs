//! A fixed pool of worker threads for data-parallel kernels.
//!
//! Design: `Threads::new(n)` spawns `n - 1` workers once; the calling thread is worker 0, so a pool
//! of one runs everything inline. [`Threads::run`] hands the same closure to every worker with its
//! index and returns when all have finished, so the closure may borrow from the caller's stack.
//!
//! Invariants:
//! - At most one job is in flight: `run` holds `dispatch` for its whole duration.
//! - The job pointer published to workers is only dereferenced between the epoch bump that
//!   announces it and the `pending` decrement that retires it; `run` does not return (nor unwind)
//!   before `pending` reaches zero, which is what makes erasing the closure's lifetime sound.
//! - Workers spin briefly on the epoch before sleeping on a condvar, because decode issues jobs
//!   back to back and a futex wake-up costs more than the work of a small matmul.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How long an idle worker (or a waiting caller) spins before blocking.
const SPIN: Duration = Duration::from_micros(100);

type Job = dyn Fn(usize) + Sync;

/// A type-erased pointer to the current job; see the module invariants for why it stays valid.
#[derive(Clone, Copy)]
struct JobPtr(*const Job);
// SAFETY: the pointee is `Sync` and outlives every use (module invariants).
unsafe impl Send for JobPtr {}

struct Shared {
    epoch: AtomicU64,
    pending: AtomicUsize,
    panicked: AtomicBool,
    shutdown: AtomicBool,
    job: Mutex<Option<JobPtr>>,
    /// Guards sleeping on `wake` / `done`; holds no data.
    lock: Mutex<()>,
    wake: Condvar,
    done: Condvar,
}

fn lock(m: &Mutex<()>) -> MutexGuard<'_, ()> {
    // The mutex protects no data, so a poisoned lock is still usable.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// A fixed pool of `n` threads (the caller counts as one).
pub struct Threads {
    n: usize,
    shared: Arc<Shared>,
    workers: Vec<JoinHandle<()>>,
    dispatch: Mutex<()>,
}

impl Threads {
    /// Creates a pool of `n` threads (`n == 0` is treated as 1). Spawns `n - 1` OS threads.
    pub fn new(n: usize) -> Self {
        let n = n.max(1);
        let shared = Arc::new(Shared {
            epoch: AtomicU64::new(0),
            pending: AtomicUsize::new(0),
            panicked: AtomicBool::new(false),
            shutdown: AtomicBool::new(false),
            job: Mutex::new(None),
            lock: Mutex::new(()),
            wake: Condvar::new(),
            done: Condvar::new(),
        });
        let workers = (1..n)
            .map(|idx| {
                let shared = Arc::clone(&shared);
                std::thread::Builder::new()
                    .name(format!("tessera-worker-{idx}"))
                    .spawn(move || worker_loop(&shared, idx))
                    .expect("failed to spawn a kernel worker thread; this is a bug or OOM")
            })
            .collect();
        Self {
            n,
            shared,
            workers,
            dispatch: Mutex::new(()),
        }
    }

    /// Number of threads, including the caller.
    pub fn n(&self) -> usize {
        self.n
    }

    /// Runs `f(i)` for every `i in 0..n()`, each on its own thread (`f(0)` on the caller), and
    /// returns when all calls have finished. A panic in any call is re-raised here.
    pub fn run(&self, f: &(dyn Fn(usize) + Sync)) {
        if self.n == 1 {
            f(0);
            return;
        }
        let _one_job = lock(&self.dispatch);
        // SAFETY: erases the borrow's lifetime only; `Finish` below keeps this frame alive until
        // every worker has retired the job, even if `f(0)` unwinds.
        let ptr: *const Job =
            unsafe { std::mem::transmute::<&(dyn Fn(usize) + Sync), &'static Job>(f) };
        *self.shared.job.lock().unwrap_or_else(|e| e.into_inner()) = Some(JobPtr(ptr));
        self.shared.panicked.store(false, Ordering::Relaxed);
        self.shared.pending.store(self.n - 1, Ordering::Release);
        {
            let _g = lock(&self.shared.lock);
            self.shared.epoch.fetch_add(1, Ordering::Release);
        }
        self.shared.wake.notify_all();

        let finish = Finish(&self.shared);
        f(0);
        drop(finish);
        if self.shared.panicked.load(Ordering::Acquire) {
            panic!("a kernel worker thread panicked");
        }
    }
}

/// Waits for all workers to retire the current job when dropped (also on unwind).
struct Finish<'a>(&'a Shared);

impl Drop for Finish<'_> {
    fn drop(&mut self) {
        let shared = self.0;
        let start = Instant::now();
        while shared.pending.load(Ordering::Acquire) != 0 {
            if start.elapsed() > SPIN {
                let mut g = lock(&shared.lock);
                while shared.pending.load(Ordering::Acquire) != 0 {
                    g = shared.done.wait(g).unwrap_or_else(|e| e.into_inner());
                }
                break;
            }
            std::hint::spin_loop();
        }
        *shared.job.lock().unwrap_or_else(|e| e.into_inner()) = None;
    }
}

fn worker_loop(shared: &Shared, idx: usize) {
    let mut seen = 0u64;
    loop {
        seen = wait_for_job(shared, seen);
        if shared.shutdown.load(Ordering::Acquire) {
            return;
        }
        let job = *shared.job.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(JobPtr(ptr)) = job {
            // SAFETY: the dispatcher keeps the closure alive until `pending` reaches zero, which
            // cannot happen before this worker's decrement below.
            let f = unsafe { &*ptr };
            if catch_unwind(AssertUnwindSafe(|| f(idx))).is_err() {
                shared.panicked.store(true, Ordering::Release);
            }
        }
        if shared.pending.fetch_sub(1, Ordering::AcqRel) == 1 {
            let _g = lock(&shared.lock);
            shared.done.notify_all();
        }
    }
}

/// Returns the new epoch once it differs from `seen` (or shutdown was requested).
fn wait_for_job(shared: &Shared, seen: u64) -> u64 {
    let start = Instant::now();
    let mut spins = 0u32;
    loop {
        let e = shared.epoch.load(Ordering::Acquire);
        if e != seen || shared.shutdown.load(Ordering::Acquire) {
            return e;
        }
        spins = spins.wrapping_add(1);
        if spins.is_multiple_of(64) && start.elapsed() > SPIN {
            break;
        }
        std::hint::spin_loop();
    }
    let mut g = lock(&shared.lock);
    loop {
        let e = shared.epoch.load(Ordering::Acquire);
        if e != seen || shared.shutdown.load(Ordering::Acquire) {
            return e;
        }
        g = shared.wake.wait(g).unwrap_or_else(|e| e.into_inner());
    }
}

impl Drop for Threads {
    fn drop(&mut self) {
        {
            let _g = lock(&self.shared.lock);
            self.shared.shutdown.store(true, Ordering::Release);
        }
        self.shared.wake.notify_all();
        for w in self.workers.drain(..) {
            // A worker only ends by returning; a join error would mean it panicked outside a
            // job, which cannot happen, so there is nothing useful to do with it.
            let _ = w.join();
        }
    }
}

impl std::fmt::Debug for Threads {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Threads").field("n", &self.n).finish()
    }
}
