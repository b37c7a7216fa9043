//! The Redis tier: one Redis string per tile, `tessera:kv:<key hex>`, shared by every replica
//! that points at the same Redis (and has the same tier namespace, so the same keys).
//!
//! A prefix's tiles are read with one `MGET` (one round trip); a tile is written with `SET`,
//! with `EX` when a TTL is configured. Which tiles stay is Redis's business
//! (`maxmemory-policy`, e.g. `allkeys-lru`); a full Redis under `noeviction` answers a write
//! with an `OOM` error, which is returned like any other fault.
//!
//! Redis is never needed for a correct answer, so it must never hold the tier I/O thread for
//! long and must never stop the server from starting:
//! - `open` only parses the URL; the connection is made on first use.
//! - Connecting waits at most `connect_timeout` (200 ms by default), and each socket read or
//!   write of a command at most `io_timeout` (1 s).
//! - After a failed connection attempt, or a command that timed out, no connection is made
//!   for `retry_interval` (1 s): in the meantime every call fails at once without touching the
//!   network, so a dead or hung Redis costs the I/O thread at most one timeout per interval.
//!   The first call after that interval reconnects.
//! - A connection that failed other than by an error reply from the server (timeout, reset,
//!   closed, unparsable reply) is dropped, never reused: a reply that arrives late would
//!   otherwise be read as the answer to the next command. When the server closed it (e.g. it
//!   restarted, or dropped an idle client), the command is tried once more on a new
//!   connection; a timeout is not retried, since a slow server would then cost twice as long.
//! - An error reply (`OOM`, `READONLY`, …) leaves the connection in step and in use.

use std::time::{Duration, Instant};

use ::redis::io::tcp::TcpSettings;
use ::redis::{Client, Cmd, ConnectionAddr, ConnectionLike, IntoConnectionInfo, RedisError};

use super::{KvTier, TierError, TierKey};

/// The prefix of every key this tier stores.
pub const KEY_PREFIX: &str = "tessera:kv:";

const NAME: &str = "redis";

fn err(what: impl std::fmt::Display) -> TierError {
    TierError::Other(NAME, what.to_string())
}

/// See the module docs.
pub struct RedisTier {
    client: Client,
    /// `host:port/db`, for messages (the URL may hold a password).
    target: String,
    /// Whole seconds, at least 1.
    ttl_secs: Option<u64>,
    connect_timeout: Duration,
    io_timeout: Duration,
    retry_interval: Duration,
    conn: Option<::redis::Connection>,
    /// No connection attempt before this instant.
    next_attempt: Option<Instant>,
    /// Why the last connection attempt failed, for the errors returned while waiting.
    last_failure: String,
    connects: u64,
}

impl RedisTier {
    /// A tier over the Redis at `url` (`redis://HOST:PORT/DB`, optionally with
    /// `USER:PASSWORD@`), whose values expire after `ttl` (rounded up to whole seconds) or, if
    /// `None`, stay until Redis evicts them. Fails only on a malformed URL; whether Redis is
    /// up is found out on first use.
    pub fn open(url: &str, ttl: Option<Duration>) -> Result<RedisTier, TierError> {
        let shown = redacted(url);
        let info = url
            .into_connection_info()
            .map_err(|e| err(format!("bad URL {shown:?}: {e}")))?;
        let ConnectionAddr::Tcp(host, port) = info.addr().clone() else {
            return Err(err(format!(
                "bad URL {shown:?}: only plain TCP (redis://HOST:PORT/DB) is supported"
            )));
        };
        let target = format!("{host}:{port}/{}", info.redis_settings().db());
        // NODELAY: a fetch is a small request waiting on its answer. No `CLIENT SETINFO` at
        // each connect: one command less, and servers before 7.2 do not know it.
        let redis_settings = info.redis_settings().clone().set_skip_set_lib_name();
        let info = info
            .set_tcp_settings(TcpSettings::default().set_nodelay(true))
            .set_redis_settings(redis_settings);
        let client = Client::open(info).map_err(|e| err(format!("bad URL {shown:?}: {e}")))?;
        Ok(RedisTier {
            client,
            target,
            ttl_secs: ttl
                .map(|t| t.as_secs() + u64::from(t.subsec_nanos() > 0))
                .map(|s| s.max(1)),
            connect_timeout: Duration::from_millis(200),
            io_timeout: Duration::from_secs(1),
            retry_interval: Duration::from_secs(1),
            conn: None,
            next_attempt: None,
            last_failure: String::new(),
            connects: 0,
        })
    }

