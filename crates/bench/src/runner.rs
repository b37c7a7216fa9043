//! Drives one run: the decoder pool (closed loop or open-loop arrivals) and, in mixed-load mode, the
//! long prompts beside it.
//!
//! Design: closed loop = `concurrency` tasks, each sending its next request when the previous one ends,
//! drawing request indices from one shared counter (so request `i` has the same prompt and lengths
//! whatever the interleaving). Open loop = one dispatcher walking the precomputed arrival schedule
//! (`arrivals`: gamma gaps, all at once, or a trace's times), sleeping until each arrival and
//! starting the request at once, or, under an in-flight cap, as soon as one of the permits is free.
//! Every outcome carries its arrival time (scheduled, or when sent in the closed loop), so a
//! capacity probe can leave its warm-up out. Long prompts (`max_tokens: 1`, nothing shared
//! with the decoders' prompts) are sent every `every_s` seconds on their own tasks, outside the
//! concurrency limit, so they land on the server while the decoders are mid-stream.
//!
//! Warm-up requests, when asked for, run before the clock starts and are not reported.
//!
//! Bounds: no new request starts after the request count is reached, the duration has passed, or a
//! stop was requested;
//! every request is bounded by the client timeout; long prompts stop when the decoders are done, and
//! those still in flight then are cancelled (counted, not timed).

use std::{
    sync::{
        atomic::{AtomicBool, AtomicU64, Ordering},
        Arc,
    },
    time::{Duration, Instant},
};

use anyhow::Context as _;
use indicatif::{ProgressBar, ProgressStyle};
use tokio::{
    sync::{oneshot, Semaphore},
    task::JoinSet,
};

use crate::{
    adapters::Adapters,
    arrivals::Arrivals,
    client::{Client, Outcome},
    config::{Arrival, BenchConfig, LongPrompts},
    prompt::PromptBuilder,
    workload::Workload,
};

/// A request to stop issuing new requests (Ctrl-C); in-flight ones still finish and are reported.
#[derive(Debug, Clone, Default)]
pub struct Stop(Arc<AtomicBool>);

impl Stop {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn request(&self) {
        self.0.store(true, Ordering::Relaxed);
    }

    pub fn is_requested(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }
}

/// Raw results of one run.
#[derive(Debug)]
pub struct RunResult {
    /// The model name sent in requests.
    pub model: String,
    /// Outcomes of the decoder requests, in completion order.
    pub decoders: Vec<Outcome>,
    /// Outcomes of the long prompts that completed (mixed-load mode).
    pub long_prompts: Vec<Outcome>,
    /// Long prompts still in flight when the decoders finished, cancelled then.
    pub long_prompts_cancelled: usize,
    /// From the first request sent to the last decoder request finished.
    pub wall: Duration,
    /// Wall-clock start, seconds since the Unix epoch.
    pub started_unix_s: f64,
}

/// Everything a request task needs, shared between tasks.
#[derive(Clone)]
struct Shared {
    client: Client,
    prompts: Arc<PromptBuilder>,
    workload: Arc<Workload>,
    progress: Progress,
    limit: Option<u64>,
    start: Instant,
    deadline: Option<Instant>,
    /// Requests still running then are cut and reported as failed.
    cutoff: Option<Instant>,
    stop: Stop,
    adapters: Option<Arc<Adapters>>,
}

impl Shared {
    fn expired(&self, at: Instant) -> bool {
        self.stop.is_requested() || self.deadline.is_some_and(|d| at >= d)
    }

    /// Sends request `index`, which arrived at `arrived_s` seconds from the start.
    async fn request(&self, index: u64, arrived_s: f64) -> Outcome {
        let spec = self.workload.spec(index);
        let prompt = self.prompts.prompt_with_len(index, spec.prompt_tokens);
        let stream = self.client.stream(index, &prompt, spec.output_tokens);
        let mut outcome = match self.cutoff {
            None => stream.await,
            Some(at) => tokio::time::timeout_at(at.into(), stream)
                .await
                .unwrap_or_else(|_| Outcome {
                    error: Some("still running at the probe's cutoff".to_string()),
                    e2e: (at - self.start).as_secs_f64() - arrived_s,
                    ..Outcome::default()
                }),
        };
        outcome.arrived_s = Some(arrived_s);
        outcome.adapter = self.adapters.as_ref().map(|a| a.slot(index));
        self.progress.record(&outcome);
        outcome
    }
}

