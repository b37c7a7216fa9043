"""Tool calling and structured output on /v1/responses, with the official `openai` client on
Qwen2.5-Coder-0.5B-Instruct (Hermes-family template): flat function tools, `function_call`
output items (whole and streamed), calls and their outputs sent back as input items, the
`required` choice, and `text.format` (a Pydantic model through `responses.parse`, JSON mode).
"""

import json
from typing import List

import openai
import pytest
from pydantic import BaseModel, Field

from test_tools import QWEN_05B, start

WEATHER = {
    "type": "function",
    "name": "get_weather",
    "description": "Get the current weather in a given city",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string", "description": "The city name"}},
        "required": ["city"],
    },
    "strict": False,
}
TIME = {
    "type": "function",
    "name": "get_time",
    "description": "Get the current local time in a given city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    "strict": False,
}
ASK_PARIS = [{"role": "user", "content": "What is the weather like in Paris today?"}]


@pytest.fixture(scope="module")
def qwen(tmp_path_factory):
    server, client = start(tmp_path_factory, "TESSERA_QWEN_MODEL", QWEN_05B)
    yield client
    assert server.stop() == 0


def model(client):
    return client.models.list().data[0].id


def create(client, input, tools=(WEATHER,), **kw):
    kw.setdefault("max_output_tokens", 160)
    return client.responses.create(model=model(client), input=input, tools=list(tools), temperature=0, **kw)


def calls_of(response):
    return [(i.name, json.loads(i.arguments)) for i in response.output if i.type == "function_call"]


def test_auto_gives_a_function_call_item(qwen):
    r = create(qwen, ASK_PARIS, tools=(WEATHER, TIME))
    assert r.status == "completed", r
    assert calls_of(r) == [("get_weather", {"city": "Paris"})]
    call = [i for i in r.output if i.type == "function_call"][0]
    assert call.call_id.startswith("call_") and call.id.startswith("fc_") and call.status == "completed"
    assert [t.name for t in r.tools] == ["get_weather", "get_time"]


def test_streamed_events_rebuild_the_whole_response(qwen):
    whole = create(qwen, ASK_PARIS)
    events = list(create(qwen, ASK_PARIS, stream=True))
    seq = [e.sequence_number for e in events]
    assert seq == list(range(len(events)))
    done = [e.item for e in events if e.type == "response.output_item.done"]
    args = {e.item_id: e.arguments for e in events if e.type == "response.function_call_arguments.done"}
    deltas = {}
    for e in events:
        if e.type == "response.function_call_arguments.delta":
            deltas[e.item_id] = deltas.get(e.item_id, "") + e.delta
    streamed_calls = [(i.name, json.loads(i.arguments)) for i in done if i.type == "function_call"]
    assert streamed_calls == calls_of(whole) and streamed_calls
    for i in done:
        if i.type == "function_call":
            assert args[i.id] == deltas[i.id] == i.arguments
    final = events[-1]
    assert final.type == "response.completed"
    assert calls_of(final.response) == calls_of(whole)


def test_a_call_and_its_output_go_back_as_input_items(qwen):
    first = create(qwen, ASK_PARIS)
    call = [i for i in first.output if i.type == "function_call"][0]
    result = {"temperature": 18, "unit": "celsius", "description": "light rain"}
    output = {"type": "function_call_output", "call_id": call.call_id, "output": json.dumps(result)}
    # Whole conversation as input items, the output passed back as the client got it.
    again = create(qwen, [*ASK_PARIS, *[i.model_dump(exclude_none=True) for i in first.output], output])
    assert again.status == "completed", again
    # The same through previous_response_id: only the output is new input.
    chained = create(qwen, [output], previous_response_id=first.id)
    assert chained.status == "completed", chained
    # The stored conversation holds the call: both prompts are the same, so greedy outputs are.
    assert chained.output_text == again.output_text
    assert calls_of(chained) == calls_of(again)
    assert chained.usage.input_tokens == again.usage.input_tokens


def test_required_gives_a_call_for_a_question_no_tool_answers(qwen):
    joke = [{"role": "user", "content": "Tell me a short joke about programmers."}]
    r = create(qwen, joke, tools=(WEATHER, TIME), tool_choice="required", parallel_tool_calls=False, max_output_tokens=96)
    calls = calls_of(r)
    assert len(calls) == 1 and calls[0][0] in {"get_weather", "get_time"}, r
    r = create(qwen, joke, tools=(WEATHER, TIME), tool_choice={"type": "function", "name": "get_time"},
               max_output_tokens=96, parallel_tool_calls=False)
    assert [c[0] for c in calls_of(r)] == ["get_time"], r


class City(BaseModel):
    name: str
    country: str
    population_millions: float
    # Bounded (the schema's maxItems): greedy decoding of a 0.5B model may repeat one landmark
    # for ever, and the grammar must then close the array rather than run out of tokens.
    landmarks: List[str] = Field(max_length=4)


def test_text_format_json_schema_parses_into_the_model(qwen):
    r = qwen.responses.parse(
        model=model(qwen), input="Describe Paris as JSON.", text_format=City, temperature=0, max_output_tokens=200,
    )
    assert r.status == "completed", r
    assert isinstance(r.output_parsed, City), r
    assert len(r.output_parsed.landmarks) <= 4, r
    assert r.text.format.type == "json_schema"


def test_text_format_json_object_is_json(qwen):
    r = qwen.responses.create(
        model=model(qwen), input="Give the capital of France as a JSON object.", temperature=0,
        max_output_tokens=100, text={"format": {"type": "json_object"}},
    )
    assert r.status == "completed", r
    assert isinstance(json.loads(r.output_text), dict)


def test_unsupported_tool_settings_are_named(qwen):
    for kw, param in [
        ({"tools": [{"type": "web_search"}]}, "tools[0].type"),
        ({"tools": [WEATHER], "max_tool_calls": 3}, "max_tool_calls"),
    ]:
        with pytest.raises(openai.BadRequestError) as e:
            qwen.responses.create(model=model(qwen), input="x", max_output_tokens=4, **kw)
        assert e.value.body["param"] == param, e.value.body


def test_a_strict_tool_under_auto_gets_a_call_that_follows_its_schema(qwen):
    strict = {
        **WEATHER,
        "strict": True,
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
            "required": ["city", "unit"],
            "additionalProperties": False,
        },
    }
    r = create(qwen, ASK_PARIS, tools=(strict,))
    calls = calls_of(r)
    assert [c[0] for c in calls] == ["get_weather"], r
    assert set(calls[0][1]) == {"city", "unit"}, calls
