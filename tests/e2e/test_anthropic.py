"""Anthropic's Messages API with the official `anthropic` client.

The shared server (the default model, started by run.sh with an API key) answers the text
requests: the client sends its key as `x-api-key`, so every test here also checks that header.
The tools round trip (tool_use, then a tool_result, then a text answer) runs on
Qwen2.5-Coder-1.5B-Instruct, as in test_tools.py (the 0.5B model calls the tool again after
every result). Everything is greedy (temperature 0), so replies are reproducible; the 2.x client
has no sampling arguments (Anthropic's newer models take none), so `temperature` goes in
`extra_body`, as the wire field it is.
"""

import json
import urllib.error
import urllib.request

import anthropic
import pytest

from conftest import Server
from test_tools import QWEN_15B, model_path

ASK = [{"role": "user", "content": "Write one sentence about the sea."}]
# Long enough to fill whole KV tiles, which the prefix cache keeps.
LONG_SYSTEM = "You are a helpful assistant who writes short, plain sentences. " * 12
WEATHER = {
    "name": "get_weather",
    "description": "Get the current weather in a given city",
    "input_schema": {
        "type": "object",
        "properties": {"city": {"type": "string", "description": "The city name"}},
        "required": ["city"],
    },
}
ASK_PARIS = [{"role": "user", "content": "What is the weather like in Paris today?"}]
GREEDY = {"temperature": 0}


@pytest.fixture(scope="module")
def claude(base_url, api_key):
    return anthropic.Anthropic(base_url=base_url, api_key=api_key or "none", max_retries=0, timeout=600)


def create(claude, model, **kw):
    args = {"model": model, "max_tokens": 24, "extra_body": GREEDY, "messages": ASK, **kw}
    return claude.messages.create(**args)


def post(base_url, path, payload, headers):
    req = urllib.request.Request(
        f"{base_url}{path}", data=json.dumps(payload).encode(),
        headers={"Content-Type": "application/json", "anthropic-version": "2023-06-01", **headers},
    )
    try:
        with urllib.request.urlopen(req, timeout=120) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def text_of(message):
    return "".join(b.text for b in message.content if b.type == "text")


def test_create_gives_a_text_message_with_its_usage(claude, model):
    m = create(claude, model, system=LONG_SYSTEM)
    assert m.type == "message" and m.role == "assistant" and m.model == model
    assert m.id.startswith("msg_")
    assert [b.type for b in m.content] == ["text"] and m.content[0].text.strip()
    assert m.stop_reason in ("end_turn", "max_tokens") and m.stop_sequence is None
    assert 0 < m.usage.output_tokens <= 24
    counted = claude.messages.count_tokens(model=model, messages=ASK, system=LONG_SYSTEM).input_tokens
    assert m.usage.input_tokens + m.usage.cache_read_input_tokens == counted
    assert m.usage.cache_creation_input_tokens == 0
    again = create(claude, model, system=LONG_SYSTEM)
    assert text_of(again) == text_of(m)
    # The same prompt again: its full tiles come from the prefix cache.
    assert again.usage.cache_read_input_tokens > 0
    assert again.usage.input_tokens + again.usage.cache_read_input_tokens == counted


def test_the_stream_helpers_give_the_whole_reply(claude, model):
    whole = create(claude, model, system="You are terse.")
    with claude.messages.stream(model=model, max_tokens=24, extra_body=GREEDY, messages=ASK,
                                system=[{"type": "text", "text": "You are terse."}]) as s:
        streamed = "".join(s.text_stream)
        final = s.get_final_message()
    assert streamed == text_of(whole) == text_of(final)
    assert final.stop_reason == whole.stop_reason
    assert final.usage.output_tokens == whole.usage.output_tokens
    assert final.usage.input_tokens + final.usage.cache_read_input_tokens == \
        whole.usage.input_tokens + whole.usage.cache_read_input_tokens


def test_the_event_sequence_is_anthropic_s(base_url, api_key, model):
    # Raw, as the client hides `ping`: each frame is `event: <type>` and `data: {"type": <type>, ...}`.
    payload = {"model": model, "max_tokens": 24, "temperature": 0, "messages": ASK, "stream": True}
    req = urllib.request.Request(
        f"{base_url}/v1/messages", data=json.dumps(payload).encode(),
        headers={"Content-Type": "application/json", "x-api-key": api_key, "anthropic-version": "2023-06-01"},
    )
    with urllib.request.urlopen(req, timeout=120) as r:
        frames = [f for f in r.read().decode().split("\n\n") if f.strip() and not f.startswith(":")]
    events = []
    for f in frames:
        lines = dict(line.split(": ", 1) for line in f.splitlines())
        data = json.loads(lines["data"])
        assert data["type"] == lines["event"], f
        events.append(data)
    kinds = [e["type"] for e in events]
    assert kinds[:3] == ["message_start", "content_block_start", "ping"], kinds
    assert kinds[-3:] == ["content_block_stop", "message_delta", "message_stop"], kinds
    assert set(kinds[3:-3]) == {"content_block_delta"}, kinds
    assert events[0]["message"]["content"] == [] and events[0]["message"]["stop_reason"] is None
    assert all(e["index"] == 0 and e["delta"]["type"] == "text_delta" for e in events[3:-3])
    assert events[-2]["delta"]["stop_reason"] in ("end_turn", "max_tokens")
    text = "".join(e["delta"]["text"] for e in events[3:-3])
    assert text == text_of(create(anthropic.Anthropic(base_url=base_url, api_key=api_key or "none"), model))


