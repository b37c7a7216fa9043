//! Text <-> token ids for GGUF models, token-for-token identical to llama.cpp.
//!
//! Design: a [`Tokenizer`] is built from the `tokenizer.ggml.*` metadata of a GGUF file (or a
//! hand-made [`Vocab`]) and needs no other files. Encoding runs in two stages, as in llama.cpp:
//! 1. `special`: split the text on special-token strings (user-defined tokens always,
//!    control tokens only with `parse_special`);
//! 2. segment each remaining text fragment with the vocabulary's algorithm: `spm`
//!    (SentencePiece, score-ordered merges with byte fallback; Gemma, LLaMA 2) or `bpe`
//!    (BPE after a `pretokenize` split: byte-level for LLaMA 3, Qwen2, SmolLM, GPT-2,
//!    DeepSeek; SentencePiece-style over `▁`-escaped UTF-8 for Gemma 4's `gemma4` model) or
//!    `wpm` (WordPiece: BERT and its embedding models, `[CLS] text [SEP]`).
//!
//! BPE pre-tokenizers: [`PreTokenizer::NAMES`] is the table of accepted `tokenizer.ggml.pre`
//! values, each mapped to one of llama.cpp's split patterns it shares (the default, GPT-2,
//! Falcon, single digits then GPT-2 as `smollm`, LLaMA 3 with or without its flags, Qwen2,
//! Qwen3.5, DeepSeek LLM and Coder, GPT-4o's o200k pattern as `gpt-4o` for gpt-oss and Llama 4,
//! Gemma 4's newline runs). Every other name, including ones llama.cpp splits with patterns
//! Tessera does not implement (`deepseek-v3`, `tekken`, `seed-coder`, ...), is refused with
//! [`TokenizerError::UnsupportedPreTokenizer`], whose message lists the accepted names.
//!
//! Decoding concatenates precomputed per-token bytes (`decode`); [`IncrementalDecoder`]
//! streams them without ever emitting half a UTF-8 character.
//!
//! A `Tokenizer` is an `Arc` around immutable tables: cloning is cheap and it is `Send + Sync`.
//!
//! Deliberate differences from llama.cpp: decoding does not apply BPE's "clean up
//! tokenization spaces" heuristics (they lose information), and the per-model `lstrip`/`rstrip`
//! special-token attributes (Phi-3, Jina) are not implemented.

mod bpe;
mod decode;
mod error;
mod hash;
mod metadata;
mod pretokenize;
mod special;
mod spm;
mod unicode;
mod vocab;
mod wpm;

use std::sync::Arc;

pub use decode::IncrementalDecoder;
pub use error::TokenizerError;
pub use vocab::{PreTokenizer, SpecialIds, Vocab, VocabModel};

use decode::PieceBytes;
use special::{Fragment, SpecialMatcher};
use vocab::{Attr, Compiled};

/// The segmentation algorithm with its model-specific tables.
#[derive(Debug)]
enum Segmenter {
    Spm(spm::WordCuts),
    Bpe {
        pre: PreTokenizer,
        merges: bpe::Merges,
    },
    Wpm,
}

struct Inner {
    vocab: Compiled,
    segmenter: Segmenter,
    specials: SpecialMatcher,
    bytes: PieceBytes,
}

/// A tokenizer for one model's vocabulary. Cheap to clone.
#[derive(Clone)]
pub struct Tokenizer {
    inner: Arc<Inner>,
}

// The tables hold hundreds of thousands of entries; debug output shows only the summary.
impl std::fmt::Debug for Tokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let model = match &self.inner.segmenter {
            Segmenter::Spm(_) => "spm".to_string(),
            Segmenter::Bpe { pre, .. } => format!("bpe/{pre:?}"),
            Segmenter::Wpm => "wpm".to_string(),
        };
        f.debug_struct("Tokenizer")
            .field("model", &model)
            .field("vocab_size", &self.vocab_size())
            .field("bos", &self.bos_id())
            .field("eos", &self.eos_id())
            .field("eog", &self.eog_ids())
            .finish()
    }
}

