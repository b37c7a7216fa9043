//! `EngineHandle`: the only way the async side reaches the engine thread.
//!
//! Submitting a request returns a stream of events; dropping that stream aborts the request
//! (the engine notices within one step and frees its tiles). The engine thread loads the model
//! itself, and a load failure is returned by `spawn`, not left behind as a dead thread.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use tokenizer::Tokenizer;
use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver, UnboundedSender};

use crate::admission::{Admission, WaitSlot};
use crate::config::EngineConfig;
use crate::constraint::{CompiledConstraint, Constraint, GrammarStats, Grammars};
use crate::embed::EmbedEvent;
use crate::engine::{Engine, Member};
use crate::error::StartError;
use crate::kv_events::KvIndexSnapshot;
use crate::lora::LoraInfo;
use crate::request::{EngineError, Event, GenerateRequest};
use crate::runner::{EmbedFacts, IntoRunner, Runner};
use crate::sequence::SeqId;
use crate::stats::EngineStats;

/// Why the loader given to `EngineHandle::spawn` failed.
pub type LoadError = Box<dyn std::error::Error + Send + Sync>;

enum Command {
    /// One request, or the choices of one prompt, computed once (see `Engine::submit_admitted`),
    /// with their places in the admission count.
    SubmitGroup(Vec<Member>, Vec<WaitSlot>),
    /// The inputs of one embedding request, with its place in the admission count.
    Embed(EmbedSubmission),
    Abort(SeqId),
    /// Read the prefix index (`Engine::kv_index`) between two steps.
    KvIndex(tokio::sync::oneshot::Sender<KvIndexSnapshot>),
    /// Register, remove or list LoRA adapters between two steps.
    Lora(LoraCommand),
    /// Stop accepting; finish in-flight work until the deadline, then abort the rest and exit.
    Shutdown(Instant),
}

/// What to do with the LoRA adapters (`Engine::load_lora`, `unload_lora`, `loras`).
enum LoraCommand {
    Load {
        name: String,
        path: PathBuf,
        reply: Reply<Result<(), EngineError>>,
    },
    Unload {
        name: String,
        reply: Reply<Result<(), EngineError>>,
    },
    List(Reply<Vec<LoraInfo>>),
}

type Reply<T> = tokio::sync::oneshot::Sender<T>;

/// One embedding request on its way to the engine thread.
struct EmbedSubmission {
    id: SeqId,
    inputs: Vec<Vec<u32>>,
    priority: i32,
    events: UnboundedSender<EmbedEvent>,
    slot: WaitSlot,
}

/// The events of one embedding request's inputs. Dropping it aborts the inputs still waiting.
pub struct EmbedStream {
    pub id: SeqId,
    /// How many inputs the request has (one `EmbedEvent::Embedded` each, unless it fails).
    pub inputs: usize,
    pub events: UnboundedReceiver<EmbedEvent>,
}

/// Facts about the loaded model the server needs.
#[derive(Clone, Debug)]
pub struct ModelInfo {
    pub context_length: usize,
    /// The most tokens (prompt plus output) one sequence can hold: the context length, or less
    /// when the KV pool cannot hold a whole context for one sequence. Requests past it are
    /// refused (`Scheduler::check_fits`).
    pub max_seq_len: usize,
    pub vocab_size: usize,
    pub kv_tiles: usize,
    pub tile_size: usize,
    /// Most sequences in one step (`EngineConfig::max_seqs`): the running batch's width.
    pub max_seqs: usize,
    /// Set on an embedding model: what each input's row holds.
    pub embedding: Option<EmbedFacts>,
}

/// The events of one request. Dropping it aborts the request.
pub struct RequestStream {
    pub id: SeqId,
    pub events: UnboundedReceiver<Event>,
}

/// A cloneable handle to the engine thread.
#[derive(Clone)]
pub struct EngineHandle {
    tx: Sender<Command>,
    next_id: Arc<AtomicU64>,
    stats: Arc<EngineStats>,
    tokenizer: Tokenizer,
    info: ModelInfo,
    /// Compiled constraints, cached (built on the first constrained request).
    grammars: Arc<Grammars>,
    admission: Admission,
    /// Cleared when the engine thread ends, however it ends (see `is_alive`).
    alive: Arc<AtomicBool>,
    accepting: Arc<AtomicBool>,
    thread: Arc<Mutex<Option<JoinHandle<()>>>>,
}

