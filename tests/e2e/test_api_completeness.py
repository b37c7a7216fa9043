"""What clients written for OpenAI, vLLM or llama-server expect beyond the basic routes (issue
23): models by id, a bare base URL, served names, 404 for an unknown model, the Responses API,
CORS, and the default max_tokens bounded by the KV pool."""

import json

import openai
import pytest

from conftest import ALIASES, ALLOWED_ORIGIN, curl

PROMPT = "The capital of France is"


def test_models_retrieve(client, model):
    m = client.models.retrieve(model)
    assert m.id == model
    assert m.model_extra["max_model_len"] > 0


def test_a_bare_base_url_works(base_url, api_key, model):
    bare = openai.OpenAI(base_url=base_url, api_key=api_key or "none", max_retries=0)
    assert [m.id for m in bare.models.list().data] == [model]
    r = bare.chat.completions.create(
        model=model, messages=[{"role": "user", "content": "Hi"}], max_tokens=3
    )
    assert r.choices[0].message.role == "assistant"
    r = bare.responses.create(model=model, input="Hi", max_output_tokens=3)
    assert r.object == "response"


def test_an_unknown_model_is_not_found(client, model):
    with pytest.raises(openai.NotFoundError) as e:
        client.completions.create(model="no-such-model", prompt=PROMPT, max_tokens=2)
    assert e.value.code == "model_not_found"
    with pytest.raises(openai.NotFoundError):
        client.chat.completions.create(model="no-such-model", messages=[{"role": "user", "content": "x"}])
    with pytest.raises(openai.NotFoundError):
        client.models.retrieve("no-such-model")
    with pytest.raises(openai.NotFoundError):
        client.responses.create(model="no-such-model", input="x")


def test_responses_create(client, model):
    r = client.responses.create(model=model, input=PROMPT, max_output_tokens=8, temperature=0)
    assert r.object == "response" and r.id.startswith("resp_")
    assert r.model == model
    assert r.status in ("completed", "incomplete")
    assert isinstance(r.output_text, str) and r.output_text
    assert r.usage.output_tokens <= 8
    assert r.usage.total_tokens == r.usage.input_tokens + r.usage.output_tokens


def test_responses_with_instructions(client, model):
    plain = client.responses.create(model=model, input=PROMPT, max_output_tokens=4, temperature=0)
    r = client.responses.create(
        model=model, input=PROMPT, instructions="Answer in one word.", max_output_tokens=4, temperature=0
    )
    assert r.instructions == "Answer in one word."
    assert r.usage.input_tokens > plain.usage.input_tokens


def test_responses_streamed_events_reassemble_to_the_whole_text(client, model):
    kwargs = dict(model=model, input="Once upon a time", max_output_tokens=12, temperature=0)
    whole = client.responses.create(**kwargs)
    events = list(client.responses.create(stream=True, **kwargs))
    types = [e.type for e in events]
    assert types[0] == "response.created"
    assert types[-1] in ("response.completed", "response.incomplete")
    assert [e.sequence_number for e in events] == list(range(len(events)))
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert text == whole.output_text
    done = next(e for e in events if e.type == "response.output_text.done")
    assert done.text == whole.output_text
    assert events[-1].response.output_text == whole.output_text
    assert events[-1].response.status == whole.status


def test_responses_chained_with_previous_response_id(client, model):
    first = client.responses.create(model=model, input="My name is Ada.", max_output_tokens=6, temperature=0)
    chained = client.responses.create(
        model=model, input="What is my name?", previous_response_id=first.id, max_output_tokens=6, temperature=0
    )
    assert chained.previous_response_id == first.id
    explicit = client.responses.create(
        model=model,
        input=[
            {"role": "user", "content": "My name is Ada."},
            {"role": "assistant", "content": first.output_text},
            {"role": "user", "content": "What is my name?"},
        ],
        max_output_tokens=6,
        temperature=0,
    )
    assert chained.usage.input_tokens == explicit.usage.input_tokens
    assert chained.output_text == explicit.output_text


def test_responses_retrieve_and_delete(client, model):
    r = client.responses.create(model=model, input="Hi", max_output_tokens=3)
    got = client.responses.retrieve(r.id)
    assert got.id == r.id and got.output_text == r.output_text
    client.responses.delete(r.id)
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(r.id)
    unstored = client.responses.create(model=model, input="Hi", max_output_tokens=1, store=False)
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(unstored.id)
    with pytest.raises(openai.BadRequestError):
        client.responses.create(model=model, input="x", previous_response_id=unstored.id)


