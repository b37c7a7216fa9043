"""Extract one Jane Austen novel as plain text from Debian's r-cran-janeaustenr package.

The package stores the novels (public-domain Project Gutenberg texts) as R character
vectors, one element per line, in R's lazy-load database data/Rdata.{rdx,rdb}.
This script reads that database without R: the .rdx index is a gzip-compressed R
serialization of a list giving, per variable, an (offset, length) into the .rdb;
each .rdb record is a 4-byte big-endian uncompressed length followed by a zlib stream
holding an R XDR serialization. Only the node types that occur in these files are
understood (pairlists, symbols, strings, integer/real/logical/generic vectors).

Usage:
    apt-get download r-cran-janeaustenr && dpkg-deb -x r-cran-janeaustenr_*.deb pkg
    python extract_austen.py pkg/usr/lib/R/site-library/janeaustenr/data prideprejudice 7 \
        > tests/data/pride_and_prejudice_ch1-7.txt

The optional third argument keeps only the title and the first N chapters (the text up to
the line "Chapter N+1"), lines joined with "\n", trailing blank lines dropped, one final "\n".
"""

import gzip
import re
import struct
import sys
import zlib
from pathlib import Path


class RReader:
    """Minimal reader of R's XDR serialization format (versions 2 and 3)."""

    def __init__(self, data: bytes):
        self.buf = data
        self.pos = 0
        self.refs = []

    def _int(self) -> int:
        (v,) = struct.unpack_from(">i", self.buf, self.pos)
        self.pos += 4
        return v

    def _length(self) -> int:
        n = self._int()
        if n == -1:
            hi, lo = self._int(), self._int()
            n = (hi << 32) + lo
        return n

    def read(self):
        if self.buf[:2] != b"X\n":
            raise ValueError("not an XDR R serialization")
        self.pos = 2
        version = self._int()
        self._int()  # R version that wrote it
        self._int()  # minimal R version to read it
        if version == 3:
            n = self._int()
            self.pos += n  # native encoding name
        return self._item()

    def _item(self):
        flags = self._int()
        kind = flags & 0xFF
        has_attr = bool(flags & (1 << 9))
        has_tag = bool(flags & (1 << 10))
        if kind == 254:  # NILVALUE_SXP
            return None
        if kind in (242, 241, 253, 252, 251, 247):  # special environments/values
            return None
        if kind == 255:  # REFSXP
            idx = flags >> 8
            if idx == 0:
                idx = self._int()
            return self.refs[idx - 1]
        if kind == 1:  # SYMSXP
            name = self._item()
            self.refs.append(name)
            return name
        if kind == 9:  # CHARSXP
            n = self._int()
            if n == -1:
                return None
            s = self.buf[self.pos : self.pos + n].decode("utf-8")
            self.pos += n
            return s
        if kind == 2:  # LISTSXP (pairlist) -> list of (tag, value)
            out = []
            while True:
                if has_attr:
                    self._item()
                tag = self._item() if has_tag else None
                out.append((tag, self._item()))
                flags = self._int()
                kind = flags & 0xFF
                has_attr = bool(flags & (1 << 9))
                has_tag = bool(flags & (1 << 10))
                if kind == 254:
                    return out
                if kind != 2:
                    raise ValueError(f"unexpected pairlist tail type {kind}")
        if kind == 16:  # STRSXP
            value = [self._item() for _ in range(self._length())]
        elif kind == 19:  # VECSXP
            value = [self._item() for _ in range(self._length())]
        elif kind in (13, 10):  # INTSXP, LGLSXP
            n = self._length()
            value = list(struct.unpack_from(f">{n}i", self.buf, self.pos))
            self.pos += 4 * n
        elif kind == 14:  # REALSXP
            n = self._length()
            value = list(struct.unpack_from(f">{n}d", self.buf, self.pos))
            self.pos += 8 * n
        else:
            raise ValueError(f"unsupported R type {kind}")
        if has_attr:
            attrs = dict(self._item())
            if "names" in attrs and kind == 19:
                return dict(zip(attrs["names"], value))
        return value


def load_variable(data_dir: Path, name: str) -> list:
    index = RReader(gzip.decompress((data_dir / "Rdata.rdx").read_bytes())).read()
    offset, length = index["variables"][name]
    raw = (data_dir / "Rdata.rdb").read_bytes()[int(offset) : int(offset) + int(length)]
    (expected,) = struct.unpack(">I", raw[:4])
    payload = zlib.decompress(raw[4:])
    if len(payload) != expected:
        raise ValueError("rdb record length mismatch")
    return RReader(payload).read()


def main() -> None:
    data_dir, name = Path(sys.argv[1]), sys.argv[2]
    lines = load_variable(data_dir, name)
    text = "\n".join("" if line is None else line for line in lines) + "\n"
    if len(sys.argv) > 3:
        chapters = int(sys.argv[3])
        starts = [m.start() for m in re.finditer(r"^Chapter \d+", text, re.M)]
        if chapters < len(starts):
            text = text[: starts[chapters]].rstrip("\n") + "\n"
    sys.stdout.write(text)


if __name__ == "__main__":
    main()
