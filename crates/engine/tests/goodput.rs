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
fn chat_lengths_are_long_tailed_clipped_seeded_and_arrive_in_order() {
    let reqs = engine::sim::chat(7, 0.5, 4000, 1024, 512);
    assert_eq!(reqs, engine::sim::chat(7, 0.5, 4000, 1024, 512));
    assert_ne!(reqs, engine::sim::chat(8, 0.5, 4000, 1024, 512));
    assert!(reqs.windows(2).all(|w| w[0].arrival <= w[1].arrival));
    // Poisson arrivals at 0.5 per second: 4000 of them span about 8000 seconds.
    let span = reqs[reqs.len() - 1].arrival;
    assert!((7000.0..9000.0).contains(&span), "span {span}");
    let prompts: Vec<f64> = reqs.iter().map(|r| r.prompt_tokens as f64).collect();
    let outputs: Vec<f64> = reqs.iter().map(|r| r.output_tokens as f64).collect();
    assert!(prompts.iter().all(|&p| (4.0..=1024.0).contains(&p)));
    assert!(outputs.iter().all(|&o| (4.0..=512.0).contains(&o)));
    // Medians 256 and 128; the prompts clipped at 1024 are those over ln(4) = 1.39 log-sds
    // above the median, about 8%.
    let (p50, o50) = (quantile(prompts.clone(), 0.5), quantile(outputs, 0.5));
    assert!((230.0..285.0).contains(&p50), "prompt median {p50}");
    assert!((115.0..142.0).contains(&o50), "output median {o50}");
    let clipped = prompts.iter().filter(|&&p| p == 1024.0).count() as f64 / 4000.0;
    assert!((0.06..0.11).contains(&clipped), "clipped share {clipped}");
}
