//! One record per API request: a `tracing` span (exported as an OpenTelemetry server span when
//! `--otlp-traces-endpoint` is set, see `telemetry`) and one log line when the request ends.
//!
//! The `layer` middleware opens the record when a request arrives, continuing the caller's W3C
//! `traceparent`, and keeps it in a task-local while the handler runs, so the code that knows
//! a fact records it without the record being passed around: `serving::head` names the
//! response, `run::start` adds the request's parameters and hands each choice a clone, and every finished
//! choice adds its usage, finish reason and engine timings. The record is shared (`Arc`); it is
//! closed when its last holder lets go — when the handler returns for a whole response, when
//! the stream ends or its client leaves for a streamed one — and closing it sets the span's
//! attributes (OpenTelemetry GenAI semantic conventions, plus vLLM's `gen_ai.latency.*`
//! timings), writes the log line (target `tessera::request`) and ends the span.
//!
//! With several choices, token counts add up as in the response's `usage` and each timing is the
//! slowest choice's. The timings are the engine's, from the moment the engine queued the
//! request; `e2e` is the server's, from the moment the request arrived.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::{Request, State};
use axum::http::HeaderMap;
use axum::middleware::Next;
use axum::response::Response;
use engine::{FinishReason, Timings, Usage};
use opentelemetry::propagation::{Extractor, TextMapPropagator};
use opentelemetry::trace::{Status, TraceContextExt};
use opentelemetry::{Array, KeyValue, StringValue, Value};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use tracing::Span;
use tracing_opentelemetry::OpenTelemetrySpanExt;

use crate::base::ErrorLabel;
use crate::protocol::response::UsageTotals;
use crate::serving::state::AppState;
use crate::serving::validate::Job;
use crate::telemetry::exporting;

pub use crate::telemetry::TARGET;

tokio::task_local! {
    static CURRENT: RequestTrace;
}

/// Middleware: opens the request's record and keeps it current while the handler runs.
pub async fn layer(State(state): State<AppState>, req: Request, next: Next) -> Response {
    let model = state.loaded().map(|m| m.model_id.clone());
    let trace = RequestTrace::start(
        req.headers(),
        req.method().as_str(),
        req.uri().path(),
        model,
    );
    let resp = CURRENT.scope(trace.clone(), next.run(req)).await;
    let label = resp.extensions().get::<ErrorLabel>().map(|l| l.0);
    trace.responded(resp.status().as_u16(), label);
    resp
}

/// The record of the request being handled, if any.
pub fn current() -> Option<RequestTrace> {
    CURRENT.try_with(RequestTrace::clone).ok()
}

/// Names the current request's response (its `id`), if a request is being handled.
pub fn name_response(id: &str) {
    let _ = CURRENT.try_with(|t| t.with(|r| r.response_id = Some(id.to_string())));
}

/// A request's shared record.
#[derive(Clone)]
pub struct RequestTrace(Arc<Inner>);

struct Inner {
    span: Span,
    arrived: Instant,
    method: String,
    path: String,
    /// 32 hex digits: the caller's trace (`traceparent`), or the exported span's own.
    trace_id: Option<String>,
    record: Mutex<Record>,
}

/// What is known about the request so far.
#[derive(Default)]
struct Record {
    model: Option<String>,
    response_id: Option<String>,
    params: Option<Params>,
    usage: Option<UsageTotals>,
    choices: usize,
    finished: usize,
    reasons: Vec<&'static str>,
    preemptions: u32,
    timings: Slowest,
    status: u16,
    error: Option<String>,
}

/// The request's sampling settings.
struct Params {
    max_tokens: usize,
    temperature: f32,
    top_p: f32,
    top_k: usize,
    seed: Option<u64>,
    presence_penalty: f32,
    frequency_penalty: f32,
    n: usize,
    stream: bool,
}

/// Each timing of the slowest choice.
#[derive(Clone, Copy, Default)]
struct Slowest {
    queue: Option<Duration>,
    ttft: Option<Duration>,
    prefill: Option<Duration>,
    decode: Option<Duration>,
}

impl Slowest {
    fn add(&mut self, t: &Timings) {
        let max = |a: Option<Duration>, b: Option<Duration>| a.max(b);
        self.queue = max(self.queue, t.queue);
        self.ttft = max(self.ttft, t.first_token);
        self.prefill = max(self.prefill, t.prefill());
        self.decode = max(self.decode, t.decode());
    }
}

/// Reads W3C trace-context headers from a request.
struct Headers<'a>(&'a HeaderMap);