    /// Sets the longest wait for a connection, for one socket read or write, and between
    /// connection attempts (see the module docs for the defaults).
    pub fn with_timeouts(mut self, connect: Duration, io: Duration, retry: Duration) -> Self {
        self.connect_timeout = connect;
        self.io_timeout = io;
        self.retry_interval = retry;
        self
    }

    /// Connection attempts made so far (successful or not).
    pub fn connects(&self) -> u64 {
        self.connects
    }

    /// Whether a connection is held now (it may still turn out broken on next use).
    pub fn is_connected(&self) -> bool {
        self.conn.is_some()
    }

    /// The connection, made now if there is none and the retry interval has passed.
    fn connection(&mut self) -> Result<&mut ::redis::Connection, TierError> {
        if self.conn.is_none() {
            let now = Instant::now();
            if let Some(at) = self.next_attempt.filter(|&at| now < at) {
                return Err(err(format!(
                    "{} unreachable ({}); next attempt in {} ms",
                    self.target,
                    self.last_failure,
                    (at - now).as_millis()
                )));
            }
            self.connects += 1;
            match self.connect() {
                Ok(c) => {
                    self.conn = Some(c);
                    self.next_attempt = None;
                }
                Err(e) => {
                    self.last_failure = e.to_string();
                    self.next_attempt = Some(Instant::now() + self.retry_interval);
                    return Err(err(format!(
                        "connecting to {}: {e}; next attempt in {} ms",
                        self.target,
                        self.retry_interval.as_millis()
                    )));
                }
            }
        }
        self.conn
            .as_mut()
            .ok_or_else(|| err("no connection (unreachable)"))
    }

    fn connect(&self) -> Result<::redis::Connection, RedisError> {
        let c = self
            .client
            .get_connection_with_timeout(self.connect_timeout)?;
        c.set_read_timeout(Some(self.io_timeout))?;
        c.set_write_timeout(Some(self.io_timeout))?;
        Ok(c)
    }

    /// Runs `cmd` on the connection, with the error handling of the module docs.
    fn run<T: ::redis::FromRedisValue>(&mut self, cmd: &Cmd, what: &str) -> Result<T, TierError> {
        let mut retried = false;
        loop {
            let conn = self.connection()?;
            let e = match cmd.query::<T>(conn) {
                Ok(v) => return Ok(v),
                Err(e) => e,
            };
            if e.code().is_some() {
                // The server answered with an error: the connection is in step.
                return Err(err(format!("{what}: {e}")));
            }
            let was_open = conn.is_open();
            self.conn = None;
            // A connection the server closed (restart, idle timeout): once more on a new one.
            if !retried && !e.is_timeout() && (e.is_connection_dropped() || !was_open) {
                retried = true;
                continue;
            }
            // A server that does not answer is left alone for the retry interval, like one
            // that cannot be reached: each call would otherwise wait the whole I/O timeout.
            self.last_failure = e.to_string();
            self.next_attempt = Some(Instant::now() + self.retry_interval);
            return Err(err(format!("{what} on {}: {e}", self.target)));
        }
    }
}

/// `url` without its user name and password, for messages.
fn redacted(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(s), Some(at)) if at > s => format!("{}***{}", &url[..s + 3], &url[at..]),
        _ => url.to_string(),
    }
}

/// The Redis key of a tier key.
pub fn redis_key(key: &TierKey) -> String {
    format!("{KEY_PREFIX}{}", key.hex())
}

