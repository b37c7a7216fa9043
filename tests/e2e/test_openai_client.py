"""The official `openai` package works against tessera unmodified."""

import openai
import pytest

PROMPT = "The capital of France is"


def test_models_list_names_the_served_model(client, model):
    ids = [m.id for m in client.models.list().data]
    assert ids == [model]


def test_completion_returns_text_and_usage(client, model):
    r = client.completions.create(model=model, prompt=PROMPT, max_tokens=8, temperature=0)
    choice = r.choices[0]
    assert isinstance(choice.text, str) and choice.text
    assert choice.finish_reason in ("stop", "length")
    assert r.usage.completion_tokens <= 8
    assert r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens


def test_streamed_completion_equals_the_whole_one(client, model):
    whole = client.completions.create(model=model, prompt=PROMPT, max_tokens=8, temperature=0)
    stream = client.completions.create(
        model=model,
        prompt=PROMPT,
        max_tokens=8,
        temperature=0,
        stream=True,
        stream_options={"include_usage": True},
    )
    text, usage, reasons = "", None, []
    for chunk in stream:
        if chunk.usage is not None:
            usage = chunk.usage
        for c in chunk.choices:
            text += c.text
            if c.finish_reason:
                reasons.append(c.finish_reason)
    assert text == whole.choices[0].text
    assert reasons == [whole.choices[0].finish_reason]
    assert usage is not None and usage.completion_tokens == whole.usage.completion_tokens


def test_chat_completion_answers_as_the_assistant(client, model):
    r = client.chat.completions.create(
        model=model,
        messages=[{"role": "user", "content": "Say hello."}],
        max_tokens=8,
        temperature=0,
    )
    msg = r.choices[0].message
    assert msg.role == "assistant"
    assert isinstance(msg.content, str)
    assert r.choices[0].finish_reason in ("stop", "length")
    assert r.usage.prompt_tokens > 5


def test_streamed_chat_equals_the_whole_one(client, model):
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Name a colour."}]
    whole = client.chat.completions.create(model=model, messages=messages, max_tokens=8, temperature=0)
    stream = client.chat.completions.create(
        model=model,
        messages=messages,
        max_tokens=8,
        temperature=0,
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == whole.choices[0].message.content
    assert chunks[-1].usage.completion_tokens == whole.usage.completion_tokens


def test_n_gives_several_choices(client, model):
    r = client.chat.completions.create(
        model=model,
        messages=[{"role": "user", "content": "Pick a number."}],
        max_tokens=4,
        n=3,
        temperature=1.0,
        seed=1,
    )
    assert sorted(c.index for c in r.choices) == [0, 1, 2]


def test_echo_with_zero_max_tokens_returns_prompt_logprobs(client, model):
    r = client.completions.create(model=model, prompt=PROMPT, max_tokens=0, echo=True, logprobs=1)
    lp = r.choices[0].logprobs
    assert lp.token_logprobs[0] is None
    assert len(lp.token_logprobs) == r.usage.prompt_tokens
    assert all(x <= 0.0 for x in lp.token_logprobs[1:])
    assert r.choices[0].text.strip() == PROMPT


def test_chat_logprobs(client, model):
    r = client.chat.completions.create(
        model=model,
        messages=[{"role": "user", "content": "Hi"}],
        max_tokens=3,
        logprobs=True,
        top_logprobs=2,
    )
    content = r.choices[0].logprobs.content
    assert 1 <= len(content) <= 3
    assert all(len(t.top_logprobs) == 2 for t in content)


def test_bad_requests_raise_bad_request_error(client, model):
    with pytest.raises(openai.BadRequestError) as e:
        client.completions.create(model=model, prompt=PROMPT, max_tokens=4, temperature=-1)
    assert e.value.status_code == 400
    assert e.value.body["param"] == "temperature"
    with pytest.raises(openai.NotFoundError):
        client.completions.create(model="no-such-model", prompt=PROMPT, max_tokens=4)
    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(model=model, messages=[], max_tokens=4)


def test_a_wrong_key_is_refused(base_url, model):
    bad = openai.OpenAI(base_url=f"{base_url}/v1", api_key="wrong", max_retries=0)
    with pytest.raises(openai.AuthenticationError):
        bad.completions.create(model=model, prompt=PROMPT, max_tokens=1)
