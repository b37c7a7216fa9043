//! Which runner computes: the binary chooses, for the served model and for a draft model. The
//! engine and the server take whatever becomes a `Runner`; this binary builds the CPU runner
//! (`engine::CpuRunner`) over the model crate's transformer or embedding models.

use std::path::{Path, PathBuf};

use engine::{CpuModel, DraftLoader, LoadError, StartError};
use model::{Pooling, Tokenizer};

/// Whether the file is an embedding model (an encoder, or a decoder converted as one).
pub fn is_embedding_model(path: &Path) -> bool {
    gguf::GgufFile::open(path)
        .is_ok_and(|f| model::model_kind(f.metadata()).is_ok_and(model::ModelKind::embeds))
}

/// The served model on the CPU: an embedding model when the file is one or `pooling` asks
/// (a decoder read as an embedder, vLLM's `--task embed`), else a decoder that generates,
/// with the LoRA adapters `merged` added into its weights (scale 1; `--lora-merge`).
pub fn cpu_model(
    path: PathBuf,
    threads: usize,
    pooling: Option<Pooling>,
    merged: Vec<PathBuf>,
) -> impl FnOnce() -> Result<(CpuModel, Tokenizer), LoadError> + Send + 'static {
    move || {
        let embeds = pooling.is_some() || is_embedding_model(&path);
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
            let m = model::load_embedder(&path, threads)?;
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
