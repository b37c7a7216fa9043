//! One streaming request against an OpenAI-compatible server, timed token by token.
//!
//! Design: the request is sent with `stream: true`, `ignore_eos: true` and
//! `stream_options.include_usage`, and the body is read piece by piece through
//! [`timed_events`]. Each chunk that carries a token (see `sse`'s counting rule) keeps the arrival
//! stamp of the network read that completed it: the first stamp gives
//! the time to first token (TTFT, measured from just before the request is sent), the gaps between
//! consecutive stamps give the inter-token latencies (ITL). The end-to-end time runs to the end of the
//! body. A failed request keeps its error text and no latency samples. Every request opens its own
//! connection (see `build_http`), so the TTFT includes a loopback connect.
//!
//! Invariants: `itl.len() == token_chunks - 1` for a request with at least one token chunk; a request is
//! `ok` only with a 2xx status, no error event, and a stream that ended with `[DONE]` or a finish reason.

use std::{
    sync::Arc,
    time::{Duration, Instant},
};

use anyhow::Context as _;

use eventsource_stream::EventStreamError;
use futures_util::StreamExt as _;
use serde_json::{json, Value};

use crate::{
    adapters::Adapters,
    config::{BenchConfig, Endpoint},
    sse::{interpret, timed_events, StreamEvent},
};

/// What one request did.
#[derive(Debug, Clone, Default)]
pub struct Outcome {
    /// The request completed as a well-formed stream.
    pub ok: bool,
    /// Why it failed, when it did.
    pub error: Option<String>,
    /// Seconds from sending to the first token chunk.
    pub ttft: Option<f64>,
    /// Seconds between consecutive token chunks.
    pub itl: Vec<f64>,
    /// Seconds from sending to the end of the body.
    pub e2e: f64,
    /// Chunks that carried a token.
    pub token_chunks: u64,
    /// `usage.completion_tokens` from the final chunk, when the server sent usage.
    pub usage_completion_tokens: Option<u64>,
    /// `usage.prompt_tokens`, when the server sent usage.
    pub usage_prompt_tokens: Option<u64>,
    /// When the request arrived (open loop: its scheduled time; closed loop: when it was sent),
    /// seconds from the start of the run; set by the runner.
    pub arrived_s: Option<f64>,
    /// The LoRA adapter it asked for (its slot in `--lora-names` / `--lora-ids`), if any.
    pub adapter: Option<usize>,
}

impl Outcome {
    /// Output tokens: the server's usage count when it gave one, else the token chunks seen.
    pub fn output_tokens(&self) -> u64 {
        self.usage_completion_tokens.unwrap_or(self.token_chunks)
    }

    fn failed(error: String, started: Instant) -> Self {
        Self {
            error: Some(error),
            e2e: started.elapsed().as_secs_f64(),
            ..Self::default()
        }
    }
}

/// Sends requests of one run; cheap to clone (the connection pool is shared).
#[derive(Debug, Clone)]
pub struct Client {
    http: reqwest::Client,
    url: String,
    api_key: Option<String>,
    model: String,
    endpoint: Endpoint,
    temperature: f32,
    top_p: Option<f32>,
    adapters: Option<Arc<Adapters>>,
}

impl Client {
    /// A client for `cfg`'s endpoint, with `model` as the model name.
    pub fn new(cfg: &BenchConfig, model: String) -> anyhow::Result<Self> {
        Ok(Self {
            http: build_http(cfg.timeout)?,
            url: cfg.endpoint_url(),
            api_key: cfg.api_key.clone(),
            model,
            endpoint: cfg.endpoint,
            temperature: cfg.temperature,
            top_p: cfg.top_p,
            adapters: cfg.adapters.clone().map(Arc::new),
        })
    }

    /// The JSON body of request `index` (which picks its adapter, if the run spreads requests
    /// over adapters) for `prompt` and `max_tokens`.
    pub fn body(&self, index: u64, prompt: &str, max_tokens: u32) -> Value {
        let mut body = json!({
            "model": self.model,
            "max_tokens": max_tokens,
            "temperature": self.temperature,
            "ignore_eos": true,
            "stream": true,
            "stream_options": { "include_usage": true },
        });
        let input = match self.endpoint {
            Endpoint::Completions => ("prompt", json!(prompt)),
            Endpoint::Chat => ("messages", json!([{ "role": "user", "content": prompt }])),
            Endpoint::Embeddings => ("input", json!(prompt)),
        };
        if let Some(obj) = body.as_object_mut() {
            obj.insert(input.0.to_string(), input.1);
            if let Some(p) = self.top_p {
                obj.insert("top_p".to_string(), json!(p));
            }
        }
        if let Some(a) = &self.adapters {
            a.apply(index, &mut body);
        }
        body
    }

