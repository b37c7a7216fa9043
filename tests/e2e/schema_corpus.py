"""A corpus of JSON schemas from the official JSON-Schema-Test-Suite
(https://github.com/json-schema-org/JSON-Schema-Test-Suite), as vendored under `json/tests/` in
the sdist of the `jsonschema` package on PyPI (pinned below). The sdist is fetched with pip at
test time into a temporary directory; nothing fetched is kept in the repository.

`python3 schema_corpus.py --dump FILE` writes it as JSON for the compile benchmark
(`crates/engine/examples/grammar_compile.rs`).

`load(limit_per_file)` returns (name, schema) pairs: the first `limit_per_file` schemas of each
top-level draft 2020-12 test file (the optional/ and format tests are left out), in file order.
"""

import json
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

SDIST = "jsonschema==4.23.0"
DRAFT = "json/tests/draft2020-12/"


def _sdist(dest):
    subprocess.run(
        [sys.executable, "-m", "pip", "download", "--quiet", "--disable-pip-version-check",
         "--no-deps", "--no-binary", ":all:", "--dest", str(dest), SDIST],
        check=True,
        timeout=600,
    )
    return next(Path(dest).glob("jsonschema-*.tar.gz"))


def load(limit_per_file=3):
    with tempfile.TemporaryDirectory() as tmp:
        out = []
        with tarfile.open(_sdist(tmp)) as tar:
            members = sorted(
                (m for m in tar.getmembers() if DRAFT in m.name and m.name.endswith(".json")),
                key=lambda m: m.name,
            )
            for m in members:
                rest = m.name.split(DRAFT, 1)[1]
                if "/" in rest:  # optional/, format tests
                    continue
                groups = json.load(tar.extractfile(m))
                for i, g in enumerate(groups[:limit_per_file]):
                    out.append((f"{rest[:-5]}#{i}", g["schema"]))
        return out


if __name__ == "__main__":
    # `--dump FILE`: write the corpus as a JSON list of [name, schema] (for the compile bench).
    corpus = load()
    if len(sys.argv) == 3 and sys.argv[1] == "--dump":
        Path(sys.argv[2]).write_text(json.dumps(corpus))
    print(len(corpus), "schemas")
