"""KV events seen by a real ZeroMQ subscriber (pyzmq, libzmq) against `tessera serve
--kv-events-endpoint`, decoded with msgspec structs of vLLM's event shapes.

The test binds a SUB socket and the server connects to it (llm-d's central-indexer mode); the
server binds the replay (ROUTER) socket. A seeded workload of token-id prompts sharing long
prefixes runs four at a time on a pool small enough to evict. Two subscribers apply the
events to their own prefix index: one takes every batch as it comes, the other ignores a run
of batches and recovers them from the replay socket when it sees the gap. At the end both
equal the server's prefix index (`/debug/kv_index`) exactly, and every payload re-encodes to
the same bytes with msgspec, vLLM's encoder.
"""

import json
import random
import threading
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import msgspec
import pytest
import zmq

from conftest import free_port


# The shapes of vLLM's KV event structs (vllm/distributed/kv_events.py), strict: an unknown
# field, a missing one or a wrong type fails the decode.
class KVCacheEvent(msgspec.Struct, omit_defaults=True, gc=False, tag=True, forbid_unknown_fields=True):
    pass


class BlockStored(KVCacheEvent):
    block_hashes: list[int | bytes]
    parent_block_hash: int | bytes | None
    token_ids: list[int]
    block_size: int
    lora_id: int | None
    medium: str | None
    lora_name: str | None
    extra_keys: list[tuple | None] | None = None
    group_idx: int | None = None
    kv_cache_spec_kind: str | None = None
    kv_cache_spec_sliding_window: int | None = None


class BlockRemoved(KVCacheEvent):
    block_hashes: list[int | bytes]
    medium: str | None
    group_idx: int | None = None


class AllBlocksCleared(KVCacheEvent):
    pass


class KVEventBatch(msgspec.Struct, array_like=True, omit_defaults=True, gc=False):
    ts: float
    events: list[BlockStored | BlockRemoved | AllBlocksCleared]
    data_parallel_rank: int | None = None


DECODER = msgspec.msgpack.Decoder(KVEventBatch)
ENCODER = msgspec.msgpack.Encoder()
END_SEQ = -1


class Index:
    """A subscriber's prefix index: (group_idx, block hash) -> (parent hash, token ids)."""

    def __init__(self, replay_endpoint, ctx, drop=None):
        self.blocks = {}
        self.next_seq = 0
        self.stored = self.removed = self.replayed = self.requests = 0
        self.drop = drop  # a range of sequence numbers to ignore when they first arrive
        self.replay = ctx.socket(zmq.DEALER)
        self.replay.setsockopt(zmq.RCVTIMEO, 10_000)
        self.replay.connect(replay_endpoint)

    def apply(self, seq, payload):
        batch = DECODER.decode(payload)
        assert ENCODER.encode(batch) == payload, f"batch {seq} is not msgspec's encoding"
        assert batch.data_parallel_rank == 0
        for e in batch.events:
            if isinstance(e, BlockStored):
                assert len(e.block_hashes) == 1 and len(e.token_ids) == e.block_size
                assert e.extra_keys == [None]
                assert e.kv_cache_spec_kind == (
                    "full_attention" if e.kv_cache_spec_sliding_window is None else "sliding_window"
                )
                key = (e.group_idx, e.block_hashes[0])
                assert key not in self.blocks, f"batch {seq}: {key} stored twice"
                self.blocks[key] = (e.parent_block_hash, e.token_ids)
                self.stored += 1
            elif isinstance(e, BlockRemoved):
                key = (e.group_idx, e.block_hashes[0])
                assert key in self.blocks, f"batch {seq}: removal of {key}, never stored"
                del self.blocks[key]
                self.removed += 1
            else:
                self.blocks.clear()
        self.next_seq = seq + 1

    def receive(self, seq, payload):
        """A batch from the PUB socket: applied in order, after replaying any gap before it."""
        if self.drop is not None and seq in self.drop:
            return
        if seq < self.next_seq:
            return
        if seq > self.next_seq:
            self.recover(seq)
        self.apply(seq, payload)

    def recover(self, upto):
        """Asks the replay socket for every batch from `next_seq` on; applies those before
        `upto` (the batch that showed the gap is applied by the caller)."""
        self.replay.send_multipart([b"", self.next_seq.to_bytes(8, "big")])
        self.requests += 1
        while True:
            empty, seq_bytes, payload = self.replay.recv_multipart()
            assert empty == b""
            seq = int.from_bytes(seq_bytes, "big", signed=True)
            if seq == END_SEQ:
                break
            if self.next_seq <= seq < upto:
                assert seq == self.next_seq, f"replay skipped from {self.next_seq} to {seq}"
                self.apply(seq, payload)
                self.replayed += 1
        assert self.next_seq == upto, f"replay ended at {self.next_seq}, the gap ran to {upto}"


def get_json(url):
    with urllib.request.urlopen(url, timeout=60) as r:
        return json.loads(r.read())


def complete(base, prompt, max_tokens):
    body = json.dumps({"prompt": prompt, "max_tokens": max_tokens, "temperature": 0}).encode()
    req = urllib.request.Request(f"{base}/v1/completions", data=body, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=120) as r:
        return json.loads(r.read())


