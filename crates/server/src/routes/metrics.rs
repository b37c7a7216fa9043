//! `/metrics` in the Prometheus text format (version 0.0.4), names prefixed `tessera_` and
//! modelled on vLLM's, encoded by the `prometheus-client` crate.
//!
//! Everything is read from atomics at scrape time, by one `Collector` over the server state:
//! the engine's `EngineStats` (requests, tokens, tiles, prefix cache, latency histograms) and
//! the server's own counters (errors by type; request spans exported over OTLP, shown with the
//! engine's). The engine thread owns and updates its atomics and never waits on a scrape, so
//! there are no registered metric objects to keep in sync: a scrape builds a registry holding
//! just that collector, which also fixes the order of the families and of their samples.
//!
//! Counters are named without `_total` here; the 0.0.4 encoder appends it to the `# HELP` and
//! `# TYPE` lines and to the samples alike, as the official Python client writes them. Gauge
//! and counter values are floats (`5.0`); histogram buckets are the engine's, their bounds
//! written the way Go's client writes them (`le="1"`, `le="0.005"`), the one form the crate's
//! encoder has. Before the model is loaded only the server's counters and
//! `tessera_model_loaded 0.0` are shown.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use engine::constraint::GrammarStats;
use engine::stats::Histogram;
use engine::EngineStats;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{
    prometheus_text, DescriptorEncoder, EncodeMetric, MetricEncoder, NoLabelSet,
};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;

use crate::serving::state::AppState;

/// The `Content-Type` of the scrape.
pub const CONTENT_TYPE: &str = prometheus_text::CONTENT_TYPE;

/// The whole scrape. Fails only if the encoder reports a formatting error, which writing into
/// a `String` does not produce.
pub fn render(state: &AppState) -> Result<String, fmt::Error> {
    let mut registry = Registry::default();
    registry.register_collector(Box::new(Scrape(state.clone())));
    let mut out = String::with_capacity(8 << 10);
    prometheus_text::encode(&mut out, &registry)?;
    Ok(out)
}

/// Reads the server state at scrape time.
struct Scrape(AppState);

impl fmt::Debug for Scrape {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Scrape")
    }
}

impl Collector for Scrape {
    fn encode(&self, mut enc: DescriptorEncoder) -> fmt::Result {
        let loaded = self.0.loaded();
        let help = "1 once the model is loaded.";
        gauge(
            &mut enc,
            "tessera_model_loaded",
            help,
            loaded.is_some().into(),
        )?;
        let help = "Requests answered with an error, by error type.";
        let errors = self.0.counters().errors();
        counter_family(&mut enc, "tessera_request_errors", help, "type", &errors)?;
        if let Some(m) = loaded {
            cache_config_info(&mut enc, m.engine.info())?;
            engine_metrics(&mut enc, m.engine.stats())?;
            grammar_counters(&mut enc, m.engine.grammar_stats())?;
            trace_export_counters(&mut enc)?;
            heap_gauges(&mut enc)?;
        }
        Ok(())
    }
}

/// `tessera_cache_config_info{tile_size, num_tiles} 1`: the KV pool's geometry as an info
/// gauge, the shape of vLLM's `cache_config_info`, so an endpoint picker's prefix scorer can
/// read the block size and block count (llm-d's `cacheInfoSpec`, see deploy/llm-d/).
fn cache_config_info(enc: &mut DescriptorEncoder, info: &engine::ModelInfo) -> fmt::Result {
    let help = "KV cache geometry: tokens per tile and tiles in the pool (value always 1).";
    let mut m =
        enc.encode_descriptor("tessera_cache_config_info", help, None, MetricType::Gauge)?;
    let (size, count) = (info.tile_size.to_string(), info.kv_tiles.to_string());
    let labels = [("tile_size", size.as_str()), ("num_tiles", count.as_str())];
    ConstGauge::new(1.0).encode(m.encode_family(&labels)?)
}

