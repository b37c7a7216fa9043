"""Tool calling with the official `openai` client against real instruct models.

Qwen2.5-Coder-0.5B-Instruct (its template is of the Hermes family) answers the calls, the
parallel calls, the streaming and the `none` checks; the full round trip (tool result sent
back, then a text answer) needs Qwen2.5-Coder-1.5B-Instruct, as the 0.5B model calls the tool
again after every result it is given. Both are looked up in TESSERA_MODELS_DIR under their
canonical names (or TESSERA_QWEN_MODEL / TESSERA_QWEN15_MODEL). The default (Gemma) server has
no tool-call format and must refuse tools.
"""

import json
import os
from pathlib import Path

import openai
import pytest

from conftest import Server

QWEN_05B = "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"
QWEN_15B = "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather in a given city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string", "description": "The city name"}},
            "required": ["city"],
        },
    },
}
TIME = {
    "type": "function",
    "function": {
        "name": "get_time",
        "description": "Get the current local time in a given city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}
# Shows the 0.5B model the shape of two calls in one reply.
PARALLEL_SYSTEM = (
    "You are a helpful assistant. When the user asks about several cities, call get_weather once per city, "
    'one <tool_call></tool_call> block each, for example:\n<tool_call>\n{"name": "get_weather", "arguments": '
    '{"city": "Madrid"}}\n</tool_call>\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Rome"}}\n'
    "</tool_call>"
)
ASK_PARIS = [{"role": "user", "content": "What is the weather like in Paris today?"}]
ASK_TWO = [
    {"role": "system", "content": PARALLEL_SYSTEM},
    {"role": "user", "content": "What is the weather in Paris and in London?"},
]


def model_path(env, name):
    path = Path(os.environ.get(env) or Path(os.environ.get("TESSERA_MODELS_DIR", "models")) / name)
    if not path.is_file():
        pytest.fail(f"{path} is missing: the tool-calling tests need the {name} model (set {env} or TESSERA_MODELS_DIR)")
    return str(path)


def start(tmp_path_factory, env, name):
    tmp = tmp_path_factory.mktemp("tools")
    server = Server(tmp, model_path=model_path(env, name))
    client = openai.OpenAI(base_url=f"{server.url}/v1", api_key="none", max_retries=0, timeout=600)
    return server, client


@pytest.fixture(scope="module")
def qwen(tmp_path_factory):
    server, client = start(tmp_path_factory, "TESSERA_QWEN_MODEL", QWEN_05B)
    yield client
    assert server.stop() == 0


@pytest.fixture(scope="module")
def qwen15(tmp_path_factory):
    server, client = start(tmp_path_factory, "TESSERA_QWEN15_MODEL", QWEN_15B)
    yield client
    assert server.stop() == 0


def ask(client, messages, tools=(WEATHER,), **kw):
    return client.chat.completions.create(
        model=client.models.list().data[0].id, messages=messages, tools=list(tools), temperature=0, max_tokens=160, **kw
    )


def calls_of(message):
    return [(c.function.name, json.loads(c.function.arguments)) for c in message.tool_calls or []]


def test_auto_lets_the_model_call_get_weather(qwen):
    r = ask(qwen, ASK_PARIS, tools=(WEATHER, TIME))
    choice = r.choices[0]
    assert choice.finish_reason == "tool_calls", choice
    assert calls_of(choice.message) == [("get_weather", {"city": "Paris"})]
    call = choice.message.tool_calls[0]
    assert call.id.startswith("call_") and call.type == "function"
    assert choice.message.content is None


def test_parallel_calls_come_back_in_order(qwen):
    r = ask(qwen, ASK_TWO)
    assert r.choices[0].finish_reason == "tool_calls"
    assert calls_of(r.choices[0].message) == [("get_weather", {"city": "Paris"}), ("get_weather", {"city": "London"})]
    ids = [c.id for c in r.choices[0].message.tool_calls]
    assert len(set(ids)) == 2
    # parallel_tool_calls=false keeps the first call only.
    r = ask(qwen, ASK_TWO, parallel_tool_calls=False)
    assert calls_of(r.choices[0].message) == [("get_weather", {"city": "Paris"})]


def reassemble(stream):
    """Content, calls (name, arguments text) and finish reason from a stream's deltas."""
    content, calls, finish = "", {}, None
    for chunk in stream:
        for ch in chunk.choices:
            d = ch.delta
            content += d.content or ""
            for tc in d.tool_calls or []:
                entry = calls.setdefault(tc.index, {"id": None, "name": "", "arguments": ""})
                if tc.id:
                    assert entry["id"] is None, "a call's id comes once"
                    entry["id"] = tc.id
                    assert tc.type == "function"
                if tc.function and tc.function.name:
                    entry["name"] += tc.function.name
                if tc.function and tc.function.arguments:
                    entry["arguments"] += tc.function.arguments
            finish = ch.finish_reason or finish
    assert sorted(calls) == list(range(len(calls))), "call indexes count from 0"
    assert all(c["id"] and c["id"].startswith("call_") for c in calls.values())
    return content, [(calls[i]["name"], calls[i]["arguments"]) for i in sorted(calls)], finish


@pytest.mark.parametrize("messages", [ASK_PARIS, ASK_TWO], ids=["one", "parallel"])
def test_streamed_deltas_reassemble_to_the_whole_reply(qwen, messages):
    whole = ask(qwen, messages).choices[0]
    streamed = reassemble(ask(qwen, messages, stream=True))
    calls = [(c.function.name, c.function.arguments) for c in whole.message.tool_calls or []]
    assert calls, "the model calls the tool here"
    assert streamed == (whole.message.content or "", calls, whole.finish_reason)


def test_none_gives_no_calls(qwen):
    r = ask(qwen, ASK_PARIS, tool_choice="none")
    choice = r.choices[0]
    assert not choice.message.tool_calls
    assert choice.finish_reason in ("stop", "length")
    assert choice.message.content


def test_required_and_named_choices_always_give_a_call(qwen):
    # A question no tool answers: left free (`auto`) the model may answer in text; `required`
    # and a named function hold the reply to the call syntax, so it is a call that parses (one:
    # with parallel calls allowed, the small model may go on calling until max_tokens).
    joke = [{"role": "user", "content": "Tell me a short joke about programmers."}]
    for choice, want in [
        ("required", {"get_weather", "get_time"}),
        ({"type": "function", "function": {"name": "get_time"}}, {"get_time"}),
    ]:
        for stream in [False, True]:
            if stream:
                chunks = list(
                    qwen.chat.completions.create(
                        model=qwen.models.list().data[0].id, messages=joke, tools=[WEATHER, TIME], tool_choice=choice,
                        max_tokens=96, temperature=0, stream=True, parallel_tool_calls=False,
                    )
                )
                finish = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
                names = [
                    tc.function.name
                    for c in chunks
                    if c.choices
                    for tc in (c.choices[0].delta.tool_calls or [])
                    if tc.function and tc.function.name
                ]
                assert finish == ["tool_calls"], (choice, finish)
                assert names and set(names) <= want, (choice, names)
                continue
            r = qwen.chat.completions.create(
                model=qwen.models.list().data[0].id, messages=joke, tools=[WEATHER, TIME], tool_choice=choice, max_tokens=96,
                temperature=0, parallel_tool_calls=False,
            ).choices[0]
            assert r.finish_reason == "tool_calls", (choice, r)
            assert len(r.message.tool_calls) == 1, (choice, r)
            for call in r.message.tool_calls:
                assert call.function.name in want, (choice, call)
                args = json.loads(call.function.arguments)
                assert isinstance(args.get("city"), str), (choice, args)


def test_a_model_without_a_tool_format_refuses_tools(client, model):
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model=model, messages=ASK_PARIS, tools=[WEATHER], max_tokens=8)
    assert e.value.body["param"] == "tools"


def test_a_full_round_trip_ends_in_a_text_answer(qwen15):
    messages = [
        {"role": "system", "content": "You are a helpful assistant. Use the tools, then answer the user's question "
         "with the tool's results in a short sentence."},
        *ASK_PARIS,
    ]
    first = ask(qwen15, messages).choices[0]
    assert first.finish_reason == "tool_calls"
    assert calls_of(first.message) == [("get_weather", {"city": "Paris"})]
    call = first.message.tool_calls[0]
    messages.append(first.message.model_dump(exclude_none=True))
    result = {"temperature": 18, "unit": "celsius", "description": "light rain"}
    messages.append({"role": "tool", "tool_call_id": call.id, "content": json.dumps(result)})
    final = ask(qwen15, messages).choices[0]
    assert final.finish_reason == "stop", final
    assert not final.message.tool_calls
    assert "18" in final.message.content and "rain" in final.message.content


STRICT_WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather in a given city",
        "strict": True,
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
            "required": ["city", "unit"],
            "additionalProperties": False,
        },
    },
}


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_a_strict_tool_under_auto_gets_calls_that_follow_its_schema(qwen, stream):
    # `unit` is required: the grammar holds the call to it once the model opens a call.
    r = ask(qwen, ASK_PARIS, tools=(STRICT_WEATHER,), stream=stream)
    if stream:
        content, calls, finish = reassemble(r)
        calls = [(name, json.loads(args)) for name, args in calls]
    else:
        finish, calls = r.choices[0].finish_reason, calls_of(r.choices[0].message)
    assert finish == "tool_calls", calls
    assert [c[0] for c in calls] == ["get_weather"]
    args = calls[0][1]
    assert set(args) == {"city", "unit"} and args["unit"] in ("celsius", "fahrenheit"), args