impl Tokenizer {
    /// Builds the tokenizer described by a GGUF file's metadata.
    pub fn from_metadata(md: &gguf::Metadata) -> Result<Tokenizer, TokenizerError> {
        Self::from_vocab(&metadata::vocab_from_metadata(md)?)
    }

    /// Builds a tokenizer from an explicit vocabulary.
    pub fn from_vocab(vocab: &Vocab) -> Result<Tokenizer, TokenizerError> {
        let compiled = Compiled::build(vocab)?;
        let segmenter = match vocab.model {
            VocabModel::Spm => Segmenter::Spm(spm::WordCuts::new(&compiled)),
            VocabModel::Bpe(pre) => Segmenter::Bpe {
                pre,
                merges: bpe::Merges::new(&compiled, &vocab.merges),
            },
            VocabModel::Wpm => Segmenter::Wpm,
        };
        let specials = SpecialMatcher::new(&compiled);
        let bytes = PieceBytes::new(&compiled, vocab.model);
        Ok(Tokenizer {
            inner: Arc::new(Inner {
                vocab: compiled,
                segmenter,
                specials,
                bytes,
            }),
        })
    }

    /// Tokenizes `text`.
    ///
    /// `add_special` adds BOS (and EOS, and WordPiece's `[SEP]`) as the model's
    /// `add_bos_token`/`add_eos_token`/`add_sep_token` ask.
    /// `parse_special` turns control-token strings in the text (e.g. `<start_of_turn>`) into
    /// those tokens; without it they are tokenized as ordinary text.
    pub fn encode(&self, text: &str, add_special: bool, parse_special: bool) -> Vec<u32> {
        let v = &self.inner.vocab;
        let mut out = Vec::with_capacity(text.len() / 3 + 2);
        if add_special && v.add_bos {
            out.extend(v.special.bos);
        }
        // SPM prefixes a space to text at the start and after each special token.
        let mut after_special = true;
        let mut escaped = String::new();
        for fragment in self.inner.specials.partition(text, v, parse_special) {
            match fragment {
                Fragment::Token(id) => {
                    out.push(id);
                    after_special = true;
                }
                Fragment::Text(t) => {
                    match &self.inner.segmenter {
                        Segmenter::Spm(cuts) => {
                            escaped.clear();
                            if v.add_space_prefix && after_special {
                                escaped.push('\u{2581}');
                            }
                            escaped
                                .extend(t.chars().map(|c| if c == ' ' { '\u{2581}' } else { c }));
                            spm::encode(v, cuts, &escaped, &mut out);
                        }
                        Segmenter::Bpe { pre, merges } => bpe::encode(v, merges, *pre, t, &mut out),
                        Segmenter::Wpm => wpm::encode(v, t, &mut out),
                    }
                    after_special = false;
                }
            }
        }
        if add_special && v.add_eos {
            out.extend(v.special.eos);
        }
        if add_special && v.add_sep {
            out.extend(v.special.sep);
        }
        out
    }

    /// Turns ids back into text. `skip_special` drops control and unknown tokens (BOS, EOS,
    /// `<end_of_turn>`, ...); otherwise they appear as their text. Bytes that do not form valid
    /// UTF-8 (e.g. a truncated byte-fallback sequence) become U+FFFD.
    ///
    /// For SPM vocabularies with `add_space_prefix`, the space `encode` adds at the start and
    /// after special tokens is removed again, so `decode(encode(t))` gives back `t`. WordPiece
    /// decoding is lossy: every word-initial piece starts with a space (the first too), text
    /// is lowercase without accents, punctuation stands apart (llama.cpp's clean-up heuristics
    /// are not applied).
    pub fn decode(&self, ids: &[u32], skip_special: bool) -> String {
        let v = &self.inner.vocab;
        let mut bytes = Vec::with_capacity(ids.len() * 4);
        let mut strip_space = v.add_space_prefix;
        for &id in ids {
            let attr = v.attr(id);
            let is_token_fragment = [Attr::CONTROL, Attr::UNKNOWN, Attr::USER_DEFINED]
                .iter()
                .any(|&a| attr.has(a));
            if is_token_fragment {
                strip_space = v.add_space_prefix;
                if skip_special && self.is_special(id) {
                    continue;
                }
                bytes.extend_from_slice(self.token_bytes(id));
                continue;
            }
            let piece = self.token_bytes(id);
            match piece.split_first() {
                Some((b' ', rest)) if strip_space => bytes.extend_from_slice(rest),
                _ => bytes.extend_from_slice(piece),
            }
            strip_space = false;
        }
        String::from_utf8_lossy(&bytes).into_owned()
    }

