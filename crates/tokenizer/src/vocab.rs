//! The vocabulary: plain input data ([`Vocab`]) and its validated, indexed form ([`Compiled`]).
//!
//! Design: [`Vocab`] mirrors the `tokenizer.ggml.*` GGUF keys one-to-one so it can be built from
//! metadata or by hand in tests. [`Vocab::new`] fills in llama.cpp's per-family defaults
//! (special ids, `add_bos`, `add_space_prefix`); metadata keys then override them.
//! [`Compiled`] adds the lookup tables every encode needs (text -> id, byte -> fallback id) and
//! derives token attributes the way llama.cpp does, including its text-based end-of-generation
//! detection, so that tokenization matches llama.cpp token for token.
//!
//! Invariants of [`Compiled`]: `pieces`, `scores` and `attrs` have the same length `n`; every id
//! stored anywhere (`piece_to_id` values, `byte_ids`, special ids, `eog`) is `< n`.

use crate::hash::FastMap;

use crate::TokenizerError;

/// Which segmentation algorithm a vocabulary uses (`tokenizer.ggml.model`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VocabModel {
    /// SentencePiece-style: score-ordered merges over characters, `<0xXX>` byte fallback
    /// (`"llama"` in GGUF; used by LLaMA 1/2, Mistral, Gemma).
    Spm,
    /// BPE with ranked merges, split by a pre-tokenizer first: byte-level (`"gpt2"` in GGUF),
    /// or SentencePiece-style over UTF-8 with [`PreTokenizer::Gemma4`] (`"gemma4"`).
    Bpe(PreTokenizer),
    /// WordPiece (`"bert"` in GGUF): lowercased, accent-free words cut into the longest pieces;
    /// BOS is BERT's `[CLS]`, and `[SEP]` ends the input.
    Wpm,
}

/// How BPE text is split into words before merging (`tokenizer.ggml.pre`).
///
/// Each variant is one of llama.cpp's pre-tokenizer behaviours: a split pattern plus the flags
/// llama.cpp ties to the name (whole-word vocabulary hits skip merging, BOS added by default).
/// [`PreTokenizer::NAMES`] maps every `tokenizer.ggml.pre` value Tessera accepts to one of them;
/// any other name is refused at load, since a wrong split silently changes every prompt.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PreTokenizer {
    /// llama.cpp's fallback: punctuation runs, the GPT-2 pattern, digit runs, digit triples.
    Default,
    /// The original GPT-2 pattern alone.
    Gpt2,
    /// Every digit on its own, then the GPT-2 pattern (SmolLM, StarCoder, Command-R, ...).
    SmolLm,
    /// The LLaMA 3 pattern (digits in groups of up to three); whole words found in the
    /// vocabulary skip merging, and BOS is added unless the file says otherwise.
    Llama3,
    /// The LLaMA 3 pattern without LLaMA 3's flags (DBRX, Smaug).
    Dbrx,
    /// The Qwen2 pattern (LLaMA 3's with single digits).
    Qwen2,
    /// Qwen3.5: Qwen2's pattern with combining marks kept in words.
    Qwen35,
    /// DeepSeek LLM: newlines, a space with a run of (mostly Latin, Greek, Cyrillic) letters,
    /// a space with a run of ASCII or full-width symbols, trailing white space, CJK runs and
    /// digit runs, each a pass over the pieces of the previous one.
    DeepSeekLlm,
    /// DeepSeek Coder: newlines, a space with letters, a space with punctuation, CJK runs and
    /// single digits, in passes as DeepSeek LLM's.
    DeepSeekCoder,
    /// Gemma 4 (`tokenizer.ggml.model = "gemma4"`): SentencePiece-style BPE. Spaces become `▁`,
    /// merges run on raw UTF-8 (no byte alphabet) over whole lines (text is split only into
    /// runs of newlines and runs of other chars), a run of newlines that is a token stays
    /// whole, and a char no merge reaches falls back to its `<0xXX>` byte tokens.
    Gemma4,
    /// Falcon: punctuation runs (with the backtick), the GPT-2 pattern, digit triples.
    Falcon,
    /// GPT-4o's o200k pattern (gpt-oss, Llama 4): words split at case changes, contractions
    /// kept on their word, digits in groups of up to three.
    Gpt4o,
}

