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
/// (a decoder read as an embedder, vLLM's `--task embed`), else a decoder that generates.
pub fn cpu_model(
    path: PathBuf,
    threads: usize,
    pooling: Option<Pooling>,
) -> impl FnOnce() -> Result<(CpuModel, Tokenizer), LoadError> + Send + 'static {
    move || {
        if pooling.is_some() || is_embedding_model(&path) {
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
