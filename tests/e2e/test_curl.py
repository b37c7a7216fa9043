"""curl against the server: the requests a README would show."""

from conftest import curl, curl_json


def test_curl_completion(base_url, api_key, model):
    status, body = curl_json(
        f"{base_url}/v1/completions",
        api_key,
        {"model": model, "prompt": "Once upon a time", "max_tokens": 6, "temperature": 0},
    )
    assert status == 200, body
    assert body["object"] == "text_completion"
    assert body["usage"]["completion_tokens"] <= 6
    assert "cached_tokens" in body["usage"]["prompt_tokens_details"]


def test_curl_streamed_chat_ends_with_done(base_url, api_key, model):
    import json

    status, text = curl(
        "-N",
        "-X",
        "POST",
        f"{base_url}/v1/chat/completions",
        "-H",
        "Content-Type: application/json",
        "-H",
        f"Authorization: Bearer {api_key}",
        "-d",
        json.dumps({"model": model, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4, "stream": True}),
    )
    assert status == 200
    data = [line[len("data: "):] for line in text.splitlines() if line.startswith("data: ")]
    assert data[-1] == "[DONE]"
    assert all(json.loads(d)["object"] == "chat.completion.chunk" for d in data[:-1])


def test_curl_tokenize_and_detokenize(base_url, api_key, model):
    status, t = curl_json(f"{base_url}/tokenize", api_key, {"model": model, "prompt": "Hello world"})
    assert status == 200, t
    assert t["count"] == len(t["tokens"]) and t["max_model_len"] > 0
    status, d = curl_json(f"{base_url}/detokenize", api_key, {"model": model, "tokens": t["tokens"]})
    assert status == 200, d
    assert d["prompt"].endswith("Hello world")


def test_curl_errors_have_the_openai_shape(base_url, api_key, model):
    status, body = curl_json(f"{base_url}/v1/completions", api_key, {"model": model, "prompt": "x", "top_p": 2})
    assert status == 400
    assert set(body["error"]) == {"message", "type", "param", "code"}
    assert body["error"]["param"] == "top_p"
    status, _ = curl("-X", "POST", f"{base_url}/v1/completions", "-d", "{}")
    assert status == 401


def test_health_needs_no_key(base_url):
    status, _ = curl(f"{base_url}/health")
    assert status == 200
