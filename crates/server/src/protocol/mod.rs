//! The OpenAI wire pieces endpoints share, above `base` and below everything else: the shared
//! request fields and message and tool shapes (`request`), which top-level fields a route
//! accepts (`fields`), the completions and chat response shapes with their shared head and
//! `usage` (`response`), log-probs (`logprobs`) and a request body's OpenAPI schema
//! (`schema`, with the `request_body!` each endpoint declares its body with). Types here only
//! describe shapes; checking them is the serving layer's work.

pub mod fields;
pub mod logprobs;
pub mod request;
pub mod response;
pub mod schema;
