//! The process's log and trace pipeline: `tracing` events go to stderr, human-readable or one
//! JSON object a line (`--log-format`); request spans (target `TARGET`) go, when an
//! OTLP endpoint is given, to an OpenTelemetry batch exporter over HTTP/protobuf.
//!
//! Export is off the hot path: ending a span puts it on a bounded queue that the SDK's batch
//! processor drains on its own thread, a batch at a time (every 5 s, or `OTEL_BSP_*`). A slow or
//! dead collector never blocks a request: a full queue drops spans, and a failed export is
//! counted (`ExportCounters`, shown on `/metrics`) and not retried. The filter of `RUST_LOG`
//! applies to the log output only, so request spans are exported whatever the log level.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::time::Duration;

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::{Protocol, WithExportConfig};
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{BatchSpanProcessor, SdkTracerProvider, SpanData, SpanExporter};
use opentelemetry_sdk::Resource;
use tracing_subscriber::filter::{filter_fn, EnvFilter};
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::Layer;

/// The `tracing` target of request spans and of the per-request log line (`serving::observe`).
pub const TARGET: &str = "tessera::request";

/// How log lines are written.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum LogFormat {
    /// `2025-01-01T00:00:00Z  INFO target: message key=value`.
    #[default]
    Human,
    /// One JSON object per line, the event's fields at its top level.
    Json,
}

impl LogFormat {
    pub fn parse(s: &str) -> Result<LogFormat, String> {
        match s {
            "human" => Ok(LogFormat::Human),
            "json" => Ok(LogFormat::Json),
            _ => Err(format!("expected human or json, not {s:?}")),
        }
    }
}

/// Spans sent to the collector and spans whose export failed, since start.
#[derive(Debug, Default)]
pub struct ExportCounters {
    pub exported: AtomicU64,
    pub failed: AtomicU64,
}

/// The process's export counters (zero while traces are off).
pub fn export_counters() -> &'static ExportCounters {
    static COUNTERS: ExportCounters = ExportCounters {
        exported: AtomicU64::new(0),
        failed: AtomicU64::new(0),
    };
    &COUNTERS
}

/// Whether request spans are exported (`observe` skips building attributes otherwise).
static EXPORTING: AtomicBool = AtomicBool::new(false);

pub(crate) fn exporting() -> bool {
    EXPORTING.load(Relaxed)
}

/// Keeps the exporter alive; `shutdown` flushes the spans still queued.
pub struct Telemetry {
    provider: Option<SdkTracerProvider>,
}

impl Telemetry {
    /// Exports what is queued (bounded by the export timeout) and stops the exporter thread.
    pub fn shutdown(self) {
        if let Some(p) = self.provider {
            EXPORTING.store(false, Relaxed);
            if let Err(e) = p.shutdown_with_timeout(Duration::from_secs(5)) {
                tracing::warn!("flushing traces: {e}");
            }
        }
    }
}

/// Installs the global subscriber: logs filtered by `filter` in `format` on stderr, and request
/// spans exported to `otlp_endpoint` when given (`http://host:4318`, or the full URL of the
/// traces path; a bare host gets `/v1/traces`). Call it once, outside any async runtime.
pub fn init(
    filter: EnvFilter,
    format: LogFormat,
    otlp_endpoint: Option<&str>,
) -> Result<Telemetry, String> {
    let logs = match format {
        LogFormat::Human => tracing_subscriber::fmt::layer()
            .with_writer(std::io::stderr)
            .boxed(),
        LogFormat::Json => tracing_subscriber::fmt::layer()
            .json()
            .flatten_event(true)
            .with_current_span(false)
            .with_span_list(false)
            .with_writer(std::io::stderr)
            .boxed(),
    };
    let provider = otlp_endpoint.map(tracer_provider).transpose()?;
    let spans = provider.as_ref().map(|p| {
        tracing_opentelemetry::layer()
            .with_tracer(p.tracer("tessera"))
            .with_location(false)
            .with_threads(false)
            .with_level(false)
            .with_target(false)
            .with_tracked_inactivity(false)
            .with_filter(filter_fn(|m| m.is_span() && m.target() == TARGET))
    });
    tracing_subscriber::registry()
        .with(logs.with_filter(filter))
        .with(spans)
        .try_init()
        .map_err(|e| format!("installing the log subscriber: {e}"))?;
    EXPORTING.store(provider.is_some(), Relaxed);
    Ok(Telemetry { provider })
}

/// The traces URL for an endpoint: as given, or with `/v1/traces` when it has no path.
pub fn traces_url(endpoint: &str) -> String {
    let trimmed = endpoint.trim_end_matches('/');
    let after_scheme = trimmed.split_once("://").map_or(trimmed, |(_, rest)| rest);
    if after_scheme.contains('/') {
        trimmed.to_string()
    } else {
        format!("{trimmed}/v1/traces")
    }
}

/// Builds the exporter on a thread of the lowest scheduling priority: the threads the SDK and
/// the HTTP client start while building it (the batch processor's, the blocking client's
/// runtime) inherit that priority, so on a machine whose cores the engine keeps busy they run in
/// its gaps instead of delaying a step — exporting shows in no request's token timings.
fn tracer_provider(endpoint: &str) -> Result<SdkTracerProvider, String> {
    let endpoint = endpoint.to_string();
    std::thread::Builder::new()
        .name("otlp-setup".into())
        .spawn(move || {
            lowest_priority();
            build_tracer_provider(&endpoint)
        })
        .map_err(|e| format!("starting the OTLP exporter: {e}"))?
        .join()
        .map_err(|_| "building the OTLP exporter panicked".to_string())?
}

