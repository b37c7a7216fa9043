//! Behaviour tests on small vocabularies built in code.

use crate::{PreTokenizer, Tokenizer, TokenizerError, Vocab, VocabModel};

const UNK: u32 = 0;
const BOS: u32 = 1;
const EOS: u32 = 2;
const FIRST_BYTE: u32 = 3;

/// `<unk> <s> </s>`, the 256 `<0xXX>` byte tokens, then control, user-defined and scored
/// normal pieces, in that order.
fn spm_vocab(pieces: &[(&str, f32)], control: &[&str], user: &[&str]) -> Vocab {
    let mut tokens = vec!["<unk>".to_string(), "<s>".into(), "</s>".into()];
    let mut types = vec![2, 3, 3];
    for b in 0..=255u8 {
        tokens.push(format!("<0x{b:02X}>"));
        types.push(6);
    }
    for c in control {
        tokens.push(c.to_string());
        types.push(3);
    }
    for u in user {
        tokens.push(u.to_string());
        types.push(4);
    }
    let mut scores = vec![0.0; tokens.len()];
    for (p, s) in pieces {
        tokens.push(p.to_string());
        types.push(1);
        scores.push(*s);
    }
    let mut v = Vocab::new(VocabModel::Spm, tokens);
    v.scores = scores;
    v.token_types = types;
    v.add_space_prefix = false;
    v
}

fn spm(pieces: &[(&str, f32)]) -> Tokenizer {
    Tokenizer::from_vocab(&spm_vocab(pieces, &[], &[])).expect("valid test vocab")
}

/// Token texts of `ids`, for readable assertions.
fn pieces(t: &Tokenizer, ids: &[u32]) -> Vec<String> {
    ids.iter()
        .map(|&id| t.token_piece(id).unwrap_or("?").to_string())
        .collect()
}

fn enc(t: &Tokenizer, text: &str) -> Vec<String> {
    pieces(t, &t.encode(text, false, false))
}

#[test]
fn spm_merges_highest_score_first() {
    let base = [("a", -1.0), ("b", -1.0), ("c", -1.0)];
    let t = spm(&[&base[..], &[("ab", -3.0), ("bc", -2.0)]].concat());
    assert_eq!(enc(&t, "abc"), ["a", "bc"]);
    let t = spm(&[&base[..], &[("ab", -2.0), ("bc", -3.0)]].concat());
    assert_eq!(enc(&t, "abc"), ["ab", "c"]);
}

#[test]
fn spm_breaks_score_ties_leftmost_first() {
    let t = spm(&[("a", -1.0), ("b", -1.0), ("ab", -2.0), ("ba", -2.0)]);
    assert_eq!(enc(&t, "aba"), ["ab", "a"]);
    assert_eq!(enc(&t, "bab"), ["ba", "b"]);
}

#[test]
fn spm_merges_repeatedly_into_long_pieces() {
    let t = spm(&[
        ("▁", -1.0),
        ("h", -1.0),
        ("i", -1.0),
        ("hi", -2.0),
        ("▁hi", -3.0),
    ]);
    assert_eq!(enc(&t, " hi hi"), ["▁hi", "▁hi"]);
}

#[test]
fn spm_falls_back_to_utf8_bytes_for_unknown_characters() {
    let t = spm(&[("a", -1.0)]);
    let ids = t.encode("aé", false, false);
    assert_eq!(
        ids,
        [
            t.token_to_id("a").expect("a"),
            FIRST_BYTE + 0xC3,
            FIRST_BYTE + 0xA9
        ]
    );
    assert_eq!(t.decode(&ids, true), "aé");
}

#[test]
fn spm_escapes_spaces_and_adds_prefix_when_asked() {
    let mut v = spm_vocab(&[("▁", -1.0), ("a", -1.0), ("▁a", -2.0)], &["<ctl>"], &[]);
    v.add_space_prefix = true;
    let t = Tokenizer::from_vocab(&v).expect("vocab");
    assert_eq!(enc(&t, "a a"), ["▁a", "▁a"]);
    // The prefix is added again after a special token.
    let ids = t.encode("a<ctl>a", false, true);
    assert_eq!(pieces(&t, &ids), ["▁a", "<ctl>", "▁a"]);
    assert_eq!(t.decode(&ids, false), "a<ctl>a");
    assert_eq!(t.decode(&t.encode(" a", true, false), true), " a");
}

