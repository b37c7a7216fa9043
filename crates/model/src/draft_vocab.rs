//! A draft model drafts tokens for the served model: both must name the same tokens by the
//! same ids, which is checked here, from the files, before either model is loaded.

use std::path::Path;

use tokenizer::Tokenizer;

/// Refuses a draft model whose vocabulary is not the target's token for token (its drafts
/// would name other tokens); the message names both files.
pub fn check_vocab(
    target: &Tokenizer,
    target_path: &Path,
    draft: &Tokenizer,
    draft_path: &Path,
) -> Result<(), String> {
    let (n, m) = (target.vocab_size(), draft.vocab_size());
    let differ = if n != m {
        Some(format!("{m} tokens against {n}"))
    } else {
        (0..n as u32)
            .find(|&t| target.token_bytes(t) != draft.token_bytes(t))
            .map(|t| format!("token {t} differs"))
    };
    match differ {
        None => Ok(()),
        Some(why) => Err(format!(
            "the draft model {} does not share the vocabulary of the model {} ({why}): a draft \
             model must use the same tokenizer",
            draft_path.display(),
            target_path.display()
        )),
    }
}

/// `check_vocab` on two GGUF files' tokenizers (before either model is loaded).
pub fn check_vocab_files(target: &Path, draft: &Path) -> Result<(), String> {
    let tokenizer =
        |p: &Path| crate::load_tokenizer(p).map_err(|e| format!("{}: {e}", p.display()));
    check_vocab(&tokenizer(target)?, target, &tokenizer(draft)?, draft)
}