impl EngineHandle {
    /// Starts the engine thread, which calls `load` to get the model and tokenizer and makes
    /// the model its runner (with the KV storage `cfg` asks for). Returns once the model is
    /// loaded, or with the first error.
    pub fn spawn<M, F>(cfg: EngineConfig, load: F) -> Result<EngineHandle, StartError>
    where
        M: IntoRunner,
        F: FnOnce() -> Result<(M, Tokenizer), LoadError> + Send + 'static,
    {
        cfg.validate()?;
        let (tx, rx) = mpsc::channel::<Command>();
        let (ready_tx, ready_rx) = mpsc::channel::<Result<(Tokenizer, ModelInfo), StartError>>();
        let stats = Arc::new(EngineStats::default());
        let thread_stats = stats.clone();
        let alive = Arc::new(AtomicBool::new(true));
        let thread_alive = AliveGuard(alive.clone());
        let thread_cfg = cfg.clone();
        let thread = std::thread::Builder::new()
            .name("tessera-engine".into())
            .spawn(move || {
                let _alive = thread_alive;
                let started = load()
                    .map_err(StartError::Load)
                    .and_then(|(model, tokenizer)| {
                        let runner = model.into_runner(&thread_cfg.kv_spec())?;
                        Engine::new(runner, tokenizer.clone(), &thread_cfg, thread_stats)
                            .map(|e| (e, tokenizer))
                    });
                let (engine, tokenizer) = match started {
                    Ok(v) => v,
                    Err(e) => {
                        let _ = ready_tx.send(Err(e));
                        return;
                    }
                };
                let info = ModelInfo {
                    context_length: engine.context_length(),
                    // An embedding model keeps no KV: an input fits if the context holds it.
                    max_seq_len: match engine.embedding() {
                        Some(_) => engine.context_length(),
                        None => engine.scheduler().max_fitting_len(engine.context_length()),
                    },
                    vocab_size: engine.vocab_size(),
                    kv_tiles: engine.scheduler().tile_counts().total,
                    tile_size: thread_cfg.tile_size,
                    max_seqs: thread_cfg.max_seqs,
                    embedding: engine.embedding(),
                };
                if ready_tx.send(Ok((tokenizer, info))).is_err() {
                    return;
                }
                let mut engine = engine;
                run_loop(&mut engine, rx);
                // Full tiles no tier has yet are written before the process goes.
                engine.close_tiers(Instant::now() + TIER_FLUSH);
            })
            .map_err(StartError::Thread)?;
        let (tokenizer, info) = match ready_rx.recv() {
            Ok(Ok(v)) => v,
            Ok(Err(e)) => {
                let _ = thread.join();
                return Err(e);
            }
            Err(_) => {
                let _ = thread.join();
                return Err(StartError::Died);
            }
        };
        let grammars = Arc::new(Grammars::new(tokenizer.clone()));
        // The vocabulary is indexed for grammars on a thread of its own, now that the model is
        // ready: serving does not wait for it, and the first constrained request does not pay
        // for it. Should the thread not start, that request indexes it.
        let warm = grammars.clone();
        let _ = std::thread::Builder::new()
            .name("tessera-vocab-index".into())
            .spawn(move || warm.warm());
        Ok(EngineHandle {
            tx,
            next_id: Arc::new(AtomicU64::new(1)),
            stats,
            grammars,
            tokenizer,
            info,
            admission: Admission::new(cfg.max_waiting),
            alive,
            accepting: Arc::new(AtomicBool::new(true)),
            thread: Arc::new(Mutex::new(Some(thread))),
        })
    }

    /// Queues a request. Fails at once when the waiting line is full or the engine stopped.
    pub fn submit(&self, req: GenerateRequest) -> Result<RequestStream, EngineError> {
        self.submit_group(vec![req])?
            .pop()
            .ok_or_else(|| EngineError::Internal("no stream for a submitted request".into()))
    }

    /// Queues the choices of one prompt (`n` > 1): same prompt, sampling settings of their own.
    /// The prompt is computed once; the choices fork from it and share its tiles. One stream per
    /// choice, in order; dropping one aborts that choice only. The whole group counts against
    /// the waiting limit.
    pub fn submit_group(
        &self,
        reqs: Vec<GenerateRequest>,
    ) -> Result<Vec<RequestStream>, EngineError> {
        if reqs.is_empty() {
            return Ok(Vec::new());
        }
        let slots = self.reserve(reqs.len())?;
        let (members, streams): (Vec<Member>, Vec<RequestStream>) = reqs
            .into_iter()
            .map(|req| {
                let (id, etx, stream) = self.next_stream();
                ((id, req, etx), stream)
            })
            .unzip();
        self.tx
            .send(Command::SubmitGroup(members, slots))
            .map_err(|_| EngineError::Stopped)?;
        Ok(streams)
    }

