//! `--lora-names` / `--lora-ids` against the fake server: every request body (warm-ups too)
//! names the adapter of its request index, and the report splits the run by adapter.

mod common;

use std::collections::HashMap;

use bench::{prompt::PromptBuilder, BenchArgs};
use clap::Parser;
use common::{FakeOptions, FakeServer};
use serde_json::{json, Value};

#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    args: BenchArgs,
}

const SEED: u64 = 7;
const PROMPT_TOKENS: usize = 20;
const WARMUP: u64 = 3;

fn args(server: &FakeServer, extra: &[&str]) -> BenchArgs {
    let url = server.url();
    let (seed, prompt) = (SEED.to_string(), PROMPT_TOKENS.to_string());
    let warmup = WARMUP.to_string();
    let mut argv = vec![
        "bench",
        "--url",
        url.as_str(),
        "--no-progress",
        "--seed",
        &seed,
    ];
    argv.extend_from_slice(&["--prompt-tokens", &prompt, "--output-tokens", "3"]);
    argv.extend_from_slice(&["--warmup", &warmup]);
    argv.extend_from_slice(extra);
    Cli::try_parse_from(argv).expect("valid argv").args
}

/// The request index of each prompt the run can send: `0..requests` and the warm-ups'.
fn index_of_prompts(requests: u64) -> HashMap<String, u64> {
    let prompts = PromptBuilder::with_prefixes(SEED, PROMPT_TOKENS, 0, 1);
    (0..requests)
        .chain((0..WARMUP).map(|k| u64::MAX - k))
        .map(|i| (prompts.prompt_with_len(i, PROMPT_TOKENS), i))
        .collect()
}

/// The request index and body of every recorded request, checking the endpoint.
fn indexed_bodies(server: &FakeServer, requests: u64, chat: bool) -> Vec<(u64, Value)> {
    let index = index_of_prompts(requests);
    let reqs = server.requests();
    assert_eq!(reqs.len() as u64, requests + WARMUP);
    reqs.into_iter()
        .map(|(path, body)| {
            let prompt = if chat {
                assert_eq!(path, "/v1/chat/completions");
                &body["messages"][0]["content"]
            } else {
                assert_eq!(path, "/v1/completions");
                &body["prompt"]
            };
            let prompt = prompt.as_str().expect("prompt text");
            let i = *index.get(prompt).expect("a prompt of the run");
            (i, body)
        })
        .collect()
}

#[tokio::test]
async fn lora_names_send_the_adapter_of_each_request_as_its_model() {
    let server = FakeServer::start(FakeOptions::default()).await;
    let json_path =
        std::env::temp_dir().join(format!("tessera-bench-{}-names.json", std::process::id()));
    let a = args(&server, &["-c", "3", "-n", "12", "--lora-names", "a,b,c"]);
    let a = BenchArgs {
        json: Some(json_path.clone()),
        ..a
    };
    let report = bench::run_async(a).await.expect("run");
    let names = ["a", "b", "c"];
    let bodies = indexed_bodies(&server, 12, false);
    let mut seen = [0; 3];
    for (i, body) in &bodies {
        assert_eq!(body["model"], names[(i % 3) as usize], "request {i}");
        assert!(body.get("lora").is_none(), "request {i}: {body}");
        seen[(i % 3) as usize] += 1;
    }
    // 4 measured requests per adapter, and the warm-ups u64::MAX - k, one per adapter.
    assert_eq!(seen, [5, 5, 5]);

    let per: Vec<_> = report
        .results
        .per_adapter
        .iter()
        .map(|a| (a.adapter.as_str(), a.requests_ok, a.output_tokens_total))
        .collect();
    assert_eq!(per, [("a", 4, 12), ("b", 4, 12), ("c", 4, 12)]);
    let sum: f64 = report
        .results
        .per_adapter
        .iter()
        .map(|a| a.output_tokens_per_s)
        .sum();
    assert!((sum - report.results.output_tokens_per_s).abs() < 1e-6);
    assert!(report.table().contains("a, b, c"), "{}", report.table());
    let written: Value =
        serde_json::from_str(&std::fs::read_to_string(&json_path).expect("json")).expect("parse");
    assert_eq!(
        written["config"]["adapters"],
        json!({"by": "model", "names": ["a", "b", "c"]})
    );
    assert_eq!(written["results"]["per_adapter"][1]["requests_ok"], 4);
    let _ = std::fs::remove_file(json_path);
}

#[tokio::test]
async fn lora_ids_send_llama_server_lora_lists_beside_the_model() {
    let server = FakeServer::start(FakeOptions::default()).await;
    let a = args(
        &server,
        &[
            "--endpoint",
            "chat",
            "-c",
            "4",
            "-n",
            "8",
            "--lora-ids",
            "4",
        ],
    );
    let report = bench::run_async(a).await.expect("run");
    let bodies = indexed_bodies(&server, 8, true);
    for (i, body) in &bodies {
        assert_eq!(body["model"], "fake-model", "request {i}");
        assert_eq!(
            body["lora"],
            json!([{"id": i % 4, "scale": 1.0}]),
            "request {i}"
        );
    }
    let per: Vec<_> = report
        .results
        .per_adapter
        .iter()
        .map(|a| (a.adapter.as_str(), a.requests_ok))
        .collect();
    assert_eq!(per, [("id 0", 2), ("id 1", 2), ("id 2", 2), ("id 3", 2)]);
    let echo = report.config.adapters.as_ref().expect("adapters echoed");
    assert_eq!((echo.by, echo.names.len()), ("lora", 4));
}

#[tokio::test]
async fn without_adapter_flags_requests_name_only_the_model() {
    let server = FakeServer::start(FakeOptions::default()).await;
    let report = bench::run_async(args(&server, &["-c", "2", "-n", "4"]))
        .await
        .expect("run");
    for (i, body) in indexed_bodies(&server, 4, false) {
        assert_eq!(body["model"], "fake-model", "request {i}");
        assert!(body.get("lora").is_none(), "request {i}");
    }
    assert!(report.results.per_adapter.is_empty());
    assert!(report.config.adapters.is_none());
    assert!(!report.to_json().contains("per_adapter"));
}
