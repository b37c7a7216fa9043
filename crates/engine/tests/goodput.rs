//! Goodput under latency targets, on a modelled clock (`engine::sim`): the same open-loop
//! traffic through the engine without targets (`--max-itl-slowdown` caps the prefill of
//! decoding steps) and with `--slo-ttft-ms 2000 --slo-tpot-ms 100`. The step model is rounded
//! from Qwen2.5-Coder-0.5B on 2 cores (40 ms a step, 2.5 ms a row up to 16 rows, 1.5 ms past
//! them); nothing here reads the machine's clock, so the results are exact and the same under
//! any load.

use std::time::Duration;

use engine::config::EngineConfig;
use engine::sim::{attainment, poisson, quantile, simulate, SimOutcome, StepModel};
use engine::SloTargets;

const MODEL: StepModel = StepModel {
    fixed: 0.040,
    knee: 16,
    per_row_small: 0.0025,
    per_row_large: 0.0015,
};
const TTFT: f64 = 2.0;
const TPOT: f64 = 0.1;

fn base() -> EngineConfig {
    EngineConfig {
        max_batch_tokens: 128,
        kv_bytes: 64 << 20,
        ..EngineConfig::default()
    }
}

fn with_targets() -> EngineConfig {
    EngineConfig {
        slo: SloTargets {
            ttft: Some(Duration::from_secs_f64(TTFT)),
            tpot: Some(Duration::from_secs_f64(TPOT)),
        },
        ..base()
    }
}

fn run(cfg: &EngineConfig, rate: f64, seed: u64) -> Vec<SimOutcome> {
    let reqs = poisson(seed, rate, 200, (64, 256), 128);
    simulate(cfg, MODEL, &reqs).expect("the workload plays through")
}

#[test]
fn latency_targets_keep_90_percent_within_them_where_the_fixed_cap_does_not() {
    for seed in [5, 6] {
        let base = run(&base(), 0.5, seed);
        let slo = run(&with_targets(), 0.5, seed);
        let (a_base, a_slo) = (attainment(&base, TTFT, TPOT), attainment(&slo, TTFT, TPOT));
        assert!(a_slo >= 0.9, "seed {seed}: {a_slo} within targets");
        assert!(a_base < 0.8, "seed {seed}: the fixed cap keeps {a_base}");
        // Every stream still meets its TPOT target: the prefill came out of their slack.
        let tpot_p90 = quantile(slo.iter().map(|o| o.tpot), 0.9);
        assert!(tpot_p90 <= TPOT, "TPOT p90 {tpot_p90}");
        assert!(slo.iter().all(|o| o.tokens == 128));
    }
}

#[test]
fn at_light_load_both_meet_the_targets_and_the_targets_cut_time_to_first_token() {
    let base = run(&base(), 0.1, 3);
    let slo = run(&with_targets(), 0.1, 3);
    assert!(attainment(&base, TTFT, TPOT) >= 0.95);
    assert!(attainment(&slo, TTFT, TPOT) >= 0.95);
    let p50 = |o: &[SimOutcome]| quantile(o.iter().map(|o| o.ttft), 0.5);
    assert!(
        p50(&slo) < p50(&base),
        "TTFT p50 {} vs {}",
        p50(&slo),
        p50(&base)
    );
}

#[test]
fn a_tpot_target_below_a_decode_step_falls_back_to_the_fixed_cap_and_every_prompt_progresses() {
    // 40 ms steps against a 30 ms target: no stream can be kept on target, so the budget
    // leaves prefill to the fixed cap rather than starving it.
    let cfg = EngineConfig {
        slo: SloTargets {
            ttft: None,
            tpot: Some(Duration::from_millis(30)),
        },
        ..base()
    };
    let out = run(&cfg, 0.3, 4);
    let fixed = run(&base(), 0.3, 4);
    let p90 = |o: &[SimOutcome]| quantile(o.iter().map(|o| o.ttft), 0.9);
    assert!(out.iter().all(|o| o.tokens == 128));
    assert!(
        p90(&out) <= p90(&fixed) * 1.5,
        "TTFT p90 {} vs {} under the fixed cap",
        p90(&out),
        p90(&fixed)
    );
}

#[test]
fn poisson_with_takes_each_request_s_lengths_from_its_index_and_spaces_arrivals_at_the_rate() {
    let lengths = |i: u64| (10 + i as usize, 3 * i as usize + 1);
    let reqs = engine::sim::poisson_with(7, 0.5, 4000, lengths);
    assert_eq!(reqs, engine::sim::poisson_with(7, 0.5, 4000, lengths));
    assert_ne!(reqs, engine::sim::poisson_with(8, 0.5, 4000, lengths));
    for (i, r) in reqs.iter().enumerate() {
        assert_eq!(
            (r.prompt_tokens, r.output_tokens),
            lengths(i as u64),
            "request {i}"
        );
    }
    assert!(reqs.windows(2).all(|w| w[0].arrival <= w[1].arrival));
    // Poisson arrivals at 0.5 per second: 4000 of them span about 8000 seconds.
    let span = reqs[reqs.len() - 1].arrival;
    assert!((7000.0..9000.0).contains(&span), "span {span}");
    // `poisson` is the same arrivals with uniform prompts.
    let uniform = poisson(7, 0.5, 4000, (64, 256), 128);
    assert!(uniform
        .iter()
        .zip(&reqs)
        .all(|(u, r)| u.arrival == r.arrival));
    assert!(uniform
        .iter()
        .all(|u| (64..=256).contains(&u.prompt_tokens) && u.output_tokens == 128));
}

#[test]
fn a_burst_larger_than_the_running_batch_is_admitted_before_the_first_streams_finish() {
    // Sixteen prompts of 530 tokens arrive together (a closed-loop load starting, prompts four
    // times their outputs). While the waiting outnumber the streams, decoding steps carry
    // prefill up to the step budget: most of the burst has its first token before the first
    // stream is done, so the decode batch fills instead of staying at a handful of streams.
    let reqs: Vec<engine::sim::SimRequest> = (0..16)
        .map(|_| engine::sim::SimRequest {
            arrival: 0.0,
            prompt_tokens: 530,
            output_tokens: 128,
        })
        .collect();
    let out = simulate(&base(), MODEL, &reqs).expect("the burst plays through");
    assert!(out.iter().all(|o| o.tokens == 128));
    // Each stream's last token: its first, then 127 gaps of its TPOT.
    let done: Vec<f64> = out.iter().map(|o| o.ttft + o.tpot * 127.0).collect();
    let first_done = done.iter().copied().fold(f64::INFINITY, f64::min);
    let last_done = done.iter().copied().fold(0.0, f64::max);
    let started = out.iter().filter(|o| o.ttft < first_done).count();
    // A cap that only widened in proportion to waiting / decoding: 8 of 16, the last done at
    // 44.8 s (this step model, exact on the modelled clock).
    assert!(
        started >= 10,
        "{started} of 16 had a first token when the first finished at {first_done:.1} s"
    );
    assert!(last_done < 40.0, "the last finished at {last_done:.1} s");
}
