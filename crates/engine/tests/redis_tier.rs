//! The Redis tier against a real `redis-server` (see `redis_server`): values round trip under
//! their namespaced keys, and every fault — Redis down at start, killed mid-run, hung, full —
//! is an error returned within the timeouts, never a panic or a stall, after which the tier
//! works again by itself once Redis does.
// Full tier only: starts a real `redis-server` (`--features services`).
#![cfg(feature = "services")]

mod redis_server;

use std::time::{Duration, Instant};

use engine::tier::redis::{redis_key, RedisTier};
use engine::tier::{KvTier, TierKey};
use redis_server::RedisServer;

/// The size of one Gemma 3 270M tile at f16.
const TILE: usize = 48 * 1024;

fn key(i: u32) -> TierKey {
    let mut k = [0u8; 32];
    k[..4].copy_from_slice(&i.to_le_bytes());
    k[31] = 0x5a;
    TierKey(k)
}

/// A value that differs for every `i` and every byte position.
fn value(i: u32, len: usize) -> Vec<u8> {
    (0..len)
        .map(|j| (j as u32).wrapping_mul(31).wrapping_add(i.wrapping_mul(7)) as u8)
        .collect()
}

/// A direct client, to look at what the tier stored.
fn raw(url: &str) -> redis::Connection {
    redis::Client::open(url)
        .expect("parses")
        .get_connection_with_timeout(Duration::from_secs(2))
        .expect("connects")
}

#[test]
fn several_keys_round_trip_with_missing_ones_as_none_in_their_db_under_their_ttl() {
    let server = RedisServer::start(&[]);
    let url = server.url(3);
    let mut t = RedisTier::open(&url, Some(Duration::from_secs(100))).expect("opens");
    let sizes = [0, 1, 100, TILE, 3 * TILE + 17];
    for (i, &len) in sizes.iter().enumerate() {
        t.put(&key(i as u32), &value(i as u32, len))
            .expect("stores");
    }
    let ask = [key(0), key(100), key(1), key(2), key(101), key(3), key(4)];
    let got = t.get(&ask).expect("reads");
    let want = vec![
        Some(value(0, 0)),
        None,
        Some(value(1, 1)),
        Some(value(2, 100)),
        None,
        Some(value(3, TILE)),
        Some(value(4, 3 * TILE + 17)),
    ];
    assert_eq!(got, want);
    // A put replaces.
    t.put(&key(2), b"replaced").expect("stores");
    assert_eq!(
        t.get(&[key(2)]).expect("reads"),
        vec![Some(b"replaced".to_vec())]
    );
    assert_eq!(t.connects(), 1, "one connection for all of it");

    // Under `tessera:kv:<hex>`, in the URL's database, with the TTL.
    let mut c = raw(&url);
    let name = redis_key(&key(3));
    assert!(name.starts_with("tessera:kv:") && name.ends_with(&key(3).hex()));
    let stored: Vec<u8> = redis::cmd("GET").arg(&name).query(&mut c).expect("GET");
    assert_eq!(stored, value(3, TILE));
    let ttl: i64 = redis::cmd("TTL").arg(&name).query(&mut c).expect("TTL");
    assert!((90..=100).contains(&ttl), "TTL {ttl}");
    let mut c0 = raw(&server.url(0));
    let in_db0: u32 = redis::cmd("EXISTS")
        .arg(&name)
        .query(&mut c0)
        .expect("EXISTS");
    assert_eq!(in_db0, 0, "stored in db 3 only");

    // Without a TTL, values stay until evicted.
    let mut forever = RedisTier::open(&url, None).expect("opens");
    forever.put(&key(9), b"kept").expect("stores");
    let ttl: i64 = redis::cmd("TTL")
        .arg(redis_key(&key(9)))
        .query(&mut c)
        .expect("TTL");
    assert_eq!(ttl, -1, "no expiry");
}