impl KvTier for RedisTier {
    fn name(&self) -> &'static str {
        NAME
    }

    fn get(&mut self, keys: &[TierKey]) -> Result<Vec<Option<Vec<u8>>>, TierError> {
        if keys.is_empty() {
            return Ok(Vec::new());
        }
        let mut cmd = ::redis::cmd("MGET");
        for k in keys {
            cmd.arg(redis_key(k));
        }
        let got: Vec<Option<Vec<u8>>> = self.run(&cmd, "MGET")?;
        if got.len() != keys.len() {
            return Err(err(format!(
                "MGET of {} keys answered {} values",
                keys.len(),
                got.len()
            )));
        }
        Ok(got)
    }

    fn put(&mut self, key: &TierKey, value: &[u8]) -> Result<(), TierError> {
        let mut cmd = ::redis::cmd("SET");
        cmd.arg(redis_key(key)).arg(value);
        if let Some(s) = self.ttl_secs {
            cmd.arg("EX").arg(s);
        }
        self.run::<()>(&cmd, "SET")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_parse_and_bad_ones_are_refused_without_connecting() {
        // Nothing listens on port 1: open must not care.
        let t = RedisTier::open("redis://127.0.0.1:1/3", None).expect("a well-formed URL opens");
        assert_eq!(t.target, "127.0.0.1:1/3");
        assert_eq!(t.connects(), 0);
        assert!(!t.is_connected());
        let t = RedisTier::open(
            "redis://127.0.0.1:6379/0",
            Some(Duration::from_millis(1500)),
        )
        .expect("opens");
        assert_eq!(t.ttl_secs, Some(2));
        let t = RedisTier::open("redis://127.0.0.1:6379/0", Some(Duration::ZERO)).expect("opens");
        assert_eq!(t.ttl_secs, Some(1));
        for bad in [
            "",
            "http://127.0.0.1/",
            "redis://",
            "redis+unix:///tmp/r.sock",
        ] {
            assert!(
                RedisTier::open(bad, None).is_err(),
                "{bad:?} must be refused"
            );
        }
    }

    #[test]
    fn messages_never_show_the_password() {
        let e = RedisTier::open("redis://user:s3cret@127.0.0.1:70000/0", None)
            .err()
            .expect("port out of range");
        assert!(!e.to_string().contains("s3cret"), "{e}");
        assert_eq!(redacted("redis://:pw@h:1/0"), "redis://***@h:1/0");
        assert_eq!(redacted("redis://h:1/0"), "redis://h:1/0");
    }

    #[test]
    fn keys_are_namespaced_hex() {
        let k = TierKey([0xab; 32]);
        assert_eq!(redis_key(&k), format!("tessera:kv:{}", "ab".repeat(32)));
    }

    #[test]
    fn an_unreachable_redis_is_tried_once_per_retry_interval() {
        // Port 1 on loopback refuses at once.
        let mut t = RedisTier::open("redis://127.0.0.1:1/0", None)
            .expect("opens")
            .with_timeouts(
                Duration::from_millis(200),
                Duration::from_secs(1),
                Duration::from_secs(60),
            );
        let t0 = Instant::now();
        for _ in 0..1000 {
            assert!(t.get(&[TierKey([1; 32])]).is_err());
            assert!(t.put(&TierKey([1; 32]), b"v").is_err());
        }
        assert_eq!(t.connects(), 1, "one attempt within the retry interval");
        assert!(t0.elapsed() < Duration::from_secs(1), "{:?}", t0.elapsed());
        let msg = t
            .get(&[TierKey([1; 32])])
            .expect_err("still down")
            .to_string();
        assert!(
            msg.contains("unreachable") && msg.contains("127.0.0.1:1/0"),
            "{msg}"
        );
        assert_eq!(
            t.get(&[]).expect("no keys, no round trip"),
            Vec::<Option<Vec<u8>>>::new()
        );
    }
}
