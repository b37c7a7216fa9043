//! The playground page at `/`: served as HTML without the API key, self-contained (nothing
//! loaded from another origin), and using the routes it calls.

mod common;

use axum::body::Body;
use axum::http::{header, StatusCode};
use common::*;
use server::ServerConfig;

#[tokio::test]
async fn the_page_is_served_without_the_key_and_loads_nothing_from_elsewhere() {
    let cfg = ServerConfig {
        api_key: Some("sk-test".into()),
        ..ServerConfig::default()
    };
    let app = server::router(state_with(cfg, engine_config(), Some(TEST_TEMPLATE)));
    let (s, headers, page) = send(&app, "GET", "/", Body::empty(), None).await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(
        headers[header::CONTENT_TYPE].to_str().ok(),
        Some("text/html; charset=utf-8")
    );
    assert!(page.contains("<title>Tessera playground</title>"));
    for external in ["http://", "https://", "//cdn", "@import"] {
        assert!(!page.contains(external), "the page refers to {external}");
    }
    for route in ["/v1/models", "/v1/chat/completions", "/v1/completions"] {
        assert!(
            page.contains(&format!("\"{route}\"")),
            "the page calls {route}"
        );
    }
    assert!(
        page.contains("\"Bearer \""),
        "the key is sent as a bearer token"
    );

    // The API itself still wants the key.
    let (s, _, _) = send(&app, "GET", "/v1/models", Body::empty(), None).await;
    assert_eq!(s, StatusCode::UNAUTHORIZED);
}
