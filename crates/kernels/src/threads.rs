//! A fixed pool of worker threads for data-parallel kernels.
//!
//! Design: `Threads::new(n)` spawns `n - 1` workers once; the calling thread is worker 0, so a pool
//! of one runs everything inline. [`Threads::run`] calls the closure once for every index in
//! `0..n` and returns when all calls have finished, so the closure may borrow from the caller's
//! stack.
//!
//! Each job index `i >= 1` is *claimed* exactly once, either by worker `i` or — if that worker has
//! not started it by the time the caller finishes its own part — by the caller, who then runs it
//! itself. On a machine shared with other processes a descheduled worker therefore costs nothing
//! extra: the caller never waits for a thread that has not begun. (With
//! [`Threads::for_each_range`] the caller's own index helps with the other shares once its own
//! is done, so such a late index finds nothing left to do.)
//!
//! Invariants:
//! - At most one job is in flight: `run` holds `dispatch` for its whole duration. A `run` that
//!   finds it held (a nested call from inside a job, or a concurrent caller) runs all indices on
//!   its own thread instead of waiting, so nesting cannot deadlock.
//! - `claim[i]` holds `2e` while index `i` of job `e` is unclaimed and `2e + 1` once claimed; only
//!   the single successful compare-exchange runs the index. Whoever claimed it publishes
//!   `done[i] = e` (a worker when finished, the caller before running it synchronously), and
//!   `run` does not return (nor unwind) before every claimed index is done. The job pointer is only dereferenced by a claimant, which is
//!   what makes erasing the closure's lifetime sound.
//! - Idle workers spin briefly on the epoch before sleeping on a condvar, because decode issues
//!   jobs back to back and a futex wake-up costs more than the work of a small matmul.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How long an idle worker spins before blocking.
const SPIN: Duration = Duration::from_micros(100);

type Job = dyn Fn(usize) + Sync;

/// A type-erased pointer to the current job; see the module invariants for why it stays valid.
#[derive(Clone, Copy)]
struct JobPtr(*const Job);
// SAFETY: the pointee is `Sync` and outlives every use (module invariants).
unsafe impl Send for JobPtr {}