impl PreTokenizer {
    /// Every accepted `tokenizer.ggml.pre` value and its pre-tokenizer, as llama.cpp maps them
    /// (`src/llama-vocab.cpp`). Names llama.cpp knows but that need another split pattern or
    /// flag (e.g. `deepseek-v3`, `tekken`, `seed-coder`, `chameleon`, `bloom`, `roberta-bpe`)
    /// are refused.
    pub const NAMES: &'static [(&'static str, PreTokenizer)] = &[
        ("default", Self::Default),
        ("gpt-2", Self::Gpt2),
        ("falcon", Self::Falcon),
        ("phi-2", Self::Gpt2),
        ("mpt", Self::Gpt2),
        ("olmo", Self::Gpt2),
        ("jais", Self::Gpt2),
        ("trillion", Self::Gpt2),
        ("exaone4", Self::Gpt2),
        ("gigachat", Self::Gpt2),
        ("a.x-4.0", Self::Gpt2),
        ("mellum", Self::Gpt2),
        ("smollm", Self::SmolLm),
        ("starcoder", Self::SmolLm),
        ("refact", Self::SmolLm),
        ("command-r", Self::SmolLm),
        ("codeshell", Self::SmolLm),
        ("exaone", Self::SmolLm),
        ("minerva-7b", Self::SmolLm),
        ("mellum2", Self::SmolLm),
        ("llama3", Self::Llama3),
        ("llama-v3", Self::Llama3),
        ("llama-bpe", Self::Llama3),
        ("falcon3", Self::Llama3),
        ("falcon-h1", Self::Llama3),
        ("pixtral", Self::Llama3),
        ("midm-2.0", Self::Llama3),
        ("lfm2", Self::Llama3),
        ("dbrx", Self::Dbrx),
        ("smaug-bpe", Self::Dbrx),
        ("qwen2", Self::Qwen2),
        ("deepseek-r1-qwen", Self::Qwen2),
        ("kormo", Self::Qwen2),
        ("f2llmv2", Self::Qwen2),
        ("megrez", Self::Qwen2),
        ("stablelm2", Self::Qwen2),
        ("hunyuan", Self::Qwen2),
        ("solar-open", Self::Qwen2),
        ("qwen35", Self::Qwen35),
        ("deepseek-llm", Self::DeepSeekLlm),
        ("deepseek-coder", Self::DeepSeekCoder),
        ("gemma4", Self::Gemma4),
        ("granite-embed-multi-311m", Self::Gemma4),
        ("gpt-4o", Self::Gpt4o),
        ("llama4", Self::Gpt4o),
        ("kanana2", Self::Gpt4o),
        ("talkie", Self::Gpt4o),
        ("minimax-m2", Self::Gpt4o),
    ];

    /// Maps a `tokenizer.ggml.pre` value to a pre-tokenizer; an absent value means `Default`.
    pub fn from_gguf_name(name: Option<&str>) -> Result<Self, TokenizerError> {
        let Some(name) = name else {
            return Ok(Self::Default);
        };
        Self::NAMES
            .iter()
            .find(|(n, _)| *n == name)
            .map(|&(_, pre)| pre)
            .ok_or_else(|| TokenizerError::UnsupportedPreTokenizer {
                pre: name.to_string(),
            })
    }

    /// The accepted names, comma-separated (for error messages).
    pub fn supported_names() -> String {
        let names: Vec<&str> = Self::NAMES.iter().map(|(n, _)| *n).collect();
        names.join(", ")
    }

    /// Whether a word found whole in the vocabulary is emitted without merging (llama.cpp's
    /// `ignore_merges`).
    pub fn ignores_merges(self) -> bool {
        self == Self::Llama3
    }

    /// Whether BOS is added by default (the file's `add_bos_token` overrides it, except for
    /// Gemma 4, where llama.cpp always adds it).
    pub fn adds_bos(self) -> bool {
        matches!(self, Self::Llama3 | Self::Gemma4)
    }

    /// Whether this is SentencePiece-style BPE (Gemma 4): spaces escaped as `▁`, pieces in raw
    /// UTF-8 rather than GPT-2's byte alphabet, `<0xXX>` byte tokens.
    pub fn is_spm_style(self) -> bool {
        self == Self::Gemma4
    }
}