/// Runs the benchmark described by `cfg`; `stop` ends it early (as if the duration had passed).
pub async fn execute(
    cfg: &BenchConfig,
    show_progress: bool,
    stop: Stop,
) -> anyhow::Result<RunResult> {
    let model = Client::model_for(cfg).await?;
    let client = Client::new(cfg, model.clone())?;
    let prompts = Arc::new(PromptBuilder::with_prefixes(
        cfg.seed,
        cfg.workload.max_prompt_tokens(),
        cfg.shared_prefix_tokens,
        cfg.prefixes,
    ));
    warm_up(&client, &prompts, cfg).await;
    let started_unix_s = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64());
    let start = Instant::now();
    let shared = Shared {
        client: client.clone(),
        prompts: prompts.clone(),
        workload: Arc::new(cfg.workload.clone()),
        progress: Progress::new(cfg.requests, show_progress),
        limit: cfg.requests,
        start,
        deadline: cfg.duration.map(|d| start + d),
        cutoff: cfg.cutoff.map(|d| start + d),
        stop,
        adapters: cfg.adapters.clone().map(Arc::new),
    };
    let (stop_tx, stop_rx) = oneshot::channel();
    let long_task = cfg
        .long_prompts
        .map(|lp| tokio::spawn(long_prompt_loop(client, prompts, lp, start, stop_rx)));
    let schedule = match (cfg.arrival, &cfg.trace_arrivals) {
        (Arrival::Closed, _) => None,
        (Arrival::Open { rate, burstiness }, _) => {
            Some(Arrivals::open_loop(rate, burstiness, cfg.seed))
        }
        (Arrival::Poisson(rate), _) => Some(Arrivals::open_loop(rate, 1.0, cfg.seed)),
        (Arrival::Trace, Some(times)) => Some(Arrivals::replay(times.clone())),
        (Arrival::Trace, None) => anyhow::bail!("trace arrivals missing from the configuration"),
    };
    let decoders = match schedule {
        None => closed_loop(&shared, cfg.concurrency).await,
        Some(s) => open_loop(&shared, cfg.max_in_flight(), s).await?,
    };
    let wall = start.elapsed();
    shared.progress.finish();
    // The receiver is gone only if the long-prompt task already ended; nothing to stop then.
    let _ = stop_tx.send(());
    let (long_prompts, long_prompts_cancelled) = match long_task {
        Some(t) => t.await.context("long-prompt task")?,
        None => (Vec::new(), 0),
    };
    Ok(RunResult {
        model,
        decoders,
        long_prompts,
        long_prompts_cancelled,
        wall,
        started_unix_s,
    })
}

/// Sends `cfg.warmup` requests one after another, with prompts no measured request uses (indices
/// counted down from `u64::MAX`), so they cannot seed a prefix cache for the run.
async fn warm_up(client: &Client, prompts: &PromptBuilder, cfg: &BenchConfig) {
    if cfg.warmup == 0 {
        return;
    }
    let mut failed = 0;
    for i in 0..u64::from(cfg.warmup) {
        let spec = cfg.workload.spec(u64::MAX - i);
        let prompt = prompts.prompt_with_len(u64::MAX - i, spec.prompt_tokens);
        let outcome = client
            .stream(u64::MAX - i, &prompt, spec.output_tokens)
            .await;
        failed += usize::from(!outcome.ok);
    }
    if failed > 0 {
        eprintln!("warm-up: {failed} of {} requests failed", cfg.warmup);
    }
}

async fn closed_loop(shared: &Shared, concurrency: usize) -> Vec<Outcome> {
    let next = Arc::new(AtomicU64::new(0));
    let mut set = JoinSet::new();
    for _ in 0..concurrency {
        let (shared, next) = (shared.clone(), next.clone());
        set.spawn(async move {
            let mut out = Vec::new();
            loop {
                if shared.expired(Instant::now()) {
                    break;
                }
                let i = next.fetch_add(1, Ordering::Relaxed);
                if shared.limit.is_some_and(|n| i >= n) {
                    break;
                }
                let sent = shared.start.elapsed().as_secs_f64();
                out.push(shared.request(i, sent).await);
            }
            out
        });
    }
    let mut all = Vec::new();
    while let Some(res) = set.join_next().await {
        match res {
            Ok(v) => all.extend(v),
            // A worker panicking is a bug in this crate, not a server failure; surface it.
            Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
            Err(_) => {}
        }
    }
    all
}

