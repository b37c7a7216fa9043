//! `/metrics` in Prometheus text format (version 0.0.4), names prefixed `tessera_` and modelled
//! on vLLM's.
//!
//! Everything is read from atomics at scrape time: the engine's `EngineStats` (requests,
//! tokens, tiles, prefix cache, latency histograms) and the server's own counters (errors by
//! type). Counters carry the `_total` suffix in both their `# TYPE` line and their sample, as
//! the official Python client writes them. Before the model is loaded only the server's
//! counters and `tessera_model_loaded 0` are shown.

use std::fmt::Write;
use std::sync::atomic::Ordering::Relaxed;

use engine::stats::Histogram;
use engine::EngineStats;

use crate::state::AppState;

/// The whole scrape.
pub fn render(state: &AppState) -> String {
    let mut out = String::with_capacity(8 << 10);
    let loaded = state.loaded();
    family(
        &mut out,
        "tessera_model_loaded",
        "gauge",
        "1 once the model is loaded.",
    );
    sample(
        &mut out,
        "tessera_model_loaded",
        "",
        u64::from(loaded.is_some()) as f64,
    );
    family(
        &mut out,
        "tessera_request_errors_total",
        "counter",
        "Requests answered with an error, by error type.",
    );
    for (label, n) in state.counters().errors() {
        sample(
            &mut out,
            "tessera_request_errors_total",
            &format!("type=\"{label}\""),
            n as f64,
        );
    }
    if let Some(m) = loaded {
        engine_metrics(&mut out, m.engine.stats());
    }
    out
}

fn engine_metrics(out: &mut String, st: &EngineStats) {
    let g = |v: &std::sync::atomic::AtomicU64| v.load(Relaxed) as f64;
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
    ];
    for (name, help, v) in gauges {
        family(out, name, "gauge", help);
        sample(out, name, "", v);
    }
    let usage = g(&st.tiles_in_use) / g(&st.tiles_total).max(1.0);
    family(
        out,
        "tessera_kv_cache_usage_perc",
        "gauge",
        "Fraction of KV tiles in use (0-1).",
    );
    sample(out, "tessera_kv_cache_usage_perc", "", usage);
    let counters = [
        (
            "tessera_prompt_tokens_total",
            "Prompt tokens of finished requests.",
            g(&st.prompt_tokens),
        ),
        (
            "tessera_generation_tokens_total",
            "Generated tokens.",
            g(&st.generation_tokens),
        ),
        (
            "tessera_prefix_cache_queries_total",
            "Prompt tokens looked up in the prefix cache.",
            g(&st.prefix_queried_tokens),
        ),
        (
            "tessera_prefix_cache_hits_total",
            "Prompt tokens found in the prefix cache.",
            g(&st.prefix_hit_tokens),
        ),
        (
            "tessera_num_preemptions_total",
            "Sequences preempted.",
            g(&st.preemptions),
        ),
        (
            "tessera_engine_steps_total",
            "Engine steps run.",
            g(&st.steps),
        ),
    ];
    for (name, help, v) in counters {
        family(out, name, "counter", help);
        sample(out, name, "", v);
    }
    family(
        out,
        "tessera_request_success_total",
        "counter",
        "Finished requests, by finish reason.",
    );
    for (reason, v) in [
        ("stop", &st.finished_stop),
        ("length", &st.finished_length),
        ("abort", &st.finished_abort),
    ] {
        let labels = format!("finished_reason=\"{reason}\"");
        sample(out, "tessera_request_success_total", &labels, g(v));
    }
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
    ];
    for (name, help, h) in hists {
        histogram(out, name, help, h);
    }
}

fn family(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} {kind}");
}

fn sample(out: &mut String, name: &str, labels: &str, v: f64) {
    if labels.is_empty() {
        let _ = writeln!(out, "{name} {}", number(v));
    } else {
        let _ = writeln!(out, "{name}{{{labels}}} {}", number(v));
    }
}

fn histogram(out: &mut String, name: &str, help: &str, h: &Histogram) {
    family(out, name, "histogram", help);
    let (buckets, sum, count) = h.snapshot();
    for (le, n) in buckets {
        let le = if le.is_infinite() {
            "+Inf".to_string()
        } else {
            number(le)
        };
        let _ = writeln!(out, "{name}_bucket{{le=\"{le}\"}} {n}");
    }
    let _ = writeln!(out, "{name}_sum {}", number(sum));
    let _ = writeln!(out, "{name}_count {count}");
}

/// Prometheus float text: integers without a fraction, others as Rust prints them.
fn number(v: f64) -> String {
    if v.is_nan() {
        "NaN".into()
    } else if v.fract() == 0.0 && v.abs() < 1e15 {
        format!("{v:.1}")
    } else {
        format!("{v}")
    }
}