struct Shared {
    /// Number of the current job; bumped (under `lock`) to announce one.
    epoch: AtomicU64,
    /// Per index: `2e` unclaimed, `2e + 1` claimed, for job `e`.
    claim: Vec<AtomicU64>,
    /// Per index: the last job a worker finished at that index.
    done: Vec<AtomicU64>,
    panicked: AtomicBool,
    shutdown: AtomicBool,
    /// Workers blocked on `wake` (so the dispatcher can skip the syscall when none are).
    sleepers: AtomicUsize,
    job: Mutex<Option<JobPtr>>,
    /// Guards sleeping on `wake`; holds no data.
    lock: Mutex<()>,
    wake: Condvar,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // The protected values stay consistent even if a holder panicked (plain stores only).
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Shared {
    /// Claims index `i` of job `e`; true for exactly one caller per (i, e).
    fn try_claim(&self, i: usize, e: u64) -> bool {
        self.claim[i]
            .compare_exchange(2 * e, 2 * e + 1, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
    }
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
            // Job 0 never exists: mark every index claimed and done for it.
            claim: (0..n).map(|_| AtomicU64::new(1)).collect(),
            done: (0..n).map(|_| AtomicU64::new(0)).collect(),
            panicked: AtomicBool::new(false),
            shutdown: AtomicBool::new(false),
            sleepers: AtomicUsize::new(0),
            job: Mutex::new(None),
            lock: Mutex::new(()),
            wake: Condvar::new(),
        });
        let workers = (1..n)
            .map(|idx| {
                let shared = Arc::clone(&shared);
                std::thread::Builder::new()
                    .name(format!("tessera-worker-{idx}"))
                    .spawn(move || worker_loop(&shared, idx))
                    .expect("failed to spawn a kernel worker thread (out of resources)")
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

    /// Cuts `0..len` into ranges of `chunk` (the last shorter) and calls `f` once per range, on
    /// the pool's threads (on the caller alone when there is only one). Each thread starts on a
    /// home share of the ranges — thread `t` of `n` the `t`-th `1/n` of them, in order — and
    /// only then helps with what the others have left, taking their next ranges in turn. Each
    /// range goes to exactly one call, with the index `t` (`0..n()`) of the pool's call that
    /// runs it — also when it helps with another share — which no two calls running at the same
    /// time have (for per-thread scratch).
    ///
    /// Steps repeat the same shapes, so a thread keeps writing the same part of each output from
    /// one step to the next, and the cache lines stay with the core that wrote them. Where the
    /// machine places the two threads in different L3 domains (a virtual machine's CPUs on two
    /// core complexes), a line last written by the other core costs a cross-complex transfer,
    /// and claiming every range from one shared counter moves that counter's line back and
    /// forth as well. Each home counter is touched by others only once their own share is done.
    pub fn for_each_range(
        &self,
        len: usize,
        chunk: usize,
        f: &(dyn Fn(usize, std::ops::Range<usize>) + Sync),
    ) {
        /// One home counter per cache line.
        #[repr(align(128))]
        struct Counter(AtomicUsize);
        const MAX: usize = 16;
        let chunk = chunk.max(1);
        let n_chunks = len.div_ceil(chunk);
        let n = self.n;
        let range = |c: usize| c * chunk..((c + 1) * chunk).min(len);
        if n_chunks <= 1 || n == 1 {
            (0..n_chunks).for_each(|c| f(0, range(c)));
            return;
        }
        if n > MAX {
            // Homes would not fit the stack array: one shared counter.
            let next = AtomicUsize::new(0);
            return self.run(&|t| loop {
                let c = next.fetch_add(1, Ordering::Relaxed);
                if c >= n_chunks {
                    break;
                }
                f(t, range(c));
            });
        }
        // Thread t's share: chunks bound(t)..bound(t + 1); its counter holds the next one.
        let bound = |t: usize| n_chunks * t / n;
        let next: [Counter; MAX] =
            std::array::from_fn(|t| Counter(AtomicUsize::new(bound(t.min(n)))));
        self.run(&|t| {
            for k in 0..n {
                let home = (t + k) % n;
                loop {
                    let c = next[home].0.fetch_add(1, Ordering::Relaxed);
                    if c >= bound(home + 1) {
                        break;
                    }
                    f(t, range(c));
                }
            }
        });
    }

    /// Runs `f(i)` exactly once for every `i in 0..n()` — in parallel on the pool's threads where
    /// they are available — and returns when all calls have finished. `f(0)` runs on the caller;
    /// other indices may too (see the module docs). A panic in any call is re-raised here.
    pub fn run(&self, f: &(dyn Fn(usize) + Sync)) {
        if self.n == 1 {
            f(0);
            return;
        }
        let _one_job = match self.dispatch.try_lock() {
            Ok(g) => g,
            Err(std::sync::TryLockError::Poisoned(e)) => e.into_inner(),
            // Busy: a nested call from inside a job of this pool, or a second thread using the
            // pool concurrently. Waiting could deadlock (nested), so run every index here.
            Err(std::sync::TryLockError::WouldBlock) => {
                (0..self.n).for_each(f);
                return;
            }
        };
        let shared = &*self.shared;
        let e = shared.epoch.load(Ordering::Relaxed) + 1;
        // SAFETY: erases the borrow's lifetime only; `Finish` below keeps this frame alive until
        // every worker-claimed index is done, even if a call on this thread unwinds.
        let ptr: *const Job =
            unsafe { std::mem::transmute::<&(dyn Fn(usize) + Sync), &'static Job>(f) };
        *lock(&shared.job) = Some(JobPtr(ptr));
        shared.panicked.store(false, Ordering::Relaxed);
        for c in &shared.claim[1..] {
            c.store(2 * e, Ordering::Release);
        }
        {
            let _g = lock(&shared.lock);
            shared.epoch.store(e, Ordering::Release);
        }
        if shared.sleepers.load(Ordering::Acquire) > 0 {
            shared.wake.notify_all();
        }

        let finish = Finish { shared, e };
        f(0);
        for i in 1..self.n {
            if shared.try_claim(i, e) {
                // Marked done up front: `Finish` only waits on indices workers claimed, and this
                // call completes (or unwinds) before `Finish` runs.
                shared.done[i].store(e, Ordering::Release);
                f(i);
            }
        }
        drop(finish);
        if shared.panicked.load(Ordering::Acquire) {
            panic!("a kernel worker thread panicked");
        }
    }
}

/// On drop (also on unwind): keeps unstarted indices from starting, then waits for the ones
/// workers claimed.
struct Finish<'a> {
    shared: &'a Shared,
    e: u64,
}

impl Drop for Finish<'_> {
    fn drop(&mut self) {
        let shared = self.shared;
        for i in 1..shared.claim.len() {
            if shared.try_claim(i, self.e) {
                continue; // never started; nobody will run it now (only reachable on unwind)
            }
            let mut spins = 0u32;
            while shared.done[i].load(Ordering::Acquire) != self.e {
                spins = spins.wrapping_add(1);
                if spins < 1 << 12 {
                    std::hint::spin_loop();
                } else {
                    std::thread::yield_now();
                }
            }
        }
        *lock(&shared.job) = None;
    }
}

fn worker_loop(shared: &Shared, idx: usize) {
    let mut seen = 0u64;
    loop {
        seen = wait_for_job(shared, seen);
        if shared.shutdown.load(Ordering::Acquire) {
            return;
        }
        if !shared.try_claim(idx, seen) {
            continue; // the caller ran this index already
        }
        let job = *lock(&shared.job);
        if let Some(JobPtr(ptr)) = job {
            // SAFETY: this thread claimed index `idx` of the current job, so the dispatcher keeps
            // the closure alive until `done[idx]` is published below.
            let f = unsafe { &*ptr };
            if catch_unwind(AssertUnwindSafe(|| f(idx))).is_err() {
                shared.panicked.store(true, Ordering::Release);
            }
        }
        shared.done[idx].store(seen, Ordering::Release);
    }
}

/// Returns the current epoch once it differs from `seen` (or shutdown was requested).
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
    shared.sleepers.fetch_add(1, Ordering::AcqRel);
    let e = loop {
        let e = shared.epoch.load(Ordering::Acquire);
        if e != seen || shared.shutdown.load(Ordering::Acquire) {
            break e;
        }
        g = shared.wake.wait(g).unwrap_or_else(|e| e.into_inner());
    };
    shared.sleepers.fetch_sub(1, Ordering::AcqRel);
    e
}

impl Drop for Threads {
    fn drop(&mut self) {
        {
            let _g = lock(&self.shared.lock);
            self.shared.shutdown.store(true, Ordering::Release);
        }
        self.shared.wake.notify_all();
        for w in self.workers.drain(..) {
            // A worker only ends by returning (job panics are caught), so there is nothing
            // useful to do with a join error.
            let _ = w.join();
        }
    }
}

impl std::fmt::Debug for Threads {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Threads").field("n", &self.n).finish()
    }
}
