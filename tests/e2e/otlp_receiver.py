"""A minimal OTLP/HTTP trace receiver for the tests: decodes each POSTed
ExportTraceServiceRequest (protobuf) with opentelemetry-proto and keeps its spans.

Run in-process (`Receiver().start()`) or as a script (`python otlp_receiver.py PORT`, which
prints one JSON line per span to stdout, for the benchmark's collector).
"""

import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)


def any_value(v):
    """A Python value for an OTLP AnyValue."""
    kind = v.WhichOneof("value")
    if kind == "array_value":
        return [any_value(x) for x in v.array_value.values]
    if kind is None:
        return None
    return getattr(v, kind)


def decode(body):
    """The spans of an ExportTraceServiceRequest as dicts."""
    req = ExportTraceServiceRequest()
    req.ParseFromString(body)
    spans = []
    for rs in req.resource_spans:
        resource = {a.key: any_value(a.value) for a in rs.resource.attributes}
        for ss in rs.scope_spans:
            for s in ss.spans:
                spans.append(
                    {
                        "trace_id": s.trace_id.hex(),
                        "span_id": s.span_id.hex(),
                        "parent_span_id": s.parent_span_id.hex(),
                        "name": s.name,
                        "kind": s.kind,
                        "start_ns": s.start_time_unix_nano,
                        "end_ns": s.end_time_unix_nano,
                        "status_code": s.status.code,
                        "attributes": {a.key: any_value(a.value) for a in s.attributes},
                        "resource": resource,
                    }
                )
    return spans


class Receiver:
    """Collects the spans POSTed to /v1/traces on a free local port."""

    def __init__(self, port=0, on_span=None):
        self.spans = []
        self.requests = 0
        self.lock = threading.Lock()
        self.on_span = on_span
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                if self.path != "/v1/traces" or self.headers.get("Content-Type") != "application/x-protobuf":
                    self.send_response(404)
                    self.end_headers()
                    return
                spans = decode(body)
                with receiver.lock:
                    receiver.requests += 1
                    receiver.spans.extend(spans)
                if receiver.on_span:
                    for s in spans:
                        receiver.on_span(s)
                out = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(out)))
                self.end_headers()
                self.wfile.write(out)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.port = self.server.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"

    def start(self):
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def stop(self):
        self.server.shutdown()
        self.server.server_close()

    def find(self, trace_id):
        with self.lock:
            return [s for s in self.spans if s["trace_id"] == trace_id]


if __name__ == "__main__":
    r = Receiver(int(sys.argv[1]), on_span=lambda s: print(json.dumps(s), flush=True))
    print(f"listening on {r.url}", file=sys.stderr, flush=True)
    r.server.serve_forever()