/// Starts request `i` at the `i`-th time of `schedule`, with at most `cap` in flight when given.
async fn open_loop(
    shared: &Shared,
    cap: Option<usize>,
    schedule: Arrivals,
) -> anyhow::Result<Vec<Outcome>> {
    let permits = cap.map(|c| Arc::new(Semaphore::new(c)));
    let mut set = JoinSet::new();
    // Bounded: validation guarantees a request limit, a deadline, or a finite trace.
    for (i, t) in (0u64..).zip(schedule) {
        if shared.limit.is_some_and(|n| i >= n) {
            break;
        }
        let at = shared.start + Duration::from_secs_f64(t);
        if shared.expired(at) {
            break;
        }
        tokio::time::sleep_until(at.into()).await;
        let permit = match &permits {
            Some(p) => Some(p.clone().acquire_owned().await?),
            None => None,
        };
        if shared.stop.is_requested() {
            break; // a stop requested while this arrival waited
        }
        let shared = shared.clone();
        set.spawn(async move {
            let outcome = shared.request(i, t).await;
            drop(permit);
            outcome
        });
    }
    let mut all = Vec::new();
    while let Some(res) = set.join_next().await {
        match res {
            Ok(o) => all.push(o),
            Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
            Err(_) => {}
        }
    }
    Ok(all)
}

/// Sends long prompt `k` at `start + (k + 1) * every` until told to stop; returns the completed
/// outcomes and how many were cancelled at the stop.
async fn long_prompt_loop(
    client: Client,
    prompts: Arc<PromptBuilder>,
    lp: LongPrompts,
    start: Instant,
    mut stop: oneshot::Receiver<()>,
) -> (Vec<Outcome>, usize) {
    let mut set = JoinSet::new();
    let mut done = Vec::new();
    for k in 0u64.. {
        let at = start + Duration::from_secs_f64(lp.every_s * (k + 1) as f64);
        tokio::select! {
            _ = &mut stop => break,
            _ = tokio::time::sleep_until(at.into()) => {}
        }
        let (c, prompt) = (client.clone(), prompts.long_prompt(k, lp.tokens));
        set.spawn(async move { c.stream(k, &prompt, 1).await });
        // Collect finished ones as we go so the set stays small on long runs.
        while let Some(Ok(o)) = set.try_join_next() {
            done.push(o);
        }
    }
    while let Some(Ok(o)) = set.try_join_next() {
        done.push(o);
    }
    let cancelled = set.len();
    set.shutdown().await;
    (done, cancelled)
}

/// The progress bar and its ok / failed tallies (hidden when not wanted or not on a terminal).
#[derive(Clone)]
struct Progress {
    bar: ProgressBar,
    ok: Arc<AtomicU64>,
    failed: Arc<AtomicU64>,
}

impl Progress {
    fn new(total: Option<u64>, show: bool) -> Self {
        let bar = match (show, total) {
            (false, _) => ProgressBar::hidden(),
            (true, Some(n)) => ProgressBar::new(n).with_style(style(
                "{spinner} [{elapsed_precise}] {bar:30} {pos}/{len} requests {msg}",
            )),
            (true, None) => ProgressBar::new_spinner()
                .with_style(style("{spinner} [{elapsed_precise}] {pos} requests {msg}")),
        };
        if show {
            bar.enable_steady_tick(Duration::from_millis(250));
        }
        Self {
            bar,
            ok: Arc::new(AtomicU64::new(0)),
            failed: Arc::new(AtomicU64::new(0)),
        }
    }

    fn record(&self, o: &Outcome) {
        let counter = if o.ok { &self.ok } else { &self.failed };
        counter.fetch_add(1, Ordering::Relaxed);
        self.bar.inc(1);
        self.bar.set_message(format!(
            "(ok {}, failed {})",
            self.ok.load(Ordering::Relaxed),
            self.failed.load(Ordering::Relaxed)
        ));
    }

    fn finish(&self) {
        self.bar.finish_and_clear();
    }
}

fn style(template: &str) -> ProgressStyle {
    // The templates are constants of this file; a bad one is a bug caught by any run with a bar.
    ProgressStyle::with_template(template).unwrap_or_else(|_| ProgressStyle::default_bar())
}
