"""deploy/grafana/tessera.json: valid JSON, a dashboard Grafana can import as is, and every
metric its queries use is exported by the running server."""

import json
import re
import urllib.request
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

DASHBOARD = Path(__file__).resolve().parents[2] / "deploy" / "grafana" / "tessera.json"


def exprs(panels):
    for p in panels:
        yield from (t["expr"] for t in p.get("targets", []))
        yield from exprs(p.get("panels", []))


def test_the_dashboard_parses_and_uses_only_exported_metrics(base_url):
    dash = json.loads(DASHBOARD.read_text())
    assert dash["title"] and dash["uid"] and dash["panels"]
    ids = [p["id"] for p in dash["panels"]]
    assert len(ids) == len(set(ids)), "panel ids are unique"
    variables = {v["name"] for v in dash["templating"]["list"]}
    assert {"datasource", "instance"} <= variables
    for p in dash["panels"]:
        if p["type"] != "row":
            assert p["datasource"]["uid"] == "${datasource}", p["title"]
            assert p["targets"], p["title"]

    with urllib.request.urlopen(f"{base_url}/metrics", timeout=30) as r:
        text = r.read().decode()
    exported = {s.name for f in text_string_to_metric_families(text) for s in f.samples}
    used = set()
    for e in list(exprs(dash["panels"])) + [v["definition"] for v in dash["templating"]["list"] if "definition" in v]:
        used |= set(re.findall(r"\btessera_[a-z0-9_]+", e))
    assert len(used) >= 25, sorted(used)
    missing = sorted(used - exported)
    assert not missing, f"the dashboard queries metrics the server does not export: {missing}"
    # The dashboard covers what the issue asks for.
    for needed in ("tessera_generation_tokens_total", "tessera_time_to_first_token_seconds_bucket",
                   "tessera_inter_token_latency_seconds_bucket", "tessera_num_requests_waiting",
                   "tessera_kv_cache_usage_perc", "tessera_prefix_cache_hits_total", "tessera_num_preemptions_total",
                   "tessera_request_errors_total", "tessera_spec_decode_num_accepted_tokens_total"):
        assert needed in used, needed
