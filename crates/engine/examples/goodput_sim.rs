//! Scheduling policies compared on a modelled clock (`engine::sim`): open-loop Poisson
//! traffic at a range of rates through the real engine, each policy's share of requests
//! within the latency targets, its TTFT and TPOT p90, and its capacity (the highest rate
//! probed at which 90% meet both).
//!
//! ```text
//! cargo run --release -p tessera-engine --example goodput_sim -- [--chat] \
//!     [FIXED_S KNEE PER_ROW_SMALL_S PER_ROW_LARGE_S [TTFT_S TPOT_S [RATES [REQUESTS]]]]
//! ```
//! The step model's defaults (40 ms + 2.5 ms a row up to 16 rows, 1.5 ms a row past them)
//! are rounded from Qwen2.5-Coder-0.5B Q4_K_M on 2 cores; prompts are 64-256 tokens, 128
//! output tokens, 200 requests per rate, rates 0.1, 0.2, … up to RATES × 0.1 (16).
//!
//! `--chat`: the lengths of `tessera bench --dataset chat` instead (its own generator,
//! `bench::workload::Workload::Chat`: lognormal, prompts up to 1024 tokens, outputs up to 512),
//! with `tessera serve`'s `--max-prefill-tokens 1024` for steps in which no stream decodes.

use bench::workload::Workload;
use engine::config::EngineConfig;
use engine::sim::{attainment, poisson, poisson_with, quantile, simulate, StepModel};
use engine::SloTargets;
use std::time::Duration;

/// Positional number `i` (from 1; flags are not counted), or `default`.
fn arg(i: usize, default: f64) -> f64 {
    std::env::args()
        .filter(|a| !a.starts_with("--"))
        .nth(i)
        .and_then(|a| a.parse().ok())
        .unwrap_or(default)
}

fn main() {
    let model = StepModel {
        fixed: arg(1, 0.040),
        knee: arg(2, 16.0) as usize,
        per_row_small: arg(3, 0.0025),
        per_row_large: arg(4, 0.0015),
    };
    let (ttft, tpot) = (arg(5, 2.0), arg(6, 0.1));
    let chat_lengths = std::env::args().any(|a| a == "--chat");
    let base = EngineConfig {
        max_batch_tokens: 128,
        max_prefill_tokens: if chat_lengths { 1024 } else { 0 },
        kv_bytes: 64 << 20,
        ..EngineConfig::default()
    };
    let slo = EngineConfig {
        slo: SloTargets {
            ttft: Some(Duration::from_secs_f64(ttft)),
            tpot: Some(Duration::from_secs_f64(tpot)),
        },
        ..base.clone()
    };
    let workload = match chat_lengths {
        true => "chat lengths",
        false => "prompts 64-256, 128 output tokens",
    };
    println!("step model {model:?}; {workload}; targets TTFT {ttft} s, TPOT {tpot} s");
    println!("| policy | rate | within targets | TTFT p90 s | TPOT p90 s |");
    println!("|---|---|---|---|---|");
    for (name, cfg) in [("--max-itl-slowdown 1.5", &base), ("--slo-*", &slo)] {
        let mut capacity = 0.0;
        for k in 1..=arg(7, 16.0) as usize {
            let rate = 0.1 * k as f64;
            let n = arg(8, 200.0) as usize;
            let reqs = match chat_lengths {
                true => {
                    let chat = Workload::Chat {
                        seed: k as u64,
                        max_prompt: 1024,
                        max_output: 512,
                    };
                    poisson_with(k as u64, rate, n, |i| {
                        let s = chat.spec(i);
                        (s.prompt_tokens, s.output_tokens as usize)
                    })
                }
                false => poisson(k as u64, rate, n, (64, 256), 128),
            };
            let out = match simulate(cfg, model, &reqs) {
                Ok(o) => o,
                Err(e) => {
                    eprintln!("{name} at {rate}: {e}");
                    std::process::exit(1);
                }
            };
            let a = attainment(&out, ttft, tpot);
            if a >= 0.9 {
                capacity = rate;
            }
            let t90 = quantile(out.iter().map(|o| o.ttft), 0.9);
            let p90 = quantile(out.iter().map(|o| o.tpot), 0.9);
            println!("| {name} | {rate:.1} | {a:.2} | {t90:.2} | {p90:.3} |");
        }
        println!("capacity {name}: {capacity:.1} req/s");
    }
}
