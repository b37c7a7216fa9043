//! A runner whose steps the test lets through one at a time, so that a test can hold a request
//! in the engine (and its tiles in use) for as long as it needs, whatever the machine's speed.

use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use engine::{IntoRunner, KvSpec, Runner, RunnerFacts, StartError};
use runner::{Batch, RunError, TileId};

#[derive(Default)]
struct Counts {
    /// Steps the runner may still start.
    permits: u64,
    /// Steps started.
    started: u64,
    /// Whether a step is waiting for a permit.
    waiting: bool,
}

/// The test's side of the gate.
#[derive(Clone, Default)]
pub struct Gate(Arc<(Mutex<Counts>, Condvar)>);

/// Bounds every wait: reached only when the engine stops calling the runner at all.
const PATIENCE: Duration = Duration::from_secs(60);

impl Gate {
    /// Lets `n` more steps start.
    pub fn permit(&self, n: u64) {
        let (lock, cv) = &*self.0;
        lock.lock().expect("gate").permits += n;
        cv.notify_all();
    }

    /// Steps started so far.
    pub fn started(&self) -> u64 {
        self.0 .0.lock().expect("gate").started
    }

    /// Waits until a step is waiting for a permit after `started` steps have started; false when
    /// the engine stopped calling the runner (within `PATIENCE`) or `give_up` became true.
    pub fn wait_blocked(&self, started: u64, give_up: impl Fn() -> bool) -> bool {
        let (lock, cv) = &*self.0;
        let deadline = std::time::Instant::now() + PATIENCE;
        let mut c = lock.lock().expect("gate");
        while !(c.waiting && c.started >= started) {
            if give_up() || std::time::Instant::now() > deadline {
                return false;
            }
            c = cv
                .wait_timeout(c, Duration::from_millis(5))
                .expect("gate")
                .0;
        }
        true
    }

    /// Wraps a model so that its runner's steps pass this gate.
    pub fn wrap<M: IntoRunner>(&self, model: M) -> Gated<M> {
        Gated(model, self.clone())
    }

    fn enter(&self) {
        let (lock, cv) = &*self.0;
        let mut c = lock.lock().expect("gate");
        while c.permits == 0 {
            c.waiting = true;
            cv.notify_all();
            c = cv.wait(c).expect("gate");
        }
        c.waiting = false;
        c.permits -= 1;
        c.started += 1;
        cv.notify_all();
    }
}

/// A model whose runner is gated.
pub struct Gated<M>(M, Gate);

impl<M: IntoRunner> IntoRunner for Gated<M> {
    type Runner = GatedRunner<M::Runner>;
    fn into_runner(self, kv: &KvSpec) -> Result<Self::Runner, StartError> {
        Ok(GatedRunner(self.0.into_runner(kv)?, self.1))
    }
}

/// The gated runner: `execute` waits for a permit, then runs the inner runner's step.
pub struct GatedRunner<R>(R, Gate);

impl<R: Runner> Runner for GatedRunner<R> {
    fn facts(&self) -> &RunnerFacts {
        self.0.facts()
    }
    fn execute(&mut self, batch: &Batch, logits: &mut Vec<f32>) -> Result<(), RunError> {
        self.1.enter();
        self.0.execute(batch, logits)
    }
    fn copy_tiles(&mut self, pairs: &[(TileId, TileId)]) {
        self.0.copy_tiles(pairs)
    }
    fn export_tile(&self, tile: TileId, out: &mut Vec<u8>) {
        self.0.export_tile(tile, out)
    }
    fn import_tile(&mut self, tile: TileId, bytes: &[u8]) -> Result<(), RunError> {
        self.0.import_tile(tile, bytes)
    }
}
