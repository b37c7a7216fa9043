//! Building a [`Vocab`] from GGUF `tokenizer.ggml.*` metadata.
//!
//! Design: read every key the tokenizer uses, start from [`Vocab::new`]'s llama.cpp defaults for
//! the model family and let present keys override them. Absent optional keys are not errors;
//! keys of the wrong type are (a silently ignored `add_bos_token` would change every prompt).

use gguf::{Array, Metadata};

use crate::vocab::{PreTokenizer, SpecialIds, Vocab, VocabModel};
use crate::TokenizerError;

const MODEL: &str = "tokenizer.ggml.model";
const PRE: &str = "tokenizer.ggml.pre";
const TOKENS: &str = "tokenizer.ggml.tokens";
const SCORES: &str = "tokenizer.ggml.scores";
const TOKEN_TYPE: &str = "tokenizer.ggml.token_type";
const MERGES: &str = "tokenizer.ggml.merges";

/// Reads the vocabulary described by `md`.
pub(crate) fn vocab_from_metadata(md: &Metadata) -> Result<Vocab, TokenizerError> {
    let model_name = md
        .get_str(MODEL)?
        .ok_or(TokenizerError::MissingKey { key: MODEL })?;
    let model = match model_name {
        "llama" => VocabModel::Spm,
        "gpt2" => VocabModel::Bpe(PreTokenizer::from_gguf_name(md.get_str(PRE)?)?),
        "bert" => VocabModel::Wpm,
        // llama.cpp sets the pre-tokenizer of this model itself, whatever the file says.
        "gemma4" => VocabModel::Bpe(PreTokenizer::Gemma4),
        other => {
            return Err(TokenizerError::UnsupportedModel {
                model: other.to_string(),
            })
        }
    };
    let tokens = match md.get_array(TOKENS)? {
        Some(Array::String(t)) => t.clone(),
        Some(other) => return Err(bad_array(TOKENS, "string", other)),
        None => return Err(TokenizerError::MissingKey { key: TOKENS }),
    };
    let mut vocab = Vocab::new(model, tokens);
    if model_name == "gemma4" {
        // No default role ids: the file names them.
        vocab.special = SpecialIds::default();
    }
    vocab.scores = match md.get_array(SCORES)? {
        None => Vec::new(),
        Some(Array::F32(s)) => s.clone(),
        Some(Array::I32(s)) => s.iter().map(|&x| x as f32).collect(),
        Some(other) => return Err(bad_array(SCORES, "f32", other)),
    };
    vocab.token_types = match md.get_array(TOKEN_TYPE)? {
        None => Vec::new(),
        Some(Array::I32(t)) => t.clone(),
        Some(Array::U32(t)) => t.iter().map(|&x| i32::try_from(x).unwrap_or(0)).collect(),
        Some(other) => return Err(bad_array(TOKEN_TYPE, "i32", other)),
    };
    vocab.merges = match md.get_array(MERGES)? {
        None => Vec::new(),
        Some(Array::String(m)) => m.clone(),
        Some(other) => return Err(bad_array(MERGES, "string", other)),
    };
    if matches!(model, VocabModel::Bpe(_)) && vocab.merges.is_empty() {
        return Err(TokenizerError::MissingKey { key: MERGES });
    }

    let ids = [
        ("tokenizer.ggml.bos_token_id", &mut vocab.special.bos),
        ("tokenizer.ggml.eos_token_id", &mut vocab.special.eos),
        ("tokenizer.ggml.eot_token_id", &mut vocab.special.eot),
        ("tokenizer.ggml.unknown_token_id", &mut vocab.special.unk),
        ("tokenizer.ggml.padding_token_id", &mut vocab.special.pad),
        // llama.cpp's key, spelled so.
        ("tokenizer.ggml.seperator_token_id", &mut vocab.special.sep),
    ];
    for (key, slot) in ids {
        if let Some(id) = md.get_u32(key)? {
            // llama.cpp keeps the default when the file's id is out of range.
            if (id as usize) < vocab.tokens.len() {
                *slot = Some(id);
            }
        }
    }
    let flags = [
        ("tokenizer.ggml.add_bos_token", &mut vocab.add_bos),
        ("tokenizer.ggml.add_eos_token", &mut vocab.add_eos),
        ("tokenizer.ggml.add_sep_token", &mut vocab.add_sep),
        (
            "tokenizer.ggml.add_space_prefix",
            &mut vocab.add_space_prefix,
        ),
    ];
    for (key, slot) in flags {
        if let Some(v) = md.get_bool(key)? {
            *slot = v;
        }
    }
    // llama.cpp adds BOS for Gemma 4 even when the file says not to.
    if model == VocabModel::Bpe(PreTokenizer::Gemma4) {
        vocab.add_bos = true;
    }
    // llama.cpp's BertNormalizer options: strip_accents follows lowercase unless given.
    if let Some(v) = md.get_bool("tokenizer.ggml.normalizer.lowercase")? {
        vocab.lowercase = v;
        vocab.strip_accents = v;
    }
    if let Some(v) = md.get_bool("tokenizer.ggml.normalizer.strip_accents")? {
        vocab.strip_accents = v;
    }
    Ok(vocab)
}

fn bad_array(key: &'static str, expected: &'static str, found: &Array) -> TokenizerError {
    TokenizerError::BadArray {
        key,
        expected,
        found: found.elem_type_name(),
    }
}