    /// Sends request `index` (see [`Client::body`]) as one streaming request and times it.
    pub async fn stream(&self, index: u64, prompt: &str, max_tokens: u32) -> Outcome {
        let body = self.body(index, prompt, max_tokens).to_string();
        let mut req = self
            .http
            .post(&self.url)
            .header("content-type", "application/json")
            .header("accept", "text/event-stream")
            .body(body);
        if let Some(key) = &self.api_key {
            req = req.bearer_auth(key);
        }
        let started = Instant::now();
        let resp = match req.send().await {
            Ok(r) => r,
            Err(e) => return Outcome::failed(format!("send: {}", error_chain(&e)), started),
        };
        let status = resp.status();
        if !status.is_success() {
            let text = resp.text().await.unwrap_or_default();
            let snippet: String = text.chars().take(200).collect();
            return Outcome::failed(format!("HTTP {}: {snippet}", status.as_u16()), started);
        }
        let mut timer = StreamTimer::new(started);
        let pieces = futures_util::stream::try_unfold(resp, |mut resp| async move {
            Ok::<_, reqwest::Error>(resp.chunk().await?.map(|bytes| (bytes, resp)))
        });
        let mut events = std::pin::pin!(timed_events(pieces));
        while let Some(event) = events.next().await {
            match event {
                Ok(e) => timer.event(&e.data, e.arrived),
                Err(EventStreamError::Transport(e)) => {
                    timer.error = Some(format!("body: {}", error_chain(&e)));
                    break;
                }
                Err(e) => {
                    timer.error = Some(format!("body: {e}"));
                    break;
                }
            }
        }
        timer.finish()
    }

    /// The model name sent in requests.
    pub fn model(&self) -> &str {
        &self.model
    }

    /// Posts a JSON body to the endpoint (not streamed); the caller reads the response.
    pub async fn post_json(&self, body: &Value) -> Result<reqwest::Response, String> {
        let mut req = self
            .http
            .post(&self.url)
            .header("content-type", "application/json")
            .body(body.to_string());
        if let Some(key) = &self.api_key {
            req = req.bearer_auth(key);
        }
        req.send().await.map_err(|e| error_chain(&e))
    }

    /// The model to name in requests: `--model`, else the first one the server lists.
    pub async fn model_for(cfg: &BenchConfig) -> anyhow::Result<String> {
        match &cfg.model {
            Some(m) => Ok(m.clone()),
            None => Self::first_model(cfg).await.with_context(|| {
                format!(
                    "asking {} for its model (or pass --model)",
                    cfg.models_url()
                )
            }),
        }
    }

    /// The first model listed by `GET /v1/models`.
    pub async fn first_model(cfg: &BenchConfig) -> anyhow::Result<String> {
        let http = build_http(Duration::from_secs(30))?;
        let mut req = http.get(cfg.models_url());
        if let Some(key) = &cfg.api_key {
            req = req.bearer_auth(key);
        }
        let resp = req.send().await?.error_for_status()?;
        let v: Value = serde_json::from_slice(&resp.bytes().await?)?;
        v.get("data")
            .and_then(|d| d.get(0))
            .and_then(|m| m.get("id"))
            .and_then(Value::as_str)
            .map(str::to_string)
            .ok_or_else(|| anyhow::anyhow!("GET /v1/models listed no model; pass --model"))
    }
}

fn build_http(timeout: Duration) -> anyhow::Result<reqwest::Client> {
    Ok(reqwest::Client::builder()
        .timeout(timeout)
        .connect_timeout(Duration::from_secs(10).min(timeout))
        // A fresh connection per request: keep-alive races (the server closing an idle pooled
        // connection just as it is reused) failed about one request in four against llama-server,
        // and a loopback connect costs well under a millisecond of the TTFT it is counted in.
        .pool_max_idle_per_host(0)
        // The server is local; a proxy from the environment would only distort the timings.
        .no_proxy()
        .build()?)
}

/// An error with its sources, so "error sending request" says why.
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(src) = cur {
        s.push_str(": ");
        s.push_str(&src.to_string());
        cur = src.source();
    }
    s
}

/// Folds a request's stream events into an [`Outcome`].
#[derive(Debug)]
struct StreamTimer {
    started: Instant,
    last_token: Option<Instant>,
    outcome: Outcome,
    done: bool,
    finished: bool,
    error: Option<String>,
}

impl StreamTimer {
    fn new(started: Instant) -> Self {
        Self {
            started,
            last_token: None,
            outcome: Outcome::default(),
            done: false,
            finished: false,
            error: None,
        }
    }

