//! Property test: no request body, however wrong, gets a 5xx or panics the server.
//!
//! Bodies are built from the fields the API knows, each given a value of a random JSON type
//! (right or wrong, in range or not), then sometimes mutated at the byte level.

mod common;

use axum::http::StatusCode;
use common::*;
use proptest::prelude::*;
use serde_json::{json, Value};

const KEYS: &[&str] = &[
    "model",
    "prompt",
    "messages",
    "max_tokens",
    "max_completion_tokens",
    "temperature",
    "top_p",
    "top_k",
    "min_p",
    "n",
    "stop",
    "stop_token_ids",
    "seed",
    "presence_penalty",
    "frequency_penalty",
    "repetition_penalty",
    "logit_bias",
    "logprobs",
    "top_logprobs",
    "echo",
    "priority",
    "ignore_eos",
    "user",
    "stream",
    "stream_options",
    "tokens",
    "add_special_tokens",
    "add_generation_prompt",
];

const ROUTES: &[&str] = &[
    "/v1/completions",
    "/v1/chat/completions",
    "/tokenize",
    "/detokenize",
];

fn leaf() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        (-3i64..300).prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        prop_oneof![
            Just(-1.0f64),
            Just(0.0),
            Just(0.5),
            Just(1.0),
            Just(2.5),
            Just(1e300)
        ]
        .prop_map(Value::from),
        "[a-z <>\\\\\u{e9}\u{4e2d}]{0,12}".prop_map(Value::from),
    ]
}

fn value() -> impl Strategy<Value = Value> {
    leaf().prop_recursive(2, 12, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::from),
            prop::collection::vec((0i64..400).prop_map(Value::from), 0..6).prop_map(Value::from),
            (inner.clone(), "[a-z]{1,8}").prop_map(|(v, k)| json!({ k: v })),
            inner.prop_map(|c| json!([{"role": "user", "content": c}])),
        ]
    })
}

fn body() -> impl Strategy<Value = Vec<u8>> {
    let fields = prop::collection::vec((prop::sample::select(KEYS), value()), 0..8);
    let small_max = prop_oneof![Just(None), (0i64..8).prop_map(Some)];
    let mutation = prop_oneof![
        3 => Just(None),
        1 => (any::<prop::sample::Index>(), any::<u8>()).prop_map(Some),
    ];
    let base = prop::sample::select(vec![
        json!({}),
        json!({"prompt": "hello"}),
        json!({"messages": [{"role": "user", "content": "hi"}]}),
        json!({"tokens": [1, 40, 41]}),
    ]);
    (base, fields, small_max, mutation).prop_map(|(base, fields, max, mutation)| {
        let Value::Object(mut m) = base else {
            unreachable!("bases are objects")
        };
        for (k, v) in fields {
            m.insert(k.to_string(), v);
        }
        // Keep generation short when the value happens to be valid.
        if let Some(n) = max {
            m.insert("max_tokens".into(), json!(n));
        }
        let mut bytes = Value::Object(m).to_string().into_bytes();
        if let Some((at, b)) = mutation {
            let i = at.index(bytes.len());
            bytes[i] = b;
        }
        bytes
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    #[test]
    fn no_request_body_gets_a_server_error(
        route in prop::sample::select(ROUTES),
        bytes in body(),
    ) {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()
            .expect("runtime");
        let (status, text) = rt.block_on(async {
            let app = server::router(shared_state());
            let (s, _, text) = send(&app, "POST", route, bytes.clone(), None).await;
            (s, text)
        });
        if std::env::var_os("FUZZ_VERBOSE").is_some() {
            eprintln!("{status}");
        }
        prop_assert!(status.as_u16() < 500, "{status} for {:?}: {text}",
            String::from_utf8_lossy(&bytes));
        if status != StatusCode::OK {
            let v: Value = serde_json::from_str(&text).expect("error bodies are JSON");
            prop_assert!(v["error"]["message"].is_string());
        }
    }
}

/// One engine for all cases (loading per case would dominate the run time).
fn shared_state() -> server::AppState {
    static STATE: std::sync::OnceLock<server::AppState> = std::sync::OnceLock::new();
    STATE.get_or_init(tiny_state).clone()
}