/// Gives the calling thread the lowest priority (nice 19); threads it starts inherit it.
#[cfg(target_os = "linux")]
fn lowest_priority() {
    // SAFETY: setpriority takes no pointer; on Linux `PRIO_PROCESS` with `who` = 0 is the
    // calling thread alone (nice values are per thread), so nothing else changes priority.
    let rc = unsafe { libc::setpriority(libc::PRIO_PROCESS, 0, 19) };
    if rc != 0 {
        tracing::debug!(
            "lowering the exporter's priority: {}",
            std::io::Error::last_os_error()
        );
    }
}

#[cfg(not(target_os = "linux"))]
fn lowest_priority() {}

fn build_tracer_provider(endpoint: &str) -> Result<SdkTracerProvider, String> {
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_protocol(Protocol::HttpBinary)
        .with_endpoint(traces_url(endpoint))
        .with_timeout(Duration::from_secs(5))
        .build()
        .map_err(|e| format!("the OTLP exporter for {endpoint}: {e}"))?;
    let counted = Counted {
        inner: exporter,
        counters: export_counters(),
    };
    // OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES win over the default name.
    let mut resource = Resource::builder();
    if std::env::var_os("OTEL_SERVICE_NAME").is_none() {
        resource = resource.with_service_name("tessera");
    }
    Ok(SdkTracerProvider::builder()
        .with_resource(resource.build())
        .with_span_processor(BatchSpanProcessor::builder(counted).build())
        .build())
}

/// An exporter that counts what it exported and what failed.
#[derive(Debug)]
struct Counted<E> {
    inner: E,
    counters: &'static ExportCounters,
}

impl<E: SpanExporter + 'static> SpanExporter for Counted<E> {
    async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        let n = batch.len() as u64;
        let result = self.inner.export(batch).await;
        let counter = match result {
            Ok(()) => &self.counters.exported,
            Err(_) => &self.counters.failed,
        };
        counter.fetch_add(n, Relaxed);
        result
    }

    fn shutdown_with_timeout(&mut self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn force_flush(&mut self) -> OTelSdkResult {
        self.inner.force_flush()
    }

    fn set_resource(&mut self, resource: &Resource) {
        self.inner.set_resource(resource);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bare_endpoint_gets_the_traces_path() {
        assert_eq!(
            traces_url("http://127.0.0.1:4318"),
            "http://127.0.0.1:4318/v1/traces"
        );
        assert_eq!(traces_url("http://c:4318/"), "http://c:4318/v1/traces");
        assert_eq!(traces_url("http://c:4318/custom"), "http://c:4318/custom");
    }

    /// The nice value (field 19 of `/proc/self/task/TID/stat`) of every thread whose name
    /// starts with `prefix`.
    #[cfg(target_os = "linux")]
    fn nice_of_threads(prefix: &str) -> Vec<i64> {
        let mut found = Vec::new();
        for task in std::fs::read_dir("/proc/self/task")
            .into_iter()
            .flatten()
            .flatten()
        {
            let comm = std::fs::read_to_string(task.path().join("comm")).unwrap_or_default();
            if !comm.starts_with(prefix) {
                continue;
            }
            let stat = std::fs::read_to_string(task.path().join("stat")).unwrap_or_default();
            // Fields after the parenthesised name: state is field 3, nice field 19.
            let after = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
            if let Some(nice) = after.split_whitespace().nth(16) {
                found.push(nice.parse().unwrap_or(i64::MIN));
            }
        }
        found
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn the_exporter_threads_run_at_the_lowest_priority() {
        // SAFETY: getpriority takes no pointer and reads the calling thread's nice value.
        let own_before = unsafe { libc::getpriority(libc::PRIO_PROCESS, 0) };
        let provider = tracer_provider("http://127.0.0.1:9").expect("exporter");
        // The SDK names its thread "OpenTelemetry.Traces.BatchProcessor" (comm keeps 15
        // bytes); a new thread names itself once it runs, so on a busy machine wait for it.
        let mut nice = Vec::new();
        for _ in 0..200 {
            nice = nice_of_threads("OpenTelemetry.T");
            if !nice.is_empty() {
                break;
            }
            std::thread::sleep(Duration::from_millis(25));
        }
        assert!(!nice.is_empty(), "no batch processor thread found");
        assert!(nice.iter().all(|&n| n == 19), "nice values {nice:?}");
        // The calling thread keeps its own priority.
        // SAFETY: as above.
        let own_after = unsafe { libc::getpriority(libc::PRIO_PROCESS, 0) };
        assert_eq!(own_before, own_after);
        let _ = provider.shutdown_with_timeout(Duration::from_millis(100));
    }

    #[test]
    fn log_formats_parse() {
        assert_eq!(LogFormat::parse("json"), Ok(LogFormat::Json));
        assert_eq!(LogFormat::parse("human"), Ok(LogFormat::Human));
        assert!(LogFormat::parse("xml").is_err());
    }
}
