"""Traces and structured logs of `tessera serve`, against a real OTLP/HTTP receiver.

A server started with --otlp-traces-endpoint and --log-format json: a request sent with a W3C
traceparent yields an exported span in the caller's trace, child of the caller's span, with the
GenAI attributes and timings; the JSON log has one line per request with the same facts. A
server pointed at a collector that is not there serves the same answers and counts the failed
exports.
"""

import json
import time

import pytest

from conftest import Server, free_port
from otlp_receiver import Receiver

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT = "00f067aa0ba902b7"
STREAM_TRACE_ID = "0af7651916cd43dd8448eb211c80319c"

CHAT = {
    "messages": [{"role": "user", "content": "Name three colours."}],
    "max_tokens": 12,
    "temperature": 0.5,
    "top_p": 0.9,
    "seed": 7,
    "ignore_eos": True,
}


@pytest.fixture(scope="module")
def traced(tmp_path_factory):
    receiver = Receiver().start()
    server = Server(
        tmp_path_factory.mktemp("traced"),
        "--otlp-traces-endpoint",
        receiver.url,
        "--log-format",
        "json",
        env={"OTEL_BSP_SCHEDULE_DELAY": "100"},
    )
    yield server, receiver
    server.stop()
    receiver.stop()


def wait_for_spans(receiver, trace_id, timeout=20):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        spans = receiver.find(trace_id)
        if spans:
            return spans
        time.sleep(0.1)
    raise AssertionError(f"no span of trace {trace_id}; received {receiver.spans}")


def test_a_request_with_a_traceparent_yields_a_span_in_that_trace(traced):
    server, receiver = traced
    status, body = server.post("/v1/chat/completions", CHAT, {"traceparent": f"00-{TRACE_ID}-{PARENT}-01"})
    assert status == 200, body
    spans = wait_for_spans(receiver, TRACE_ID)
    assert len(spans) == 1, spans
    span = spans[0]
    a = span["attributes"]
    assert span["parent_span_id"] == PARENT
    assert span["kind"] == 2, "SPAN_KIND_SERVER"
    assert span["name"] == f"chat {body['model']}"
    assert span["resource"]["service.name"] == "tessera"
    assert a["gen_ai.operation.name"] == "chat"
    assert a["gen_ai.request.model"] == body["model"]
    assert a["gen_ai.response.id"] == body["id"]
    assert a["gen_ai.request.max_tokens"] == 12
    assert a["gen_ai.request.temperature"] == 0.5
    assert a["gen_ai.request.top_p"] == 0.9
    assert a["gen_ai.request.seed"] == 7
    assert a["gen_ai.usage.input_tokens"] == body["usage"]["prompt_tokens"]
    assert a["gen_ai.usage.output_tokens"] == body["usage"]["completion_tokens"] == 12
    assert a["gen_ai.usage.cache_read.input_tokens"] == body["usage"]["prompt_tokens_details"]["cached_tokens"]
    assert a["gen_ai.response.finish_reasons"] == ["length"]
    assert a["tessera.preemptions"] == 0
    assert a["http.response.status_code"] == 200
    queue = a["gen_ai.latency.time_in_queue"]
    ttft = a["gen_ai.latency.time_to_first_token"]
    prefill = a["gen_ai.latency.time_in_model_prefill"]
    decode = a["gen_ai.latency.time_in_model_decode"]
    e2e = a["gen_ai.latency.e2e"]
    assert 0 <= queue <= ttft <= e2e, a
    assert prefill > 0 and decode > 0, a
    assert abs(queue + prefill - ttft) < 1e-6, a
    duration = (span["end_ns"] - span["start_ns"]) / 1e9
    assert e2e <= duration + 1e-3 and ttft + decode <= duration + 1e-3, (a, duration)