/// Constrained decoding: compilations (cache misses), cache hits, token masks, and the time
/// spent on compilations and masks (the mask cost per token is the ratio of the last two).
fn grammar_counters(enc: &mut DescriptorEncoder, g: &GrammarStats) -> fmt::Result {
    let secs = |v: &AtomicU64| v.load(Relaxed) as f64 / 1e9;
    let counters = [
        (
            "tessera_structured_compiles",
            "Output constraints compiled (grammar cache misses).",
            load(&g.compiled),
        ),
        (
            "tessera_structured_compile_seconds",
            "Time spent compiling output constraints.",
            secs(&g.compile_nanos),
        ),
        (
            "tessera_structured_cache_hits",
            "Output constraints found compiled in the cache.",
            load(&g.cache_hits),
        ),
        (
            "tessera_structured_masks",
            "Token masks computed for constrained sequences.",
            load(&g.masks),
        ),
        (
            "tessera_structured_mask_seconds",
            "Time spent computing token masks.",
            secs(&g.mask_nanos),
        ),
    ];
    for (name, help, v) in counters {
        let m = enc.encode_descriptor(name, help, None, MetricType::Counter)?;
        ConstCounter::new(v).encode(m)?;
    }
    let m = enc.encode_descriptor(
        "tessera_structured_vocab_waits",
        "Constraint compilations that had to wait for the vocabulary to be indexed.",
        None,
        MetricType::Counter,
    )?;
    ConstCounter::new(load(&g.vocab_waits)).encode(m)?;
    let m = enc.encode_descriptor(
        "tessera_structured_vocab_ready",
        "1 once the vocabulary is indexed for constrained decoding (done at start-up).",
        None,
        MetricType::Gauge,
    )?;
    ConstGauge::new(u8::from(g.vocab_ready.load(Relaxed)) as f64).encode(m)
}

fn engine_metrics(enc: &mut DescriptorEncoder, st: &EngineStats) -> fmt::Result {
    engine_gauges(enc, st)?;
    engine_counters(enc, st)?;
    engine_histograms(enc, st)?;
    if let Some(k) = st.kv_events.get() {
        kv_event_metrics(enc, k)?;
    }
    match st.tiers.get() {
        Some(t) => tier_metrics(enc, t),
        None => Ok(()),
    }
}

/// The KV event stream's counters, when events are published.
fn kv_event_metrics(
    enc: &mut DescriptorEncoder,
    k: &engine::kv_events::KvEventStats,
) -> fmt::Result {
    let counters = [
        (
            "tessera_kv_events_published_batches",
            "KV event batches sent on the publisher's socket.",
            &k.published_batches,
        ),
        (
            "tessera_kv_events_dropped_batches",
            "KV event batches dropped because the publisher's queue was full.",
            &k.dropped_batches,
        ),
        (
            "tessera_kv_events_dropped_events",
            "KV events in the dropped batches.",
            &k.dropped_events,
        ),
        (
            "tessera_kv_events_replays",
            "Replay requests answered.",
            &k.replays,
        ),
    ];
    for (name, help, v) in counters {
        let m = enc.encode_descriptor(name, help, None, MetricType::Counter)?;
        ConstCounter::new(load(v)).encode(m)?;
    }
    Ok(())
}