@pytest.fixture
def events_server(tmp_path):
    """A SUB socket bound on loopback, and a server publishing to it with a small pool."""
    from conftest import Server

    ctx = zmq.Context()
    sub = ctx.socket(zmq.SUB)
    sub.setsockopt(zmq.SUBSCRIBE, b"kv@")
    pub_port = free_port()
    sub.bind(f"tcp://127.0.0.1:{pub_port}")
    replay = f"tcp://127.0.0.1:{free_port()}"
    # 12 MiB: 256 tiles of 16 tokens over Gemma 3's six KV groups, about 680 tokens at once.
    server = Server(
        tmp_path,
        "--kv-events-endpoint", f"tcp://127.0.0.1:{pub_port}",
        "--kv-events-replay-endpoint", replay,
        "--kv-events-topic", "kv@tessera-e2e@gemma",
        "--debug-kv-index",
        kv_memory="12MiB",
    )
    try:
        yield server, ctx, sub, replay
    finally:
        server.stop()
        ctx.destroy(linger=0)


def test_subscribers_applying_the_events_end_with_the_servers_prefix_index(events_server):
    server, ctx, sub, replay = events_server
    live = Index(replay, ctx)
    lossy = Index(replay, ctx, drop=range(5, 25))
    stop = threading.Event()
    errors = []

    def listen():
        try:
            while not stop.is_set():
                if sub.poll(100):
                    topic, seq, payload = sub.recv_multipart()
                    assert topic == b"kv@tessera-e2e@gemma"
                    assert len(seq) == 8
                    seq = int.from_bytes(seq, "big")
                    live.receive(seq, payload)
                    lossy.receive(seq, payload)
        except Exception as e:  # reported by the test thread
            errors.append(e)

    listener = threading.Thread(target=listen)
    listener.start()
    rng = random.Random(20)
    bases = [[rng.randrange(1000, 30000) for _ in range(rng.randrange(60, 200))] for _ in range(6)]

    def one(i):
        r = random.Random(i)
        base = bases[r.randrange(len(bases))]
        prompt = base[: r.randrange(16, len(base) + 1)] + [r.randrange(1000, 30000) for _ in range(r.randrange(1, 40))]
        out = complete(server.url, prompt, r.randrange(1, 12))
        return out["usage"]["prompt_tokens_details"]["cached_tokens"]

    try:
        with ThreadPoolExecutor(4) as pool:
            cached = list(pool.map(one, range(80)))
        index = get_json(f"{server.url}/debug/kv_index")
        last = index["last_seq"]
        deadline = time.monotonic() + 30
        while min(live.next_seq, lossy.next_seq) <= last and time.monotonic() < deadline and not errors:
            time.sleep(0.05)
    finally:
        stop.set()
        listener.join()
    assert not errors, errors[0]
    print(f"batches {last + 1}, stored {live.stored}, removed {live.removed}, index {len(index['blocks'])} "
          f"blocks, replayed live {live.replayed} lossy {lossy.replayed}, prefix hits {sum(c > 0 for c in cached)}/80")
    assert live.next_seq == lossy.next_seq == last + 1, (live.next_seq, lossy.next_seq, last)
    assert index["block_size"] == 16
    want = {
        (b["group_idx"], b["block_hash"]): (b["parent_block_hash"], b["token_ids"]) for b in index["blocks"]
    }
    assert len(want) == len(index["blocks"])
    assert live.blocks == want
    assert lossy.blocks == want
    # Not vacuous: prefixes were shared and evicted, and the lossy subscriber replayed its gap.
    assert sum(c > 0 for c in cached) > 10
    assert live.removed > 100 and live.stored > live.removed
    assert {g for g, _ in want} == set(range(6))
    # Batches sent before the server's PUB socket had connected are replayed by both.
    assert lossy.replayed == 20 + live.replayed, (lossy.replayed, live.replayed)
    metrics = server.metrics()
    assert "tessera_kv_events_dropped_batches_total 0.0" in metrics
    assert f"tessera_kv_events_replays_total {float(live.requests + lossy.requests)}" in metrics


def test_a_subscriber_that_binds_after_the_server_started_gets_every_batch(tmp_path):
    """The server keeps trying to connect (as libzmq does); what it published before the
    subscriber was up comes back from the replay socket."""
    from conftest import Server

    pub_port = free_port()
    replay = f"tcp://127.0.0.1:{free_port()}"
    server = Server(
        tmp_path,
        "--kv-events-endpoint", f"tcp://127.0.0.1:{pub_port}",
        "--kv-events-replay-endpoint", replay,
        "--debug-kv-index",
    )
    ctx = zmq.Context()
    try:
        complete(server.url, list(range(1000, 1100)), 2)  # published before anyone listens
        sub = ctx.socket(zmq.SUB)
        sub.setsockopt(zmq.SUBSCRIBE, b"")
        sub.bind(f"tcp://127.0.0.1:{pub_port}")
        index = Index(replay, ctx)
        deadline = time.monotonic() + 60
        first, i = None, 0
        while first is None and time.monotonic() < deadline:
            i += 1  # new tokens each time, so each request stores tiles and sends a batch
            complete(server.url, list(range(2000 + 50 * i, 2040 + 50 * i)), 2)
            if sub.poll(2000):
                _, seq, payload = sub.recv_multipart()
                first = int.from_bytes(seq, "big")
        assert first is not None, "the server never connected to the subscriber"
        assert first > 0
        index.receive(first, payload)
        want = get_json(f"{server.url}/debug/kv_index")
        while index.next_seq <= want["last_seq"] and sub.poll(5000):
            _, seq, payload = sub.recv_multipart()
            index.receive(int.from_bytes(seq, "big"), payload)
        assert index.replayed == first
        assert index.blocks == {
            (b["group_idx"], b["block_hash"]): (b["parent_block_hash"], b["token_ids"]) for b in want["blocks"]
        }
        # The tiles of the request made before the subscriber was up came by replay.
        assert any(set(tokens) <= set(range(1000, 1100)) for _, tokens in index.blocks.values())
    finally:
        server.stop()
        ctx.destroy(linger=0)