def test_a_streamed_request_is_traced_when_its_stream_ends(traced):
    server, receiver = traced
    payload = {"prompt": "The sea is", "max_tokens": 6, "n": 2, "stream": True, "ignore_eos": True}
    status, text = server.post("/v1/completions", payload, {"traceparent": f"00-{STREAM_TRACE_ID}-{PARENT}-01"})
    assert status == 200 and text.rstrip().endswith("data: [DONE]"), text
    (span,) = wait_for_spans(receiver, STREAM_TRACE_ID)
    a = span["attributes"]
    assert a["gen_ai.operation.name"] == "text_completion"
    assert a["gen_ai.request.stream"] is True
    assert a["gen_ai.request.choice.count"] == 2
    assert a["gen_ai.usage.output_tokens"] == 12
    assert a["gen_ai.response.finish_reasons"] == ["length", "length"]


def test_an_error_is_a_span_with_error_status(traced):
    server, receiver = traced
    trace_id = "5bf92f3577b34da6a3ce929d0e0e4737"
    status, body = server.post("/v1/completions", {"prompt": "x", "temperature": -3},
                               {"traceparent": f"00-{trace_id}-{PARENT}-01"})
    assert status == 400, body
    (span,) = wait_for_spans(receiver, trace_id)
    assert span["status_code"] == 2, "STATUS_CODE_ERROR"
    assert span["attributes"]["error.type"] == "invalid_request"
    assert span["attributes"]["http.response.status_code"] == 400


def test_json_logs_have_one_parseable_line_per_request(traced):
    server, receiver = traced
    marker = "6bf92f3577b34da6a3ce929d0e0e4738"
    status, body = server.post("/v1/chat/completions", CHAT, {"traceparent": f"00-{marker}-{PARENT}-01"})
    assert status == 200
    wait_for_spans(receiver, marker)  # the span closes with the request, after its log line
    lines = [json.loads(line) for line in server.log_path.read_text().splitlines()]
    assert all(line["level"] in ("TRACE", "DEBUG", "INFO", "WARN", "ERROR") for line in lines)
    assert any(line["target"] == "tessera::serve" and "ready" in line["message"] for line in lines)
    mine = [line for line in lines if line.get("trace_id") == marker]
    assert len(mine) == 1, mine
    line = mine[0]
    assert line["target"] == "tessera::request"
    assert line["id"] == body["id"]
    assert line["model"] == body["model"]
    assert line["status"] == 200 and line["outcome"] == "ok"
    assert line["prompt_tokens"] == body["usage"]["prompt_tokens"]
    assert line["cached_tokens"] == body["usage"]["prompt_tokens_details"]["cached_tokens"]
    assert line["output_tokens"] == 12
    assert line["finish_reason"] == "length"
    assert 0 <= line["queue_s"] <= line["ttft_s"] <= line["e2e_s"]
    refused = [line for line in lines if line.get("status") == 400]
    assert refused and refused[0]["outcome"] == "error" and refused[0]["error"] == "invalid_request"


def test_a_dead_collector_leaves_requests_unaffected(tmp_path, base_url, api_key, client, model):
    dead = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    server = Server(tmp_path, "--otlp-traces-endpoint", dead, env={"OTEL_BSP_SCHEDULE_DELAY": "100"})
    try:
        greedy = {"prompt": "Once upon a time", "max_tokens": 16, "temperature": 0, "ignore_eos": True}
        reference = client.completions.create(model=model, **{k: v for k, v in greedy.items() if k != "ignore_eos"},
                                              extra_body={"ignore_eos": True})
        for _ in range(3):
            t0 = time.monotonic()
            status, body = server.post("/v1/completions", greedy, {"traceparent": f"00-{TRACE_ID}-{PARENT}-01"})
            assert status == 200, body
            assert body["choices"][0]["text"] == reference.choices[0].text
            assert time.monotonic() - t0 < 10, "export never waits on the request path"
        deadline = time.monotonic() + 20
        failed = 0.0
        while time.monotonic() < deadline and failed < 3:
            failed = next(float(line.split()[-1]) for line in server.metrics().splitlines()
                          if line.startswith("tessera_otlp_spans_failed_total "))
            time.sleep(0.2)
        assert failed >= 3, "each failed span is counted"
    finally:
        assert server.stop() == 0
