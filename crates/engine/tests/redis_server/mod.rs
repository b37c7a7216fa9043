//! A real `redis-server` for tests: started on a free loopback port with nothing persisted
//! (`--save '' --appendonly no`), in a directory of its own, and killed when dropped.
//!
//! The binary is `$TESSERA_REDIS_SERVER` or `redis-server` on `PATH`; when there is none the
//! test fails, saying how to install it (Debian: `apt-get install -y redis-server`) — a test
//! of the Redis tier never passes without a Redis. Faults are made the way they happen: the
//! process killed (`kill`), stopped and resumed (`pause`, `resume`: SIGSTOP / SIGCONT, so its
//! socket still accepts connections but nothing answers), restarted on the same port.

#![allow(dead_code)] // each test binary uses its own part of it

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How long a server may take to answer its first PING.
const READY_WITHIN: Duration = Duration::from_secs(10);

pub struct RedisServer {
    port: u16,
    args: Vec<String>,
    dir: PathBuf,
    child: Option<Child>,
}

/// The `redis-server` binary, or a failed test that says how to get one.
pub fn binary() -> PathBuf {
    if let Some(p) = std::env::var_os("TESSERA_REDIS_SERVER") {
        let p = PathBuf::from(p);
        assert!(
            p.is_file(),
            "TESSERA_REDIS_SERVER={} is not a file: the Redis tier tests need a real redis-server",
            p.display()
        );
        return p;
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .map(|d| d.join("redis-server"))
        .find(|p| p.is_file())
        .unwrap_or_else(|| {
            panic!(
                "redis-server not found on PATH (nor TESSERA_REDIS_SERVER): the Redis tier tests \
                 need a real Redis server; install it (Debian: apt-get install -y redis-server)"
            )
        })
}

pub use test_support::free_port;

impl RedisServer {
    /// Starts a server on a free port with `extra` arguments (e.g. `--maxmemory 1mb`).
    pub fn start(extra: &[&str]) -> RedisServer {
        RedisServer::start_on(free_port(), extra)
    }

    /// Starts a server on `port`.
    pub fn start_on(port: u16, extra: &[&str]) -> RedisServer {
        let dir = std::env::temp_dir().join(format!("tessera-redis-{}-{port}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("creates the server's directory");
        let mut s = RedisServer {
            port,
            args: extra.iter().map(|s| s.to_string()).collect(),
            dir,
            child: None,
        };
        s.launch();
        s
    }

    fn log_path(&self) -> PathBuf {
        self.dir.join("redis.log")
    }

    fn launch(&mut self) {
        let bin = binary();
        let port = self.port.to_string();
        let dir = self.dir.to_string_lossy().into_owned();
        let log = self.log_path().to_string_lossy().into_owned();
        let mut args: Vec<&str> = vec![
            "--port",
            &port,
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            &dir,
            "--logfile",
            &log,
        ];
        args.extend(self.args.iter().map(String::as_str));
        let child = Command::new(&bin)
            .args(&args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("starting {}: {e}", bin.display()));
        self.child = Some(child);
        self.wait_ready();
    }

    fn wait_ready(&mut self) {
        let t0 = Instant::now();
        loop {
            if ping(self.port) {
                return;
            }
            if let Some(status) = self
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten())
            {
                panic!(
                    "redis-server on port {} exited ({status}) before answering; its log:\n{}",
                    self.port,
                    read_log(&self.log_path())
                );
            }
            assert!(
                t0.elapsed() < READY_WITHIN,
                "redis-server on port {} did not answer PING within {READY_WITHIN:?}; its log:\n{}",
                self.port,
                read_log(&self.log_path())
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// `redis://127.0.0.1:PORT/db`.
    pub fn url(&self, db: u32) -> String {
        format!("redis://127.0.0.1:{}/{db}", self.port)
    }

    fn pid(&self) -> u32 {
        self.child.as_ref().expect("the server runs").id()
    }

    /// Kills the server (SIGKILL) and waits for it: its port refuses connections afterwards.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Starts the server again, on the same port with the same arguments (and no data).
    pub fn restart(&mut self) {
        self.kill();
        self.launch();
    }

    /// Stops the process (SIGSTOP): connections are still accepted, nothing is answered.
    pub fn pause(&self) {
        signal("-STOP", self.pid());
    }

    /// Resumes a paused process (SIGCONT).
    pub fn resume(&self) {
        signal("-CONT", self.pid());
    }

    /// Sends one command and returns its reply: a status line's text, or a bulk string.
    pub fn command(&self, args: &[&str]) -> String {
        let mut s = TcpStream::connect(("127.0.0.1", self.port)).expect("connects to redis");
        s.set_read_timeout(Some(READY_WITHIN))
            .expect("sets a timeout");
        let mut req = format!("*{}\r\n", args.len());
        for a in args {
            req.push_str(&format!("${}\r\n{a}\r\n", a.len()));
        }
        s.write_all(req.as_bytes()).expect("sends the command");
        let mut reply = Vec::new();
        let mut buf = [0u8; 4096];
        loop {
            let n = s.read(&mut buf).expect("reads the reply");
            assert!(n > 0, "redis closed the connection after {args:?}");
            reply.extend_from_slice(&buf[..n]);
            let text = String::from_utf8_lossy(&reply);
            let Some((head, rest)) = text.split_once("\r\n") else {
                continue;
            };
            match head.strip_prefix('$') {
                Some(len) => {
                    let len: usize = len.parse().expect("a bulk length");
                    if rest.len() >= len {
                        return rest[..len].to_string();
                    }
                }
                None => {
                    assert!(!head.starts_with('-'), "redis refused {args:?}: {head}");
                    return head.trim_start_matches('+').to_string();
                }
            }
        }
    }

    /// `INFO memory`'s `used_memory`, in bytes.
    pub fn used_memory(&self) -> u64 {
        let info = self.command(&["INFO", "memory"]);
        info.lines()
            .find_map(|l| l.strip_prefix("used_memory:"))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or_else(|| panic!("no used_memory in INFO memory: {info}"))
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn signal(sig: &str, pid: u32) {
    let st = Command::new("kill")
        .arg(sig)
        .arg(pid.to_string())
        .status()
        .expect("runs kill(1)");
    assert!(st.success(), "kill {sig} {pid}: {st}");
}

/// Whether a server on `port` answers PING.
fn ping(port: u16) -> bool {
    let Ok(mut s) = TcpStream::connect(("127.0.0.1", port)) else {
        return false;
    };
    let _ = s.set_read_timeout(Some(Duration::from_millis(500)));
    if s.write_all(b"PING\r\n").is_err() {
        return false;
    }
    let mut buf = [0u8; 7];
    s.read_exact(&mut buf).is_ok() && &buf == b"+PONG\r\n"
}

fn read_log(p: &Path) -> String {
    std::fs::read_to_string(p).unwrap_or_else(|e| format!("(no log at {}: {e})", p.display()))
}

/// A TCP proxy to `127.0.0.1:target` that holds every chunk of the server's replies for
/// `delay` before passing it on: a slow link. Its threads end with their connections.
pub struct DelayProxy {
    pub port: u16,
}

impl DelayProxy {
    pub fn start(target: u16, delay: Duration) -> DelayProxy {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("binds the proxy");
        let port = listener.local_addr().expect("proxy address").port();
        std::thread::spawn(move || {
            for client in listener.incoming() {
                let Ok(client) = client else { return };
                let Ok(server) = TcpStream::connect(("127.0.0.1", target)) else {
                    continue;
                };
                let (c2, s2) = (
                    client.try_clone().expect("clones"),
                    server.try_clone().expect("clones"),
                );
                std::thread::spawn(move || pipe(client, server, Duration::ZERO));
                std::thread::spawn(move || pipe(s2, c2, delay));
            }
        });
        DelayProxy { port }
    }
}

/// Copies `from` to `to`, each chunk after `delay`, until either side closes.
fn pipe(mut from: TcpStream, mut to: TcpStream, delay: Duration) {
    let mut buf = vec![0u8; 1 << 20];
    loop {
        match from.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                std::thread::sleep(delay);
                if to.write_all(&buf[..n]).is_err() {
                    break;
                }
            }
        }
    }
    let _ = to.shutdown(std::net::Shutdown::Both);
    let _ = from.shutdown(std::net::Shutdown::Both);
}
