"""Goldens for llama.cpp's official chat templates: each rendered by Hugging Face transformers.

llama.cpp keeps the chat templates of the models it supports in `models/templates/*.jinja`
(the llama-cpp-python sdist has them under `vendor/llama.cpp/models/templates`;
`scripts/fetch_llama_cpp_files.py` extracts them). Every template is rendered here for a set of
conversations (a lone user turn, a system message, multi-turn with and without a system
message, a final assistant turn, non-ASCII text and surrounding whitespace, tools offered, a
tool call and its result, two parallel calls with named results and a final answer, a call whose
arguments hold every JSON type, an empty tool list, `chat_template_kwargs`), each with the
generation prompt on and off.

The renderer is transformers' own `render_jinja_template`, the function
`PreTrainedTokenizer.apply_chat_template` calls: a Jinja2 ImmutableSandboxedEnvironment with
trim_blocks, lstrip_blocks and loop controls, transformers' `tojson` (json.dumps with its
options, no HTML escaping), `raise_exception` and `strftime_now`, given `messages`, `tools`,
`documents` (None), `add_generation_prompt`, and `bos_token` / `eos_token` (as a tokenizer passes
its special tokens). The clock `strftime_now` reads is fixed at `NOW` so the texts do not
depend on the day they are made.

The messages are written in the shapes Tessera's server passes to a template (and vLLM's):
`content` always a string (empty beside tool calls), an assistant message's `tool_calls` as
`{"id", "type": "function", "function": {"name", "arguments": <object>}}`, a tool result as
`{"role": "tool", "content", "tool_call_id"}` with `name` when the client gave it.

The templates themselves are not written into the golden (they are llama.cpp's files, fetched
at test time): each entry has the file name and its sha256. A conversation the template refuses
(`raise_exception`, or any other Jinja error) is recorded as an error.

Usage: python official_templates_goldens.py --templates DIR [--out PATH]
The output defaults to tests/goldens/official_chat_templates.json.
"""

import argparse
import datetime as dt
import json
from pathlib import Path

import jinja2
import transformers
import transformers.utils.chat_template_utils as ctu
from oracle_common import sha256, write_json

REPO = Path(__file__).resolve().parents[2]

