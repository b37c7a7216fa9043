"""Reasoning output on a real model, through the official `openai` and `anthropic` clients.

No model this machine reaches was trained to think, so Qwen2.5-Coder-0.5B-Instruct is served with
`--reasoning-parser qwen3` and shown two worked examples in that format (`<think>…</think>`, then
the answer as JSON): under greedy decoding it then thinks before it answers. Each route must give
the thinking apart from the answer, streamed and not, with no marker left in either:
`reasoning_content` on chat, `thinking` blocks on messages, `reasoning` items on responses. A
JSON schema holds the answer and not the thinking; with `enable_thinking: false` there is no
split, and the schema holds the whole reply.
"""

import json

import anthropic
import jsonschema
import openai
import pytest

from conftest import Server
from test_tools import QWEN_05B, model_path

SYSTEM = "Think inside <think></think> tags first, then give the answer."
SHOTS = [
    {"role": "user", "content": "What is 2 + 3?"},
    {"role": "assistant", "content": '<think>\nTwo plus three is five.\n</think>\n\n{"answer": 5}'},
    {"role": "user", "content": "What is 10 - 4?"},
    {"role": "assistant", "content": '<think>\nTen minus four is six.\n</think>\n\n{"answer": 6}'},
    {"role": "user", "content": "What is 7 + 1?"},
]
MESSAGES = [{"role": "system", "content": SYSTEM}, *SHOTS]
SCHEMA = {
    "type": "object",
    "properties": {"answer": {"type": "integer"}},
    "required": ["answer"],
    "additionalProperties": False,
}
RESPONSE_FORMAT = {"type": "json_schema", "json_schema": {"name": "answer", "schema": SCHEMA}}
MAX = 80


class Thinker:
    def __init__(self, server):
        self.server = server
        self.openai = openai.OpenAI(base_url=f"{server.url}/v1", api_key="none", max_retries=0, timeout=600)
        self.model = self.openai.models.list().data[0].id
        self.anthropic = anthropic.Anthropic(base_url=server.url, api_key="none", max_retries=0, timeout=600)


@pytest.fixture(scope="module")
def thinker(tmp_path_factory):
    server = Server(tmp_path_factory.mktemp("reasoning"), "--reasoning-parser", "qwen3",
                    model_path=model_path("TESSERA_QWEN_MODEL", QWEN_05B))
    yield Thinker(server)
    assert server.stop() == 0


def chat(t, stream=False, **kw):
    args = {"model": t.model, "messages": MESSAGES, "max_tokens": MAX, "temperature": 0, **kw}
    if not stream:
        choice = t.openai.chat.completions.create(**args).choices[0]
        # An extra field of the client's message type, absent when there is no reasoning.
        reasoning = getattr(choice.message, "reasoning_content", None)
        return reasoning, choice.message.content, choice.finish_reason
    reasoning, content, finish = [], [], None
    for chunk in t.openai.chat.completions.create(stream=True, **args):
        if not chunk.choices:
            continue
        delta = chunk.choices[0].delta
        r = getattr(delta, "reasoning_content", None)
        assert not (r and delta.content), f"one chunk carries reasoning and content: {chunk}"
        reasoning.append(r or "")
        content.append(delta.content or "")
        finish = chunk.choices[0].finish_reason or finish
    return "".join(reasoning) or None, "".join(content), finish


def assert_split(reasoning, content):
    assert reasoning and reasoning.strip(), f"no reasoning: {reasoning!r} / {content!r}"
    for marker in ("<think>", "</think>"):
        assert marker not in reasoning and marker not in content, (reasoning, content)
    assert content.strip(), "no answer"


def test_chat_gives_the_thinking_apart_from_the_answer_streamed_and_not(thinker):
    whole = chat(thinker)
    assert_split(*whole[:2])
    assert whole[2] == "stop"
    assert chat(thinker, stream=True) == whole


def test_a_schema_holds_the_answer_and_not_the_thinking(thinker):
    reasoning, content, finish = chat(thinker, response_format=RESPONSE_FORMAT)
    assert finish == "stop"
    assert_split(reasoning, content)
    jsonschema.validate(json.loads(content), SCHEMA)
    assert chat(thinker, stream=True, response_format=RESPONSE_FORMAT) == (reasoning, content, finish)
    # vLLM's guided_regex holds the answer the same way.
    regex = chat(thinker, extra_body={"guided_regex": r'\{"answer": [0-9]+\}'})
    assert regex[0] == reasoning and regex[1] == content


def test_with_thinking_off_the_schema_holds_the_whole_reply(thinker):
    off = {"chat_template_kwargs": {"enable_thinking": False}}
    reasoning, content, finish = chat(thinker, response_format=RESPONSE_FORMAT, extra_body=off)
    assert reasoning is None and finish == "stop"
    jsonschema.validate(json.loads(content), SCHEMA)
    # Without a grammar the same request's reply is all content, its think tags included.
    _, free, _ = chat(thinker, extra_body=off)
    assert free.lstrip().startswith("<think>"), free


def test_messages_give_thinking_blocks_streamed_and_not(thinker):
    chat_reasoning, chat_content, _ = chat(thinker)
    args = {"model": thinker.model, "max_tokens": MAX, "system": SYSTEM, "messages": SHOTS,
            "thinking": {"type": "enabled", "budget_tokens": MAX}, "extra_body": {"temperature": 0}}
    whole = thinker.anthropic.messages.create(**args)
    kinds = [b.type for b in whole.content]
    assert kinds == ["thinking", "text"], whole
    assert whole.content[0].thinking == chat_reasoning
    assert whole.content[1].text == chat_content
    assert whole.stop_reason == "end_turn"
    with thinker.anthropic.messages.stream(**args) as s:
        streamed = s.get_final_message()
    assert [b.model_dump() for b in streamed.content] == [b.model_dump() for b in whole.content]


def test_responses_give_reasoning_items_streamed_and_not(thinker):
    chat_reasoning, chat_content, _ = chat(thinker, response_format=RESPONSE_FORMAT)
    fmt = {"format": {"type": "json_schema", "name": "answer", "schema": SCHEMA}}
    args = {"model": thinker.model, "instructions": SYSTEM, "input": SHOTS, "max_output_tokens": MAX,
            "temperature": 0, "text": fmt}
    whole = thinker.openai.responses.create(**args)
    kinds = [item.type for item in whole.output]
    assert kinds == ["reasoning", "message"], whole
    assert "".join(c.text for c in whole.output[0].content) == chat_reasoning
    assert whole.output_text == chat_content
    with thinker.openai.responses.stream(**args) as s:
        streamed = s.get_final_response()
    # The same items, text for text (ids differ per response; the stream helper adds `parsed`).
    same = [[(i.type, i.status, [c.text for c in i.content]) for i in r.output] for r in (streamed, whole)]
    assert same[0] == same[1]
