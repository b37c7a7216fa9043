//! The tokenizer of a generated model: every `tokenizer.*` key of a real file, optionally cut
//! down to a smaller vocabulary (OLMoE's 50304 rows from Qwen2.5's 151936 tokens).
//!
//! Cutting keeps the first ordinary tokens (type 1) and every other token (control, user-defined,
//! byte, ...) after them, in their order, so special tokens survive with new ids; the BOS, EOS,
//! padding and unknown ids are renumbered, per-token arrays (tokens, types, scores) cut alike,
//! and a BPE merge is kept only when both its halves and their join are kept, so that every
//! merge still produces a token of the vocabulary.

use std::collections::{HashMap, HashSet};

use gguf::{Array, Metadata, Value};

const TOKENS: &str = "tokenizer.ggml.tokens";
const TYPES: &str = "tokenizer.ggml.token_type";
const MERGES: &str = "tokenizer.ggml.merges";
const TYPE_NORMAL: i32 = 1;

/// The `tokenizer.*` entries of `source`, with the vocabulary cut to `vocab` tokens when that is
/// given and smaller than the source's; also returns the vocabulary size.
pub fn tokenizer_entries(
    source: &Metadata,
    vocab: Option<usize>,
) -> Result<(Vec<(String, Value)>, usize), String> {
    let Some(Value::Array(Array::String(tokens))) = source.get(TOKENS) else {
        return Err(format!("the tokenizer source has no {TOKENS} string array"));
    };
    let n = tokens.len();
    let entries: Vec<(String, Value)> = source
        .iter()
        .filter(|(k, _)| k.starts_with("tokenizer."))
        .map(|(k, v)| (k.to_string(), v.clone()))
        .collect();
    match vocab {
        Some(v) if v > n => Err(format!("the tokenizer has {n} tokens, fewer than {v}")),
        Some(v) if v < n => cut(entries, tokens, source, v).map(|e| (e, v)),
        _ => Ok((entries, n)),
    }
}

/// The entries with the vocabulary cut to `vocab` tokens (see the module header).
fn cut(
    entries: Vec<(String, Value)>,
    tokens: &[String],
    source: &Metadata,
    vocab: usize,
) -> Result<Vec<(String, Value)>, String> {
    let n = tokens.len();
    let types: Vec<i32> = match source.get(TYPES) {
        Some(Value::Array(Array::I32(t))) if t.len() == n => t.clone(),
        _ => {
            return Err(format!(
                "cutting the vocabulary needs {TYPES} (i32, one per token)"
            ))
        }
    };
    let special: Vec<usize> = (0..n).filter(|&i| types[i] != TYPE_NORMAL).collect();
    let Some(n_normal) = vocab.checked_sub(special.len()) else {
        return Err(format!(
            "{} special tokens do not fit in {vocab}",
            special.len()
        ));
    };
    let keep: Vec<usize> = (0..n)
        .filter(|&i| types[i] == TYPE_NORMAL)
        .take(n_normal)
        .chain(special)
        .collect();
    let new_id: HashMap<usize, u32> = keep
        .iter()
        .enumerate()
        .map(|(j, &i)| (i, j as u32))
        .collect();
    let kept_text: HashSet<&str> = keep.iter().map(|&i| tokens[i].as_str()).collect();
    let pick = |a: &Array| -> Option<Array> {
        Some(match a {
            Array::String(v) => Array::String(keep.iter().map(|&i| v[i].clone()).collect()),
            Array::I32(v) => Array::I32(keep.iter().map(|&i| v[i]).collect()),
            Array::F32(v) => Array::F32(keep.iter().map(|&i| v[i]).collect()),
            _ => return None,
        })
    };
    let mut out = Vec::with_capacity(entries.len());
    for (k, v) in entries {
        let v = match v {
            Value::Array(a) if k == MERGES => Value::Array(keep_merges(&a, &kept_text)),
            Value::Array(a) if a.len() == n => match pick(&a) {
                Some(a) => Value::Array(a),
                None => return Err(format!("cannot cut {k} ({})", a.elem_type_name())),
            },
            Value::U32(id) if k.ends_with("_token_id") => match new_id.get(&(id as usize)) {
                Some(&j) => Value::U32(j),
                None => continue, // the token is cut: drop the key
            },
            v => v,
        };
        out.push((k, v));
    }
    Ok(out)
}

/// The merges `"a b"` whose `a`, `b` and `ab` are all kept.
fn keep_merges(merges: &Array, kept: &HashSet<&str>) -> Array {
    let Array::String(m) = merges else {
        return merges.clone();
    };
    let ok = |s: &String| match s.get(1..).and_then(|r| r.find(' ')) {
        Some(p) => {
            let (a, b) = (&s[..p + 1], &s[p + 2..]);
            kept.contains(a) && kept.contains(b) && kept.contains(format!("{a}{b}").as_str())
        }
        None => false,
    };
    Array::String(m.iter().filter(|s| ok(s)).cloned().collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn source() -> Metadata {
        let mut md = Metadata::new();
        let tokens = ["a", "b", "ab", "c", "abc", "<|end|>", "d"];
        let types = vec![1, 1, 1, 1, 1, 3, 1];
        md.insert("general.architecture", "qwen2".into());
        md.insert("tokenizer.ggml.model", "gpt2".into());
        md.insert(
            TOKENS,
            Array::String(tokens.map(String::from).to_vec()).into(),
        );
        md.insert(TYPES, types.into());
        let merges = ["a b", "ab c", "c d"].map(String::from).to_vec();
        md.insert(MERGES, Array::String(merges).into());
        md.insert("tokenizer.ggml.eos_token_id", Value::U32(5));
        md.insert("tokenizer.ggml.padding_token_id", Value::U32(6));
        md
    }

    #[test]
    fn copies_only_tokenizer_keys_when_not_cut() {
        let (e, n) = tokenizer_entries(&source(), None).expect("copies");
        assert_eq!(n, 7);
        assert!(e.iter().all(|(k, _)| k.starts_with("tokenizer.")));
        assert_eq!(e.len(), 6);
        assert!(tokenizer_entries(&source(), Some(8)).is_err());
    }

    #[test]
    fn cutting_keeps_specials_renumbers_ids_and_drops_broken_merges() {
        let (e, n) = tokenizer_entries(&source(), Some(4)).expect("cuts");
        assert_eq!(n, 4);
        let get = |k: &str| e.iter().find(|(key, _)| key == k).map(|(_, v)| v.clone());
        let Some(Value::Array(Array::String(t))) = get(TOKENS) else {
            panic!("tokens")
        };
        assert_eq!(t, ["a", "b", "ab", "<|end|>"]);
        let Some(Value::Array(Array::I32(types))) = get(TYPES) else {
            panic!("types")
        };
        assert_eq!(types, [1, 1, 1, 3]);
        let Some(Value::Array(Array::String(m))) = get(MERGES) else {
            panic!("merges")
        };
        assert_eq!(m, ["a b"]);
        assert_eq!(get("tokenizer.ggml.eos_token_id"), Some(Value::U32(3)));
        assert_eq!(get("tokenizer.ggml.padding_token_id"), None);
    }
}