    fn event(&mut self, data: &str, at: Instant) {
        if self.error.is_some() {
            return;
        }
        let chunk = match interpret(data) {
            Ok(StreamEvent::Done) => {
                self.done = true;
                return;
            }
            Ok(StreamEvent::Error(msg)) => {
                self.error = Some(format!("stream error: {msg}"));
                return;
            }
            Ok(StreamEvent::Chunk(c)) => c,
            Err(e) => {
                self.error = Some(e.to_string());
                return;
            }
        };
        if chunk.has_token {
            match self.last_token {
                None => self.outcome.ttft = Some((at - self.started).as_secs_f64()),
                Some(prev) => self.outcome.itl.push((at - prev).as_secs_f64()),
            }
            self.last_token = Some(at);
            self.outcome.token_chunks += 1;
        }
        self.finished |= chunk.finish_reason.is_some();
        if chunk.completion_tokens.is_some() {
            self.outcome.usage_completion_tokens = chunk.completion_tokens;
            self.outcome.usage_prompt_tokens = chunk.prompt_tokens;
        }
    }

    fn finish(mut self) -> Outcome {
        self.outcome.e2e = self.started.elapsed().as_secs_f64();
        if self.error.is_none() && !(self.done || self.finished) {
            self.error = Some("stream ended without [DONE] or a finish reason".to_string());
        }
        self.outcome.ok = self.error.is_none();
        if !self.outcome.ok {
            // A broken stream's partial timings would bias the percentiles; keep only the error.
            self.outcome.ttft = None;
            self.outcome.itl.clear();
        }
        self.outcome.error = self.error;
        self.outcome
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(t0: Instant, ms: u64) -> Instant {
        t0 + Duration::from_millis(ms)
    }

    #[test]
    fn timer_measures_ttft_and_gaps_between_token_chunks_only() {
        let t0 = Instant::now();
        let mut t = StreamTimer::new(t0);
        t.event(
            r#"{"choices":[{"delta":{"role":"assistant","content":""}}]}"#,
            at(t0, 5),
        );
        t.event(r#"{"choices":[{"delta":{"content":"a"}}]}"#, at(t0, 100));
        t.event(r#"{"choices":[{"delta":{"content":"b"}}]}"#, at(t0, 130));
        t.event(r#"{"choices":[{"delta":{"content":"c"}}]}"#, at(t0, 170));
        t.event(
            r#"{"choices":[{"delta":{},"finish_reason":"length"}]}"#,
            at(t0, 171),
        );
        t.event("[DONE]", at(t0, 172));
        let o = t.finish();
        assert!(o.ok, "{:?}", o.error);
        assert_eq!(o.token_chunks, 3);
        assert!((o.ttft.expect("ttft") - 0.100).abs() < 1e-9);
        let itl: Vec<u64> = o.itl.iter().map(|s| (s * 1000.0).round() as u64).collect();
        assert_eq!(itl, vec![30, 40]);
    }

    #[test]
    fn top_p_is_sent_only_when_set() {
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            args: crate::config::BenchArgs,
        }
        let client = |argv: &[&str]| {
            let mut full = vec!["bench"];
            full.extend_from_slice(argv);
            let cfg = <Cli as clap::Parser>::try_parse_from(full)
                .expect("valid argv")
                .args
                .validate()
                .expect("valid config");
            Client::new(&cfg, "m".into()).expect("client")
        };
        let body = client(&["--top-p", "0.9"]).body(0, "hi", 4);
        assert_eq!(body["top_p"].as_f64().map(|p| p as f32), Some(0.9));
        assert!(client(&[]).body(0, "hi", 4).get("top_p").is_none());
    }

    #[test]
    fn usage_count_overrides_chunk_count() {
        let t0 = Instant::now();
        let mut t = StreamTimer::new(t0);
        t.event(r#"{"choices":[{"text":"ab"}]}"#, at(t0, 1));
        t.event(
            r#"{"choices":[],"usage":{"prompt_tokens":9,"completion_tokens":2}}"#,
            at(t0, 2),
        );
        t.event("[DONE]", at(t0, 3));
        let o = t.finish();
        assert_eq!((o.token_chunks, o.output_tokens()), (1, 2));
        assert_eq!(o.usage_prompt_tokens, Some(9));
    }

    #[test]
    fn stream_without_end_marker_fails_and_drops_its_samples() {
        let t0 = Instant::now();
        let mut t = StreamTimer::new(t0);
        t.event(r#"{"choices":[{"text":"a"}]}"#, at(t0, 1));
        t.event(r#"{"choices":[{"text":"b"}]}"#, at(t0, 2));
        let o = t.finish();
        assert!(!o.ok);
        assert!(o.ttft.is_none() && o.itl.is_empty());
    }

    #[test]
    fn error_event_fails_the_request() {
        let t0 = Instant::now();
        let mut t = StreamTimer::new(t0);
        t.event(r#"{"error":{"message":"boom"}}"#, at(t0, 1));
        t.event("[DONE]", at(t0, 2));
        let o = t.finish();
        assert_eq!(o.error.as_deref(), Some("stream error: boom"));
    }
}
