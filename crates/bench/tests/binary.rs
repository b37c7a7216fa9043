//! The standalone `tessera-bench` binary end to end: flags, table on stdout, JSON file, exit status.

mod common;

use std::process::{Command, Output};

use common::{FakeOptions, FakeServer};

async fn run_binary(args: Vec<String>) -> Output {
    tokio::task::spawn_blocking(move || {
        Command::new(env!("CARGO_BIN_EXE_tessera-bench"))
            .args(&args)
            .output()
            .expect("run tessera-bench")
    })
    .await
    .expect("join")
}

#[tokio::test]
async fn binary_prints_the_table_writes_json_and_exits_zero() {
    let server = FakeServer::start(FakeOptions::default()).await;
    let json = std::env::temp_dir().join(format!("tessera-bench-bin-{}.json", std::process::id()));
    let args = [
        "--url",
        &server.url(),
        "-c",
        "2",
        "-n",
        "4",
        "--output-tokens",
        "3",
        "--json",
        &json.to_string_lossy(),
    ]
    .map(str::to_string)
    .to_vec();
    let out = run_binary(args).await;
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "stderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("4 ok, 0 failed"), "{stdout}");
    for row in ["output tok/s", "TTFT", "ITL", "end-to-end"] {
        assert!(stdout.contains(row), "missing {row}: {stdout}");
    }
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).expect("json")).expect("valid json");
    assert_eq!(v["results"]["output_tokens_total"], 12);
    let _ = std::fs::remove_file(json);
}

#[tokio::test]
async fn binary_exits_nonzero_when_no_request_succeeds() {
    let server = FakeServer::start(FakeOptions {
        fail_every: Some(1),
        ..FakeOptions::default()
    })
    .await;
    let args = ["--url", &server.url(), "-n", "2", "--model", "m"]
        .map(str::to_string)
        .to_vec();
    let out = run_binary(args).await;
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains("0 ok, 2 failed"));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no request succeeded"));
}

#[tokio::test]
async fn binary_rejects_bad_flags_before_sending_anything() {
    let server = FakeServer::start(FakeOptions::default()).await;
    let args = [
        "--url",
        &server.url(),
        "--shared-prefix-tokens",
        "300",
        "--prompt-tokens",
        "200",
    ]
    .map(str::to_string)
    .to_vec();
    let out = run_binary(args).await;
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--shared-prefix-tokens"));
    assert!(server.requests().is_empty());
}
