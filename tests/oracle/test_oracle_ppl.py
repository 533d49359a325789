#!/usr/bin/env python3
"""tools/eval/oracle_ppl.py on the project's trained model (models/leoam-byte-4l) and a generated text:

- with a budget that covers the whole context, every mode keeps every key, so each perplexity
  equals full attention's exactly;
- with a small budget the modes attend a small share and change the perplexity, and the three
  chunk modes, which differ only in which chunks each head keeps, attend the same share;
- bad flags fail with a message.
"""

import os
import re
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..", "..")
SCRIPT = os.path.join(ROOT, "tools", "eval", "oracle_ppl.py")
LINE = re.compile(r"^(\S+)\s+ppl (\S+)\s+vs full (\S+)\s+attended\s+(\S+)%")


def run(*args):
    return subprocess.run([sys.executable, SCRIPT, *args], capture_output=True, text=True)


def results(proc):
    assert proc.returncode == 0, proc.stderr
    out = {}
    for line in proc.stdout.splitlines():
        m = LINE.match(line)
        assert m, line
        out[m.group(1)] = (float(m.group(2)), float(m.group(4)))
    return out


def main():
    with tempfile.TemporaryDirectory() as tmp:
        text = os.path.join(tmp, "text.txt")
        words = ["the", "river", "stone", "light", "came", "over", "and", "a", "slow", "wind"]
        body = " ".join(words[(i * 7 + i // 3) % len(words)] for i in range(400)) + ".\n"
        with open(text, "w") as f:
            f.write(body * 2)
        common = ["--text", text, "--ctx", "384", "--sink", "4", "--recent", "16", "--block", "128"]

        whole = results(run(*common, "--budget", "1"))
        assert set(whole) == {"full", "recent@1", "top-tokens@1", "top-chunks@1", "kv-chunks@1",
                              "layer-chunks@1"}, whole
        full_ppl, full_att = whole["full"]
        assert full_att == 100.0 and 1.0 < full_ppl < 258.0, whole
        for name, (ppl, att) in whole.items():
            assert ppl == full_ppl and att == 100.0, (name, ppl, att, full_ppl)

        small = results(run(*common, "--budget", "0.05", "--modes",
                            "full,top-tokens,top-chunks,kv-chunks,layer-chunks,recent"))
        chunk_modes = ("top-chunks@0.05", "kv-chunks@0.05", "layer-chunks@0.05")
        for name in ("recent@0.05", "top-tokens@0.05") + chunk_modes:
            ppl, att = small[name]
            assert att < 25.0, (name, att)
            assert ppl != full_ppl, (name, ppl)
        assert len({small[name][1] for name in chunk_modes}) == 1, small

        bad = run(*common, "--modes", "full,bogus")
        assert bad.returncode != 0 and "bogus" in bad.stderr, bad.stderr
        bad = run(*common, "--budget", "1.5")
        assert bad.returncode != 0 and "--budget" in bad.stderr, bad.stderr
        bad = run("--text", text, "--ctx", "100000")
        assert bad.returncode != 0 and "fewer than" in bad.stderr, bad.stderr
    print("OK: oracle_ppl")
    return 0


if __name__ == "__main__":
    sys.exit(main())
