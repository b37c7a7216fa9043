//! The request being served: its id and its deadline, in a task-local.
//!
//! `app::guard` opens a context per request and runs the handler within it; response streams,
//! polled after the handler returned, carry it along with `current` / `within`. Errors read the
//! id (an internal error names it), the engine-facing waits read the deadline.

use std::any::Any;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

/// What the code serving one request can ask about it.
#[derive(Clone, Debug)]
pub struct Context {
    id: Arc<str>,
    deadline: Option<Instant>,
    timeout: Option<Duration>,
}

impl Context {
    /// The context of request `id`, due `timeout` from now (if any).
    pub fn new(id: Arc<str>, timeout: Option<Duration>) -> Context {
        Context {
            id,
            deadline: timeout.map(|t| Instant::now() + t),
            timeout,
        }
    }

    /// The deadline and the timeout it came from.
    pub fn deadline(&self) -> Option<(Instant, Duration)> {
        self.deadline.zip(self.timeout)
    }
}

tokio::task_local! {
    static CURRENT: Context;
}

/// The context of the request being served, if any (to carry into a response stream).
pub fn current() -> Option<Context> {
    CURRENT.try_with(Context::clone).ok()
}

/// Runs `fut` with `ctx` as the current request's context.
pub async fn within<F: std::future::Future>(ctx: Option<Context>, fut: F) -> F::Output {
    match ctx {
        Some(c) => CURRENT.scope(c, fut).await,
        None => fut.await,
    }
}

/// The current request's id.
pub fn request_id() -> Option<Arc<str>> {
    CURRENT.try_with(|c| c.id.clone()).ok()
}

/// The current request's deadline and the timeout it came from.
pub fn deadline() -> Option<(Instant, Duration)> {
    CURRENT.try_with(Context::deadline).ok().flatten()
}

/// The text of a caught panic's payload.
pub fn panic_message(p: &(dyn Any + Send)) -> &str {
    p.downcast_ref::<&str>()
        .copied()
        .or_else(|| p.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("(no message)")
}
