"""scripts/bench_models.py against fake `throughput` and `llama-bench` binaries: the medians
table and each core-complex state's ratios come out of the runs it was given.

Run with `python3 -m unittest discover -s tests/scripts` (scripts/test.sh does); standard
library only. The fakes answer from counters in a temporary directory: the core-to-core probe
reads ~45 ns for the first four probes (one core complex) and ~400 ns after (two), and each
binary's n-th run reports its n-th figures, so the expected medians and ratios are known.
"""

import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, "scripts", "bench_models.py")

COUNTER = textwrap.dedent(
    """
    import json, os, sys
    def bump(name):
        path = os.path.join(os.environ["FAKE_DIR"], name)
        n = int(open(path).read()) if os.path.exists(path) else 0
        open(path, "w").write(str(n + 1))
        return n
    """
)

# `throughput --probe` prints "core-to-core N ns"; a run writes pp512 / tg128_b1 to --json.
THROUGHPUT = COUNTER + textwrap.dedent(
    """
    if sys.argv[1] == "--probe":
        print(f"core-to-core {45 if bump('probe') < 4 else 400} ns")
        sys.exit(0)
    n = bump("tessera")
    out = sys.argv[sys.argv.index("--json") + 1]
    json.dump({"pp512": [300.0, 500.0][n], "tg128_b1": [60.0, 80.0][n]}, open(out, "w"))
    """
)

# `llama-bench -o json`: one test with 512 prompt tokens, one with 128 generated.
LLAMA_BENCH = COUNTER + textwrap.dedent(
    """
    n = bump("llama")
    print(json.dumps([
        {"n_prompt": 512, "n_gen": 0, "avg_ts": [100.0, 100.0][n]},
        {"n_prompt": 0, "n_gen": 128, "avg_ts": [40.0, 40.0][n]},
    ]))
    """
)


class BenchModels(unittest.TestCase):
    def setUp(self):
        if not os.path.exists("/usr/bin/time"):
            self.fail("/usr/bin/time is missing (Debian: apt-get install time)")
        self.dir = tempfile.mkdtemp()
        self.bins = {}
        for name, body in (("throughput", THROUGHPUT), ("llama-bench", LLAMA_BENCH)):
            path = os.path.join(self.dir, name)
            with open(path, "w") as f:
                f.write(f"#!{sys.executable}\n{body}")
            os.chmod(path, 0o755)
            self.bins[name] = path
        open(os.path.join(self.dir, "tiny.gguf"), "w").close()

    def tearDown(self):
        shutil.rmtree(self.dir)

    def test_medians_and_each_states_ratios(self):
        out = subprocess.run(
            [
                sys.executable,
                SCRIPT,
                "--throughput",
                self.bins["throughput"],
                "--llama-bench",
                self.bins["llama-bench"],
                "--models-dir",
                self.dir,
                "--models",
                "tiny",
                "--rounds",
                "2",
            ],
            check=True,
            capture_output=True,
            text=True,
            env={**os.environ, "FAKE_DIR": self.dir},
        ).stdout
        # Round 1 runs Tessera then llama-bench on one complex; round 2 the other order on two.
        self.assertIn("round 1 tiny", out)
        self.assertRegex(out, r"round 1 tiny +tessera .*45 / 45 ns: one\)")
        self.assertRegex(out, r"round 2 tiny +llama .*400 / 400 ns: two\)")
        # Medians: decode (60, 80) / (40, 40), prefill (300, 500) / (100, 100).
        self.assertIn("| tiny | 70.0 | 40.0 | 1.75× | 400.0 | 100.0 | 4.00× |", out)
        self.assertIn(
            "tiny, runs on one core complex (1 Tessera, 1 llama-bench): decode 60.0 / 40.0"
            " (1.50×), prefill 300.0 / 100.0 (3.00×)",
            out,
        )
        self.assertIn(
            "tiny, runs on two core complexes (1 Tessera, 1 llama-bench): decode 80.0 / 40.0"
            " (2.00×), prefill 500.0 / 100.0 (5.00×)",
            out,
        )


if __name__ == "__main__":
    unittest.main()