/// Ids of the tokens with a fixed role; `None` when the vocabulary has no such token.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SpecialIds {
    /// Beginning of sequence.
    pub bos: Option<u32>,
    /// End of sequence.
    pub eos: Option<u32>,
    /// End of turn (chat models); detected from the token text when absent.
    pub eot: Option<u32>,
    /// Unknown token, used when even byte fallback has no token.
    pub unk: Option<u32>,
    /// Padding.
    pub pad: Option<u32>,
    /// Separator (WordPiece's `[SEP]`, which ends every input and parts a pair's texts).
    pub sep: Option<u32>,
}

/// A vocabulary as stored in GGUF metadata, before indexing.
#[derive(Clone, Debug)]
pub struct Vocab {
    /// Segmentation algorithm.
    pub model: VocabModel,
    /// Token texts; the index is the token id.
    pub tokens: Vec<String>,
    /// SPM merge priorities (higher merges first); empty means all zero.
    pub scores: Vec<f32>,
    /// GGUF token types (1 normal, 2 unknown, 3 control, 4 user defined, 5 unused, 6 byte);
    /// empty means all normal.
    pub token_types: Vec<i32>,
    /// BPE merges as `"left right"`, highest priority first; unused by SPM.
    pub merges: Vec<String>,
    /// Role token ids.
    pub special: SpecialIds,
    /// Whether `encode(.., add_special = true, ..)` prepends BOS.
    pub add_bos: bool,
    /// Whether `encode(.., add_special = true, ..)` appends EOS.
    pub add_eos: bool,
    /// Whether `encode(.., add_special = true, ..)` appends the separator (WordPiece).
    pub add_sep: bool,
    /// WordPiece normaliser: lowercase the text (`tokenizer.ggml.normalizer.lowercase`).
    pub lowercase: bool,
    /// WordPiece normaliser: strip accents, i.e. keep the first code point of each canonical
    /// decomposition and drop combining marks (`tokenizer.ggml.normalizer.strip_accents`;
    /// defaults to `lowercase`).
    pub strip_accents: bool,
    /// SPM only: prepend a space to text at the start and after every special token.
    pub add_space_prefix: bool,
}

impl Vocab {
    /// A vocabulary with llama.cpp's defaults for `model`; callers then override fields.
    pub fn new(model: VocabModel, tokens: Vec<String>) -> Self {
        let (special, add_bos, add_space_prefix) = match model {
            VocabModel::Spm => (
                SpecialIds {
                    bos: Some(1),
                    eos: Some(2),
                    unk: Some(0),
                    ..SpecialIds::default()
                },
                true,
                true,
            ),
            VocabModel::Bpe(pre) => (
                SpecialIds {
                    bos: Some(11),
                    eos: Some(11),
                    ..SpecialIds::default()
                },
                pre.adds_bos(),
                false,
            ),
            // llama.cpp's BERT defaults: [CLS] 101 as BOS, [UNK] 100, [SEP] 102, [PAD] 0.
            VocabModel::Wpm => (
                SpecialIds {
                    bos: Some(101),
                    unk: Some(100),
                    sep: Some(102),
                    pad: Some(0),
                    ..SpecialIds::default()
                },
                true,
                false,
            ),
        };
        Self {
            model,
            tokens,
            scores: Vec::new(),
            token_types: Vec::new(),
            merges: Vec::new(),
            special,
            add_bos,
            add_eos: false,
            add_sep: model == VocabModel::Wpm,
            lowercase: true,
            strip_accents: true,
            add_space_prefix,
        }
    }
}

/// Token attribute bits (a token can carry several, e.g. user defined + control).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Attr(u8);

impl Attr {
    pub const NORMAL: Attr = Attr(1);
    pub const UNKNOWN: Attr = Attr(2);
    pub const CONTROL: Attr = Attr(4);
    pub const USER_DEFINED: Attr = Attr(8);
    pub const UNUSED: Attr = Attr(16);
    pub const BYTE: Attr = Attr(32);

