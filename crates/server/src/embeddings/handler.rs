//! `POST /v1/embeddings` and `POST /rerank` (also `/v1/rerank`): the inputs go to the engine as
//! one embedding request (`EngineHandle::embed`), which computes them whole in as few steps as
//! its token budget allows; the rows come back by index.

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use engine::{EmbedEvent, EmbedFacts, EmbedStream};

use super::protocol::{
    EmbeddingData, EmbeddingList, EmbeddingRequest, EmbeddingUsage, EmbeddingValue, EmbeddingsBody,
    RerankBody, RerankRequest, RerankResponse, RerankResult, RerankText, RerankUsage, EMBEDDINGS,
    RERANK,
};
use super::validate::{embedding_inputs, rerank_inputs};
use super::vectors;
use crate::base::{body_bytes, parse_body, ApiError};
use crate::protocol::fields::{self, struct_fields};
use crate::serving::state::{AppState, Loaded};
use crate::serving::validate::check_model;

/// `POST /v1/embeddings`.
#[utoipa::path(post, path = "/v1/embeddings", tag = "openai",
    request_body(content = EmbeddingsBody, content_type = "application/json"),
    responses((status = 200, description = "One embedding per input, in input order",
        body = EmbeddingList)))]
pub async fn embeddings(
    State(state): State<AppState>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let m = state.model()?;
    let bytes = body_bytes(body, state.config().body_limit)?;
    let req: EmbeddingRequest = parse_body(&bytes)?;
    fields::check(&bytes, EMBEDDINGS, &[struct_fields::<EmbeddingRequest>()])?;
    check_model(req.model.as_deref(), m)?;
    let facts = embedding_model(m)?;
    let tok = m.engine.tokenizer();
    let (inputs, finish) = embedding_inputs(&req, tok, facts, m.engine.info().context_length)?;
    let prompt_tokens = inputs.iter().map(Vec::len).sum();
    let stream = m.engine.embed(inputs, req.priority.unwrap_or(0))?;
    let rows = collect(stream).await?;
    let data = rows
        .into_iter()
        .enumerate()
        .map(|(index, row)| {
            let v = vectors::finish(&row, finish.dimensions, finish.normalize);
            let embedding = if finish.base64 {
                EmbeddingValue::Base64(vectors::to_base64(&v))
            } else {
                EmbeddingValue::Float(v)
            };
            EmbeddingData {
                object: "embedding",
                index,
                embedding,
            }
        })
        .collect();
    let list = EmbeddingList {
        object: "list",
        data,
        model: m.model_id.clone(),
        usage: EmbeddingUsage {
            prompt_tokens,
            total_tokens: prompt_tokens,
        },
    };
    Ok(axum::Json(list).into_response())
}

/// `POST /rerank` and `/v1/rerank`: the documents by decreasing relevance to the query.
#[utoipa::path(post, path = "/v1/rerank", tag = "rerank",
    request_body(content = RerankBody, content_type = "application/json"),
    responses((status = 200, description = "The documents' scores, best first (also served \
        at `/rerank`)", body = RerankResponse)))]
pub async fn rerank(
    State(state): State<AppState>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let m = state.model()?;
    let bytes = body_bytes(body, state.config().body_limit)?;
    let req: RerankRequest = parse_body(&bytes)?;
    fields::check(&bytes, RERANK, &[struct_fields::<RerankRequest>()])?;
    check_model(req.model.as_deref(), m)?;
    let facts = embedding_model(m)?;
    let tok = m.engine.tokenizer();
    let inputs = rerank_inputs(&req, tok, facts, m.engine.info().context_length)?;
    let prompt_tokens = inputs.iter().map(Vec::len).sum();
    let stream = m.engine.embed(inputs, req.priority.unwrap_or(0))?;
    let rows = collect(stream).await?;
    let docs = req.documents.unwrap_or_default();
    let mut results: Vec<RerankResult> = rows
        .iter()
        .enumerate()
        .map(|(index, row)| RerankResult {
            index,
            relevance_score: row.first().copied().unwrap_or(f32::NAN),
            document: req.return_documents.unwrap_or(false).then(|| RerankText {
                text: docs
                    .get(index)
                    .map(|d| d.text().to_string())
                    .unwrap_or_default(),
            }),
        })
        .collect();
    results.sort_by(|a, b| b.relevance_score.total_cmp(&a.relevance_score));
    if let Some(n) = req.top_n {
        results.truncate(n.max(1) as usize);
    }
    let resp = RerankResponse {
        id: crate::base::ids::new_id("rerank-"),
        model: m.model_id.clone(),
        results,
        usage: RerankUsage {
            prompt_tokens,
            total_tokens: prompt_tokens,
        },
    };
    Ok(axum::Json(resp).into_response())
}

/// The loaded model's embedding facts, or the 400 of a generative model.
fn embedding_model(m: &Loaded) -> Result<EmbedFacts, ApiError> {
    m.engine.info().embedding.ok_or_else(|| {
        ApiError::invalid(
            "model",
            format!(
                "the model `{}` generates text and computes no embeddings: start a server with \
                 an embedding model (such as nomic-embed-text-v1.5) for this route",
                m.model_id
            ),
        )
    })
}

/// Every input's row, by index; the first error fails the request.
async fn collect(mut stream: EmbedStream) -> Result<Vec<Vec<f32>>, ApiError> {
    let mut rows: Vec<Option<Vec<f32>>> = vec![None; stream.inputs];
    let mut left = stream.inputs;
    while left > 0 {
        match stream.events.recv().await {
            Some(EmbedEvent::Embedded { index, vector, .. }) => {
                if let Some(slot) = rows.get_mut(index) {
                    if slot.replace(vector).is_none() {
                        left -= 1;
                    }
                }
            }
            Some(EmbedEvent::Error(e)) => return Err(e.into()),
            None => {
                return Err(ApiError::Internal(
                    "the engine dropped an embedding request".into(),
                ))
            }
        }
    }
    Ok(rows.into_iter().flatten().collect())
}
