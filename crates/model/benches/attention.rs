//! Paged attention at the default model's shapes (4 query heads, 1 KV head, head dim 256, f16
//! cache, tiles of 16): 16 decoding sequences at 512 tokens of context (one layer, its 8 MB of
//! K/V warm in cache, and 18 layers in turn, read from memory as in a model's step), and one
//! 128-query prefill chunk at 1,024 tokens of context; the same prefill chunk at
//! Qwen2.5-0.5B's shapes (14 query heads, 2 KV heads, head dim 64).
//! `cargo bench -p tessera-model --bench attention`.

use std::sync::Mutex;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use kernels::Threads;
use model::attention::{attend_all, AttnScratch, ChunkAttention, Heads};
use model::kv::{KvPool, TileId};
use model::testing::kv::{filled_pool, ramp as values};

const TS: usize = 16;
const HD: usize = 256;

/// A pool holding `seqs` sequences of `len` tokens each, and their tile tables.
fn filled(seqs: usize, len: usize) -> (KvPool, Vec<Vec<TileId>>) {
    filled_pool(TS, HD, seqs, len)
}

/// One decode query per sequence, at the last position of its `len` tokens.
fn decode_chunks(tables: &[Vec<TileId>], len: usize) -> Vec<ChunkAttention<'_>> {
    tables
        .iter()
        .enumerate()
        .map(|(i, t)| ChunkAttention {
            tiles: t,
            in_group: 0,
            start_pos: len - 1,
            first_row: i,
            len: 1,
            window: None,
        })
        .collect()
}

fn bench(c: &mut Criterion) {
    let threads = Threads::new(2);
    let heads = Heads {
        n_heads: 4,
        n_kv_heads: 1,
        head_dim: HD,
        scale: 1.0 / 16.0,
        softcap: 0.0,
        sinks: None,
    };
    let mut scratch: Vec<Mutex<AttnScratch>> = Vec::new();
    let mut g = c.benchmark_group("attention");

    let q = values(16 * 4 * HD, 1);
    let mut out = vec![0f32; q.len()];
    for len in [512, 128] {
        let (pool, tables) = filled(16, len);
        let chunks = decode_chunks(&tables, len);
        g.throughput(Throughput::Elements(16 * len as u64));
        g.bench_function(format!("decode_16x{len}"), |b| {
            b.iter(|| attend_all(&threads, &pool, &chunks, heads, &q, &mut out, &mut scratch))
        });
    }

    // The same per layer, but 18 layers' worth of K/V (144 MB at 512 tokens) visited in turn,
    // so each call reads its K/V from memory as a model's step does rather than from a warm
    // cache; and at 128 tokens, where each sequence's few tiles make starting a task costly.
    for len in [512, 128] {
        let layers: Vec<(KvPool, Vec<Vec<TileId>>)> = (0..18).map(|_| filled(16, len)).collect();
        let layer_chunks: Vec<Vec<ChunkAttention>> = layers
            .iter()
            .map(|(_, tables)| decode_chunks(tables, len))
            .collect();
        g.throughput(Throughput::Elements(18 * 16 * len as u64));
        g.bench_function(format!("decode_16x{len}_18_layers"), |b| {
            b.iter(|| {
                for ((pool, _), chunks) in layers.iter().zip(&layer_chunks) {
                    attend_all(&threads, pool, chunks, heads, &q, &mut out, &mut scratch)
                }
            })
        });
    }

    // OLMoE's shapes (16 query heads, each its own KV head, head dim 128): one decoding
    // sequence at 2,048 tokens (the lone decode is cut by heads over the threads) and 16 at 512,
    // 16 layers' worth of K/V visited in turn (268 MB), read from memory as in a model's step.
    let olmoe = Heads {
        n_heads: 16,
        n_kv_heads: 16,
        head_dim: 128,
        scale: 1.0 / 128f32.sqrt(),
        ..heads
    };
    for (seqs, len) in [(1, 2048), (16, 512)] {
        let layers: Vec<(KvPool, Vec<Vec<TileId>>)> = (0..16)
            .map(|_| filled_pool(TS, 16 * 128, seqs, len))
            .collect();
        let layer_chunks: Vec<Vec<ChunkAttention>> = layers
            .iter()
            .map(|(_, tables)| decode_chunks(tables, len))
            .collect();
        let q = values(seqs * 16 * 128, 3);
        let mut out = vec![0f32; q.len()];
        g.throughput(Throughput::Elements(16 * (seqs * len) as u64));
        g.bench_function(format!("decode_{seqs}x{len}_16_layers_olmoe"), |b| {
            b.iter(|| {
                for ((pool, _), chunks) in layers.iter().zip(&layer_chunks) {
                    attend_all(&threads, pool, chunks, olmoe, &q, &mut out, &mut scratch)
                }
            })
        });
    }

    let (pool, tables) = filled(1, 1024);
    let chunk = [ChunkAttention {
        tiles: &tables[0],
        in_group: 0,
        start_pos: 1024 - 128,
        first_row: 0,
        len: 128,
        window: None,
    }];
    let q = values(128 * 4 * HD, 2);
    let mut out = vec![0f32; q.len()];
    g.throughput(Throughput::Elements(128 * 1024));
    g.bench_function("prefill_128_at_1024", |b| {
        b.iter(|| attend_all(&threads, &pool, &chunk, heads, &q, &mut out, &mut scratch))
    });

    let qwen = Heads {
        n_heads: 14,
        n_kv_heads: 2,
        head_dim: 64,
        scale: 1.0 / 8.0,
        ..heads
    };
    let (pool, tables) = filled_pool(TS, 2 * 64, 1, 1024);
    let chunk = [ChunkAttention {
        tiles: &tables[0],
        ..chunk[0]
    }];
    let q = values(128 * 14 * 64, 2);
    let mut out = vec![0f32; q.len()];
    g.bench_function("prefill_128_at_1024_qwen_0.5b", |b| {
        b.iter(|| attend_all(&threads, &pool, &chunk, qwen, &q, &mut out, &mut scratch))
    });
    g.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .sample_size(10)
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(2));
    targets = bench
}
criterion_main!(benches);
