//! `GET /`: the playground, a single static page compiled into the binary (`playground.html`:
//! chat and completion against this server's own API, streamed, with per-reply TTFT, tokens/s
//! and cached prompt tokens). It is served without the API key check: the page holds no data,
//! and its requests carry the key the user types in.

use axum::http::header;
use axum::response::IntoResponse;

const PAGE: &str = include_str!("../playground.html");

#[utoipa::path(get, path = "/", tag = "playground",
    responses((status = 200, description = "The playground page", body = String,
        content_type = "text/html")))]
pub async fn page() -> impl IntoResponse {
    (
        [
            (header::CONTENT_TYPE, "text/html; charset=utf-8"),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        PAGE,
    )
}
