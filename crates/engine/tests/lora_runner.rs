//! LoRA adapters through the `Runner` seam: the CPU runner loads and unloads them, and one
//! ragged batch of chunks naming different adapters gives each chunk the logits it gets alone;
//! a runner without LoRA support refuses with a clear error.

use engine::{CpuRunner, KvSpec, Runner};
use model::{Batch, KvDtype, LogitsWanted, LoraUse, SeqChunk, TileId};

const TS: usize = 4;

fn runner(dir: &std::path::Path) -> CpuRunner {
    let path = dir.join("tiny.gguf");
    std::fs::write(&path, model::testing::tiny_model_gguf("llama", 7)).expect("write model");
    let t = model::load(&path, 2).expect("tiny model loads").transformer;
    let tile_bytes = t.config().kv_layout(TS).tile_bytes();
    let kv = KvSpec {
        tile_size: TS,
        bytes: 64 * tile_bytes,
        dtype: KvDtype::F16,
        warm: false,
    };
    CpuRunner::new(t, &kv).expect("runner")
}

/// Runs `chunks` (tokens, tile base, adapters) as one batch from position 0; the last row of
/// each.
fn run(r: &mut CpuRunner, chunks: &[(&[u32], u32, &[LoraUse])]) -> Vec<Vec<f32>> {
    let tables: Vec<Vec<Vec<TileId>>> = chunks
        .iter()
        .map(|&(_, base, _)| vec![(0..4).map(|i| TileId(base + i)).collect()])
        .collect();
    let mut tokens = Vec::new();
    let mut seqs = Vec::new();
    for (i, &(toks, _, loras)) in chunks.iter().enumerate() {
        seqs.push(SeqChunk {
            start_pos: 0,
            first_token: tokens.len(),
            len: toks.len(),
            tile_tables: &tables[i],
            logits: LogitsWanted::Last,
            loras,
        });
        tokens.extend_from_slice(toks);
    }
    let mut logits = Vec::new();
    let batch = Batch {
        tokens: &tokens,
        seqs: &seqs,
    };
    r.execute(&batch, &mut logits).expect("batch runs");
    let vocab = r.facts().vocab_size;
    logits.chunks(vocab).map(<[f32]>::to_vec).collect()
}

#[test]
fn the_cpu_runner_loads_adapters_and_mixes_them_in_one_batch() {
    let dir = std::env::temp_dir().join(format!("tessera-lora-runner-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let mut r = runner(&dir);
    let ids: Vec<_> = (0..2)
        .map(|i| {
            let p = dir.join(format!("a{i}.gguf"));
            std::fs::write(&p, model::testing::lora::tiny_lora_gguf("llama", 40 + i)).expect("w");
            r.load_lora(&p).expect("adapter loads")
        })
        .collect();
    let a = [LoraUse {
        id: ids[0],
        scale: 1.0,
    }];
    let b = [LoraUse {
        id: ids[1],
        scale: 0.5,
    }];
    let (p1, p2, p3): (&[u32], &[u32], &[u32]) = (&[1, 40, 50, 60], &[1, 70, 80], &[1, 90]);
    let alone = [
        run(&mut r, &[(p1, 0, &a)]),
        run(&mut r, &[(p2, 4, &[])]),
        run(&mut r, &[(p3, 8, &b)]),
    ];
    let mixed = run(&mut r, &[(p1, 0, &a), (p2, 4, &[]), (p3, 8, &b)]);
    for (i, want) in alone.iter().enumerate() {
        assert!(mixed[i] == want[0], "chunk {i} differs in the mixed batch");
    }
    assert!(
        run(&mut r, &[(p1, 0, &[])])[0] != mixed[0],
        "the adapter changed nothing"
    );
    r.unload_lora(ids[0]).expect("unloads");
    let mut logits = Vec::new();
    let table = vec![vec![TileId(0)]];
    let seqs = [SeqChunk {
        start_pos: 0,
        first_token: 0,
        len: 1,
        tile_tables: &table,
        logits: LogitsWanted::Last,
        loras: &a,
    }];
    let batch = Batch {
        tokens: &[1],
        seqs: &seqs,
    };
    let err = r
        .execute(&batch, &mut logits)
        .expect_err("unloaded adapter refused");
    assert!(err.to_string().contains("not loaded"), "{err}");
    assert!(r.unload_lora(ids[0]).is_err(), "unloaded twice");
    let bad = dir.join("bad.gguf");
    std::fs::write(&bad, model::testing::tiny_model_gguf("qwen2", 7)).expect("write");
    let err = r.load_lora(&bad).expect_err("a model is no adapter");
    assert!(err.to_string().contains("bad.gguf"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}
