//! The accept loop: HTTP/1.1 connections served by hyper around the axum router, with the
//! connection-level limits `axum::serve` does not offer.
//!
//! - **Connection cap** (`max_connections`): a permit is taken before each `accept`, so once the
//!   cap is reached further connections wait in the kernel's accept queue (their handshake
//!   completes, their request is read when an open connection closes); nothing is refused.
//! - **Header read timeout** (`header_read_timeout`): from the first byte of a request head to
//!   its last, and from a new connection's opening to its first byte. A client that sends half a
//!   header and waits, or connects and sends nothing, is disconnected (no response: there is no
//!   request to answer), so silent connections cannot hold the connection slots for long.
//! - **Keep-alive idle timeout** (`keep_alive_timeout`): a connection that has served a request
//!   and has no request in flight and no byte in either direction for that long is closed. A
//!   request counts as in flight from its head until its response body has been sent (or
//!   dropped), so a long generation or a quiet stream is never idle.
//! - **Graceful shutdown**: when `shutdown` completes the listener closes, every connection
//!   finishes the request it is serving and closes, idle ones close at once; `serve` returns
//!   when the last connection is gone (the caller bounds that wait).
//!
//! The two timeouts are enforced by a watcher in each connection's task reading an `Activity`
//! record that the socket wrapper (bytes) and the service (requests) keep up to date.

use std::convert::Infallible;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::Body;
use axum::Router;
use hyper::body::{Frame, Incoming, SizeHint};
use hyper::server::conn::http1;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;
use tower::ServiceExt;

use super::router;
use crate::serving::state::{AppState, ServerConfig};

/// The connection-level limits.
#[derive(Clone, Copy, Debug)]
pub struct ConnLimits {
    pub max_connections: usize,
    pub header_read_timeout: Duration,
    pub keep_alive_timeout: Duration,
}

impl ConnLimits {
    /// The limits `cfg` sets.
    pub fn of(cfg: &ServerConfig) -> ConnLimits {
        ConnLimits {
            max_connections: cfg.max_connections,
            header_read_timeout: cfg.header_read_timeout,
            keep_alive_timeout: cfg.keep_alive_timeout,
        }
    }
}