#[test]
fn encode_adds_bos_and_eos_as_the_vocab_asks() {
    let mut v = spm_vocab(&[("a", -1.0)], &[], &[]);
    let t = Tokenizer::from_vocab(&v).expect("vocab");
    assert_eq!(t.encode("a", true, false)[0], BOS);
    assert_eq!(t.encode("", true, false), [BOS]);
    assert!(t.encode("", false, false).is_empty());
    v.add_bos = false;
    v.add_eos = true;
    let t = Tokenizer::from_vocab(&v).expect("vocab");
    let ids = t.encode("a", true, false);
    assert_eq!(ids.last(), Some(&EOS));
    assert_ne!(ids[0], BOS);
}

#[test]
fn control_tokens_are_parsed_only_with_parse_special() {
    let v = spm_vocab(&[("<", -1.0), (">", -1.0), ("c", -1.0)], &["<c>"], &[]);
    let t = Tokenizer::from_vocab(&v).expect("vocab");
    let ctl = t.token_to_id("<c>").expect("<c>");
    assert_eq!(
        t.encode("c<c>c", false, true),
        [
            t.encode("c", false, false)[0],
            ctl,
            t.encode("c", false, false)[0]
        ]
    );
    assert_eq!(enc(&t, "<c>"), ["<", "c", ">"]);
}

#[test]
fn user_defined_tokens_are_split_out_even_without_parse_special() {
    let t = Tokenizer::from_vocab(&spm_vocab(&[("a", -1.0)], &[], &["\n", "\n\n"])).expect("vocab");
    assert_eq!(enc(&t, "a\n\n\na"), ["a", "\n\n", "\n", "a"]);
}

#[test]
fn longer_special_tokens_split_first_even_when_they_start_later() {
    let v = spm_vocab(
        &[("a", -1.0), ("b", -1.0), ("c", -1.0), ("d", -1.0)],
        &[],
        &["ab", "bcd"],
    );
    let t = Tokenizer::from_vocab(&v).expect("vocab");
    assert_eq!(enc(&t, "abcd"), ["a", "bcd"]);
    assert_eq!(enc(&t, "abab"), ["ab", "ab"]);
}

#[test]
fn decode_skips_control_tokens_only_when_asked() {
    let hi = [
        ("▁", -1.0),
        ("h", -1.0),
        ("i", -1.0),
        ("hi", -2.0),
        ("▁hi", -3.0),
    ];
    let v = spm_vocab(&hi, &["<end>"], &["<b>"]);
    let t = Tokenizer::from_vocab(&v).expect("vocab");
    let ids = t.encode("<b> hi<end>", true, true);
    assert_eq!(t.decode(&ids, true), "<b> hi");
    assert_eq!(t.decode(&ids, false), "<s><b> hi<end>");
    assert!(t.is_special(BOS) && !t.is_special(t.token_to_id("<b>").expect("<b>")));
}

#[test]
fn token_bytes_unescape_spaces_and_byte_tokens() {
    let t = spm(&[("▁hi", -1.0)]);
    assert_eq!(t.token_bytes(t.token_to_id("▁hi").expect("piece")), b" hi");
    assert_eq!(t.token_bytes(FIRST_BYTE + 0x0A), b"\n");
    assert_eq!(t.token_bytes(BOS), b"<s>");
    assert!(t.token_bytes(1_000_000).is_empty());
}

#[test]
fn incremental_decoder_never_emits_half_a_character() {
    let t = spm(&[("a", -1.0)]);
    let text = "a😀aé中";
    let ids = t.encode(text, false, false);
    assert!(ids.len() > 5, "emoji and accents should use byte fallback");
    let mut dec = t.incremental_decoder(true);
    let mut streamed = String::new();
    for &id in &ids {
        let chunk = dec.push(id);
        // Every emitted chunk is a whole string; it must also be a prefix of the text.
        streamed.push_str(&chunk);
        assert!(text.starts_with(&streamed), "{streamed:?}");
    }
    assert!(!dec.has_pending());
    assert_eq!(dec.flush(), "");
    assert_eq!(streamed, text);

    let emoji: Vec<u32> = "😀".bytes().map(|b| FIRST_BYTE + u32::from(b)).collect();
    let mut dec = t.incremental_decoder(true);
    for &id in &emoji[..3] {
        assert_eq!(dec.push(id), "");
    }
    assert_eq!(dec.push(emoji[3]), "😀");
    dec.push(emoji[0]);
    assert_eq!(dec.flush(), "\u{FFFD}");
}

