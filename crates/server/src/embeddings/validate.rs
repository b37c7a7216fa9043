//! An embedding or rerank request checked and turned into the token ids of its inputs.

use engine::EmbedFacts;
use tokenizer::Tokenizer;

use super::protocol::{EmbeddingInput, EmbeddingRequest, RerankRequest};
use crate::base::ApiError;

/// What `/v1/embeddings` does with each pooled row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Finish {
    pub dimensions: Option<usize>,
    pub normalize: bool,
    pub base64: bool,
}

/// The inputs of an embeddings request as token ids, and what to do with their rows.
pub fn embedding_inputs(
    req: &EmbeddingRequest,
    tok: &Tokenizer,
    facts: EmbedFacts,
    context: usize,
) -> Result<(Vec<Vec<u32>>, Finish), ApiError> {
    if facts.scores {
        return Err(ApiError::invalid(
            "model",
            "this model is a reranker (it scores query-document pairs): use /rerank",
        ));
    }
    let base64 = match req.encoding_format.as_deref() {
        None | Some("float") => false,
        Some("base64") => true,
        Some(other) => {
            return Err(ApiError::invalid(
                "encoding_format",
                format!("encoding_format must be \"float\" or \"base64\", not {other:?}"),
            ))
        }
    };
    let dimensions = match req.dimensions {
        None => None,
        Some(d) if d >= 1 && d as usize <= facts.dim => Some(d as usize),
        Some(d) => {
            return Err(ApiError::invalid(
                "dimensions",
                format!(
                    "dimensions must be between 1 and {} (the model's), not {d}",
                    facts.dim
                ),
            ))
        }
    };
    let keep = truncation(req.truncate_prompt_tokens, context)?;
    let vocab = tok.vocab_size();
    let ids = |list: &[i64], i: usize| -> Result<Vec<u32>, ApiError> {
        list.iter()
            .map(|&t| match u32::try_from(t) {
                Ok(t) if (t as usize) < vocab => Ok(t),
                _ => Err(ApiError::invalid(
                    "input",
                    format!("input {i}: token id {t} is outside the vocabulary (0..{vocab})"),
                )),
            })
            .collect()
    };
    let mut inputs = match &req.input {
        None => return Err(ApiError::invalid("input", "`input` is required")),
        Some(EmbeddingInput::Text(t)) => vec![tok.encode(t, true, false)],
        Some(EmbeddingInput::Texts(ts)) => ts.iter().map(|t| tok.encode(t, true, false)).collect(),
        Some(EmbeddingInput::Tokens(list)) => vec![ids(list, 0)?],
        Some(EmbeddingInput::TokenLists(lists)) => lists
            .iter()
            .enumerate()
            .map(|(i, l)| ids(l, i))
            .collect::<Result<_, _>>()?,
    };
    if inputs.is_empty() {
        return Err(ApiError::invalid(
            "input",
            "`input` must not be an empty list",
        ));
    }
    for (i, input) in inputs.iter_mut().enumerate() {
        fit(input, i, keep, context, "input")?;
    }
    let normalize = req.normalize.unwrap_or(true);
    Ok((
        inputs,
        Finish {
            dimensions,
            normalize,
            base64,
        },
    ))
}

/// How many tokens of an input `truncate_prompt_tokens` keeps (`None`: no truncation).
fn truncation(asked: Option<i64>, context: usize) -> Result<Option<usize>, ApiError> {
    match asked {
        None => Ok(None),
        Some(-1) => Ok(Some(context)),
        Some(k) if k >= 1 && k as usize <= context => Ok(Some(k as usize)),
        Some(k) => Err(ApiError::invalid(
            "truncate_prompt_tokens",
            format!(
                "truncate_prompt_tokens must be -1 or between 1 and the context ({context}), \
                 not {k}"
            ),
        )),
    }
}

/// Keeps the last `keep` tokens of `input` when truncation was asked for; otherwise an input
/// empty or longer than the context is a 400 naming it.
fn fit(
    input: &mut Vec<u32>,
    i: usize,
    keep: Option<usize>,
    context: usize,
    field: &str,
) -> Result<(), ApiError> {
    if let Some(k) = keep {
        if input.len() > k {
            input.drain(..input.len() - k);
        }
    }
    if input.is_empty() {
        return Err(ApiError::invalid(
            field,
            format!("{field} {i} has no tokens"),
        ));
    }
    if input.len() > context {
        return Err(ApiError::invalid(
            field,
            format!(
                "{field} {i} has {} tokens, more than the model's context of {context} (set \
                 truncate_prompt_tokens to keep its last tokens)",
                input.len()
            ),
        ));
    }
    Ok(())
}

/// The token ids of each (query, document) pair (`pair`).
pub fn rerank_inputs(
    req: &RerankRequest,
    tok: &Tokenizer,
    facts: EmbedFacts,
    context: usize,
) -> Result<Vec<Vec<u32>>, ApiError> {
    if !facts.scores {
        return Err(ApiError::invalid(
            "model",
            "this model computes embeddings, not relevance scores: /rerank needs a reranker \
             (a classifier with rank pooling)",
        ));
    }
    let query = req
        .query
        .as_deref()
        .ok_or_else(|| ApiError::invalid("query", "`query` is required"))?;
    let docs = req
        .documents
        .as_deref()
        .ok_or_else(|| ApiError::invalid("documents", "`documents` is required"))?;
    if docs.is_empty() {
        return Err(ApiError::invalid(
            "documents",
            "`documents` must not be empty",
        ));
    }
    if let Some(n) = req.top_n {
        if n < 1 {
            return Err(ApiError::invalid(
                "top_n",
                format!("top_n must be at least 1, not {n}"),
            ));
        }
    }
    let mut inputs = Vec::with_capacity(docs.len());
    for (i, d) in docs.iter().enumerate() {
        let mut input = pair(tok, query, d.text());
        fit(&mut input, i, None, context, "documents")?;
        inputs.push(input);
    }
    Ok(inputs)
}

/// A (query, document) pair as BERT's tokenizers lay it out, `[CLS] query [SEP] document
/// [SEP]`: the query with the vocabulary's special tokens, the document, the closing separator.
fn pair(tok: &Tokenizer, query: &str, doc: &str) -> Vec<u32> {
    let mut out = tok.encode(query, true, false);
    out.extend(tok.encode(doc, false, false));
    out.extend(tok.sep_id().or(tok.eos_id()));
    out
}
