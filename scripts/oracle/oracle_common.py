"""Helpers shared by the oracle scripts: file hashing and a diff-friendly JSON layout."""

import hashlib
import json
from pathlib import Path

# A value whose compact form fits in this many characters is written on one line.
INLINE_WIDTH = 250


def sha256(path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _compact(value) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(", ", ": "))


def _is_flat(value) -> bool:
    """A list of scalars, or of short lists of scalars (e.g. [id, logprob] pairs)."""
    if not isinstance(value, list):
        return False
    return all(
        not isinstance(x, (list, dict))
        or (isinstance(x, list) and all(not isinstance(y, (list, dict)) for y in x))
        for x in value
    )


def _format(value, indent: int) -> str:
    text = _compact(value)
    if len(text) <= INLINE_WIDTH or _is_flat(value) or not isinstance(value, (list, dict)):
        return text
    pad = " " * (indent + 1)
    if isinstance(value, dict):
        items = [f"{pad}{_compact(k)}: {_format(v, indent + 1)}" for k, v in value.items()]
        return "{\n" + ",\n".join(items) + "\n" + " " * indent + "}"
    items = [pad + _format(v, indent + 1) for v in value]
    return "[\n" + ",\n".join(items) + "\n" + " " * indent + "]"


def write_json(path, value) -> None:
    """Pretty JSON that keeps short values and flat lists (token ids, top-k pairs) on one line."""
    Path(path).write_text(_format(value, 0) + "\n", encoding="utf-8")