#[test]
fn eog_ids_include_eos_and_end_of_turn() {
    let v = spm_vocab(&[("a", -1.0)], &["<end_of_turn>", "<start_of_turn>"], &[]);
    let t = Tokenizer::from_vocab(&v).expect("vocab");
    let eot = t.token_to_id("<end_of_turn>").expect("eot");
    assert_eq!(t.eog_ids(), [EOS, eot]);
    assert_eq!(t.eot_id(), Some(eot));
    assert!(t.is_eog(eot) && !t.is_eog(t.token_to_id("<start_of_turn>").expect("sot")));
}

/// Byte-level vocabulary: the 256 byte chars (id = byte), then `extra` pieces.
fn bpe(pre: PreTokenizer, extra: &[&str], merges: &[&str]) -> Tokenizer {
    let mut tokens: Vec<String> = (0..=255u8)
        .map(|b| crate::unicode::byte_to_char(b).to_string())
        .collect();
    tokens.extend(extra.iter().map(|s| s.to_string()));
    tokens.push("<|end|>".into());
    let mut types = vec![1; tokens.len()];
    *types.last_mut().expect("non-empty") = 3;
    let mut v = Vocab::new(VocabModel::Bpe(pre), tokens);
    v.token_types = types;
    v.merges = merges.iter().map(|s| s.to_string()).collect();
    v.special.bos = None;
    v.special.eos = None;
    Tokenizer::from_vocab(&v).expect("valid test vocab")
}

#[test]
fn bpe_applies_lowest_rank_merge_first() {
    let t = bpe(
        PreTokenizer::Gpt2,
        &["he", "el", "ll"],
        &["e l", "h e", "l l"],
    );
    assert_eq!(enc(&t, "hell"), ["h", "el", "l"]);
    let t = bpe(
        PreTokenizer::Gpt2,
        &["he", "el", "ll"],
        &["h e", "e l", "l l"],
    );
    assert_eq!(enc(&t, "hell"), ["he", "ll"]);
}

#[test]
fn bpe_does_not_merge_across_pretokenized_words() {
    let t = bpe(
        PreTokenizer::Gpt2,
        &["aĠ", "Ġb", "ab"],
        &["a Ġ", "Ġ b", "a b"],
    );
    assert_eq!(enc(&t, "a b"), ["a", "Ġb"]);
}

#[test]
fn bpe_maps_bytes_to_the_byte_alphabet_and_back() {
    let t = bpe(PreTokenizer::Gpt2, &["Ã©"], &["Ã ©"]);
    let ids = t.encode("é\n", false, false);
    assert_eq!(pieces(&t, &ids), ["Ã©", "Ċ"]);
    assert_eq!(t.token_bytes(ids[0]), "é".as_bytes());
    assert_eq!(t.decode(&ids, true), "é\n");
}

#[test]
fn llama3_emits_whole_words_that_are_tokens_without_merging() {
    let t = bpe(PreTokenizer::Llama3, &["abc"], &[]);
    assert_eq!(enc(&t, "abc"), ["abc"]);
    let t = bpe(PreTokenizer::Gpt2, &["abc"], &[]);
    assert_eq!(enc(&t, "abc"), ["a", "b", "c"]);
}

#[test]
fn bpe_round_trips_arbitrary_text() {
    let t = bpe(PreTokenizer::Default, &["Ġt", "Ġth"], &["Ġ t", "Ġt h"]);
    let text = "Ünïcödé 中文 😀\t\r\n  x'LL 1,000.5 <|end|> the";
    assert_eq!(t.decode(&t.encode(text, true, false), false), text);
    let ids = t.encode("x<|end|>", false, true);
    assert_eq!(pieces(&t, &ids), ["x", "<|end|>"]);
}

/// gpt-oss's vocabulary marks its harmony tokens as control tokens; llama.cpp overrides that.
#[test]
fn harmony_markers_are_user_defined_and_end_stops_ending_generation() {
    let specials = [
        "<|start|>",
        "<|channel|>",
        "<|message|>",
        "<|constrain|>",
        "<|return|>",
        "<|call|>",
    ];
    let mut tokens: Vec<String> = (0..=255u8)
        .map(|b| crate::unicode::byte_to_char(b).to_string())
        .collect();
    tokens.extend(specials.iter().map(|s| s.to_string()));
    tokens.push("<|end|>".into());
    let mut v = Vocab::new(VocabModel::Bpe(PreTokenizer::Gpt4o), tokens);
    v.token_types = vec![1; 256];
    v.token_types.resize(256 + specials.len() + 1, 3);
    v.special.bos = None;
    v.special.eos = Some(256 + 4);
    let t = Tokenizer::from_vocab(&v).expect("valid test vocab");
    let id = |s: &str| t.token_to_id(s).expect("listed");

    let text = "<|start|>a<|channel|>f<|message|>H<|end|><|return|>";
    let ids = t.encode(text, false, false);
    // Without parse_special only the control token <|return|> stays text.
    assert_eq!(&ids[..8], [256, 97, 257, 102, 258, 72, id("<|end|>"), 60]);
    assert_eq!(t.decode(&ids, true), text);
    let ids = t.encode(text, false, true);
    assert_eq!(ids.last(), Some(&id("<|return|>")));
    assert_eq!(
        t.decode(&ids, true),
        "<|start|>a<|channel|>f<|message|>H<|end|>"
    );
    assert!(!t.is_special(id("<|constrain|>")));
    assert_eq!(t.eog_ids(), [id("<|return|>"), id("<|call|>")]);
}

