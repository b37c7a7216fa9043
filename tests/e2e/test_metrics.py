"""/metrics parses with prometheus_client's parser and counts what was served."""

import urllib.request

from prometheus_client.parser import text_string_to_metric_families

from conftest import curl_json


def scrape(base_url):
    with urllib.request.urlopen(f"{base_url}/metrics", timeout=30) as r:
        assert r.headers["Content-Type"].startswith("text/plain")
        return {f.name: f for f in text_string_to_metric_families(r.read().decode())}


def value(families, name, **labels):
    for fam in families.values():
        for s in fam.samples:
            if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()):
                return s.value
    raise AssertionError(f"no sample {name} {labels}")


def test_metrics_parse_and_count_requests(base_url, api_key, model):
    before = scrape(base_url)
    status, _ = curl_json(
        f"{base_url}/v1/completions", api_key, {"model": model, "prompt": "Count", "max_tokens": 3, "ignore_eos": True}
    )
    assert status == 200
    curl_json(f"{base_url}/v1/completions", api_key, {"model": model, "prompt": "x", "n": 1000})
    after = scrape(base_url)

    assert value(after, "tessera_generation_tokens_total") >= value(before, "tessera_generation_tokens_total") + 3
    assert value(after, "tessera_request_errors_total", type="invalid_request") >= 1 + value(
        before, "tessera_request_errors_total", type="invalid_request"
    )
    assert value(after, "tessera_request_success_total", finished_reason="length") >= 1
    for name in ("tessera_num_requests_running", "tessera_num_requests_waiting", "tessera_kv_tiles_total",
                 "tessera_kv_tiles_used", "tessera_kv_tiles_cached", "tessera_num_preemptions_total",
                 "tessera_prefix_cache_queries_total", "tessera_prefix_cache_hits_total",
                 "tessera_prompt_tokens_total"):
        value(after, name)
    for hist in ("tessera_time_to_first_token_seconds", "tessera_inter_token_latency_seconds",
                 "tessera_e2e_request_latency_seconds", "tessera_request_queue_time_seconds",
                 "tessera_tokens_per_step"):
        assert after[hist].type == "histogram"
        assert value(after, hist + "_count") >= 1
        assert value(after, hist + "_bucket", le="+Inf") == value(after, hist + "_count")
    assert value(after, "tessera_kv_tiles_total") > 0