    /// Queues the inputs of one embedding request (token ids each, whole: an input is never
    /// split across steps); one place in the waiting line for all. Fails at once when the line
    /// is full or the engine stopped; a refused input comes back as an `EmbedEvent::Error`.
    pub fn embed(&self, inputs: Vec<Vec<u32>>, priority: i32) -> Result<EmbedStream, EngineError> {
        let slot = self.reserve(1)?.pop().ok_or_else(|| {
            EngineError::Internal("no admission slot for an embedding request".into())
        })?;
        let id = SeqId(self.next_id.fetch_add(1, Relaxed));
        let (events, rx) = unbounded_channel();
        let n = inputs.len();
        self.tx
            .send(Command::Embed(EmbedSubmission {
                id,
                inputs,
                priority,
                events,
                slot,
            }))
            .map_err(|_| EngineError::Stopped)?;
        Ok(EmbedStream {
            id,
            inputs: n,
            events: rx,
        })
    }

    /// Places in the waiting line for `n` more requests (`admission`), all or none.
    fn reserve(&self, n: usize) -> Result<Vec<WaitSlot>, EngineError> {
        if !self.accepting.load(Relaxed) {
            return Err(EngineError::Stopped);
        }
        self.admission.reserve(n).map_err(|waiting| {
            EngineError::Overloaded(format!(
                "{waiting} requests are waiting (limit {})",
                self.admission.limit()
            ))
        })
    }

    fn next_stream(&self) -> (SeqId, UnboundedSender<Event>, RequestStream) {
        let id = SeqId(self.next_id.fetch_add(1, Relaxed));
        let (etx, erx) = unbounded_channel();
        (id, etx, RequestStream { id, events: erx })
    }

    /// Whether the engine thread still runs. False once it has ended — after `shutdown`, or
    /// because it died of a fault it could not contain: then nothing will be served again, and
    /// the process should exit so that its supervisor restarts it.
    pub fn is_alive(&self) -> bool {
        self.alive.load(Relaxed)
    }

    pub fn abort(&self, id: SeqId) {
        let _ = self.tx.send(Command::Abort(id));
    }

    /// Asks for the prefix index as the engine has it between two steps, with the sequence
    /// number of the last KV event batch sent before (see `Engine::kv_index`); the answer
    /// comes on the returned channel (closed if the engine stops first).
    pub fn kv_index(&self) -> Result<tokio::sync::oneshot::Receiver<KvIndexSnapshot>, EngineError> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        self.tx
            .send(Command::KvIndex(tx))
            .map_err(|_| EngineError::Stopped)?;
        Ok(rx)
    }

    /// Registers LoRA adapter `name`, the GGUF adapter file at `path`, for requests to name
    /// (`GenerateRequest::loras`); it is loaded and checked against the model first.
    pub async fn load_lora(&self, name: String, path: PathBuf) -> Result<(), EngineError> {
        let (reply, rx) = tokio::sync::oneshot::channel();
        self.lora(LoraCommand::Load { name, path, reply })?;
        rx.await.map_err(|_| EngineError::Stopped)?
    }

    /// Forgets LoRA adapter `name` (the runner drops it once no request uses it).
    pub async fn unload_lora(&self, name: String) -> Result<(), EngineError> {
        let (reply, rx) = tokio::sync::oneshot::channel();
        self.lora(LoraCommand::Unload { name, reply })?;
        rx.await.map_err(|_| EngineError::Stopped)?
    }

    /// The LoRA adapters requests may name, in registration order.
    pub async fn loras(&self) -> Result<Vec<LoraInfo>, EngineError> {
        let (reply, rx) = tokio::sync::oneshot::channel();
        self.lora(LoraCommand::List(reply))?;
        rx.await.map_err(|_| EngineError::Stopped)
    }

    fn lora(&self, cmd: LoraCommand) -> Result<(), EngineError> {
        self.tx
            .send(Command::Lora(cmd))
            .map_err(|_| EngineError::Stopped)
    }

    pub fn stats(&self) -> &EngineStats {
        &self.stats
    }

    /// Compiles a constraint for this model's vocabulary (cached by constraint), to attach to a
    /// request as `GenerateRequest::constraint`. The error names what the grammar library could
    /// not handle. A first compilation can take milliseconds or more: call it where blocking is
    /// fine (not on an async executor's thread).
    pub fn compile(&self, c: &Constraint) -> Result<CompiledConstraint, EngineError> {
        self.grammars
            .compile(c)
            .map_err(EngineError::InvalidRequest)
    }

    /// Counters of grammar compilation and token masks.
    pub fn grammar_stats(&self) -> &GrammarStats {
        self.grammars.stats()
    }

    pub fn tokenizer(&self) -> &Tokenizer {
        &self.tokenizer
    }

    pub fn info(&self) -> &ModelInfo {
        &self.info
    }

    /// Stops accepting requests, lets in-flight ones finish for up to `grace`, aborts the rest
    /// and waits for the engine thread to exit.
    pub fn shutdown(&self, grace: Duration) {
        self.accepting.store(false, Relaxed);
        let _ = self.tx.send(Command::Shutdown(Instant::now() + grace));
        let thread = self.thread.lock().ok().and_then(|mut t| t.take());
        if let Some(t) = thread {
            let _ = t.join();
        }
    }
}

