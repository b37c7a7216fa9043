"""Chat-template goldens: a set of conversations rendered by the model's own template, as
llama-cpp-python renders it.

The renderer is llama-cpp-python's `Jinja2ChatFormatter` (llama_cpp/llama_chat_format.py), the one
`Llama.create_chat_completion` uses for a GGUF that carries `tokenizer.chat_template`: Jinja2's
ImmutableSandboxedEnvironment with trim_blocks and lstrip_blocks, given `messages`,
`add_generation_prompt`, `bos_token` and `eos_token` (the texts of the vocabulary's BOS and EOS
tokens), `raise_exception` and no tools. That is also what Hugging Face transformers and
llama-server's `--jinja` path (minja) render. Each case also records, for comparison only, what
llama.cpp's C++ `llama_chat_apply_template` makes of the same template (it does not run Jinja: it
recognises the template by substrings and applies a built-in format, e.g. plain ChatML without
Qwen's default system message), or the error it gives.

The conversations cover a system message, multi-turn chats with and without one, a conversation
ending with an assistant turn, a lone system message, empty content, surrounding whitespace and
non-ASCII text; each is rendered with and without the generation prompt.

Usage: python chat_template_goldens.py [--model-name NAME] [--model PATH] [--out PATH]
The output defaults to tests/goldens/<stem>_chat_template.json.
"""

import argparse
import ctypes
from pathlib import Path

import jinja2
import llama_cpp
from llama_cpp import Llama
from llama_cpp.llama_chat_format import Jinja2ChatFormatter
from oracle_common import MODELS, add_model_args, model_path, sha256, write_json

REPO = Path(__file__).resolve().parents[2]

CONVERSATIONS = [
    ("user_only", [("user", "Hello! Who are you?")]),
    ("system_user", [("system", "You are a terse assistant. Answer in one sentence."),
                     ("user", "What is the capital of France?")]),
    ("multi_turn", [("system", "You are a helpful coding assistant."),
                    ("user", "Write a Python function that adds two numbers."),
                    ("assistant", "def add(a, b):\n    return a + b"),
                    ("user", "Now make it add three numbers.")]),
    ("multi_turn_no_system", [("user", "Hi!"),
                              ("assistant", "Hello! How can I help you today?"),
                              ("user", "Tell me a joke about cats.")]),
    ("ends_with_assistant", [("system", "Be brief."),
                             ("user", "Name a prime number."),
                             ("assistant", "7")]),
    ("system_only", [("system", "You only answer in French.")]),
    ("empty_content", [("user", "")]),
    ("whitespace", [("system", "  padded system  \n"),
                    ("user", "\n  indented question?\n\n"),
                    ("assistant", " answer with spaces "),
                    ("user", "trailing newline\n")]),
    ("unicode", [("user", "Traduis « bonjour » en japonais 🇯🇵 et en chinois：你好？")]),
]


def builtin_render(template: str, messages: list, add_generation_prompt: bool):
    """llama.cpp's llama_chat_apply_template on the GGUF's template: (text, None) or (None, error)."""
    n = len(messages)
    keep = [(m["role"].encode(), m["content"].encode()) for m in messages]
    chat = (llama_cpp.llama_chat_message * n)()
    for i, (role, content) in enumerate(keep):
        chat[i].role = role
        chat[i].content = content
    size = 1 << 16
    buf = ctypes.create_string_buffer(size)
    got = llama_cpp.llama_chat_apply_template(template.encode(), chat, n, add_generation_prompt, buf, size)
    if got < 0:
        return None, f"llama_chat_apply_template returned {got} (template not recognised)"
    return buf.raw[:got].decode("utf-8"), None


def render_cases(llm: Llama, template: str) -> list:
    vocab = llm._model
    bos = vocab.token_get_text(llm.token_bos()) if llm.token_bos() != -1 else ""
    eos = vocab.token_get_text(llm.token_eos()) if llm.token_eos() != -1 else ""
    cases = []
    for name, turns in CONVERSATIONS:
        messages = [{"role": r, "content": c} for r, c in turns]
        for add_gen in (True, False):
            formatter = Jinja2ChatFormatter(template, eos_token=eos, bos_token=bos,
                                            add_generation_prompt=add_gen)
            case = {"name": name, "add_generation_prompt": add_gen, "messages": messages}
            try:
                case["rendered"] = formatter(messages=messages).prompt
            except (jinja2.TemplateError, ValueError) as e:
                case["error"] = str(e)
            text, err = builtin_render(template, messages, add_gen)
            case["llama_cpp_builtin"] = text if err is None else {"error": err}
            case["builtin_equal"] = text == case.get("rendered")
            cases.append(case)
    return cases, bos, eos


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_model_args(ap)
    ap.add_argument("--out", default=None, help="default: tests/goldens/<stem>_chat_template.json")
    args = ap.parse_args()
    spec = MODELS[args.model_name]
    model = args.model or model_path(args.model_name)
    out = args.out or str(REPO / "tests/goldens" / f"{spec['stem']}_chat_template.json")

    llm = Llama(model_path=model, vocab_only=True, verbose=False)
    template = llm.metadata.get("tokenizer.chat_template")
    if template is None:
        raise SystemExit(f"{model} has no tokenizer.chat_template")
    cases, bos, eos = render_cases(llm, template)
    golden = {
        "description": f"Chat template renderings of {spec['title']}'s tokenizer.chat_template",
        "generator": "scripts/oracle/chat_template_goldens.py",
        "model": {"file": Path(model).name, "sha256": sha256(model)},
        "renderer": (
            "llama-cpp-python Jinja2ChatFormatter (jinja2 ImmutableSandboxedEnvironment, trim_blocks, "
            "lstrip_blocks) over the GGUF's tokenizer.chat_template, with messages, "
            "add_generation_prompt, bos_token, eos_token and raise_exception; no tools"
        ),
        "oracle": {"llama_cpp_python": llama_cpp.__version__, "jinja2": jinja2.__version__},
        "bos_token": bos,
        "eos_token": eos,
        "chat_template": template,
        "cases": cases,
    }
    write_json(out, golden)
    print(f"wrote {len(cases)} cases to {out}")


if __name__ == "__main__":
    main()
