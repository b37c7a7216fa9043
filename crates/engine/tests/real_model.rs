//! End to end through the `Engine` with the default model (Gemma 3 270M), greedy: the ways of
//! running a request that must not change its tokens. Short (16 tokens) because CI is slow;
//! run with `cargo test --release`.
// Full tier only: reads real model files (`--features real-models`, scripts/test.sh fetches them).
#![cfg(feature = "real-models")]

mod common;

use std::collections::HashMap;

use common::*;
use engine::{EngineConfig, GenerateRequest, SeqId};
use model::Transformer;

const TOKENS: usize = 16;

fn load() -> (Transformer, model::Tokenizer) {
    let path = default_model_path();
    let m = model::load(&path, 2)
        .unwrap_or_else(|e| panic!("cannot load the default model {}: {e}", path.display()));
    (m.transformer, m.tokenizer)
}

fn tile_bytes(t: &Transformer, tile_size: usize) -> usize {
    t.config().kv_layout(tile_size).tile_bytes()
}

const TEXT: &str = "The lighthouse keeper climbed the spiral stairs every evening, counting the \
    steps as his father had taught him. At the top he trimmed the wick, polished the great lens \
    and watched the ships pass along the rocky coast. One stormy night in November, a small \
    fishing boat appeared out of the fog, its lantern swinging wildly as the waves rose higher. ";

fn text_prompt(tok: &model::Tokenizer, text: &str) -> Vec<u32> {
    tok.encode(text, true, false)
}

/// Runs `reqs` (submitted together) through a fresh engine; returns each one's tokens, the
/// harness for inspection.
fn run(
    cfg: &EngineConfig,
    reqs: &[GenerateRequest],
) -> (Vec<Vec<u32>>, Harness<Transformer>, Vec<SeqId>) {
    let (t, tok) = load();
    let mut h = Harness::new(t, tok, cfg);
    // Drafting by measured time would hang the outcome on the machine's load.
    h.engine.set_fixed_draft_length();
    let ids: Vec<SeqId> = reqs.iter().map(|r| h.submit(r.clone())).collect();
    h.run();
    let out = ids
        .iter()
        .map(|id| {
            let o = h.outcome(*id);
            assert!(o.error.is_none(), "{:?}", o.error);
            assert_eq!(o.tokens.len(), TOKENS);
            o.tokens.clone()
        })
        .collect();
    (out, h, ids)
}

#[test]
fn chunked_prefill_gives_the_same_tokens_as_whole_prefill() {
    let (_, tok) = load();
    let p = text_prompt(&tok, &TEXT.repeat(2));
    assert!(
        p.len() > 64 * 2,
        "the prompt spans several chunks: {}",
        p.len()
    );
    let req = greedy(p, TOKENS);
    let chunked = EngineConfig {
        max_batch_tokens: 64,
        ..EngineConfig::default()
    };
    let whole = EngineConfig {
        chunked_prefill: false,
        ..EngineConfig::default()
    };
    let (a, h, _) = run(&chunked, std::slice::from_ref(&req));
    assert!(h.steps > TOKENS + 1, "prefill took several steps");
    let (b, _, _) = run(&whole, &[req]);
    assert_eq!(a, b);
}

#[test]
fn a_prefix_cache_hit_gives_the_same_tokens_as_a_miss() {
    let (t, tok) = load();
    let p = text_prompt(&tok, TEXT);
    let mut h = Harness::new(t, tok, &EngineConfig::default());
    let first = h.submit(greedy(p.clone(), TOKENS));
    h.run();
    let second = h.submit(greedy(p.clone(), TOKENS));
    h.run();
    let usage = |id| h.outcome(id).finish.expect("finished").1;
    assert_eq!(usage(first).cached_tokens, 0);
    assert_eq!(usage(second).cached_tokens, (p.len() - 1) / 16 * 16);
    assert_eq!(h.outcome(first).tokens.len(), TOKENS);
    assert_eq!(h.outcome(first).tokens, h.outcome(second).tokens);
}

#[test]
fn a_preempted_and_resumed_request_gives_the_same_tokens_as_an_uninterrupted_one() {
    let (t, tok) = load();
    let texts = [
        "Write a short poem about the sea.",
        "Explain why the sky is blue in simple words.",
        "List three uses of copper and say why each works.",
        "Describe the smell of rain on a summer afternoon.",
    ];
    let reqs: Vec<GenerateRequest> = texts
        .iter()
        // Distinct from the first token, so no tile is shared through the prefix cache.
        .map(|s| greedy(text_prompt(&tok, &format!("{s} {TEXT}")), TOKENS))
        .collect();
    // Each request needs 6 groups x ceil(~100 / 16) tiles; the pool holds about two.
    let per_req = 6 * (reqs[0].prompt.len() + TOKENS).div_ceil(16);
    let tiny = EngineConfig {
        kv_bytes: (2 * per_req + 6) * tile_bytes(&t, 16),
        max_batch_tokens: 64,
        ..EngineConfig::default()
    };
    drop(t);
    let (roomy, _, _) = run(&EngineConfig::default(), &reqs);
    let (squeezed, h, _) = run(&tiny, &reqs);
    assert!(h.engine.scheduler().preemptions_total() > 0);
    assert_eq!(squeezed, roomy);
}

