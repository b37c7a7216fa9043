"""Structured output on the instruct model (Qwen2.5-Coder-0.5B-Instruct), through the official
`openai` client: Pydantic models parsed by `chat.completions.parse`, vLLM's guided_* fields, a
corpus of public JSON schemas whose every answer validates (or is refused with a 400), and
constrained requests batched with unconstrained ones that stay bit-identical to running alone.

The model is $TESSERA_MODELS_DIR/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf, fetched with
`tessera fetch-model qwen2.5-coder-0.5b` when missing.
"""

import json
import os
import subprocess
from concurrent.futures import ThreadPoolExecutor
from enum import Enum
from pathlib import Path
from typing import List, Optional

import jsonschema
import openai
import pytest
from pydantic import BaseModel

import schema_corpus
from conftest import Server

MODEL_FILE = "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"
MODEL = MODEL_FILE.removesuffix(".gguf")


def instruct_model():
    d = Path(os.environ.get("TESSERA_MODELS_DIR", "models"))
    path = d / MODEL_FILE
    if not path.exists():
        subprocess.run([os.environ["TESSERA_BIN"], "fetch-model", "qwen2.5-coder-0.5b"], check=True)
    assert path.exists(), f"{path} is missing and `tessera fetch-model qwen2.5-coder-0.5b` did not fetch it"
    return str(path)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    if not os.environ.get("TESSERA_BIN"):
        pytest.skip("TESSERA_BIN is not set: run tests/e2e/run.sh")
    # `Server` serves $TESSERA_MODEL: the instruct model, for this module's server only.
    shared = os.environ.get("TESSERA_MODEL")
    os.environ["TESSERA_MODEL"] = instruct_model()
    try:
        s = Server(tmp_path_factory.mktemp("structured"))
    finally:
        if shared is None:
            del os.environ["TESSERA_MODEL"]
        else:
            os.environ["TESSERA_MODEL"] = shared
    yield s
    s.stop()


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=f"{server.url}/v1", api_key="none", max_retries=0, timeout=900)


def metric(server, name):
    for line in server.metrics().splitlines():
        if line.startswith(name + " ") or line.startswith(name + "_total "):
            return float(line.split()[-1])
    raise AssertionError(f"{name} is not in /metrics")


def test_the_vocabulary_is_indexed_at_start_so_no_request_waits_for_it(server, client):
    # This module's first test: no constrained request has been sent yet, and the server
    # indexes the vocabulary by itself once the model is ready.
    import time

    deadline = time.monotonic() + 120
    while metric(server, "tessera_structured_vocab_ready") != 1:
        assert time.monotonic() < deadline, "the vocabulary was never indexed"
        time.sleep(0.2)
    assert metric(server, "tessera_structured_compiles") == 0
    r = ask(client, "Reply with JSON.", max_tokens=16, response_format={"type": "json_object"})
    assert r.choices[0].message.content.startswith("{")
    assert metric(server, "tessera_structured_compiles") == 1
    assert metric(server, "tessera_structured_vocab_waits") == 0


def ask(client, content, **kw):
    return client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": content}], temperature=0, **kw
    )


class Color(str, Enum):
    red = "red"
    green = "green"
    blue = "blue"


class Address(BaseModel):
    street: str
    city: str
    zip: Optional[str] = None


class Person(BaseModel):
    name: str
    age: int
    address: Address


class Palette(BaseModel):
    name: str
    colors: List[Color]
    favorite: Color


class Task(BaseModel):
    title: str
    done: bool
    priority: Optional[int] = None
    tags: List[str]


class Inventory(BaseModel):
    items: List[Task]
    owner: Optional[Person] = None


PYDANTIC_CASES = [
    (Person, "Describe Ann, 31, who lives at 5 Main St in Springfield, as JSON."),
    (Palette, "Give a palette named sea with two colors, as JSON."),
    (Task, "Make a to-do item to buy milk, as JSON."),
    (Inventory, "List two small tasks as JSON."),
]


@pytest.mark.parametrize("model_cls,prompt", PYDANTIC_CASES, ids=[c[0].__name__ for c in PYDANTIC_CASES])
def test_pydantic_models_parse(client, model_cls, prompt):
    r = client.beta.chat.completions.parse(
        model=MODEL, messages=[{"role": "user", "content": prompt}], response_format=model_cls,
        temperature=0, max_tokens=300,
    )
    choice = r.choices[0]
    assert choice.finish_reason == "stop", choice
    assert isinstance(choice.message.parsed, model_cls)
    # The text is the JSON the object was parsed from, and valid under the strict schema.
    assert model_cls.model_validate_json(choice.message.content) == choice.message.parsed