SDIST = "llama-cpp-python==0.3.36"
SDIST_DIR = "vendor/llama.cpp/models/templates"
BOS = "<|bos|>"
EOS = "<|eos|>"
NOW = dt.datetime(2026, 2, 3, 4, 5, 6)

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Current weather in a city (temperature in °C or °F).",
            "parameters": {
                "type": "object",
                "properties": {
                    "city": {"type": "string", "description": "City name, e.g. Paris"},
                    "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
                },
                "required": ["city"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "get_time",
            "description": "Local time in a timezone.",
            "parameters": {
                "type": "object",
                "properties": {"timezone": {"type": "string"}},
                "required": ["timezone"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "get_forecast",
            "description": "Forecast for the coming days: \"hourly\" adds one line per hour.",
            "parameters": {
                "type": "object",
                "properties": {
                    "location": {"type": "object", "description": "Where",
                                 "properties": {"lat": {"type": "number"}, "lon": {"type": "number"}}},
                    "days": {"type": "integer", "minimum": 1, "maximum": 14, "default": 3},
                    "hourly": {"type": "boolean", "default": False},
                    "threshold": {"type": ["number", "null"], "default": None, "minimum": 1e-05},
                    "fields": {"type": "array", "items": {"type": "string"}},
                },
                "required": ["location"],
            },
        },
    },
]


def msg(role, content, **extra):
    return {"role": role, "content": content, **extra}


def call(id_, name, arguments):
    """An assistant message's call. Mistral's templates accept only ids of 9 letters and digits:
    `tool_result` has an OpenAI-style id (they refuse it), the other calls ids they accept."""
    return {"id": id_, "type": "function", "function": {"name": name, "arguments": arguments}}


SYSTEM = "You are a helpful assistant. Answer briefly."
CONVERSATIONS = [
    {"name": "user_only", "messages": [msg("user", "Hello! Who are you?")]},
    {"name": "system_user", "messages": [msg("system", SYSTEM),
                                         msg("user", "What is the capital of France?")]},
    {"name": "multi_turn", "messages": [msg("system", SYSTEM),
                                        msg("user", "Write a Python function that adds two numbers."),
                                        msg("assistant", "def add(a, b):\n    return a + b"),
                                        msg("user", "Now make it add three numbers.")]},
    {"name": "multi_turn_no_system", "messages": [msg("user", "Hi!"),
                                                  msg("assistant", "Hello! How can I help?"),
                                                  msg("user", "Tell me a joke about cats.")]},
    {"name": "ends_with_assistant", "messages": [msg("system", "Be brief."),
                                                 msg("user", "Name a prime number."),
                                                 msg("assistant", "7")]},
    {"name": "unicode_whitespace", "messages": [msg("user", "  Traduis « bonjour » en japonais 🇯🇵 ?\n"),
                                                msg("assistant", " こんにちは "),
                                                msg("user", "Et en chinois：你好？\n\n")]},
    {"name": "tools", "tools": TOOLS, "messages": [msg("user", "What's the weather in Paris?")]},
    {"name": "tools_system", "tools": TOOLS, "messages": [msg("system", SYSTEM),
                                                          msg("user", "What time is it in Tokyo?")]},
    {"name": "tool_result", "tools": TOOLS, "messages": [
        msg("user", "What's the weather in Paris?"),
        msg("assistant", "", tool_calls=[call("call_1", "get_weather", {"city": "Paris"})]),
        msg("tool", '{"temperature": 18, "sky": "cloudy"}', tool_call_id="call_1"),
    ]},
    {"name": "parallel_tool_calls", "tools": TOOLS, "messages": [
        msg("system", SYSTEM),
        msg("user", "Weather in Paris in fahrenheit, and the time in Tokyo?"),
        msg("assistant", "",
            tool_calls=[call("a1b2c3d4e", "get_weather", {"city": "Paris", "unit": "fahrenheit"}),
                        call("f5g6h7i8j", "get_time", {"timezone": "Asia/Tokyo"})]),
        msg("tool", '{"temperature": 64}', tool_call_id="a1b2c3d4e", name="get_weather"),
        msg("tool", "21:05", tool_call_id="f5g6h7i8j", name="get_time"),
        msg("assistant", "It is 64°F in Paris and 21:05 in Tokyo."),
        msg("user", "Thanks!"),
    ]},
    {"name": "rich_arguments", "tools": TOOLS, "messages": [
        msg("user", "Forecast for Zürich, hourly, 0.5 mm threshold?"),
        msg("assistant", "Let me check.",
            tool_calls=[call("k9l8m7n6o", "get_forecast",
                             {"location": {"lat": 47.37, "lon": 8.55}, "days": 2, "hourly": True,
                              "threshold": 0.5, "fields": ["rain", "wind"], "note": None,
                              "label": "Zürich \"centre\" ✓"})]),
        msg("tool", '{"rain": [0.0, 1.25e-05], "ok": true}', tool_call_id="k9l8m7n6o"),
    ]},
    {"name": "empty_tools", "tools": [], "messages": [msg("user", "Hello!")]},
    # Variables a request passes in `chat_template_kwargs`: thinking off (Qwen 3 and others), and
    # FireFunction's `functions` (JSON text) and `datetime`.
    {"name": "template_kwargs", "messages": [msg("system", SYSTEM), msg("user", "What is 2 + 2?")],
     "kwargs": {"enable_thinking": False, "functions": json.dumps([t["function"] for t in TOOLS]),
                "datetime": "2026-02-03 04:05"}},
]


class FixedClock(dt.datetime):
    """`datetime` as transformers' `strftime_now` sees it: `now()` is always NOW."""

    @classmethod
    def now(cls, tz=None):
        return NOW


def render(template: str, conversation: dict, add_generation_prompt: bool) -> dict:
    try:
        text = ctu.render_jinja_template(
            conversations=[conversation["messages"]],
            tools=conversation.get("tools"),
            chat_template=template,
            add_generation_prompt=add_generation_prompt,
            bos_token=BOS,
            eos_token=EOS,
            **conversation.get("kwargs", {}),
        )[0][0]
        return {"rendered": text}
    except Exception as e:  # noqa: BLE001 - every failure of the template is a refusal
        # `raise_exception` raises TemplateError itself; its subclasses (UndefinedError, ...) and
        # Python errors are the template failing on that input.
        kind = "raise_exception" if type(e) is jinja2.exceptions.TemplateError else type(e).__name__
        return {"error": {"kind": kind, "message": str(e)}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--templates", required=True,
                    help=f"the templates directory ({SDIST_DIR} of the {SDIST} sdist)")
    ap.add_argument("--out", default=str(REPO / "tests/goldens/official_chat_templates.json"))
    args = ap.parse_args()
    ctu.datetime = FixedClock
    files = sorted(Path(args.templates).glob("*.jinja"))
    if not files:
        raise SystemExit(f"no *.jinja in {args.templates}")
    templates = []
    for f in files:
        source = f.read_text(encoding="utf-8")
        cases = []
        for c in CONVERSATIONS:
            for add_gen in (True, False):
                cases.append({"conversation": c["name"], "add_generation_prompt": add_gen,
                              **render(source, c, add_gen)})
        templates.append({"file": f.name, "sha256": sha256(f), "cases": cases})
    golden = {
        "description": "llama.cpp's official chat templates rendered by transformers' apply_chat_template",
        "generator": "scripts/oracle/official_templates_goldens.py",
        "source": {"sdist": SDIST, "directory": SDIST_DIR},
        "renderer": (
            "transformers.utils.chat_template_utils.render_jinja_template (what "
            "apply_chat_template calls): jinja2 ImmutableSandboxedEnvironment, trim_blocks, "
            "lstrip_blocks, loopcontrols; tojson, raise_exception, strftime_now; messages, tools, "
            "documents=None, add_generation_prompt, bos_token, eos_token"
        ),
        "oracle": {"transformers": transformers.__version__, "jinja2": jinja2.__version__},
        "now": NOW.isoformat(),
        "bos_token": BOS,
        "eos_token": EOS,
        "conversations": CONVERSATIONS,
        "templates": templates,
    }
    write_json(args.out, golden)
    n_err = sum("error" in c for t in templates for c in t["cases"])
    print(f"wrote {len(templates)} templates, {sum(len(t['cases']) for t in templates)} cases "
          f"({n_err} refused by the template) to {args.out}")


if __name__ == "__main__":
    main()
