#!/usr/bin/env python3
"""Fetch the llama.cpp files some tests read: its official chat templates and its vocabulary
test files.

The files are llama.cpp's, not the repository's. Each set has a manifest in tests/goldens naming
the llama-cpp-python sdist, the directory in it and every file with its sha256:
  - tests/goldens/official_chat_templates.json: `vendor/llama.cpp/models/templates/*.jinja`, into
    $TESSERA_CHAT_TEMPLATES_DIR, else <repo>/models/chat-templates;
  - tests/goldens/llama_cpp_vocabs.json: `vendor/llama.cpp/models/ggml-vocab-*` (a vocabulary
    GGUF with its `.inp` texts and `.out` ids), into $TESSERA_LLAMA_CPP_VOCABS_DIR, else
    <repo>/models/llama-cpp-vocabs.
The sdist is downloaded from PyPI (its JSON simple index, sha256-checked) once, for the sets
not already on disk with their sha256. The sdist must hold exactly the files a
manifest lists: a file more or less is an error, as is a changed file.

Usage: python3 scripts/fetch_llama_cpp_files.py   (stdlib only)
"""

import hashlib
import io
import json
import os
import tarfile
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


class FileSet:
    def __init__(self, what, manifest, env, default, select):
        """`select` picks the set's files from {name: bytes} of its sdist directory."""
        self.what, self.env, self.default, self.select = what, env, default, select
        golden = json.loads((REPO / manifest).read_text(encoding="utf-8"))
        self.manifest = manifest
        self.source = golden["source"]
        key = "templates" if "templates" in golden else "files"
        self.expected = {t["file"]: t["sha256"] for t in golden[key]}

    def destination(self) -> Path:
        env = os.environ.get(self.env)
        return Path(env) if env else REPO / self.default

    def up_to_date(self) -> bool:
        dest = self.destination()
        return all((dest / name).is_file() and digest((dest / name).read_bytes()) == sha
                   for name, sha in self.expected.items())


def templates(found: dict) -> dict:
    return {n: d for n, d in found.items() if n.endswith(".jinja")}


def vocabularies(found: dict) -> dict:
    """The `ggml-vocab-*` files of the vocabularies that have test texts (a few have none)."""
    with_texts = {n.split(".gguf")[0] for n in found if n.endswith(".gguf.inp")}
    return {n: d for n, d in found.items()
            if n.startswith("ggml-vocab-") and n.split(".gguf")[0] in with_texts}


SETS = [
    FileSet("chat templates", "tests/goldens/official_chat_templates.json",
            "TESSERA_CHAT_TEMPLATES_DIR", "models/chat-templates", templates),
    FileSet("vocabulary test files", "tests/goldens/llama_cpp_vocabs.json",
            "TESSERA_LLAMA_CPP_VOCABS_DIR", "models/llama-cpp-vocabs", vocabularies),
]


def digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def sdist_bytes(requirement: str) -> bytes:
    """The sdist of `name==version`, from PyPI's JSON simple index (PEP 691), its sha256 checked
    against the index's. Fetched directly: `pip download --no-binary :all:` would first build
    the package's build requirements from source (cmake among them), a quarter of an hour."""
    name, _, version = requirement.partition("==")
    index = f"https://pypi.org/simple/{name}/"
    request = urllib.request.Request(index, headers={"Accept": "application/vnd.pypi.simple.v1+json"})
    with urllib.request.urlopen(request, timeout=180) as response:
        files = json.load(response)["files"]
    wanted = f"{name.replace('-', '_')}-{version}.tar.gz"
    entry = next((f for f in files if f["filename"] in (wanted, f"{name}-{version}.tar.gz")), None)
    if entry is None:
        raise SystemExit(f"{index} lists no sdist {wanted}")
    with urllib.request.urlopen(entry["url"], timeout=180) as response:
        data = response.read()
    if digest(data) != entry["hashes"]["sha256"]:
        raise SystemExit(f"{entry['url']}: sha256 {digest(data)}, the index says {entry['hashes']['sha256']}")
    return data


def files_of_sdist(requirement: str, directories: list) -> dict:
    """{directory: {file name: bytes}} of the files directly under each directory of the sdist."""
    found = {d: {} for d in directories}
    with tarfile.open(fileobj=io.BytesIO(sdist_bytes(requirement)), mode="r:gz") as tar:
        for member in tar.getmembers():
            # <project>-<version>/<directory>/<name>
            _, _, rest = member.name.partition("/")
            parent, _, name = rest.rpartition("/")
            if member.isfile() and parent in found:
                found[parent][name] = tar.extractfile(member).read()
    return found


def check_and_write(s: FileSet, found: dict) -> None:
    found = s.select(found)
    missing = sorted(set(s.expected) - set(found))
    extra = sorted(set(found) - set(s.expected))
    changed = sorted(n for n in set(s.expected) & set(found) if digest(found[n]) != s.expected[n])
    if missing or extra or changed:
        raise SystemExit(f"{s.source['sdist']} does not match {s.manifest}: missing {missing}, "
                         f"not in the manifest {extra}, changed {changed}")
    dest = s.destination()
    dest.mkdir(parents=True, exist_ok=True)
    for name, data in found.items():
        part = dest / (name + ".part")
        part.write_bytes(data)
        part.replace(dest / name)
    print(f"wrote {len(found)} {s.what} from {s.source['sdist']} to {dest}")


def main() -> None:
    stale = []
    for s in SETS:
        if s.up_to_date():
            print(f"{len(s.expected)} {s.what} up to date in {s.destination()}")
        else:
            stale.append(s)
    if not stale:
        return
    sdists = {s.source["sdist"] for s in stale}
    if len(sdists) != 1:
        raise SystemExit(f"the manifests name different sdists: {sorted(sdists)}")
    found = files_of_sdist(sdists.pop(), sorted({s.source["directory"] for s in stale}))
    for s in stale:
        check_and_write(s, found[s.source["directory"]])


if __name__ == "__main__":
    main()