/// The KV tiers' counters, labelled by tier (`disk`, `redis`), when tiers are on.
fn tier_metrics(enc: &mut DescriptorEncoder, t: &engine::tier::TierStats) -> fmt::Result {
    type Field = fn(&engine::tier::TierCounters) -> &AtomicU64;
    let per_tier: [(&str, &str, Field); 6] = [
        (
            "tessera_kv_tier_lookups",
            "KV tiles asked of a tier.",
            |c| &c.lookups,
        ),
        (
            "tessera_kv_tier_hits",
            "KV tiles a tier returned and that verified.",
            |c| &c.hits,
        ),
        (
            "tessera_kv_tier_read_bytes",
            "Bytes read from a tier.",
            |c| &c.bytes_read,
        ),
        (
            "tessera_kv_tier_written_bytes",
            "Bytes written to a tier.",
            |c| &c.bytes_written,
        ),
        (
            "tessera_kv_tier_errors",
            "Tier operations that failed (the tokens were recomputed).",
            |c| &c.errors,
        ),
        (
            "tessera_kv_tier_rejected",
            "Values a tier returned that did not verify (never used).",
            |c| &c.rejected,
        ),
    ];
    for (name, help, field) in per_tier {
        let samples: Vec<(&str, u64)> = t
            .tiers
            .iter()
            .map(|c| (c.name, field(c).load(Relaxed)))
            .collect();
        counter_family(enc, name, help, "tier", &samples)?;
    }
    let totals = [
        (
            "tessera_kv_tier_write_drops",
            "Tier writes dropped because the queue was full.",
            &t.write_drops,
        ),
        (
            "tessera_kv_tier_skipped_fetches",
            "Tier fetches not made because recomputing was estimated faster.",
            &t.skipped_fetches,
        ),
        (
            "tessera_kv_tier_imported_tiles",
            "KV tiles imported from the tiers into memory.",
            &t.imported_tiles,
        ),
    ];
    for (name, help, v) in totals {
        let m = enc.encode_descriptor(name, help, None, MetricType::Counter)?;
        ConstCounter::new(load(v)).encode(m)?;
    }
    for c in &t.tiers {
        let name = format!("tessera_kv_tier_{}_load_seconds", c.name);
        let help = "Seconds per fetch from this tier.";
        let m = enc.encode_descriptor(&name, help, None, MetricType::Histogram)?;
        Buckets(&c.load_seconds).encode(m)?;
    }
    Ok(())
}

fn load(v: &AtomicU64) -> f64 {
    v.load(Relaxed) as f64
}

fn engine_gauges(enc: &mut DescriptorEncoder, st: &EngineStats) -> fmt::Result {
    let g = load;
    let gauges = [
        (
            "tessera_num_requests_running",
            "Requests in the running batch.",
            g(&st.running),
        ),
        (
            "tessera_num_requests_waiting",
            "Requests waiting to be scheduled.",
            g(&st.waiting),
        ),
        (
            "tessera_kv_tiles_total",
            "KV tiles in the pool.",
            g(&st.tiles_total),
        ),
        (
            "tessera_kv_tiles_used",
            "KV tiles held by requests.",
            g(&st.tiles_in_use),
        ),
        (
            "tessera_kv_tiles_cached",
            "Free KV tiles that still hold a cached prefix.",
            g(&st.tiles_cached),
        ),
        (
            "tessera_kv_cache_usage_perc",
            "Fraction of KV tiles in use (0-1).",
            g(&st.tiles_in_use) / g(&st.tiles_total).max(1.0),
        ),
    ];
    for (name, help, v) in gauges {
        gauge(enc, name, help, v)?;
    }
    Ok(())
}