#[test]
fn unknown_pre_tokenizer_is_refused_by_name() {
    let err = PreTokenizer::from_gguf_name(Some("exotic-9")).expect_err("unsupported");
    assert!(matches!(&err, TokenizerError::UnsupportedPreTokenizer { pre } if pre == "exotic-9"));
    assert!(err.to_string().contains("exotic-9"));
}

#[test]
fn from_metadata_reads_tokenizer_keys() {
    use gguf::{Array, Metadata, Value};
    let v = spm_vocab(&[("▁a", -1.0), ("a", -2.0)], &[], &[]);
    let mut md = Metadata::new();
    md.insert("tokenizer.ggml.model", Value::String("llama".into()));
    md.insert(
        "tokenizer.ggml.tokens",
        Value::Array(Array::String(v.tokens.clone())),
    );
    md.insert(
        "tokenizer.ggml.scores",
        Value::Array(Array::F32(v.scores.clone())),
    );
    md.insert(
        "tokenizer.ggml.token_type",
        Value::Array(Array::I32(v.token_types.clone())),
    );
    md.insert("tokenizer.ggml.bos_token_id", Value::U32(2));
    md.insert("tokenizer.ggml.add_space_prefix", Value::Bool(true));
    let t = Tokenizer::from_metadata(&md).expect("metadata");
    assert_eq!(t.bos_id(), Some(2));
    assert_eq!(enc(&t, "a"), ["▁a"]);

    md.insert("tokenizer.ggml.model", Value::String("gpt2".into()));
    md.insert(
        "tokenizer.ggml.merges",
        Value::Array(Array::String(vec!["a b".into()])),
    );
    md.insert("tokenizer.ggml.pre", Value::String("exotic-9".into()));
    let err = Tokenizer::from_metadata(&md).expect_err("unknown pre");
    assert!(err.to_string().contains("exotic-9"), "{err}");
}

/// Gemma 4's `gemma4` tokenizer model: BPE over raw UTF-8 with spaces as `▁` (the same
/// vocabulary written to a GGUF gives these ids in llama.cpp).
#[test]
fn gemma4_is_bpe_over_escaped_utf8_with_byte_fallback() {
    use gguf::{Array, Metadata, Value};
    let mut tokens: Vec<String> = vec!["<pad>".into(), "<eos>".into(), "<bos>".into()];
    tokens.extend((0..=255u8).map(|b| format!("<0x{b:02X}>")));
    tokens.extend(["a", "b", "▁", "▁b", "ab", "\n", "\n\n"].map(String::from));
    let mut types = vec![3; 3];
    types.extend([6; 256]);
    types.resize(tokens.len(), 1);
    let mut md = Metadata::new();
    md.insert("tokenizer.ggml.model", Value::String("gemma4".into()));
    md.insert("tokenizer.ggml.tokens", Value::Array(Array::String(tokens)));
    md.insert("tokenizer.ggml.token_type", Value::Array(Array::I32(types)));
    let merges = vec!["▁ b".to_string(), "a b".into()];
    md.insert("tokenizer.ggml.merges", Value::Array(Array::String(merges)));
    md.insert("tokenizer.ggml.bos_token_id", Value::U32(2));
    // llama.cpp adds BOS whatever the file says.
    md.insert("tokenizer.ggml.add_bos_token", Value::Bool(false));
    let t = Tokenizer::from_metadata(&md).expect("gemma4 metadata");
    assert_eq!((t.bos_id(), t.eos_id(), t.add_bos()), (Some(2), None, true));

    let ids = t.encode("ab b\n\n\né", true, false);
    // A newline run that is a token stays whole; one that is not falls apart (no merges);
    // `é` has no token and becomes its two UTF-8 bytes.
    assert_eq!(
        pieces(&t, &ids),
        ["<bos>", "ab", "▁b", "\n", "\n", "\n", "<0xC3>", "<0xA9>"]
    );
    assert_eq!(pieces(&t, &t.encode("\n\n", false, false)), ["\n\n"]);
    assert_eq!(t.decode(&ids, true), "ab b\n\n\né");
    assert_eq!(t.token_bytes(t.token_to_id("▁b").expect("token")), b" b");
}