    /// A streaming decoder for generated tokens (no prefix-space handling).
    pub fn incremental_decoder(&self, skip_special: bool) -> IncrementalDecoder {
        IncrementalDecoder::with_skip_special(self, skip_special)
    }

    /// The raw output bytes of one token: `▁` as a space, byte-fallback tokens as their byte,
    /// special tokens as their text. Empty for ids outside the vocabulary.
    pub fn token_bytes(&self, id: u32) -> &[u8] {
        self.inner.bytes.get(id)
    }

    /// The token's text as stored in the vocabulary (e.g. `▁Hello`, `<0x0A>`).
    pub fn token_piece(&self, id: u32) -> Option<&str> {
        self.inner.vocab.pieces.get(id as usize).map(String::as_str)
    }

    /// The id of the token whose vocabulary text is exactly `piece`.
    pub fn token_to_id(&self, piece: &str) -> Option<u32> {
        self.inner.vocab.piece_to_id.get(piece).copied()
    }

    /// Number of tokens in the vocabulary.
    pub fn vocab_size(&self) -> usize {
        self.inner.vocab.len()
    }

    pub fn bos_id(&self) -> Option<u32> {
        self.inner.vocab.special.bos
    }

    pub fn eos_id(&self) -> Option<u32> {
        self.inner.vocab.special.eos
    }

    /// End-of-turn token (e.g. Gemma's `<end_of_turn>`), if any.
    pub fn eot_id(&self) -> Option<u32> {
        self.inner.vocab.special.eot
    }

    /// The separator (WordPiece's `[SEP]`): it ends every input and parts a pair's texts.
    pub fn sep_id(&self) -> Option<u32> {
        self.inner.vocab.special.sep
    }

    /// The unknown token (WordPiece's `[UNK]`).
    pub fn unk_id(&self) -> Option<u32> {
        self.inner.vocab.special.unk
    }

    /// Whether `encode(.., add_special = true, ..)` appends the separator.
    pub fn add_sep(&self) -> bool {
        self.inner.vocab.add_sep
    }

    /// Whether this is a WordPiece (BERT) vocabulary.
    pub fn is_wordpiece(&self) -> bool {
        matches!(self.inner.segmenter, Segmenter::Wpm)
    }

    pub fn pad_id(&self) -> Option<u32> {
        self.inner.vocab.special.pad
    }

    /// Whether `encode(.., add_special = true, ..)` prepends BOS.
    pub fn add_bos(&self) -> bool {
        self.inner.vocab.add_bos
    }

    /// Ids that end generation: EOS, EOT and llama.cpp's list of end-like token texts
    /// (sorted, unique).
    pub fn eog_ids(&self) -> &[u32] {
        &self.inner.vocab.eog
    }

    pub fn is_eog(&self, id: u32) -> bool {
        self.inner.vocab.eog.binary_search(&id).is_ok()
    }

    /// Whether the token is a control or unknown token, i.e. one `decode(.., true)` hides.
    pub fn is_special(&self, id: u32) -> bool {
        let attr = self.inner.vocab.attr(id);
        attr.has(Attr::CONTROL) || attr.has(Attr::UNKNOWN)
    }
}

#[cfg(test)]
mod tests;
