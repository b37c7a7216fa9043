//! A chunk's queries attended together (converted tiles; on AVX-512 the transposed K·Q blocks)
//! give the bits of the same queries attended one by one (f16 tiles read as stored; row by row
//! where each head has its own KV head), and of a lone decode (its heads split over threads).

use std::sync::Mutex;

use kernels::Threads;

use super::{attend_all, AttnScratch, ChunkAttention, Heads};
use crate::kv::KvDtype;
use crate::testing::kv::{filled_pool_of, ramp as values};

fn bits(x: &[f32]) -> Vec<u32> {
    x.iter().map(|v| v.to_bits()).collect()
}

#[test]
fn a_chunk_attended_whole_gives_the_bits_of_its_queries_one_by_one() {
    // (heads, KV heads, head dim, tile size, window): Qwen2.5-0.5B's shape (seven heads per KV
    // head: pairs and a lone head), Gemma 3's, tiles that are not a multiple of sixteen; and
    // heads with their own KV heads (read row by row): OLMoE's shape, more than eight heads
    // per task with a head dimension of 8 (not 16) lanes, and one with a tail of four.
    let shapes = [
        (14, 2, 64, 16, None),
        (4, 1, 256, 16, Some(21)),
        (6, 2, 32, 12, None),
        (16, 16, 128, 16, None),
        (22, 22, 24, 12, Some(21)),
        (3, 3, 20, 16, None),
    ];
    let threads = Threads::new(2);
    // Each shape on an f16 pool (decodes read it as stored), and on f32 and Q8_0 pools (every
    // task converts its tiles to f32 first) where the rows allow.
    let cases = shapes.into_iter().flat_map(|shape| {
        let kv_dim: usize = shape.1 * shape.2;
        [KvDtype::F16, KvDtype::F32, KvDtype::Q8_0]
            .into_iter()
            .filter(move |&d| d != KvDtype::Q8_0 || kv_dim.is_multiple_of(32))
            .map(move |d| (shape, d))
    });
    for ((n_heads, n_kv, hd, ts, window), dtype) in cases {
        let (start, n) = (19, 37);
        let (pool, tables) = filled_pool_of(dtype, ts, n_kv * hd, 1, start + n);
        let table = &tables[0];
        let heads = Heads {
            n_heads,
            n_kv_heads: n_kv,
            head_dim: hd,
            scale: 1.0 / (hd as f32).sqrt(),
            softcap: 0.0,
            sinks: None,
        };
        let q = values(n * n_heads * hd, 7);
        let chunk = |first: usize, len: usize| ChunkAttention {
            tiles: table,
            in_group: 0,
            start_pos: start + first,
            first_row: first,
            len,
            window,
        };
        let mut scratch: Vec<Mutex<AttnScratch>> = Vec::new();
        let mut whole = vec![0f32; q.len()];
        attend_all(
            &threads,
            &pool,
            &[chunk(0, n)],
            heads,
            &q,
            &mut whole,
            &mut scratch,
        );
        let singles: Vec<ChunkAttention> = (0..n).map(|i| chunk(i, 1)).collect();
        let mut one_by_one = vec![0f32; q.len()];
        attend_all(
            &threads,
            &pool,
            &singles,
            heads,
            &q,
            &mut one_by_one,
            &mut scratch,
        );
        assert_eq!(
            bits(&whole),
            bits(&one_by_one),
            "{n_heads} heads, hd {hd}, tiles of {ts}, {dtype:?}"
        );
        // Two queries a chunk (a decode verifying one drafted token), read as stored too.
        let pairs: Vec<ChunkAttention> =
            (0..n).step_by(2).map(|i| chunk(i, 2.min(n - i))).collect();
        let mut two_by_two = vec![0f32; q.len()];
        attend_all(
            &threads,
            &pool,
            &pairs,
            heads,
            &q,
            &mut two_by_two,
            &mut scratch,
        );
        assert_eq!(
            bits(&whole),
            bits(&two_by_two),
            "pairs: {n_heads} heads, hd {hd}, tiles of {ts}, {dtype:?}"
        );
        // The last query alone: a lone decode, its heads cut over the threads.
        let mut alone = vec![0f32; q.len()];
        let last = [chunk(n - 1, 1)];
        attend_all(&threads, &pool, &last, heads, &q, &mut alone, &mut scratch);
        let row = (n - 1) * n_heads * hd..n * n_heads * hd;
        assert_eq!(
            bits(&alone[row.clone()]),
            bits(&whole[row]),
            "alone: {n_heads} heads, hd {hd}, tiles of {ts}, {dtype:?}"
        );
    }
}
