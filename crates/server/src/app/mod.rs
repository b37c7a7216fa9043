//! The top layer: the router that wires every endpoint folder and small route with the
//! cross-cutting layers (body-size limit, API-key check, error counting and CORS), the
//! per-request guard (`guard`), the key check (`auth`), CORS (`cors`), the accept loop
//! (`http`) and the OpenAPI document (`openapi`). Nothing below imports this module.
//!
//! Layer order (outermost first): CORS (when origins are allowed) answers preflights before
//! anything else, so they need no key; error counting sees every other response, including
//! the 401s of the key check and the 404 fallback, and the 413s, 504s and contained panics of
//! `guard::layer` (request id, body limit, deadline), which wraps every route; the key check
//! guards the API routes but not `/health` or `/metrics` (probes and scrapers carry no key, as
//! with vLLM) unless `protect_health` / `protect_metrics` are set, nor the playground page at
//! `/`; every API request, a 401 included, gets a span and a log line (`observe`), except the
//! gateway's polls of the worker routes (`worker`), which are keyed but not logged.
//! `/openapi.json` (`openapi`) describes every route and is open like the probes. The OpenAI
//! routes are served under `/v1` and at the root alike (as llama-server does), so clients
//! configured with a bare base URL work; Anthropic's (`/v1/messages`, and its `count_tokens`)
//! under `/v1` only, as its clients call them, and their errors, whichever layer answers them,
//! are re-rendered in Anthropic's shape (`anthropic_errors`). The key is read from
//! `Authorization: Bearer` or Anthropic's `x-api-key` (`auth`) on every route.

pub mod auth;
pub mod cors;
pub mod guard;
pub mod http;
pub mod openapi;

use axum::extract::{DefaultBodyLimit, Request, State};
use axum::http::{header, StatusCode, Uri};
use axum::middleware::{self, Next};
use axum::response::Response;
use axum::routing::{get, post, MethodRouter};
use axum::Router;

use crate::base::context::{within, Context};
use crate::base::{ApiError, ErrorLabel};
use crate::chat;
use crate::completions;
use crate::embeddings;
use crate::lora;
use crate::messages;
use crate::responses;
use crate::routes::{debug, misc, playground, worker};
use crate::serving::observe;
use crate::serving::state::{AppState, ServerConfig};

use auth::authorized;

/// The whole application.
pub fn router(state: AppState) -> Router {
    build(state).0
}

/// The application and every path it serves: routes are added only through `Served`, so the
/// list is complete (the OpenAPI test holds the document to it).
pub(crate) fn build(state: AppState) -> (Router, Vec<String>) {
    let cfg = state.config();
    let mut served = Served::default();
    let api = served.openai_routes();
    let api = served.add(api, MESSAGES, post(messages::handler::create));
    let api = served.add(api, COUNT_TOKENS, post(messages::handler::count_tokens));
    let api = served.add(api, "/tokenize", post(misc::tokenize));
    let api = served.add(api, "/detokenize", post(misc::detokenize));
    let lora_adapters = get(lora::handler::list).post(lora::handler::set_scales);
    let api = served.add(api, "/lora-adapters", lora_adapters);
    let api = served.add(api, "/v1/load_lora_adapter", post(lora::handler::load));
    let mut api = served.add(api, "/v1/unload_lora_adapter", post(lora::handler::unload));
    if cfg.debug_kv_index {
        api = served.add(api, "/debug/kv_index", get(debug::kv_index));
    }
    let mut api = api.route_layer(middleware::from_fn_with_state(
        state.clone(),
        refuse_while_draining,
    ));
    let mut open = served.add(Router::new(), "/", get(playground::page));
    let probes = [
        ("/health", get(misc::health)),
        ("/metrics", get(misc::metrics)),
        ("/openapi.json", get(openapi::spec)),
    ];
    for (path, handler) in probes {
        if needs_key(path, cfg) {
            api = served.add(api, path, handler);
        } else {
            open = served.add(open, path, handler);
        }
    }
    let api = api
        .route_layer(middleware::from_fn_with_state(state.clone(), require_key))
        .route_layer(middleware::from_fn_with_state(
            state.clone(),
            observe::layer,
        ));
    let worker = served.worker_routes(&state);
    let app = open
        .merge(api)
        .merge(worker)
        .fallback(not_found)
        .layer(DefaultBodyLimit::max(cfg.body_limit))
        .layer(middleware::from_fn_with_state(state.clone(), guard::layer))
        .layer(middleware::from_fn(anthropic_errors))
        .layer(middleware::from_fn_with_state(state.clone(), count_errors))
        .with_state(state.clone());
    let app = match cors::layer(&state.config().allowed_origins) {
        Some(cors) => app.layer(cors),
        None => app,
    };
    (app, served.0)
}