/// Serves the application on `listener` until `shutdown` completes, then lets open
/// connections finish (graceful shutdown). Limits come from the state's `ServerConfig`.
pub async fn serve(
    listener: TcpListener,
    state: AppState,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> io::Result<()> {
    let limits = ConnLimits::of(state.config());
    let max = limits.max_connections.clamp(1, 1 << 20);
    let app = router(state);
    let permits = Arc::new(Semaphore::new(max));
    let (stop_tx, stop_rx) = watch::channel(false);
    tokio::pin!(shutdown);
    loop {
        let permit = tokio::select! {
            _ = &mut shutdown => break,
            p = permits.clone().acquire_owned() => match p {
                Ok(p) => p,
                Err(_) => break,
            },
        };
        let stream = tokio::select! {
            _ = &mut shutdown => break,
            r = listener.accept() => match r {
                Ok((s, _)) => s,
                Err(e) => {
                    // Out of file descriptors or a connection reset before accept: not fatal.
                    tracing::warn!("accept failed: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let conn = Conn {
            app: app.clone(),
            limits,
            stop: stop_rx.clone(),
            _permit: permit,
        };
        tokio::spawn(conn.run(stream));
    }
    drop(listener);
    let _ = stop_tx.send(true);
    // Every connection holds a permit until its task ends.
    let _ = permits.acquire_many(max as u32).await;
    Ok(())
}

/// One accepted connection.
struct Conn {
    app: Router,
    limits: ConnLimits,
    stop: watch::Receiver<bool>,
    _permit: OwnedSemaphorePermit,
}

impl Conn {
    async fn run(mut self, stream: TcpStream) {
        let _ = stream.set_nodelay(true);
        let activity = Arc::new(Activity::new());
        let io = TokioIo::new(Tracked {
            inner: stream,
            activity: activity.clone(),
        });
        let app = self.app.clone();
        let act = activity.clone();
        let svc = hyper::service::service_fn(move |req: hyper::Request<Incoming>| {
            let guard = act.begin();
            let resp = app.clone().oneshot(req.map(Body::new));
            async move {
                let resp = resp.await?;
                Ok::<_, Infallible>(resp.map(|body| InFlight {
                    body,
                    _guard: guard,
                }))
            }
        });
        let conn = http1::Builder::new()
            .keep_alive(true)
            .serve_connection(io, svc);
        tokio::pin!(conn);
        let tick = (self
            .limits
            .keep_alive_timeout
            .min(self.limits.header_read_timeout)
            / 4)
        .clamp(Duration::from_millis(50), Duration::from_secs(1));
        let mut closing = false;
        loop {
            tokio::select! {
                r = conn.as_mut() => {
                    if let Err(e) = r {
                        tracing::debug!("connection ended: {e}");
                    }
                    return;
                }
                _ = self.stop.wait_for(|s| *s), if !closing => {
                    conn.as_mut().graceful_shutdown();
                    closing = true;
                }
                _ = tokio::time::sleep(tick) => match activity.verdict(&self.limits) {
                    Verdict::Fine => {}
                    Verdict::Idle if !closing => {
                        conn.as_mut().graceful_shutdown();
                        closing = true;
                    }
                    // A head that never completes: drop the socket (nothing to answer).
                    Verdict::Idle | Verdict::SlowHead => {
                        tracing::debug!("closing a connection: no complete request head in time");
                        return;
                    }
                },
            }
        }
    }
}

/// What the watcher knows about a connection. Times are milliseconds since `epoch`.
struct Activity {
    epoch: Instant,
    /// The last byte read or written.
    last: AtomicU64,
    /// One more than the time the first byte of a head not yet parsed arrived (0: none).
    head_since: AtomicU64,
    /// Requests whose response body is not finished.
    in_flight: AtomicUsize,
    /// Requests whose head was read on this connection.
    served: AtomicUsize,
}

enum Verdict {
    Fine,
    /// No request in flight or arriving, no bytes for the keep-alive timeout.
    Idle,
    /// A request head started arriving longer than the header timeout ago.
    SlowHead,
}

impl Activity {
    fn new() -> Activity {
        Activity {
            epoch: Instant::now(),
            last: AtomicU64::new(0),
            head_since: AtomicU64::new(0),
            in_flight: AtomicUsize::new(0),
            served: AtomicUsize::new(0),
        }
    }

    fn now(&self) -> u64 {
        self.epoch.elapsed().as_millis() as u64
    }

    fn read(&self) {
        let now = self.now();
        self.last.store(now, Relaxed);
        if self.in_flight.load(Relaxed) == 0 {
            let _ = self
                .head_since
                .compare_exchange(0, now + 1, Relaxed, Relaxed);
        }
    }

    fn wrote(&self) {
        self.last.store(self.now(), Relaxed);
    }

    /// A request's head has been parsed: it is in flight until the guard drops.
    fn begin(self: &Arc<Self>) -> RequestGuard {
        self.in_flight.fetch_add(1, Relaxed);
        self.served.fetch_add(1, Relaxed);
        self.head_since.store(0, Relaxed);
        RequestGuard(self.clone())
    }

    fn verdict(&self, limits: &ConnLimits) -> Verdict {
        let now = self.now();
        let head = self.head_since.load(Relaxed);
        if head > 0 && now + 1 - head >= limits.header_read_timeout.as_millis() as u64 {
            return Verdict::SlowHead;
        }
        let quiet = now.saturating_sub(self.last.load(Relaxed));
        // A connection that never sent a request waits for its first head, not a keep-alive.
        let idle_limit = match self.served.load(Relaxed) {
            0 => limits.header_read_timeout.min(limits.keep_alive_timeout),
            _ => limits.keep_alive_timeout,
        };
        if head == 0 && self.in_flight.load(Relaxed) == 0 && quiet >= idle_limit.as_millis() as u64
        {
            return Verdict::Idle;
        }
        Verdict::Fine
    }
}

/// Held while a request is in flight.
struct RequestGuard(Arc<Activity>);

impl Drop for RequestGuard {
    fn drop(&mut self) {
        self.0.wrote();
        self.0.in_flight.fetch_sub(1, Relaxed);
    }
}

/// A response body that keeps its request in flight until it is finished or dropped.
struct InFlight {
    body: Body,
    _guard: RequestGuard,
}

impl hyper::body::Body for InFlight {
    type Data = axum::body::Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

/// The socket, noting when bytes move.
struct Tracked {
    inner: TcpStream,
    activity: Arc<Activity>,
}

impl AsyncRead for Tracked {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let r = Pin::new(&mut self.inner).poll_read(cx, buf);
        if matches!(r, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            self.activity.read();
        }
        r
    }
}

impl AsyncWrite for Tracked {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let r = Pin::new(&mut self.inner).poll_write(cx, buf);
        if matches!(r, Poll::Ready(Ok(n)) if n > 0) {
            self.activity.wrote();
        }
        r
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let r = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        if matches!(r, Poll::Ready(Ok(n)) if n > 0) {
            self.activity.wrote();
        }
        r
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}