/// Clears the engine's alive flag when dropped: when the engine thread ends, also by a panic.
struct AliveGuard(Arc<AtomicBool>);

impl Drop for AliveGuard {
    fn drop(&mut self) {
        self.0.store(false, Relaxed);
    }
}

/// Runs a step; a panic in it fails every request in flight, and the loop goes on while the
/// tile invariants still hold. (Faults of one request's own work — its draws, drafts, text —
/// are contained to that request inside the step.) Returns false when the engine must stop.
fn step_contained<R: Runner>(engine: &mut Engine<R>) -> bool {
    let stepped = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| engine.step()));
    match stepped {
        Ok(Ok(_)) => true,
        Ok(Err(e)) => {
            // A runner error is a bug (inputs are validated); fail the requests, keep serving.
            tracing::error!("forward pass failed: {e}");
            engine.fail_all(&e.to_string());
            true
        }
        Err(_) => {
            tracing::error!("an engine step panicked; failing the requests in flight");
            engine.fail_all("an engine step failed");
            match engine.scheduler().check_invariants() {
                Ok(()) if engine.scheduler().tile_counts().in_use == 0 => true,
                broken => {
                    tracing::error!("engine state after the panic: {broken:?}; stopping");
                    false
                }
            }
        }
    }
}

/// How long the engine thread may spend writing full tiles to the KV tiers when it stops.
const TIER_FLUSH: Duration = Duration::from_secs(10);

fn run_loop<R: Runner>(engine: &mut Engine<R>, rx: Receiver<Command>) {
    let mut deadline: Option<Instant> = None;
    let mut connected = true;
    loop {
        // Block for work when idle (after the runner's idle work, a slice per turn); otherwise take
        // whatever arrived since the last step.
        if !engine.has_work() {
            if deadline.is_some() || !connected {
                return;
            }
            if engine.warming() {
                match rx.try_recv() {
                    Ok(cmd) => apply(engine, cmd, &mut deadline),
                    Err(mpsc::TryRecvError::Empty) => {
                        engine.idle();
                    }
                    Err(mpsc::TryRecvError::Disconnected) => return,
                }
                continue;
            }
            match rx.recv_timeout(Duration::from_millis(250)) {
                Ok(cmd) => apply(engine, cmd, &mut deadline),
                Err(RecvTimeoutError::Timeout) => continue,
                Err(RecvTimeoutError::Disconnected) => return,
            }
        }
        loop {
            match rx.try_recv() {
                Ok(cmd) => apply(engine, cmd, &mut deadline),
                Err(mpsc::TryRecvError::Empty) => break,
                Err(mpsc::TryRecvError::Disconnected) => {
                    connected = false;
                    break;
                }
            }
        }
        if deadline.is_some_and(|d| Instant::now() >= d) {
            engine.abort_all();
            return;
        }
        engine.reap_disconnected();
        if !step_contained(engine) {
            return;
        }
        if engine.scheduler().is_idle() && engine.has_work() {
            // Only requests waiting on KV tier fetches: do not spin.
            std::thread::sleep(Duration::from_micros(200));
        }
    }
}

fn apply<R: Runner>(engine: &mut Engine<R>, cmd: Command, deadline: &mut Option<Instant>) {
    match cmd {
        Command::SubmitGroup(members, slots) => {
            if deadline.is_some() {
                for (_, _, events) in members {
                    let _ = events.send(Event::Error(EngineError::Stopped));
                }
            } else {
                engine.submit_admitted(members, slots);
            }
        }
        Command::Embed(e) => {
            if deadline.is_some() {
                let _ = e.events.send(EmbedEvent::Error(EngineError::Stopped));
            } else {
                engine.submit_embed(e.id, e.inputs, e.priority, e.events, Some(e.slot));
            }
        }
        Command::Abort(id) => engine.abort(id),
        Command::KvIndex(reply) => {
            let _ = reply.send(engine.kv_index());
        }
        Command::Lora(LoraCommand::Load { name, path, reply }) => {
            let _ = reply.send(engine.load_lora(&name, &path));
        }
        Command::Lora(LoraCommand::Unload { name, reply }) => {
            let _ = reply.send(engine.unload_lora(&name));
        }
        Command::Lora(LoraCommand::List(reply)) => {
            let _ = reply.send(engine.loras());
        }
        Command::Shutdown(d) => *deadline = Some(d),
    }
}