def test_max_tokens_ends_with_stop_reason_max_tokens(claude, model):
    m = create(claude, model, max_tokens=3)
    assert m.stop_reason == "max_tokens" and m.usage.output_tokens == 3


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_a_stop_sequence_ends_the_reply_and_is_named(claude, model, stream):
    free = text_of(create(claude, model))
    middle = len(free) // 2
    stop = free[middle:middle + 3]
    assert stop.strip(), free
    before = free[: free.find(stop)]
    if stream:
        with claude.messages.stream(model=model, max_tokens=24, extra_body=GREEDY, messages=ASK,
                                    stop_sequences=[stop, "never-written"]) as s:
            m = s.get_final_message()
    else:
        m = create(claude, model, stop_sequences=[stop, "never-written"])
    assert m.stop_reason == "stop_sequence", m
    assert m.stop_sequence == stop
    assert text_of(m) == before


def test_count_tokens_counts_the_rendered_prompt(claude, model):
    bare = claude.messages.count_tokens(model=model, messages=ASK).input_tokens
    with_system = claude.messages.count_tokens(model=model, messages=ASK, system="You are terse.").input_tokens
    assert 0 < bare < with_system


def test_errors_have_anthropic_s_shape(claude, model, base_url, api_key):
    with pytest.raises(anthropic.BadRequestError) as e:
        create(claude, model, extra_body={"top_p": 2})
    assert e.value.body["type"] == "error"
    assert e.value.body["error"]["type"] == "invalid_request_error"
    assert "top_p" in e.value.body["error"]["message"]
    with pytest.raises(anthropic.BadRequestError) as e:
        create(claude, model, thinking={"type": "enabled", "budget_tokens": 1024})
    assert "thinking" in e.value.body["error"]["message"]
    with pytest.raises(anthropic.NotFoundError) as e:
        create(claude, "no-such-model")
    assert e.value.body["error"]["type"] == "not_found_error"
    # max_tokens is required (the client will not send a request without it).
    status, body = post(base_url, "/v1/messages", {"model": model, "messages": ASK}, {"x-api-key": api_key})
    assert status == 400, body
    assert body["type"] == "error" and body["error"]["type"] == "invalid_request_error"
    assert "max_tokens" in body["error"]["message"]


def test_the_key_is_checked_in_either_header(base_url, api_key, model):
    if not api_key:
        pytest.skip("the shared server has no key")
    wrong = anthropic.Anthropic(base_url=base_url, api_key="wrong", max_retries=0)
    with pytest.raises(anthropic.AuthenticationError) as e:
        wrong.messages.create(model=model, max_tokens=2, messages=ASK)
    assert e.value.body["error"]["type"] == "authentication_error"
    payload = {"model": model, "max_tokens": 2, "messages": ASK}
    status, _ = post(base_url, "/v1/messages", payload, {"Authorization": f"Bearer {api_key}"})
    assert status == 200
    # And x-api-key on the OpenAI routes too.
    status, body = post(base_url, "/v1/chat/completions", payload, {"x-api-key": api_key})
    assert status == 200, body
    status, body = post(base_url, "/v1/chat/completions", payload, {"x-api-key": "wrong"})
    assert status == 401 and body["error"]["type"] == "authentication_error"


class Qwen:
    """The 1.5B model's server: its Anthropic client and its model id."""

    def __init__(self, server):
        with urllib.request.urlopen(f"{server.url}/v1/models", timeout=30) as r:
            self.model = json.loads(r.read())["data"][0]["id"]
        self.client = anthropic.Anthropic(base_url=server.url, api_key="none", max_retries=0, timeout=600)


@pytest.fixture(scope="module")
def qwen15(tmp_path_factory):
    server = Server(tmp_path_factory.mktemp("anthropic"), model_path=model_path("TESSERA_QWEN15_MODEL", QWEN_15B))
    yield Qwen(server)
    assert server.stop() == 0


def ask_tools(qwen, messages, **kw):
    return qwen.client.messages.create(model=qwen.model, max_tokens=160, extra_body=GREEDY, messages=messages,
                                       tools=[WEATHER], **kw)


def tool_uses(message):
    return [(b.name, b.input) for b in message.content if b.type == "tool_use"]


def test_a_tools_round_trip_ends_in_a_text_answer(qwen15):
    system = "You are a helpful assistant. Use the tools, then answer the user's question with the tool's " \
             "results in a short sentence."
    first = ask_tools(qwen15, ASK_PARIS, system=system)
    assert first.stop_reason == "tool_use", first
    assert tool_uses(first) == [("get_weather", {"city": "Paris"})]
    call = next(b for b in first.content if b.type == "tool_use")
    assert call.id
    result = {"temperature": 18, "unit": "celsius", "description": "light rain"}
    messages = [
        *ASK_PARIS,
        {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in first.content]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call.id, "content": json.dumps(result)}]},
    ]
    final = ask_tools(qwen15, messages, system=system)
    assert final.stop_reason == "end_turn", final
    assert tool_uses(final) == []
    assert "18" in text_of(final) and "rain" in text_of(final)


def test_a_streamed_tool_use_reassembles_to_the_whole_one(qwen15):
    whole = ask_tools(qwen15, ASK_PARIS, tool_choice={"type": "any"})
    with qwen15.client.messages.stream(model=qwen15.model, max_tokens=160, extra_body=GREEDY, messages=ASK_PARIS, tools=[WEATHER],
                                tool_choice={"type": "any"}) as s:
        final = s.get_final_message()
    assert whole.stop_reason == final.stop_reason == "tool_use"
    assert tool_uses(final) == tool_uses(whole) and tool_uses(whole)[0][0] == "get_weather"