#[test]
fn redis_down_at_open_is_tried_again_once_a_second_and_used_when_it_comes_up() {
    let port = redis_server::free_port();
    let url = format!("redis://127.0.0.1:{port}/0");
    let mut t = RedisTier::open(&url, None).expect("open does not need Redis");
    let first_failure = Instant::now();
    let e = t.get(&[key(1)]).expect_err("nothing listens");
    assert!(e.to_string().contains(&format!("127.0.0.1:{port}")), "{e}");
    // Within the retry interval, calls fail at once without trying to connect.
    let t0 = Instant::now();
    for i in 0..200 {
        assert!(t.get(&[key(i)]).is_err());
        assert!(t.put(&key(i), b"v").is_err());
    }
    assert!(
        t0.elapsed() < Duration::from_millis(200),
        "{:?}",
        t0.elapsed()
    );
    assert_eq!(t.connects(), 1);

    let _server = RedisServer::start_on(port, &[]);
    let wait = Duration::from_millis(1100).saturating_sub(first_failure.elapsed());
    std::thread::sleep(wait);
    t.put(&key(1), b"one").expect("reconnected");
    assert_eq!(
        t.get(&[key(1)]).expect("reads"),
        vec![Some(b"one".to_vec())]
    );
    assert_eq!(t.connects(), 2);
}

#[test]
fn redis_killed_mid_run_gives_errors_then_works_again_after_a_restart() {
    let mut server = RedisServer::start(&[]);
    let mut t = RedisTier::open(&server.url(0), None).expect("opens");
    t.put(&key(1), &value(1, TILE)).expect("stores");
    assert_eq!(t.get(&[key(1)]).expect("reads"), vec![Some(value(1, TILE))]);

    server.kill();
    let t0 = Instant::now();
    let e = t.get(&[key(1)]).expect_err("Redis is gone");
    assert!(e.to_string().starts_with("redis: "), "{e}");
    assert!(t.put(&key(2), &value(2, TILE)).is_err());
    assert!(t.get(&[key(1), key(2)]).is_err());
    assert!(
        t0.elapsed() < Duration::from_millis(500),
        "{:?}",
        t0.elapsed()
    );
    assert!(!t.is_connected());

    server.restart();
    std::thread::sleep(Duration::from_millis(1100));
    // Nothing was persisted: the old value is a miss, new ones round trip.
    assert_eq!(t.get(&[key(1)]).expect("reconnected"), vec![None]);
    t.put(&key(3), &value(3, TILE)).expect("stores");
    assert_eq!(t.get(&[key(3)]).expect("reads"), vec![Some(value(3, TILE))]);

    // A restart between two calls (the server closed the connection) costs no error at all:
    // the command is tried once more on a new connection.
    server.restart();
    t.put(&key(4), b"four")
        .expect("retried on a new connection");
    assert_eq!(
        t.get(&[key(4)]).expect("reads"),
        vec![Some(b"four".to_vec())]
    );
}

#[test]
fn a_hung_redis_costs_one_timeout_then_nothing_until_the_retry_and_replies_never_cross() {
    let server = RedisServer::start(&[]);
    let mut t = RedisTier::open(&server.url(0), None).expect("opens");
    for i in 0..4 {
        t.put(&key(i), &value(i, TILE)).expect("stores");
    }
    server.pause();
    let t0 = Instant::now();
    let e = t.get(&[key(0), key(1)]).expect_err("no answer");
    let waited = t0.elapsed();
    assert!(
        waited >= Duration::from_millis(900) && waited < Duration::from_millis(2500),
        "the I/O timeout is 1 s, waited {waited:?}: {e}"
    );
    // Within the retry interval: failing at once.
    let t1 = Instant::now();
    assert!(t.put(&key(9), &value(9, TILE)).is_err());
    assert!(t.get(&[key(2)]).is_err());
    assert!(
        t1.elapsed() < Duration::from_millis(100),
        "{:?}",
        t1.elapsed()
    );

    // A new connection to the hung server gives up after the connect timeout (200 ms): its
    // handshake (SELECT 1) is not answered.
    let mut other = RedisTier::open(&server.url(1), None).expect("opens");
    let t2 = Instant::now();
    assert!(other.get(&[key(0)]).is_err());
    assert!(
        t2.elapsed() < Duration::from_millis(900),
        "{:?}",
        t2.elapsed()
    );

    server.resume();
    std::thread::sleep(Duration::from_millis(1100));
    // The late reply to the timed-out MGET must not be read as this one's.
    assert_eq!(
        t.get(&[key(3), key(2)]).expect("works again"),
        vec![Some(value(3, TILE)), Some(value(2, TILE))]
    );
    assert_eq!(t.connects(), 2);
}