    fn from_token_type(t: i32) -> Attr {
        match t {
            1 => Attr::NORMAL,
            2 => Attr::UNKNOWN,
            3 => Attr::CONTROL,
            4 => Attr::USER_DEFINED,
            5 => Attr::UNUSED,
            6 => Attr::BYTE,
            _ => Attr(0),
        }
    }

    pub fn has(self, other: Attr) -> bool {
        self.0 & other.0 != 0
    }

    fn insert(&mut self, other: Attr) {
        self.0 |= other.0;
    }
}

/// Token texts that end generation, as llama.cpp recognises them; such tokens are also forced
/// to be control tokens (which changes how `parse_special = false` treats them).
const EOG_TEXTS: &[&str] = &[
    "<|eot_id|>",
    "<|im_end|>",
    "<|end|>",
    "<|return|>",
    "<|call|>",
    "<|flush|>",
    "<|calls|>",
    "<end_of_turn>",
    "<|endoftext|>",
    "</s>",
    "<|eom_id|>",
    "<EOT>",
    "_<EOT>",
    "[EOT]",
    "[EOS]",
    "<|end_of_text|>",
    "<end_of_utterance>",
    "<eos>",
    "<turn|>",
    "<|tool_response>",
    "<｜end▁of▁sentence｜>",
];

/// gpt-oss's harmony markers: llama.cpp makes them user-defined tokens whatever the file says,
/// so they are split out of text even without `parse_special` and always rendered (the
/// reasoning parser reads them in the decoded text).
const HARMONY_MARKERS: &[&str] = &["<|channel|>", "<|message|>", "<|start|>", "<|constrain|>"];

/// Token texts that llama.cpp takes as the end-of-turn token when the metadata names none.
const EOT_TEXTS: &[&str] = &[
    "<|eot_id|>",
    "<|im_end|>",
    "<|end|>",
    "<end_of_turn>",
    "<|endoftext|>",
    "<|end_of_text|>",
    "<EOT>",
    "_<EOT>",
    "[EOT]",
    "<｜end▁of▁sentence｜>",
    "<end_of_utterance>",
];

/// The indexed vocabulary shared by the encoders and the decoder.
#[derive(Debug)]
pub(crate) struct Compiled {
    pub pieces: Vec<String>,
    pub scores: Vec<f32>,
    pub attrs: Vec<Attr>,
    pub piece_to_id: FastMap<String, u32>,
    /// Byte-fallback token for each byte (`<0xXX>`), if the vocabulary has it.
    pub byte_ids: [Option<u32>; 256],
    pub special: SpecialIds,
    /// End-of-generation ids, sorted and unique.
    pub eog: Vec<u32>,
    pub add_bos: bool,
    pub add_eos: bool,
    pub add_sep: bool,
    pub lowercase: bool,
    pub strip_accents: bool,
    pub add_space_prefix: bool,
    /// Bytes of the longest piece (WordPiece tries no longer match).
    pub max_piece_len: usize,
}