def test_unsupported_fields_are_refused_by_name(client, model):
    tool = {"type": "function", "name": "f", "parameters": {"type": "object", "properties": {}}}
    with pytest.raises(openai.BadRequestError) as e:
        client.responses.create(model=model, input="x", tools=[tool])
    assert e.value.body["param"] == "tools"
    # text.format is honoured (its schema must compile); other text settings are not.
    with pytest.raises(openai.BadRequestError) as e:
        client.responses.create(model=model, input="x", text={"verbosity": "low"})
    assert e.value.body["param"] == "text"
    schema = {"format": {"type": "json_schema", "name": "x", "schema": {"type": "strnig"}}}
    with pytest.raises(openai.BadRequestError) as e:
        client.responses.create(model=model, input="x", text=schema)
    assert e.value.body["param"] == "text.format"
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(
            model=model,
            messages=[{"role": "user", "content": "x"}],
            response_format={"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "strnig"}}},
        )
    assert e.value.body["param"] == "response_format"
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(
            model=model, messages=[{"role": "user", "content": "x"}], extra_body={"guided_regex": "a("}
        )
    assert e.value.body["param"] == "guided_regex"
    r = client.chat.completions.create(
        model=model, messages=[{"role": "user", "content": "x"}], max_tokens=1, user="u", metadata={"k": "v"}
    )
    assert r.choices[0].message.role == "assistant"


def small_client(small_server):
    base, key = small_server
    return openai.OpenAI(base_url=f"{base}/v1", api_key=key, max_retries=0, timeout=900)


def test_served_model_names(small_server):
    client = small_client(small_server)
    assert [m.id for m in client.models.list().data] == ALIASES
    r = client.chat.completions.create(
        model=ALIASES[1], messages=[{"role": "user", "content": "Hi"}], max_tokens=2
    )
    assert r.model == ALIASES[0]
    assert client.models.retrieve(ALIASES[1]).id == ALIASES[1]


def headers_of(text):
    """Lower-cased response headers of `curl -i` output (the last header block)."""
    head = text.replace("\r\n", "\n").split("\n\n")[0]
    out = {}
    for line in head.split("\n")[1:]:
        name, _, value = line.partition(":")
        out[name.strip().lower()] = value.strip()
    return out


def test_cors_preflight_and_requests(small_server):
    base, key = small_server
    url = f"{base}/v1/chat/completions"

    def preflight(origin):
        return curl("-i", "-X", "OPTIONS", url, "-H", f"Origin: {origin}",
                    "-H", "Access-Control-Request-Method: POST",
                    "-H", "Access-Control-Request-Headers: authorization, content-type")

    # A preflight carries no key and is answered anyway.
    status, text = preflight(ALLOWED_ORIGIN)
    assert status in (200, 204), text
    h = headers_of(text)
    assert h["access-control-allow-origin"] == ALLOWED_ORIGIN
    assert "authorization" in h["access-control-allow-headers"]
    assert "POST" in h["access-control-allow-methods"]
    status, text = preflight("http://refused.example")
    assert "access-control-allow-origin" not in headers_of(text), text

    def actual(origin):
        body = json.dumps({"model": ALIASES[0], "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2})
        return curl("-i", "-X", "POST", url, "-H", f"Origin: {origin}", "-H", "Content-Type: application/json",
                    "-H", f"Authorization: Bearer {key}", "-d", body)

    status, text = actual(ALLOWED_ORIGIN)
    assert status == 200, text
    assert headers_of(text)["access-control-allow-origin"] == ALLOWED_ORIGIN
    status, text = actual("http://refused.example")
    assert "access-control-allow-origin" not in headers_of(text), text


def test_no_cors_headers_without_allowed_origins(base_url, api_key):
    status, text = curl("-i", f"{base_url}/v1/models", "-H", f"Origin: {ALLOWED_ORIGIN}",
                        "-H", f"Authorization: Bearer {api_key}")
    assert status == 200
    assert "access-control-allow-origin" not in headers_of(text), text


def test_chat_without_max_tokens_stops_at_the_pool_limit(small_server):
    """On a 64 MiB pool the server's max_model_len is below the model's 32k context; a chat
    without max_tokens must run (not be refused for the default) and stop there."""
    base, key = small_server
    client = small_client(small_server)
    limit = client.models.retrieve(ALIASES[0]).model_extra["max_model_len"]
    assert 0 < limit < 32768

    def tokens(n_words):
        msgs = [{"role": "user", "content": " ".join(f"w{i}" for i in range(n_words))}]
        status, body = curl("-X", "POST", f"{base}/tokenize", "-H", "Content-Type: application/json",
                            "-H", f"Authorization: Bearer {key}", "-d", json.dumps({"messages": msgs}))
        assert status == 200, body
        return msgs, json.loads(body)["count"]

    # The longest prompt that leaves 8 to 64 tokens to generate (a long prompt keeps the
    # generated part, the slow one on a CPU, short).
    lo, hi = 1, limit
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if tokens(mid)[1] <= limit - 8:
            lo = mid
        else:
            hi = mid - 1
    msgs, n_prompt = tokens(lo)
    assert limit - 64 <= n_prompt <= limit - 8, (n_prompt, limit)
    r = client.chat.completions.create(
        model=ALIASES[0], messages=msgs, temperature=0, extra_body={"ignore_eos": True}
    )
    assert r.choices[0].finish_reason == "length"
    assert r.usage.prompt_tokens == n_prompt
    assert r.usage.total_tokens == limit
    # Asking for more than fits is the client's choice and is refused up front.
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(
            model=ALIASES[0], messages=msgs, max_tokens=limit - n_prompt + 1
        )
    assert e.value.code == "context_length_exceeded"