#[test]
fn a_full_redis_under_noeviction_refuses_writes_with_an_error_and_still_serves_reads() {
    // Room for about 1 MiB more than the server uses empty (that base differs between builds
    // and machines, and once exceeded a fixed 1 MiB limit, refusing the very first write).
    let server = RedisServer::start(&["--maxmemory-policy", "noeviction"]);
    let mut t = RedisTier::open(&server.url(0), None).expect("opens");
    let limit = server.used_memory() + (1 << 20);
    server.command(&["CONFIG", "SET", "maxmemory", &limit.to_string()]);
    let mut stored = 0;
    let mut refusal = None;
    for i in 0..200 {
        match t.put(&key(i), &value(i, TILE)) {
            Ok(()) => stored += 1,
            Err(e) => {
                refusal = Some(e);
                break;
            }
        }
    }
    let e = refusal.expect("1 MiB cannot hold 200 tiles of 48 KiB");
    assert!(e.to_string().contains("OOM"), "{e}");
    assert!(stored > 0, "some tiles fit before it was full");
    // Still connected and in step: what fit is readable, what did not is a miss.
    assert_eq!(
        t.get(&[key(0), key(stored)]).expect("reads"),
        vec![Some(value(0, TILE)), None]
    );
    assert!(t.put(&key(stored), &value(stored, TILE)).is_err());
    assert_eq!(t.connects(), 1);
}