/// Whether `path` is behind the API key (when one is set): every route but the playground,
/// and the probes (`/health`, `/metrics`) only when protected. `/openapi.json` is open like
/// the probes, and closed with either of them.
pub(crate) fn needs_key(path: &str, cfg: &ServerConfig) -> bool {
    match path {
        "/" => false,
        "/health" => cfg.protect_health,
        "/metrics" => cfg.protect_metrics,
        "/openapi.json" => cfg.protect_health || cfg.protect_metrics,
        _ => true,
    }
}

/// The paths added so far.
#[derive(Default)]
struct Served(Vec<String>);

impl Served {
    /// `r` with `handler` at `path`, noted.
    fn add(
        &mut self,
        r: Router<AppState>,
        path: &str,
        handler: MethodRouter<AppState>,
    ) -> Router<AppState> {
        self.0.push(path.to_string());
        r.route(path, handler)
    }

    /// The OpenAI routes, each under `/v1` and at the root.
    fn openai_routes(&mut self) -> Router<AppState> {
        let routes: [(&str, MethodRouter<AppState>); 10] = [
            ("/completions", post(completions::handler::handle)),
            ("/chat/completions", post(chat::handler::handle)),
            ("/completions/render", post(completions::render::render)),
            ("/chat/completions/render", post(chat::render::render)),
            ("/embeddings", post(embeddings::handler::embeddings)),
            ("/rerank", post(embeddings::handler::rerank)),
            ("/models", get(misc::models)),
            ("/models/{id}", get(misc::model)),
            ("/responses", post(responses::handler::create)),
            (
                "/responses/{id}",
                get(responses::handler::retrieve).delete(responses::handler::delete),
            ),
        ];
        let mut r = Router::new();
        for (path, handler) in routes {
            r = self.add(r, &format!("/v1{path}"), handler.clone());
            r = self.add(r, path, handler);
        }
        r
    }

    /// The routes a gateway polls to register and weigh this worker (`worker`): behind the
    /// API key like the API, but without a span or log line per poll.
    fn worker_routes(&mut self, state: &AppState) -> Router<AppState> {
        let routes = [
            ("/version", get(worker::version)),
            ("/v1/loads", get(worker::loads)),
            ("/server_info", get(worker::server_info)),
            ("/get_server_info", get(worker::server_info)),
            ("/model_info", get(worker::model_info)),
            ("/get_model_info", get(worker::model_info)),
        ];
        let mut r = Router::new();
        for (path, handler) in routes {
            r = self.add(r, path, handler);
        }
        r.route_layer(middleware::from_fn_with_state(state.clone(), require_key))
    }
}

async fn not_found(uri: Uri) -> ApiError {
    ApiError::NotFound(uri.path().to_string())
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

/// 401 unless the request carries the key (`Authorization: Bearer <key>` or
/// `x-api-key: <key>`), when one is set.
async fn require_key(State(state): State<AppState>, req: Request, next: Next) -> Response {
    if let Some(key) = &state.config().api_key {
        if !authorized(req.headers(), key) {
            return axum::response::IntoResponse::into_response(ApiError::Unauthorized);
        }
    }
    next.run(req).await
}

/// Anthropic's Messages API routes.
const MESSAGES: &str = "/v1/messages";
const COUNT_TOKENS: &str = "/v1/messages/count_tokens";

/// On the Messages API's routes, every error in Anthropic's shape and status, whichever layer
/// answered it (the key check, the guard's limits and deadline, the draining refusal, the
/// handler): its response carries the `ApiError`, re-rendered here with the other headers kept.
async fn anthropic_errors(req: Request, next: Next) -> Response {
    let anthropic = matches!(req.uri().path(), MESSAGES | COUNT_TOKENS);
    let resp = next.run(req).await;
    if !anthropic {
        return resp;
    }
    let Some(e) = resp.extensions().get::<ApiError>().cloned() else {
        return resp;
    };
    // Outside the guard: the request's id (which the body names) is read back from the header.
    let id = resp.headers().get(&guard::REQUEST_ID);
    let ctx = id
        .and_then(|v| v.to_str().ok())
        .map(|id| Context::new(id.into(), None));
    let mut out = within(ctx, async { e.anthropic_response() }).await;
    for (name, value) in resp.headers() {
        if name != header::CONTENT_TYPE && name != header::CONTENT_LENGTH {
            out.headers_mut().insert(name.clone(), value.clone());
        }
    }
    out
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
