//! Which runner computes: the binary chooses, for the served model and for a draft model. The
//! engine and the server take whatever becomes a `Runner`; this binary builds the CPU runner
//! (`engine::CpuRunner`) over the model crate's transformer or embedding models.

use std::path::{Path, PathBuf};

use engine::{CpuModel, DraftLoader, LoadError, StartError};
use model::{Dtype, Pooling, Tokenizer};

/// Whether the file is an embedding model (an encoder, or a decoder converted as one).
pub fn is_embedding_model(path: &Path) -> bool {
    gguf::GgufFile::open(path)
        .is_ok_and(|f| model::model_kind(f.metadata()).is_ok_and(model::ModelKind::embeds))
}

/// The served model on the CPU: an embedding model when the file is one or `pooling` asks
/// (a decoder read as an embedder, vLLM's `--task embed`), else a decoder that generates,
/// with the LoRA adapters `merged` added into its weights (scale 1; `--lora-merge`). `dtype` is
/// an encoder's arithmetic (`--dtype`); any but `Auto` on a generating model is an error.
pub fn cpu_model(
    path: PathBuf,
    threads: usize,
    pooling: Option<Pooling>,
    dtype: Dtype,
    merged: Vec<PathBuf>,
) -> impl FnOnce() -> Result<(CpuModel, Tokenizer), LoadError> + Send + 'static {
    move || {
        let embeds = pooling.is_some() || is_embedding_model(&path);
        if !embeds && dtype != Dtype::Auto {
            return Err(format!(
                "--dtype {}: applies to embedding encoders (nomic-bert, bert); {} is a \
                 generating model, which computes in its own block formats",
                dtype.name(),
                path.display()
            )
            .into());
        }
        if embeds && !merged.is_empty() {
            return Err(
                "--lora-merge: LoRA adapters apply to generating models, and this \
                        is an embedding model"
                    .into(),
            );
        }
        if !merged.is_empty() {
            let merges: Vec<(&Path, f32)> = merged.iter().map(|p| (p.as_path(), 1.0)).collect();
            let m = model::load_merged(&path, threads, &merges)?;
            return Ok((CpuModel::Decoder(Box::new(m.transformer)), m.tokenizer));
        }
        if embeds {
            let m = model::load_embedder(&path, threads, dtype)?;
            let pooling = pooling.unwrap_or(m.embedder.pooling());
            let model = CpuModel::Embedder {
                embedder: m.embedder,
                pooling,
            };
            Ok((model, m.tokenizer))
        } else {
            let m = model::load(&path, threads)?;
            Ok((CpuModel::Decoder(Box::new(m.transformer)), m.tokenizer))
        }
    }
}

/// A draft model on the CPU, on `threads` workers, loaded when the engine starts.
pub fn cpu_draft(path: PathBuf, threads: usize) -> DraftLoader {
    DraftLoader::new(path.display().to_string(), move |kv| {
        let m = model::load(&path, threads)
            .map_err(|e| StartError::Draft(format!("{}: {e}", path.display())))?;
        let runner = engine::CpuRunner::new(m.transformer, kv)?;
        Ok(Box::new(runner) as Box<dyn engine::Runner>)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Greedy next token after each prompt, from a loaded decoder.
    fn next_tokens(m: CpuModel, prompts: &[Vec<u32>]) -> Vec<u32> {
        let CpuModel::Decoder(mut t) = m else {
            panic!("a decoder was loaded");
        };
        prompts
            .iter()
            .map(|p| {
                let mut s = model::Session::new(&t, 1, 64, 16);
                let logits = s.prefill(&mut t, 0, p, 64).expect("prefill");
                (0..logits.len())
                    .max_by(|&a, &b| logits[a].total_cmp(&logits[b]))
                    .expect("logits") as u32
            })
            .collect()
    }

    #[test]
    fn lora_merge_loads_the_adapter_into_the_weights_and_names_a_bad_file() {
        let dir = std::env::temp_dir().join(format!("tessera-runners-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let path = dir.join("tiny.gguf");
        std::fs::write(&path, model::testing::tiny_model_gguf("llama", 7)).expect("write");
        let adapter = dir.join("a.gguf");
        let bytes = model::testing::lora::tiny_lora_gguf("llama", 40);
        std::fs::write(&adapter, bytes).expect("write");
        let load =
            |merged: Vec<PathBuf>| cpu_model(path.clone(), 1, None, model::Dtype::Auto, merged)();
        let prompts: Vec<Vec<u32>> = (0..8).map(|i| vec![1, 40 + i, 50 + i, 60]).collect();
        let (base, _) = load(Vec::new()).expect("base loads");
        let (merged, _) = load(vec![adapter.clone()]).expect("merged loads");
        let (base, merged) = (next_tokens(base, &prompts), next_tokens(merged, &prompts));
        assert_ne!(
            base, merged,
            "merging the adapter changes the greedy tokens"
        );
        let missing = dir.join("missing.gguf");
        let err = load(vec![missing]).err().expect("refused").to_string();
        assert!(err.contains("missing.gguf"), "{err}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn an_encoder_dtype_on_a_generating_model_is_refused_naming_the_flag() {
        let dir = std::env::temp_dir().join(format!("tessera-dtype-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let path = dir.join("tiny.gguf");
        std::fs::write(&path, model::testing::tiny_model_gguf("llama", 7)).expect("write");
        for dtype in [model::Dtype::Float32, model::Dtype::Bfloat16] {
            let err = cpu_model(path.clone(), 1, None, dtype, Vec::new())()
                .err()
                .expect("refused")
                .to_string();
            assert!(
                err.contains("--dtype") && err.contains(dtype.name()) && err.contains("tiny.gguf"),
                "{err}"
            );
        }
        assert!(cpu_model(path.clone(), 1, None, model::Dtype::Auto, Vec::new())().is_ok());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