/// Put and get times of Gemma-sized tiles over loopback, the best of three rounds;
/// `--nocapture` shows them (tiles per round: `TESSERA_REDIS_BENCH_TILES`, default 256). Every
/// value read is checked.
#[test]
fn tile_put_and_get_times_over_loopback() {
    const BATCH: usize = 32;
    const ROUNDS: usize = 3;
    let n: u32 = std::env::var("TESSERA_REDIS_BENCH_TILES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(256);
    let server = RedisServer::start(&[]);
    let mut t = RedisTier::open(&server.url(0), None).expect("opens");
    let values: Vec<Vec<u8>> = (0..n).map(|i| value(i, TILE)).collect();
    let keys: Vec<TierKey> = (0..n).map(key).collect();
    t.get(&[key(u32::MAX)]).expect("connects"); // not timed

    let mut best = [Duration::MAX; 3];
    for _ in 0..ROUNDS {
        let t0 = Instant::now();
        for (k, v) in keys.iter().zip(&values) {
            t.put(k, v).expect("stores");
        }
        best[0] = best[0].min(t0.elapsed());

        let t0 = Instant::now();
        for (k, v) in keys.iter().zip(&values) {
            let got = t.get(std::slice::from_ref(k)).expect("reads");
            assert!(got.len() == 1 && got[0].as_deref() == Some(v.as_slice()));
        }
        best[1] = best[1].min(t0.elapsed());

        let t0 = Instant::now();
        for (ks, vs) in keys.chunks(BATCH).zip(values.chunks(BATCH)) {
            let got = t.get(ks).expect("reads");
            assert_eq!(got.len(), ks.len());
            assert!(got
                .iter()
                .zip(vs)
                .all(|(g, v)| g.as_deref() == Some(v.as_slice())));
        }
        best[2] = best[2].min(t0.elapsed());
    }

    let mib = f64::from(n) * TILE as f64 / (1024.0 * 1024.0);
    let per = |d: Duration| d.as_secs_f64() * 1e6 / f64::from(n);
    let rate = |d: Duration| mib / d.as_secs_f64();
    println!(
        "redis tier, {n} tiles of {} KiB over loopback, best of {ROUNDS}:",
        TILE / 1024
    );
    for (what, d) in [
        ("put (one SET per tile)", best[0]),
        ("get (one key per MGET)", best[1]),
        ("get (32 keys per MGET)", best[2]),
    ] {
        println!("  {what}: {:7.1} µs/tile {:7.1} MiB/s", per(d), rate(d));
    }
}

mod through_the_tier_io_thread {
    //! Two replicas' tier I/O threads over one Redis: what one writes the other finds, verified;
    //! a value that is not what the asker's tile must be is rejected, and Redis being down
    //! makes fetches come back empty (the prompt is recomputed), with the fault counted.

    use std::sync::atomic::Ordering::Relaxed;

    use engine::tier::io::FetchJob;
    use engine::tier::{FetchResult, TierIo, TierTile, TileMeta};
    use engine::SeqId;

    use super::*;

    const TS: usize = 4;

    fn meta(i: u32) -> TileMeta {
        TileMeta {
            key: key(1000 + i),
            parent: i.checked_sub(1).map(|p| u128::from(p) + 1),
            tokens: (0..TS as u32).map(|t| i * 100 + t).collect(),
        }
    }

    fn replica(url: &str) -> TierIo {
        let tier = RedisTier::open(url, None).expect("opens");
        TierIo::start(vec![Box::new(tier)], vec![None], TS).expect("starts the I/O thread")
    }

    fn fetch(io: &TierIo, blocks: Vec<TileMeta>) -> FetchResult {
        io.fetch(FetchJob {
            id: SeqId(7),
            first_block: 0,
            blocks: blocks.into_iter().map(|m| vec![m]).collect(),
        });
        let t0 = Instant::now();
        loop {
            if let Some(r) = io.try_result() {
                return r;
            }
            assert!(
                t0.elapsed() < Duration::from_secs(5),
                "no fetch result in 5 s"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    #[test]
    fn a_prefix_written_by_one_replica_is_loaded_by_another() {
        let server = RedisServer::start(&[]);
        let a = replica(&server.url(0));
        let b = replica(&server.url(0));
        for i in 0..3 {
            a.write(TierTile {
                meta: meta(i),
                bytes: value(i, TILE),
            });
        }
        // Writes are queued: wait until A has written all three.
        let t0 = Instant::now();
        let written = |io: &TierIo| io.stats().tiers[0].bytes_written.load(Relaxed);
        while written(&a) < 3 * TILE as u64 {
            assert!(
                t0.elapsed() < Duration::from_secs(5),
                "writes not done in 5 s"
            );
            std::thread::sleep(Duration::from_millis(1));
        }

        // Blocks 0..3 are there, block 3 is not: a run of three.
        let r = fetch(&b, (0..4).map(meta).collect());
        assert_eq!(r.first_block, 0);
        let got: Vec<Option<Vec<u8>>> = r.tiles.into_iter().map(|mut t| t.remove(0)).collect();
        assert_eq!(
            got,
            (0..3).map(|i| Some(value(i, TILE))).collect::<Vec<_>>()
        );
        let c = &b.stats().tiers[0];
        assert_eq!((c.lookups.load(Relaxed), c.hits.load(Relaxed)), (4, 3));

        // Block 1's key asked for with other tokens: rejected, so the run is block 0 alone.
        let mut wrong = meta(1);
        wrong.tokens[2] += 1;
        let r = fetch(&b, vec![meta(0), wrong, meta(2)]);
        assert_eq!(r.tiles.len(), 1);
        assert_eq!(c.rejected.load(Relaxed), 1);
        assert_eq!(c.errors.load(Relaxed), 0);
    }

    #[test]
    fn with_redis_down_fetches_come_back_empty_and_the_fault_is_counted() {
        let port = redis_server::free_port();
        let io = replica(&format!("redis://127.0.0.1:{port}/0"));
        io.write(TierTile {
            meta: meta(0),
            bytes: value(0, TILE),
        });
        let t0 = Instant::now();
        let r = fetch(&io, (0..2).map(meta).collect());
        assert!(r.tiles.is_empty());
        assert!(t0.elapsed() < Duration::from_secs(1), "{:?}", t0.elapsed());
        let c = &io.stats().tiers[0];
        assert!(c.errors.load(Relaxed) >= 1);
        assert_eq!(c.hits.load(Relaxed), 0);
    }
}