#[test]
fn sliding_window_release_gives_the_same_tokens_as_keeping_every_tile() {
    let (_, tok) = load();
    let text = TEXT.repeat(9);
    let p = text_prompt(&tok, &text);
    assert!(
        p.len() > 600,
        "longer than Gemma 3's 512-token window: {}",
        p.len()
    );
    let req = greedy(p, TOKENS);
    let release = EngineConfig::default();
    let keep = EngineConfig {
        release_window_tiles: false,
        ..EngineConfig::default()
    };
    let (a, ha, _) = run(&release, std::slice::from_ref(&req));
    let (b, hb, _) = run(&keep, &[req]);
    assert_eq!(a, b);
    assert!(
        ha.peak_in_use < hb.peak_in_use,
        "{} vs {}",
        ha.peak_in_use,
        hb.peak_in_use
    );
}

#[test]
fn greedy_output_is_the_same_alone_and_among_fifteen_others() {
    let (_, tok) = load();
    let target = greedy(text_prompt(&tok, "The capital of France is"), TOKENS);
    let others: Vec<GenerateRequest> = (0..15)
        .map(|i| {
            let words = ["river", "mountain", "engine", "garden", "violin"];
            let s = format!(
                "Tell me something about the {} number {i}.{}",
                words[i % 5],
                " Please be brief.".repeat(i % 4)
            );
            greedy(text_prompt(&tok, &s), TOKENS)
        })
        .collect();
    let (alone, _, _) = run(&EngineConfig::default(), std::slice::from_ref(&target));
    let mut all = others.clone();
    all.insert(7, target);
    let (together, _, _) = run(&EngineConfig::default(), &all);
    assert_eq!(together[7], alone[0]);
    // The others differ from each other, so the batch really mixed distinct sequences.
    let distinct: HashMap<&Vec<u32>, ()> = together.iter().map(|t| (t, ())).collect();
    assert!(distinct.len() > 8);
}

#[test]
fn the_default_config_holds_full_context_requests() {
    let (t, tok) = load();
    let cfg = EngineConfig::default();
    let context = t.config().context_length;
    let layout = t.config().kv_layout(cfg.tile_size);
    // Tiles one full-context sequence holds at most: every tile of a global group, a window
    // plus a prefill chunk of a local one.
    let per_seq: usize = layout
        .groups
        .iter()
        .map(|g| {
            let all = context.div_ceil(cfg.tile_size);
            g.window.map_or(all, |w| {
                all.min((w + cfg.max_batch_tokens).div_ceil(cfg.tile_size) + 1)
            })
        })
        .sum();
    let mut h = Harness::new(t, tok, &cfg);
    let tiles = h.engine.scheduler().tile_counts().total;
    assert!(
        tiles >= 4 * per_seq,
        "{tiles} tiles, {per_seq} per full context"
    );
    let id = h.submit(greedy(vec![2, 100], context - 2));
    assert!(h.outcome(id).error.is_none(), "{:?}", h.outcome(id).error);
    h.engine.abort(id);
}

#[test]
fn prompt_lookup_drafts_give_the_same_tokens_and_are_accepted_on_repeated_text() {
    let (_, tok) = load();
    // The text twice, then its start again: greedy decoding tends to go on quoting it, which
    // prompt lookup drafts from the prompt itself.
    let mut p = text_prompt(&tok, &TEXT.repeat(2));
    p.extend(tok.encode(&TEXT[..60], false, false));
    let reqs = vec![
        greedy(p.clone(), TOKENS),
        greedy(text_prompt(&tok, "Once"), TOKENS),
    ];
    let plain = EngineConfig {
        kv_bytes: 512 * tile_bytes(&load().0, 16),
        ..EngineConfig::default()
    };
    let (want, _, _) = run(&plain, &reqs);
    let spec = EngineConfig {
        speculative: Some(engine::SpeculativeConfig::default()),
        ..plain.clone()
    };
    let (got, h, _) = run(&spec, &reqs);
    assert_eq!(got, want, "drafting changed the tokens");
    let drafted = h
        .stats
        .spec_draft_tokens
        .load(std::sync::atomic::Ordering::Relaxed);
    let accepted = h
        .stats
        .spec_accepted_tokens
        .load(std::sync::atomic::Ordering::Relaxed);
    eprintln!("drafted {drafted}, accepted {accepted}");
    assert!(accepted > 0, "drafted {drafted}, none accepted");
}

#[test]
fn a_prompt_restored_from_the_disk_tier_gives_the_logits_of_a_cold_run() {
    let dir = std::env::temp_dir().join(format!("tessera-real-tier-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let (_, tok) = load();
    let p = text_prompt(&tok, &TEXT.repeat(2));
    let req = GenerateRequest {
        logprobs: Some(5),
        ..greedy(p.clone(), TOKENS)
    };
    let cfg = EngineConfig {
        kv_bytes: 512 * tile_bytes(&load().0, 16),
        kv_tiers: Some(engine::TierConfig {
            model_fingerprint: [7; 32],
            disk: Some((dir.clone(), 1 << 30)),
            redis: None,
            write_through: false,
        }),
        ..EngineConfig::default()
    };
    let run_one = || {
        let (t, tok) = load();
        let mut h = Harness::new(t, tok, &cfg);
        let id = h.submit(req.clone());
        while h.engine.has_work() {
            h.step();
        }
        h.engine
            .close_tiers(std::time::Instant::now() + std::time::Duration::from_secs(30));
        h.outcome(id).clone()
    };
    let cold = run_one();
    let warm = run_one();
    let _ = std::fs::remove_dir_all(&dir);
    let full = (p.len() - 1) / 16 * 16;
    assert_eq!(cold.finish.expect("finished").1.cached_tokens, 0);
    assert_eq!(warm.finish.expect("finished").1.cached_tokens, full);
    assert_eq!(warm.tokens, cold.tokens);
    // Every generated position's log-probabilities (and top 5), bit for bit.
    assert_eq!(warm.logprobs, cold.logprobs);
}