fn engine_counters(enc: &mut DescriptorEncoder, st: &EngineStats) -> fmt::Result {
    let counters = [
        (
            "tessera_prompt_tokens",
            "Prompt tokens of finished requests.",
            &st.prompt_tokens,
        ),
        (
            "tessera_generation_tokens",
            "Generated tokens.",
            &st.generation_tokens,
        ),
        (
            "tessera_prefix_cache_queries",
            "Prompt tokens looked up in the prefix cache.",
            &st.prefix_queried_tokens,
        ),
        (
            "tessera_prefix_cache_hits",
            "Prompt tokens found in the prefix cache.",
            &st.prefix_hit_tokens,
        ),
        (
            "tessera_num_preemptions",
            "Sequences preempted.",
            &st.preemptions,
        ),
        ("tessera_engine_steps", "Engine steps run.", &st.steps),
        (
            "tessera_spec_decode_num_drafts",
            "Drafts fed (one per sequence and step that verified drafted tokens).",
            &st.spec_drafts,
        ),
        (
            "tessera_spec_decode_num_draft_tokens",
            "Drafted tokens fed for verification.",
            &st.spec_draft_tokens,
        ),
        (
            "tessera_spec_decode_num_accepted_tokens",
            "Drafted tokens accepted.",
            &st.spec_accepted_tokens,
        ),
    ];
    for (name, help, v) in counters {
        let m = enc.encode_descriptor(name, help, None, MetricType::Counter)?;
        ConstCounter::new(load(v)).encode(m)?;
    }
    let m = enc.encode_descriptor(
        "tessera_spec_decode_draft_seconds",
        "Time spent drafting (a draft model's forward passes, prompt lookup's scans).",
        None,
        MetricType::Counter,
    )?;
    ConstCounter::new(load(&st.spec_draft_micros) / 1e6).encode(m)?;
    let finished = [
        ("stop", st.finished_stop.load(Relaxed)),
        ("length", st.finished_length.load(Relaxed)),
        ("abort", st.finished_abort.load(Relaxed)),
    ];
    let help = "Finished requests, by finish reason.";
    counter_family(
        enc,
        "tessera_request_success",
        help,
        "finished_reason",
        &finished,
    )
}

fn engine_histograms(enc: &mut DescriptorEncoder, st: &EngineStats) -> fmt::Result {
    let hists = [
        (
            "tessera_time_to_first_token_seconds",
            "Time to first token.",
            &st.ttft,
        ),
        (
            "tessera_inter_token_latency_seconds",
            "Time between generated tokens.",
            &st.itl,
        ),
        (
            "tessera_e2e_request_latency_seconds",
            "Arrival to finish.",
            &st.e2e,
        ),
        (
            "tessera_request_queue_time_seconds",
            "Arrival to first schedule.",
            &st.queue_time,
        ),
        (
            "tessera_tokens_per_step",
            "Tokens processed per engine step.",
            &st.tokens_per_step,
        ),
        (
            "tessera_spec_decode_acceptance_rate",
            "Per finished request that fed drafts: accepted / drafted tokens.",
            &st.spec_acceptance,
        ),
    ];
    for (name, help, h) in hists {
        let m = enc.encode_descriptor(name, help, None, MetricType::Histogram)?;
        Buckets(h).encode(m)?;
    }
    Ok(())
}

/// Request spans exported over OTLP and spans whose export failed (zero with traces off).
fn trace_export_counters(enc: &mut DescriptorEncoder) -> fmt::Result {
    let c = crate::telemetry::export_counters();
    let counters = [
        (
            "tessera_otlp_spans_exported",
            "Request spans sent to the OTLP collector.",
            &c.exported,
        ),
        (
            "tessera_otlp_spans_failed",
            "Request spans whose export failed (collector down or refusing); they are dropped.",
            &c.failed,
        ),
    ];
    for (name, help, v) in counters {
        let m = enc.encode_descriptor(name, help, None, MetricType::Counter)?;
        ConstCounter::new(load(v)).encode(m)?;
    }
    Ok(())
}

/// The C allocator's own account of the heap (glibc's `mallinfo2`): bytes handed out and
/// not yet freed, and bytes it holds from the system. Resident memory that grows while the
/// first stays flat is fragmentation, not a leak. Absent with another C library.
fn heap_gauges(enc: &mut DescriptorEncoder) -> fmt::Result {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        // SAFETY: mallinfo2 takes no argument and returns a plain struct by value; it locks
        // each arena while it sums it, which is what malloc itself does.
        let info = unsafe { libc::mallinfo2() };
        let in_use = info.uordblks + info.hblkhd;
        let held = info.arena + info.hblkhd;
        gauge(
            enc,
            "tessera_heap_in_use_bytes",
            "Heap bytes allocated and not freed (malloc's own count, mmapped blocks included).",
            in_use as f64,
        )?;
        gauge(
            enc,
            "tessera_heap_held_bytes",
            "Heap bytes malloc holds from the system, in use or free for reuse.",
            held as f64,
        )?;
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    let _ = enc;
    Ok(())
}