impl Extractor for Headers<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).and_then(|v| v.to_str().ok())
    }

    fn keys(&self) -> Vec<&str> {
        self.0.keys().map(|k| k.as_str()).collect()
    }
}

impl RequestTrace {
    /// Opens the record of a request that just arrived.
    pub fn start(headers: &HeaderMap, method: &str, path: &str, model: Option<String>) -> Self {
        let parent = TraceContextPropagator::new().extract(&Headers(headers));
        let caller = parent.span().span_context().clone();
        let span = tracing::info_span!(
            target: TARGET,
            "request",
            otel.name = format!("{method} {path}"),
            otel.kind = "server",
        );
        let mut trace_id = caller.is_valid().then(|| caller.trace_id().to_string());
        if exporting() {
            if caller.is_valid() {
                let _ = span.set_parent(parent);
            }
            let own = span.context().span().span_context().clone();
            if own.is_valid() {
                trace_id = Some(own.trace_id().to_string());
            }
        }
        RequestTrace(Arc::new(Inner {
            span,
            arrived: Instant::now(),
            method: method.to_string(),
            path: path.to_string(),
            trace_id,
            record: Mutex::new(Record {
                model,
                ..Record::default()
            }),
        }))
    }

    fn with<T>(&self, f: impl FnOnce(&mut Record) -> T) -> T {
        let mut r = self.0.record.lock().unwrap_or_else(|e| e.into_inner());
        f(&mut r)
    }

    /// The request was validated into `job` and its choices are about to be submitted.
    pub fn begin(&self, job: &Job) {
        let s = &job.request.sampling;
        let params = Params {
            max_tokens: job.request.max_tokens,
            temperature: s.temperature,
            top_p: s.top_p,
            top_k: s.top_k,
            seed: s.seed,
            presence_penalty: s.presence_penalty,
            frequency_penalty: s.frequency_penalty,
            n: job.n,
            stream: job.stream,
        };
        self.with(|r| {
            r.params = Some(params);
            r.usage = Some(UsageTotals::new(&job.prompts));
            r.choices = job.prompts.len() * job.n;
        });
    }

    /// A choice of prompt `prompt_index` finished.
    pub fn finished(&self, prompt_index: usize, reason: FinishReason, usage: &Usage) {
        self.with(|r| {
            if let Some(u) = &mut r.usage {
                u.add(prompt_index, usage);
            }
            r.finished += 1;
            r.reasons.push(reason.as_str());
            r.preemptions += usage.preemptions;
            r.timings.add(&usage.timings);
        });
    }

    /// The request failed after its response started (an in-band stream error).
    pub fn failed(&self, message: &str) {
        self.with(|r| r.error = Some(message.to_string()));
    }

    /// The handler answered with `status` (and an error of type `label`).
    fn responded(&self, status: u16, label: Option<&'static str>) {
        self.with(|r| {
            r.status = status;
            if let Some(l) = label {
                r.error.get_or_insert_with(|| l.to_string());
            }
        });
    }
}

impl Record {
    /// `ok`, `error`, or `cancelled` (the client left before every choice finished).
    fn outcome(&self) -> &'static str {
        if self.error.is_some() || self.status >= 400 {
            "error"
        } else if self.finished < self.choices {
            "cancelled"
        } else {
            "ok"
        }
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        let e2e = self.arrived.elapsed();
        let r = self.record.get_mut().unwrap_or_else(|e| e.into_inner());
        if exporting() {
            set_attributes(&self.span, &self.path, r, e2e);
        }
        let secs = |d: Option<Duration>| d.map(|d| d.as_secs_f64());
        let usage = r.usage.as_ref().map(UsageTotals::usage);
        let reasons = (!r.reasons.is_empty()).then(|| r.reasons.join(","));
        tracing::info!(
            target: TARGET,
            id = r.response_id.as_deref(),
            trace_id = self.trace_id.as_deref(),
            method = self.method.as_str(),
            path = self.path.as_str(),
            model = r.model.as_deref(),
            status = r.status,
            outcome = r.outcome(),
            error = r.error.as_deref(),
            prompt_tokens = usage.map(|u| u.prompt_tokens),
            cached_tokens = usage.map(|u| u.prompt_tokens_details.cached_tokens),
            output_tokens = usage.map(|u| u.completion_tokens),
            finish_reason = reasons.as_deref(),
            preemptions = usage.map(|_| r.preemptions),
            queue_s = secs(r.timings.queue),
            ttft_s = secs(r.timings.ttft),
            prefill_s = secs(r.timings.prefill),
            decode_s = secs(r.timings.decode),
            e2e_s = e2e.as_secs_f64(),
            "request finished"
        );
    }
}

