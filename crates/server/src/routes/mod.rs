//! The HTTP routes, one file each, and the router that wires them with the cross-cutting
//! layers: body-size limit, API-key check, error counting and CORS.
//!
//! Layer order (outermost first): CORS (when origins are allowed) answers preflights before
//! anything else, so they need no key; error counting sees every other response, including
//! the 401s of the key check and the 404 fallback, and the 413s, 504s and contained panics of
//! `guard::layer` (request id, body limit, deadline), which wraps every route; the key check
//! guards the API routes but not `/health` or `/metrics` (probes and scrapers carry no key, as
//! with vLLM) unless `protect_health` / `protect_metrics` are set, nor the playground page at
//! `/`; every API request, a 401 included, gets a span and a log line (`observe`), except the
//! gateway's polls of the worker routes (`worker`), which are keyed but not logged. The OpenAI
//! routes are served under `/v1` and at the root alike (as llama-server does), so clients
//! configured with a bare base URL work.

pub mod chat;
pub mod completions;
pub mod debug;
pub mod misc;
pub mod playground;
pub mod render;
pub mod responses;
pub mod worker;

use axum::body::{Body, Bytes};
use axum::extract::rejection::BytesRejection;
use axum::extract::{DefaultBodyLimit, Request, State};
use axum::http::{header, StatusCode, Uri};
use axum::middleware::{self, Next};
use axum::response::Response;
use axum::routing::{get, post, MethodRouter};
use axum::Router;

use crate::auth::authorized;
use crate::error::{ApiError, ErrorLabel};
use crate::guard;
use crate::observe;
use crate::state::AppState;

/// The whole application.
pub fn router(state: AppState) -> Router {
    let cfg = state.config();
    let mut api = openai_routes()
        .route("/tokenize", post(misc::tokenize))
        .route("/detokenize", post(misc::detokenize));
    if cfg.debug_kv_index {
        api = api.route("/debug/kv_index", get(debug::kv_index));
    }
    let mut api = api.route_layer(middleware::from_fn_with_state(
        state.clone(),
        refuse_while_draining,
    ));
    let mut open = Router::new().route("/", get(playground::page));
    let probes = [
        ("/health", get(misc::health), cfg.protect_health),
        ("/metrics", get(misc::metrics), cfg.protect_metrics),
    ];
    for (path, handler, protect) in probes {
        if protect {
            api = api.route(path, handler);
        } else {
            open = open.route(path, handler);
        }
    }
    let api = api
        .route_layer(middleware::from_fn_with_state(state.clone(), require_key))
        .route_layer(middleware::from_fn_with_state(
            state.clone(),
            observe::layer,
        ));
    let app = open
        .merge(api)
        .merge(worker_routes(&state))
        .fallback(not_found)
        .layer(DefaultBodyLimit::max(cfg.body_limit))
        .layer(middleware::from_fn_with_state(state.clone(), guard::layer))
        .layer(middleware::from_fn_with_state(state.clone(), count_errors))
        .with_state(state.clone());
    match crate::cors::layer(&state.config().allowed_origins) {
        Some(cors) => app.layer(cors),
        None => app,
    }
}

/// The OpenAI routes, each under `/v1` and at the root.
fn openai_routes() -> Router<AppState> {
    let routes: [(&str, MethodRouter<AppState>); 8] = [
        ("/completions", post(completions::handle)),
        ("/chat/completions", post(chat::handle)),
        ("/completions/render", post(render::completion)),
        ("/chat/completions/render", post(render::chat)),
        ("/models", get(misc::models)),
        ("/models/{id}", get(misc::model)),
        ("/responses", post(responses::create)),
        (
            "/responses/{id}",
            get(responses::retrieve).delete(responses::delete),
        ),
    ];
    let mut r = Router::new();
    for (path, handler) in routes {
        r = r
            .route(&format!("/v1{path}"), handler.clone())
            .route(path, handler);
    }
    r
}

async fn not_found(uri: Uri) -> ApiError {
    ApiError::NotFound(uri.path().to_string())
}

/// The routes a gateway polls to register and weigh this worker (`worker`): behind the API
/// key like the API, but without a span or log line per poll.
fn worker_routes(state: &AppState) -> Router<AppState> {
    Router::new()
        .route("/version", get(worker::version))
        .route("/v1/loads", get(worker::loads))
        .route("/server_info", get(worker::server_info))
        .route("/get_server_info", get(worker::server_info))
        .route("/model_info", get(worker::model_info))
        .route("/get_model_info", get(worker::model_info))
        .route_layer(middleware::from_fn_with_state(state.clone(), require_key))
}

/// 503 `shutting_down` with `Connection: close` once the server drains (`AppState::drain`):
/// a gateway retries the request on another replica and drops its pooled connection here,
/// while the requests already running finish.
async fn refuse_while_draining(
    State(state): State<AppState>,
    req: Request,
    next: Next,
) -> Response {
    if state.is_draining() {
        let mut resp = axum::response::IntoResponse::into_response(ApiError::ShuttingDown);
        resp.headers_mut().insert(
            header::CONNECTION,
            header::HeaderValue::from_static("close"),
        );
        return resp;
    }
    next.run(req).await
}

/// 401 unless the request carries `Authorization: Bearer <key>` (when a key is set).
async fn require_key(State(state): State<AppState>, req: Request, next: Next) -> Response {
    if let Some(key) = &state.config().api_key {
        if !authorized(req.headers(), key) {
            return axum::response::IntoResponse::into_response(ApiError::Unauthorized);
        }
    }
    next.run(req).await
}

/// Counts error responses by the label `ApiError` attached.
async fn count_errors(State(state): State<AppState>, req: Request, next: Next) -> Response {
    let resp = next.run(req).await;
    if let Some(ErrorLabel(label)) = resp.extensions().get::<ErrorLabel>() {
        state.counters().count_error(label);
    } else if resp.status() == StatusCode::METHOD_NOT_ALLOWED {
        state.counters().count_error("not_found");
    }
    resp
}

/// A chat or completions body: the route's request `R` and the common parameters, both parsed
/// from the same bytes, with every top-level field checked against what the two honour.
pub(crate) fn openai_body<R: serde::de::DeserializeOwned>(
    bytes: &[u8],
    route: crate::fields::Route,
) -> Result<(R, crate::openai::CommonParams), ApiError> {
    use crate::fields::{self, struct_fields};
    use crate::openai::CommonParams;
    let req: R = crate::validate::parse_body(bytes)?;
    let common: CommonParams = crate::validate::parse_body(bytes)?;
    let honoured = [struct_fields::<CommonParams>(), struct_fields::<R>()];
    fields::check(bytes, route, &honoured)?;
    Ok((req, common))
}

/// The request body, or 413 past the limit.
pub(crate) fn body_bytes(
    body: Result<Bytes, BytesRejection>,
    limit: usize,
) -> Result<Bytes, ApiError> {
    body.map_err(|rej| {
        if rej.status() == StatusCode::PAYLOAD_TOO_LARGE {
            ApiError::PayloadTooLarge { limit }
        } else {
            ApiError::bad(format!("cannot read the request body: {rej}"))
        }
    })
}

/// An empty 200 (health).
pub(crate) fn empty_ok() -> Response {
    Response::new(Body::empty())
}
