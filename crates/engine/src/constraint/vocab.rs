//! The model's vocabulary as llguidance sees it: each token's bytes in a `TokTrie`, special
//! (control) tokens behind llguidance's 0xFF marker so that no text can spell them, and the
//! vocabulary's end-of-generation ids as the tokens that end a grammar.

use std::sync::Arc;

use llguidance::toktrie::{TokEnv, TokRxInfo, TokTrie, TokenId, TokenizerEnv};
use tokenizer::Tokenizer;

/// Our tokenizer and the trie over its tokens' bytes.
struct VocabEnv {
    tokenizer: Tokenizer,
    trie: TokTrie,
    /// Whether the tokenizer's tokens spell exactly the text given (false for SentencePiece
    /// vocabularies that prefix a space): only then are its tokenizations used for forced text.
    canonical: bool,
}

impl TokenizerEnv for VocabEnv {
    fn tok_trie(&self) -> &TokTrie {
        &self.trie
    }

    /// The tokenizer's own segmentation (no special tokens parsed), so forced text is
    /// tokenized as the model saw it in training; bytes that are not UTF-8 fall back to the
    /// trie's greedy tokenization.
    fn tokenize_bytes(&self, s: &[u8]) -> Vec<TokenId> {
        match std::str::from_utf8(s) {
            Ok(text) if self.canonical => self.tokenizer.encode(text, false, false),
            _ => self.trie.greedy_tokenize(s),
        }
    }

    fn tokenize_is_canonical(&self) -> bool {
        self.canonical
    }
}

/// Whether encoding text gives tokens whose bytes are that text (a sample with a leading word
/// and an inner space: a SentencePiece space prefix shows up as an extra leading space).
fn spells_exactly(tokenizer: &Tokenizer) -> bool {
    let text = "ab c{\"x\": 1}";
    let ids = tokenizer.encode(text, false, false);
    let bytes: Vec<u8> = ids
        .iter()
        .flat_map(|&id| tokenizer.token_bytes(id).iter().copied())
        .collect();
    bytes == text.as_bytes()
}

/// Each token's bytes, the special ones marked (an unused id with no bytes stays empty, which
/// llguidance never allows).
pub(super) fn token_words(tokenizer: &Tokenizer) -> Vec<Vec<u8>> {
    (0..tokenizer.vocab_size() as u32)
        .map(|id| {
            let bytes = tokenizer.token_bytes(id);
            if tokenizer.is_special(id) && !bytes.is_empty() {
                let mut w = Vec::with_capacity(bytes.len() + 1);
                w.push(TokTrie::SPECIAL_TOKEN_MARKER);
                w.extend_from_slice(bytes);
                w
            } else {
                bytes.to_vec()
            }
        })
        .collect()
}

/// The environment llguidance compiles grammars against.
pub(super) fn tok_env(tokenizer: &Tokenizer) -> TokEnv {
    let words = token_words(tokenizer);
    let eog = tokenizer.eog_ids();
    let first_eog = eog.first().copied().or(tokenizer.eos_id()).unwrap_or(0);
    let mut info = TokRxInfo::new(words.len() as u32, first_eog);
    info.tok_bos = tokenizer.bos_id();
    info.tok_pad = tokenizer.pad_id();
    info.tok_end_of_turn = tokenizer.eot_id();
    let mut trie = TokTrie::from(&info, &words);
    if !eog.is_empty() {
        trie = trie.with_eos_tokens(eog);
    }
    Arc::new(VocabEnv {
        tokenizer: tokenizer.clone(),
        trie,
        canonical: spells_exactly(tokenizer),
    })
}