/// The GenAI operation of a generation route: `text_completion` for `/v1/completions`, `chat`
/// for the chat routes.
fn operation_for(path: &str) -> &'static str {
    if path.ends_with("/completions") && !path.ends_with("/chat/completions") {
        "text_completion"
    } else {
        "chat"
    }
}

/// The span's attributes: HTTP, then GenAI when the request ran on the engine. Its name
/// becomes `{operation} {model}` then, as the GenAI conventions name client spans.
fn set_attributes(span: &Span, path: &str, r: &Record, e2e: Duration) {
    let cx = span.context();
    let otel = cx.span();
    let int = |v: usize| Value::I64(i64::try_from(v).unwrap_or(i64::MAX));
    let mut attrs = vec![
        KeyValue::new("http.response.status_code", i64::from(r.status)),
        KeyValue::new("gen_ai.latency.e2e", e2e.as_secs_f64()),
    ];
    if let Some(m) = &r.model {
        attrs.push(KeyValue::new("gen_ai.request.model", m.clone()));
        attrs.push(KeyValue::new("gen_ai.response.model", m.clone()));
    }
    if let Some(id) = &r.response_id {
        attrs.push(KeyValue::new("gen_ai.response.id", id.clone()));
    }
    if let Some(p) = &r.params {
        let operation = operation_for(path);
        let name = format!("{operation} {}", r.model.as_deref().unwrap_or(""));
        otel.update_name(name.trim_end().to_string());
        attrs.extend([
            KeyValue::new("gen_ai.operation.name", operation),
            KeyValue::new("gen_ai.request.max_tokens", int(p.max_tokens)),
            KeyValue::new("gen_ai.request.temperature", decimal(p.temperature)),
            KeyValue::new("gen_ai.request.top_p", decimal(p.top_p)),
            KeyValue::new("gen_ai.request.top_k", int(p.top_k)),
            KeyValue::new(
                "gen_ai.request.presence_penalty",
                decimal(p.presence_penalty),
            ),
            KeyValue::new(
                "gen_ai.request.frequency_penalty",
                decimal(p.frequency_penalty),
            ),
            KeyValue::new("gen_ai.request.choice.count", int(p.n)),
            KeyValue::new("gen_ai.request.stream", p.stream),
            KeyValue::new("tessera.preemptions", i64::from(r.preemptions)),
        ]);
        if let Some(seed) = p.seed {
            // OpenTelemetry integers are i64: a seed past i64::MAX shows as its two's complement.
            attrs.push(KeyValue::new("gen_ai.request.seed", seed as i64));
        }
    }
    if let Some(u) = r.usage.as_ref().map(UsageTotals::usage) {
        attrs.extend([
            KeyValue::new("gen_ai.usage.input_tokens", int(u.prompt_tokens)),
            KeyValue::new("gen_ai.usage.output_tokens", int(u.completion_tokens)),
            KeyValue::new(
                "gen_ai.usage.cache_read.input_tokens",
                int(u.prompt_tokens_details.cached_tokens),
            ),
        ]);
    }
    if !r.reasons.is_empty() {
        let reasons: Vec<StringValue> = r.reasons.iter().map(|&s| s.into()).collect();
        attrs.push(KeyValue::new(
            "gen_ai.response.finish_reasons",
            Value::Array(Array::String(reasons)),
        ));
    }
    let timings = [
        ("gen_ai.latency.time_in_queue", r.timings.queue),
        ("gen_ai.latency.time_to_first_token", r.timings.ttft),
        ("gen_ai.latency.time_in_model_prefill", r.timings.prefill),
        ("gen_ai.latency.time_in_model_decode", r.timings.decode),
    ];
    for (key, d) in timings {
        if let Some(d) = d {
            attrs.push(KeyValue::new(key, d.as_secs_f64()));
        }
    }
    otel.set_attributes(attrs);
    match (&r.error, r.outcome()) {
        (Some(e), _) => {
            otel.set_attribute(KeyValue::new("error.type", e.clone()));
            otel.set_status(Status::error(e.clone()));
        }
        (None, "error") => otel.set_status(Status::error(format!("HTTP {}", r.status))),
        _ => {}
    }
}

/// A request's `f32` setting as the decimal the client wrote (0.9, not 0.8999999761581421).
fn decimal(x: f32) -> f64 {
    x.to_string().parse().unwrap_or(f64::from(x))
}