#[test]
fn construction_rejects_inconsistent_vocabularies() {
    let mut v = spm_vocab(&[("a", -1.0)], &[], &[]);
    v.scores.pop();
    assert!(matches!(
        Tokenizer::from_vocab(&v),
        Err(TokenizerError::LengthMismatch { .. })
    ));
    let mut v = spm_vocab(&[("a", -1.0), ("a", -1.0)], &[], &[]);
    v.scores.clear();
    assert!(matches!(
        Tokenizer::from_vocab(&v),
        Err(TokenizerError::DuplicateToken { .. })
    ));
    let v = Vocab::new(VocabModel::Spm, Vec::new());
    assert!(matches!(
        Tokenizer::from_vocab(&v),
        Err(TokenizerError::EmptyVocab)
    ));
}

#[test]
fn unk_is_special_and_ids_outside_the_vocab_decode_to_nothing() {
    let t = spm(&[("a", -1.0)]);
    assert!(t.is_special(UNK));
    assert_eq!(
        t.decode(&[u32::MAX, t.token_to_id("a").expect("a")], true),
        "a"
    );
}

#[test]
fn tokenizer_is_shareable_across_threads_and_debug_prints_a_summary() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<Tokenizer>();
    assert_send_sync::<crate::IncrementalDecoder>();
    let t = spm(&[("a", -1.0)]);
    let shown = format!("{t:?}");
    assert!(
        shown.contains("vocab_size: 260") && !shown.contains("<0x00>"),
        "{shown}"
    );
}

#[test]
fn pre_tokenizer_names_map_to_llama_cpp_behaviours() {
    let of = |n: &str| PreTokenizer::from_gguf_name(Some(n)).expect("supported name");
    assert_eq!(of("smollm"), PreTokenizer::SmolLm);
    assert_eq!(of("starcoder"), PreTokenizer::SmolLm);
    assert_eq!(of("llama-bpe"), PreTokenizer::Llama3);
    assert_eq!(of("smaug-bpe"), PreTokenizer::Dbrx);
    assert_eq!(of("deepseek-r1-qwen"), PreTokenizer::Qwen2);
    assert_eq!(of("megrez"), PreTokenizer::Qwen2);
    assert_eq!(of("olmo"), PreTokenizer::Gpt2);
    assert_eq!(of("gpt-4o"), PreTokenizer::Gpt4o);
    assert_eq!(of("llama4"), PreTokenizer::Gpt4o);
    assert_eq!(of("qwen35"), PreTokenizer::Qwen35);
    assert_eq!(of("deepseek-llm"), PreTokenizer::DeepSeekLlm);
    assert_eq!(of("deepseek-coder"), PreTokenizer::DeepSeekCoder);
    assert_eq!(of("gemma4"), PreTokenizer::Gemma4);
    assert_eq!(
        PreTokenizer::from_gguf_name(None).expect("absent"),
        PreTokenizer::Default
    );
    // Only LLaMA 3's names carry its flags; DBRX shares the split alone.
    assert!(of("llama3").ignores_merges() && of("llama3").adds_bos());
    assert!(!of("dbrx").ignores_merges() && !of("dbrx").adds_bos());
    assert!(!of("smollm").ignores_merges() && !of("smollm").adds_bos());
    assert!(!of("gpt-4o").ignores_merges() && !of("gpt-4o").adds_bos());
    assert!(!of("deepseek-llm").ignores_merges() && !of("deepseek-llm").adds_bos());
    assert!(of("gemma4").adds_bos() && of("gemma4").is_spm_style());
}

#[test]
fn names_needing_another_pattern_are_refused_with_the_supported_list() {
    for name in [
        "deepseek-v3",
        "tekken",
        "tiny_aya",
        "granite-embed-multi-97m",
        "seed-coder",
        "bloom",
    ] {
        let err = PreTokenizer::from_gguf_name(Some(name)).expect_err("refused");
        let msg = err.to_string();
        assert!(msg.contains(name), "{msg}");
        assert!(
            msg.contains("smollm") && msg.contains("qwen2") && msg.contains("llama-bpe"),
            "{msg}"
        );
    }
}
