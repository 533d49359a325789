#!/usr/bin/env python3
"""bench/kv_quant_error.py on stories260K: it prints every layout, f16 against itself is exact,
and the KL divergences order as docs/kv-store.md says (keys by channel far below keys by
token at int4). Exit 77 (skipped) without the fixtures. Usage: test_kv_quant_error.py LEOAM_BINARY"""
import os
import re
import subprocess
import sys

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
FIXTURES = os.path.join(ROOT, "..", "shared", "fixtures")
MODEL = os.path.join(FIXTURES, "models", "stories260K", "stories260K.gguf")
TEXT = os.path.join(FIXTURES, "text", "pg19_firstbook.txt")


def main():
    if not os.path.exists(MODEL) or not os.path.exists(TEXT):
        print(f"skipped: fixture absent: {MODEL} or {TEXT}")
        return 77
    out = subprocess.run([sys.executable, os.path.join(ROOT, "bench", "kv_quant_error.py"), "--model", MODEL,
                          "--text", TEXT, "--leoam", sys.argv[1], "-n", "256", "-e", "32"],
                         check=True, capture_output=True, text=True).stdout
    rows = {}
    for line in out.splitlines():
        m = re.match(r"\| (.+?) \| ([\d.]+) \| ([\d.]+) \| ([+-][\d.]+)% \| ([\d.]+) \|", line)
        if m:
            rows[m.group(1)] = (float(m.group(2)), float(m.group(3)), float(m.group(5)))
    names = ["f16", "token-int8", "token-int4", "channel-int4-32 (K), token-int4 (V)"]
    assert list(rows) == names, out
    assert rows["f16"][2] == 0.0, out
    assert rows["token-int4"][0] == 5.0 and rows[names[3]][0] == 5.0, out
    kl = {n: rows[n][2] for n in names}
    assert 0 < kl["token-int8"] < kl["token-int4"], out
    assert kl[names[3]] * 10 < kl["token-int4"], out
    print("ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
