//! Tool calling for chat completions and the Responses API.
//!
//! The request side (`request`): `tools`, `tool_choice` and `parallel_tool_calls` checked; the
//! tools rendered through the chat template's `tools` variable; earlier calls sent back in a
//! conversation turned into the shape templates read (`history`). The reply side: each
//! template family's call syntax (`family`; readers in `hermes`, `llama3`, `mistral` over the
//! helpers in `call`) and one incremental parser (`parser`) that splits the model's text into
//! content and whole calls, for streamed and whole replies alike. A `required` or named choice
//! needs its output held to the call shape (`constraint`). `reply` reads one choice's tokens.
//!
//! Invariants: malformed model output is never an error, it comes back as content; a streamed
//! reply's deltas reassemble to the whole reply's message, because both come out of the same
//! parser, whose decisions do not depend on how the text was split into tokens.

pub mod call;
pub mod constraint;
pub mod family;
mod hermes;
pub mod history;
mod llama3;
mod mistral;
pub mod parser;
pub mod reply;
pub mod request;

pub use call::ParsedCall;
pub use family::{Family, Markers};
pub use parser::{parse_whole, CallParser, Out};
pub use reply::{outcome_outs, read_next, read_outcome, ChoiceReader};
pub use request::{setup_fields, ToolFields, ToolParse, ToolSetup};
