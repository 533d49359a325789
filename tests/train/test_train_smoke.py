#!/usr/bin/env python3
"""Smoke test of tools/train/train.py: a few steps on tiny windows, export, `leoam gguf pack`,
and the engine loads and runs the result; then probe_retrieval.py, --init, --copy-norm and
--resume on it. Skipped (exit 77) without numpy, python3-torch or python3-scipy.

    test_train_smoke.py LEOAM_BINARY
"""

import json
import os
import subprocess
import sys
import tempfile

SKIP = 77
HERE = os.path.dirname(os.path.abspath(__file__))
TRAIN = os.path.join(HERE, "..", "..", "tools", "train", "train.py")
PROBE = os.path.join(HERE, "..", "..", "tools", "train", "probe_retrieval.py")
TEXTS = os.path.join(HERE, "..", "..", "..", "shared", "fixtures", "text")
sys.path.insert(0, os.path.join(HERE, "..", "reference"))


def main():
    try:
        import numpy as np
        import scipy  # noqa: F401
        import torch  # noqa: F401
        from dequant import dequantize
        from gguf_read import read_gguf
    except ImportError as e:
        print(f"SKIP: the training script needs numpy, python3-torch and python3-scipy ({e})")
        return SKIP
    if not os.path.isdir(TEXTS):
        print(f"SKIP: {TEXTS} is absent (the training texts live in ../shared)")
        return SKIP
    leoam = sys.argv[1]
    with tempfile.TemporaryDirectory() as out:
        cmd = [sys.executable, TRAIN, "--out", out, "--max-steps", "3", "--ctx", "128", "--eval-ctx", "128",
               "--batch", "2", "--eval-every", "2", "--texts", os.path.join(TEXTS, "devils_dictionary.txt"),
               "--logn-length", "64", "--leoam", leoam]
        subprocess.run(cmd, check=True, timeout=600)
        log = [json.loads(line) for line in open(os.path.join(out, "log.jsonl"))]
        assert [r["step"] for r in log] == [1, 2, 3], log
        assert "held_out_bpb" in log[1], log[1]
        summary = json.load(open(os.path.join(out, "train_summary.json")))
        assert summary["steps"] == 3 and 0 < summary["held_out_bpb"] < 64, summary
        gguf = os.path.join(out, "model.gguf")
        info = subprocess.run([leoam, "gguf", "info", gguf], check=True, capture_output=True, text=True).stdout
        assert "llama.attention.key_length" in info and "tokenizer.ggml.model" in info, info
        assert "leoam.attention.logn_length" in info, info  # --logn-length, used by the 128-byte windows
        run = subprocess.run([leoam, "run", "-m", gguf, "-p", "The pass key is", "-n", "4", "--temp", "0"],
                             check=True, capture_output=True, text=True, errors="replace")
        assert "generated" in run.stderr, run.stderr
        # Starting from the packed model, before any step, scores what the training ended at (F16 rounding aside).
        with tempfile.TemporaryDirectory() as again:
            subprocess.run(cmd[:3] + [again, "--minutes", "0", "--init", gguf] + cmd[6:-2], check=True, timeout=600)
            restart = json.load(open(os.path.join(again, "train_summary.json")))
            assert restart["steps"] == 0 and abs(restart["held_out_bpb"] - summary["held_out_bpb"]) < 0.01, restart
        # probe_retrieval.py reads the run's checkpoint (a 3-step model: only its output's form is checked).
        probe = subprocess.run([sys.executable, PROBE, out, "--ctx", "512", "--samples", "1"], check=True,
                               capture_output=True, text=True, timeout=600)
        report = json.loads(probe.stdout[probe.stdout.index("{"):])
        assert report["positions"] > 0 and 0 <= report["needle_mass_median"] <= 1, report
        # --copy-norm on a packed model changes the induction head's copy and nothing else.
        with tempfile.TemporaryDirectory() as louder:
            subprocess.run(cmd[:3] + [louder, "--minutes", "0", "--init", gguf, "--copy-norm", "7.8"] + cmd[6:],
                           check=True, timeout=600)
            assert json.load(open(os.path.join(louder, "train_summary.json")))["circuit"]["copy_norm"] == 7.8
            _, before = read_gguf(gguf)
            _, after = read_gguf(os.path.join(louder, "model.gguf"))
            changed = [n for n in before if not np.array_equal(dequantize(*before[n]), dequantize(*after[n]))]
            assert changed == ["blk.1.attn_output.weight"], changed
            old, new = dequantize(*before[changed[0]]), dequantize(*after[changed[0]])
            diff = old != new
            assert diff[:, 64:].sum() == 0 and diff.sum() == 7, np.argwhere(diff)  # head 0's 7 copy entries
            assert np.allclose(new[diff] / old[diff], 7.8 / 6.0, rtol=1e-3), new[diff] / old[diff]
            # Without --copy-norm, --init and --resume keep the norm the model was built with.
            louder_gguf = os.path.join(louder, "model.gguf")
            with tempfile.TemporaryDirectory() as kept:
                subprocess.run(cmd[:3] + [kept, "--minutes", "0", "--init", louder_gguf] + cmd[6:], check=True,
                               timeout=600)
                circuit = json.load(open(os.path.join(kept, "train_summary.json")))["circuit"]
                assert abs(circuit["copy_norm"] - 7.8) < 0.01, circuit
                _, again = read_gguf(os.path.join(kept, "model.gguf"))
                assert all(np.array_equal(dequantize(*after[n]), dequantize(*again[n])) for n in after)
            subprocess.run(cmd[:3] + [louder, "--max-steps", "1"] + cmd[6:] + ["--resume"], check=True, timeout=600)
            assert json.load(open(os.path.join(louder, "train_summary.json")))["circuit"]["copy_norm"] == 7.8
        bad = subprocess.run(cmd[:3] + [os.path.join(out, "bad"), "--copy-norm", "0"], capture_output=True, text=True,
                             timeout=600)
        assert bad.returncode == 2 and "--copy-norm: 0.0 is not positive" in bad.stderr, bad.stderr
        # A model of another shape is refused by name.
        stories = os.path.join(TEXTS, "..", "models", "stories260K", "stories260K.gguf")
        bad = subprocess.run(cmd[:3] + [os.path.join(out, "bad"), "--minutes", "0", "--init", stories] + cmd[6:-2],
                             capture_output=True, text=True, timeout=600)
        assert bad.returncode != 0 and "not this model's" in bad.stderr, bad.stderr
        bad = subprocess.run(cmd[:3] + [os.path.join(out, "bad"), "--logn-length", "1"], capture_output=True, text=True,
                             timeout=600)
        assert bad.returncode == 2 and "--logn-length: 1 is not" in bad.stderr, bad.stderr
        # Resuming continues the step count from the checkpoint, and keeps its log-n length.
        resume = cmd[:5] + ["6"] + [a for a in cmd[6:] if a not in ("--logn-length", "64")] + ["--resume"]
        subprocess.run(resume, check=True, timeout=600)
        log = [json.loads(line) for line in open(os.path.join(out, "log.jsonl"))]
        assert [r["step"] for r in log] == [1, 2, 3, 4, 5, 6], log
        assert json.load(open(os.path.join(out, "train_summary.json")))["config"]["logn_length"] == 64
    print("train smoke test passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