/// One unlabelled gauge. Values are floats, so whole numbers read `5.0`.
fn gauge(enc: &mut DescriptorEncoder, name: &str, help: &str, v: f64) -> fmt::Result {
    let m = enc.encode_descriptor(name, help, None, MetricType::Gauge)?;
    ConstGauge::new(v).encode(m)
}

/// A counter family with one label, a sample per `(label value, count)` in the given order.
fn counter_family(
    enc: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    label: &str,
    samples: &[(&str, u64)],
) -> fmt::Result {
    let mut m = enc.encode_descriptor(name, help, None, MetricType::Counter)?;
    for &(value, n) in samples {
        let labels = [(label, value)];
        ConstCounter::new(n as f64).encode(m.encode_family(&labels)?)?;
    }
    Ok(())
}

/// The engine's fixed-bucket histogram, encoded as a Prometheus histogram.
struct Buckets<'a>(&'a Histogram);

impl EncodeMetric for Buckets<'_> {
    fn encode(&self, mut enc: MetricEncoder) -> fmt::Result {
        // The snapshot's counts are cumulative and end with +Inf; the encoder wants each
        // bucket's own count and accumulates them itself.
        let (cumulative, sum, _) = self.0.snapshot();
        let mut below = 0;
        let buckets: Vec<(f64, u64)> = cumulative
            .iter()
            .map(|&(le, acc)| {
                let own = acc.saturating_sub(below);
                below = acc;
                (le, own)
            })
            .collect();
        // `_count` is the +Inf bucket, so the two agree even when an observation lands
        // between the engine's bucket and count updates.
        enc.encode_histogram::<NoLabelSet>(sum, below, &buckets, None)
    }

    fn metric_type(&self) -> MetricType {
        MetricType::Histogram
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::serving::state::ServerConfig;

    #[test]
    fn before_loading_only_the_server_counters_are_shown() {
        let state = AppState::new(ServerConfig::default());
        state.counters().count_error("not_found");
        let text = render(&state).expect("renders");
        let head = "# HELP tessera_model_loaded 1 once the model is loaded.\n\
            # TYPE tessera_model_loaded gauge\n\
            tessera_model_loaded 0.0\n\
            # HELP tessera_request_errors_total Requests answered with an error, by error type.\n\
            # TYPE tessera_request_errors_total counter\n\
            tessera_request_errors_total{type=\"invalid_request\"} 0.0\n\
            tessera_request_errors_total{type=\"unauthorized\"} 0.0\n\
            tessera_request_errors_total{type=\"not_found\"} 1.0\n";
        assert!(text.starts_with(head), "{text}");
        assert_eq!(text.lines().count(), 5 + crate::base::ERROR_LABELS.len());
    }

    /// A collector of one histogram named `h`.
    struct One(Histogram);

    impl fmt::Debug for One {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("One")
        }
    }

    impl Collector for One {
        fn encode(&self, mut enc: DescriptorEncoder) -> fmt::Result {
            let m = enc.encode_descriptor("h", "Help.", None, MetricType::Histogram)?;
            Buckets(&self.0).encode(m)
        }
    }

    #[test]
    fn histograms_keep_the_engine_buckets_and_count_what_the_buckets_hold() {
        let h = Histogram::new(&[0.5, 2.0]);
        for v in [0.25, 1.5, 1.75, 9.0] {
            h.observe(v);
        }
        let mut registry = Registry::default();
        registry.register_collector(Box::new(One(h)));
        let mut text = String::new();
        prometheus_text::encode(&mut text, &registry).expect("renders");
        let want = "# HELP h Help.\n# TYPE h histogram\n\
            h_bucket{le=\"0.5\"} 1\nh_bucket{le=\"2\"} 3\nh_bucket{le=\"+Inf\"} 4\n\
            h_sum 12.5\nh_count 4\n";
        assert_eq!(text, want);
    }
}
