#!/usr/bin/env python3
"""Fetch llama.cpp's official chat templates for the chat-template goldens.

The templates are llama.cpp's files (`models/templates/*.jinja`), not the repository's: this
script downloads the llama-cpp-python sdist named in tests/goldens/official_chat_templates.json
from PyPI with pip (`pip download --no-deps --no-binary :all:`), extracts the `*.jinja` files of
its `vendor/llama.cpp/models/templates`, and checks each against the sha256 the golden records.
The sdist must hold exactly the templates the golden covers: a template more or less is an
error, as is a changed file.

Destination: $TESSERA_CHAT_TEMPLATES_DIR, else <repo>/models/chat-templates (git-ignored).
Nothing is downloaded when every file is already there with its sha256.

Usage: python3 scripts/fetch_chat_templates.py   (the Python whose pip downloads; stdlib only)
"""

import hashlib
import json
import os
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
GOLDEN = REPO / "tests/goldens/official_chat_templates.json"


def destination() -> Path:
    env = os.environ.get("TESSERA_CHAT_TEMPLATES_DIR")
    return Path(env) if env else REPO / "models/chat-templates"


def digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def up_to_date(dest: Path, expected: dict) -> bool:
    return all((dest / name).is_file() and digest((dest / name).read_bytes()) == sha
               for name, sha in expected.items())


def templates_of_sdist(requirement: str, directory: str) -> dict:
    """{file name: bytes} of the `*.jinja` files under `directory` in the sdist."""
    with tempfile.TemporaryDirectory(prefix="tessera-templates-") as tmp:
        subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
                        "--no-binary", ":all:", requirement, "-d", tmp], check=True)
        sdists = list(Path(tmp).glob("*.tar.gz"))
        if len(sdists) != 1:
            raise SystemExit(f"pip download {requirement} gave {sdists}, not one sdist")
        found = {}
        with tarfile.open(sdists[0]) as tar:
            for member in tar.getmembers():
                # <project>-<version>/vendor/llama.cpp/models/templates/<name>.jinja
                _, _, rest = member.name.partition("/")
                parent, _, name = rest.rpartition("/")
                if member.isfile() and parent == directory and name.endswith(".jinja"):
                    found[name] = tar.extractfile(member).read()
        return found


def main() -> None:
    golden = json.loads(GOLDEN.read_text(encoding="utf-8"))
    expected = {t["file"]: t["sha256"] for t in golden["templates"]}
    dest = destination()
    if up_to_date(dest, expected):
        print(f"{len(expected)} chat templates up to date in {dest}")
        return
    source = golden["source"]
    found = templates_of_sdist(source["sdist"], source["directory"])
    missing = sorted(set(expected) - set(found))
    extra = sorted(set(found) - set(expected))
    changed = sorted(n for n in set(expected) & set(found) if digest(found[n]) != expected[n])
    if missing or extra or changed:
        raise SystemExit(f"{source['sdist']} does not match {GOLDEN.name}: missing {missing}, "
                         f"not in the golden {extra}, changed {changed}")
    dest.mkdir(parents=True, exist_ok=True)
    for name, data in found.items():
        part = dest / (name + ".part")
        part.write_bytes(data)
        part.replace(dest / name)
    print(f"wrote {len(found)} chat templates from {source['sdist']} to {dest}")


if __name__ == "__main__":
    main()
