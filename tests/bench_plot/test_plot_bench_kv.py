"""Test of bench/plot_bench_kv.py (no pytest needed):

    /usr/bin/python3 tests/bench_plot/test_plot_bench_kv.py

Writes small `leoam bench kv --json` files in a temporary directory, runs the script on them and
checks the PNGs it writes (the exact set, the PNG signature, a plausible IHDR size) and its
errors. Exits 77 (ctest's SKIP_RETURN_CODE) when matplotlib is not importable.
"""

import json
import os
import struct
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.normpath(os.path.join(HERE, "..", "..", "bench", "plot_bench_kv.py"))
SKIP = 77
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def result(policy, chunk, ms, attended):
    return {"n_ctx": 16384, "policy": policy, "chunk_tokens": chunk, "ms_per_token": ms, "bound_ms": ms / 2,
            "attended_fraction": attended,
            "breakdown": {"steps": 6, "step_ms": ms, "weights_ms": ms / 4, "selection_ms": ms / 4,
                          "io_wait_ms": ms / 4, "decode_ms": 0.0, "attention_ms": ms / 8, "other_ms": ms / 8}}


def write(path, results):
    with open(path, "w") as f:
        json.dump({"model": {"path": "m.gguf"}, "results": results}, f)


def run(*args):
    return subprocess.run([sys.executable, SCRIPT, *args], capture_output=True, text=True)


def png_size(path):
    with open(path, "rb") as f:
        head = f.read(24)
    assert head[:8] == PNG_SIGNATURE, f"{path}: not a PNG"
    return struct.unpack(">II", head[16:24])


def main():
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        print("matplotlib missing: skipped")
        return SKIP
    failures = []

    def check(cond, what):
        if not cond:
            failures.append(what)

    with tempfile.TemporaryDirectory() as tmp:
        policies = os.path.join(tmp, "policies.json")
        write(policies, [result("full", 64, 900.0, 1.0), result("leoam", 8, 120.0, 0.126)])
        sweep = os.path.join(tmp, "sweep.json")
        write(sweep, [result("leoam", c, 100.0 + c, 0.1 + c / 2048) for c in (8, 32, 128)])

        out = os.path.join(tmp, "one")
        r = run(policies + "=policies", "--out", out, "--title", "test")
        check(r.returncode == 0, f"a policy file: exit {r.returncode}: {r.stderr}")
        check(sorted(os.listdir(out)) == ["breakdown.png", "ms_per_token.png"],
              f"a policy file without a sweep: {sorted(os.listdir(out))}")
        check(r.stdout.split() == [os.path.join(out, "ms_per_token.png"), os.path.join(out, "breakdown.png")],
              f"printed paths: {r.stdout!r}")
        for name in os.listdir(out):
            w, h = png_size(os.path.join(out, name))
            check(w >= 400 and h >= 300, f"{name}: {w}x{h}")

        out = os.path.join(tmp, "two")
        r = run(policies, sweep + "=chunks", "--out", out)
        check(r.returncode == 0, f"two files: exit {r.returncode}: {r.stderr}")
        check(sorted(os.listdir(out)) == ["breakdown.png", "chunk_sweep.png", "ms_per_token.png"],
              f"with a sweep: {sorted(os.listdir(out))}")

        bad = os.path.join(tmp, "bad.json")
        with open(bad, "w") as f:
            f.write('{"results": [{"policy": "leoam"}]}')
        r = run(bad, "--out", os.path.join(tmp, "bad"))
        check(r.returncode == 2 and "bad.json" in r.stderr and "lacks" in r.stderr,
              f"a result without its fields: exit {r.returncode}: {r.stderr}")
        with open(bad, "w") as f:
            f.write("not json")
        r = run(bad, "--out", os.path.join(tmp, "bad"))
        check(r.returncode == 2 and "bad.json" in r.stderr, f"not JSON: exit {r.returncode}: {r.stderr}")
        r = run(os.path.join(tmp, "none.json"), "--out", os.path.join(tmp, "bad"))
        check(r.returncode == 2, f"a missing file: exit {r.returncode}")
        empty = os.path.join(tmp, "empty.json")
        write(empty, [])
        r = run(empty, "--out", os.path.join(tmp, "bad"))
        check(r.returncode == 2 and "no results" in r.stderr, f"no results: exit {r.returncode}: {r.stderr}")
        check(not os.path.exists(os.path.join(tmp, "bad")), "a refused input wrote a directory")

    for f in failures:
        print("FAIL:", f)
    print("ok" if not failures else f"{len(failures)} failure(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
