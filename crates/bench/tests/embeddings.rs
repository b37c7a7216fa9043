//! `--endpoint embeddings` against the in-process fake server: request bodies, counts, rates,
//! failures, and the flags an embeddings run refuses.

mod common;

use bench::BenchArgs;
use clap::Parser;
use common::{FakeOptions, FakeServer};

#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    args: BenchArgs,
}

fn args(url: &str, extra: &[&str]) -> BenchArgs {
    let mut argv = vec![
        "bench",
        "--url",
        url,
        "--no-progress",
        "--endpoint",
        "embeddings",
    ];
    argv.extend_from_slice(extra);
    Cli::try_parse_from(argv).expect("valid argv").args
}

#[tokio::test]
async fn closed_loop_sends_batches_of_texts_and_counts_embeddings() {
    let server = FakeServer::start(FakeOptions::default()).await;
    let a = args(
        &server.url(),
        &[
            "-c",
            "4",
            "-n",
            "20",
            "--texts-per-request",
            "2-5",
            "--text-tokens",
            "3-9",
        ],
    );
    let report = bench::embeddings(a, bench::Stop::new()).await.expect("run");
    let r = &report.results;
    assert_eq!((r.requests_ok, r.requests_failed), (20, 0));
    let sent = server.requests();
    assert_eq!(sent.len(), 20);
    let (mut texts, mut words) = (0, 0);
    for (path, body) in &sent {
        assert_eq!(path, "/v1/embeddings");
        assert_eq!(body["model"], "fake-model");
        let input = body["input"].as_array().expect("a list of texts");
        assert!((2..=5).contains(&input.len()), "{}", input.len());
        for t in input {
            let n = t.as_str().expect("text").split(' ').count();
            assert!((3..=9).contains(&n), "{n} words");
            words += n;
        }
        texts += input.len();
    }
    assert_eq!(r.embeddings_total, texts);
    assert_eq!(r.prompt_tokens_total, words as u64);
    assert!(
        server
            .recorded
            .peak_in_flight
            .load(std::sync::atomic::Ordering::SeqCst)
            <= 4
    );
    let rate = r.embeddings_total as f64 / r.wall_time_s;
    assert!((r.embeddings_per_s - rate).abs() < 1e-9);
    // The fake answers after 30 ms.
    assert!(r.latency_ms.p50.expect("p50") >= 25.0, "{:?}", r.latency_ms);
    assert!(report.table().contains("embeddings/s"));
}

#[tokio::test]
async fn failures_are_counted_with_their_message_and_not_timed() {
    let server = FakeServer::start(FakeOptions {
        fail_every: Some(3),
        ..FakeOptions::default()
    })
    .await;
    let a = args(&server.url(), &["-c", "1", "-n", "9", "--text-tokens", "4"]);
    let r = bench::embeddings(a, bench::Stop::new())
        .await
        .expect("run")
        .results;
    assert_eq!((r.requests_ok, r.requests_failed), (6, 3));
    assert_eq!(r.latency_ms.count, 6);
    assert_eq!(r.errors.len(), 1);
    assert!(r.errors[0].message.contains("HTTP 500"), "{:?}", r.errors);
}

#[tokio::test]
async fn the_same_seed_sends_the_same_texts() {
    let server = FakeServer::start(FakeOptions::default()).await;
    for _ in 0..2 {
        let a = args(&server.url(), &["-c", "1", "-n", "3", "--seed", "7"]);
        bench::embeddings(a, bench::Stop::new()).await.expect("run");
    }
    let sent = server.requests();
    assert_eq!(sent.len(), 6);
    assert_eq!(sent[..3], sent[3..]);
}

#[test]
fn flags_of_other_modes_are_refused_by_name() {
    let url = "http://127.0.0.1:9";
    for (flag, extra) in [
        ("--request-rate", vec!["--request-rate", "2"]),
        ("--goodput", vec!["--goodput", "ttft:100"]),
        ("--long-prompt-every", vec!["--long-prompt-every", "5"]),
        ("--find-capacity", vec!["--find-capacity"]),
    ] {
        let err = args(url, &extra).validate().expect_err(flag).to_string();
        assert!(err.contains(flag), "{flag}: {err}");
    }
    let mut argv = vec!["bench", "--url", url, "--texts-per-request", "3"];
    let plain = Cli::try_parse_from(argv.drain(..)).expect("argv").args;
    let err = plain.validate().expect_err("needs embeddings").to_string();
    assert!(err.contains("--endpoint embeddings"), "{err}");
    let too_many = args(url, &["--texts-per-request", "1-5000"]).validate();
    assert!(too_many
        .expect_err("too many")
        .to_string()
        .contains("texts-per-request"));
}