def test_json_object_and_guided_fields(client):
    r = ask(client, "Give me a JSON object describing a cat.", response_format={"type": "json_object"},
            max_tokens=200)
    assert r.choices[0].finish_reason == "stop"
    assert isinstance(json.loads(r.choices[0].message.content), dict)
    r = ask(client, "Is water wet?", max_tokens=10, extra_body={"guided_choice": ["yes", "no"]})
    assert r.choices[0].message.content in ("yes", "no")
    r = ask(client, "Give a US phone number.", max_tokens=30,
            extra_body={"guided_regex": r"\(\d{3}\) \d{3}-\d{4}"})
    import re

    assert re.fullmatch(r"\(\d{3}\) \d{3}-\d{4}", r.choices[0].message.content)
    grammar = 'start: "The answer is " NUMBER "."\nNUMBER: /[0-9]+/'
    r = client.completions.create(model=MODEL, prompt="2 + 2 =", max_tokens=20, temperature=0,
                                  extra_body={"guided_grammar": grammar})
    assert re.fullmatch(r"The answer is [0-9]+\.", r.choices[0].text), r.choices[0].text
    r = client.completions.create(model=MODEL, prompt="A user:", max_tokens=100, temperature=0,
                                  extra_body={"guided_json": {"type": "object", "properties": {
                                      "id": {"type": "integer"}}, "required": ["id"]}})
    assert isinstance(json.loads(r.choices[0].text)["id"], int)


def test_truncated_output_reports_length_and_bad_grammars_are_named(client):
    schema = {"type": "object", "properties": {"story": {"type": "string"}}, "required": ["story"]}
    r = ask(client, "Tell a long story as JSON.", max_tokens=5,
            response_format={"type": "json_schema", "json_schema": {"name": "s", "schema": schema}})
    assert r.choices[0].finish_reason == "length"
    assert r.usage.completion_tokens == 5
    for extra, param in [
        ({"guided_regex": "a("}, "guided_regex"),
        ({"guided_grammar": "start: nothing_defined"}, "guided_grammar"),
        ({"guided_json": {"type": "object", "properties": {"a": {"$ref": "#/$defs/missing"}}}}, "guided_json"),
        ({"guided_choice": ["a"], "guided_regex": "a"}, "guided_choice"),
    ]:
        with pytest.raises(openai.BadRequestError) as e:
            ask(client, "x", max_tokens=5, extra_body=extra)
        assert e.value.body["param"] == param, e.value.body


def test_schema_corpus_outputs_validate_or_are_refused(client):
    corpus = schema_corpus.load(limit_per_file=3)
    assert len(corpus) >= 50

    def run(item):
        name, schema = item
        try:
            r = ask(client, "Reply with a short JSON value.", max_tokens=96,
                    response_format={"type": "json_schema", "json_schema": {"name": "t", "schema": schema}})
        except openai.BadRequestError as e:
            assert e.body["param"] == "response_format", e.body
            return name, "refused", str(e)
        c = r.choices[0]
        if c.finish_reason == "length":
            return name, "truncated", c.message.content
        assert c.finish_reason == "stop", (name, c)
        value = json.loads(c.message.content)
        validator = jsonschema.Draft202012Validator(schema)
        errors = [e.message for e in validator.iter_errors(value)]
        assert not errors, (name, schema, c.message.content, errors)
        return name, "valid", c.message.content

    with ThreadPoolExecutor(16) as pool:
        results = list(pool.map(run, corpus))
    counts = {k: sum(1 for r in results if r[1] == k) for k in ("valid", "refused", "truncated")}
    print(f"\nschema corpus: {len(corpus)} schemas: {counts}")
    for name, kind, detail in results:
        if kind != "valid":
            print(f"  {name}: {kind}: {detail[:160]}")
    # Most of the suite's schemas are satisfiable by a short value; a truncated one is a
    # schema that asks for more than 96 tokens, never an invalid value.
    assert counts["valid"] >= 50, counts


def test_unconstrained_outputs_are_bit_identical_beside_constrained_ones(client):
    prompts = ["Write a haiku about rust.", "Count from 1 to 8.", "Name three rivers.", "What is a tile?"]

    def plain(p):
        r = ask(client, p, max_tokens=40, logprobs=True, seed=7)
        c = r.choices[0]
        return c.message.content, [(t.token, t.logprob) for t in c.logprobs.content]

    alone = [plain(p) for p in prompts]
    schema = {"type": "object", "properties": {"name": {"type": "string"}, "n": {"type": "integer"}},
              "required": ["name", "n"]}

    def constrained(i):
        return ask(client, f"Make object {i} as JSON.", max_tokens=60,
                   response_format={"type": "json_schema", "json_schema": {"name": "o", "schema": schema}})

    with ThreadPoolExecutor(8) as pool:
        cons = [pool.submit(constrained, i) for i in range(4)]
        mixed = [pool.submit(plain, p) for p in prompts]
        together = [f.result() for f in mixed]
        for f in cons:
            json.loads(f.result().choices[0].message.content)
    assert together == alone