impl Compiled {
    pub fn build(vocab: &Vocab) -> Result<Self, TokenizerError> {
        let n = vocab.tokens.len();
        if n == 0 {
            return Err(TokenizerError::EmptyVocab);
        }
        if u32::try_from(n).is_err() {
            return Err(TokenizerError::TooManyTokens { n_tokens: n });
        }
        let scores = per_token(&vocab.scores, n, 0.0, "tokenizer.ggml.scores")?;
        let types = per_token(&vocab.token_types, n, 1, "tokenizer.ggml.token_type")?;

        let mut pieces = Vec::with_capacity(n);
        let mut piece_to_id = FastMap::with_capacity_and_hasher(n, Default::default());
        for (id, text) in vocab.tokens.iter().enumerate() {
            let id = id as u32;
            // llama.cpp renames empty tokens so they can never match text.
            let text = if text.is_empty() {
                format!("[EMPTY_{id}]")
            } else {
                text.clone()
            };
            if let Some(first) = piece_to_id.insert(text.clone(), id) {
                return Err(TokenizerError::DuplicateToken {
                    text,
                    first,
                    second: id,
                });
            }
            pieces.push(text);
        }
        let mut attrs: Vec<Attr> = types.iter().map(|&t| Attr::from_token_type(t)).collect();

        let in_range = |id: Option<u32>| id.filter(|&i| (i as usize) < n);
        let mut special = SpecialIds {
            bos: in_range(vocab.special.bos),
            eos: in_range(vocab.special.eos),
            eot: in_range(vocab.special.eot),
            unk: in_range(vocab.special.unk),
            pad: in_range(vocab.special.pad),
            sep: in_range(vocab.special.sep),
        };
        if special.eot.is_none() {
            special.eot = EOT_TEXTS
                .iter()
                .filter_map(|t| piece_to_id.get(*t).copied())
                .min();
        }
        let eog = end_of_generation_ids(&piece_to_id, &mut attrs, &special);
        for text in HARMONY_MARKERS {
            if let Some(&id) = piece_to_id.get(*text) {
                attrs[id as usize] = Attr::USER_DEFINED;
            }
        }

        let mut byte_ids = [None; 256];
        for (b, slot) in byte_ids.iter_mut().enumerate() {
            *slot = piece_to_id.get(&format!("<0x{b:02X}>")).copied();
            if slot.is_none() && b < 0x80 {
                // llama.cpp falls back to the byte itself as a one-character token.
                *slot = piece_to_id.get(&char::from(b as u8).to_string()).copied();
            }
        }

        let max_piece_len = pieces.iter().map(String::len).max().unwrap_or(0);
        Ok(Self {
            pieces,
            scores,
            attrs,
            piece_to_id,
            byte_ids,
            special,
            eog,
            add_bos: vocab.add_bos,
            add_eos: vocab.add_eos,
            add_sep: vocab.add_sep,
            lowercase: vocab.lowercase,
            strip_accents: vocab.strip_accents,
            add_space_prefix: vocab.add_space_prefix && vocab.model == VocabModel::Spm,
            max_piece_len,
        })
    }

    pub fn len(&self) -> usize {
        self.pieces.len()
    }

    pub fn attr(&self, id: u32) -> Attr {
        self.attrs.get(id as usize).copied().unwrap_or_default()
    }
}

/// A per-token array padded to `n` with `default` when absent; too short is an error.
fn per_token<T: Copy>(
    values: &[T],
    n: usize,
    default: T,
    what: &'static str,
) -> Result<Vec<T>, TokenizerError> {
    if values.is_empty() {
        return Ok(vec![default; n]);
    }
    if values.len() < n {
        return Err(TokenizerError::LengthMismatch {
            what,
            len: values.len(),
            n_tokens: n,
        });
    }
    Ok(values[..n].to_vec())
}

/// EOS, EOT and every token whose text is in [`EOG_TEXTS`]; the latter become control tokens.
/// Two llama.cpp exceptions keep models working whose vocabularies reuse those texts.
fn end_of_generation_ids(
    piece_to_id: &FastMap<String, u32>,
    attrs: &mut [Attr],
    special: &SpecialIds,
) -> Vec<u32> {
    let mut eog: Vec<u32> = Vec::new();
    for text in EOG_TEXTS {
        if let Some(&id) = piece_to_id.get(*text) {
            attrs[id as usize].insert(Attr::CONTROL);
            eog.push(id);
        }
    }
    eog.extend(special.eos);
    eog.extend(special.eot);
    let eog_id = |eog: &[u32], t: &str| piece_to_id.get(t).copied().filter(|id| eog.contains(id));
    // gpt-oss / solar-open: "<|end|>" ends a message, not the generation.
    if let Some(end) = eog_id(&eog, "<|end|>") {
        let has = |t: &str| eog_id(&eog, t).is_some();
        if (has("<|return|>") && has("<|call|>")) || (has("<|calls|>") && has("<|flush|>")) {
            eog.retain(|&id| id != end);
            attrs[end as usize] = Attr::USER_DEFINED;
        }
    }
    // Gemma 4 / PLaMo: "</s>" is ordinary text there.
    if let Some(s) = eog_id(&eog, "</s>") {
        if eog_id(&eog, "<|tool_response>").is_some() || eog_id(&eog, "<|plamo:eos|>").is_some() {
            eog.retain(|&id| id != s);
            attrs[s as usize] = Attr::NORMAL;
        }
    }
    eog.sort_unstable();
    eog.dedup();
    eog
}
