#!/usr/bin/env python3
"""Does the copy win? The induction head's attention and the next-byte logits where a needle's
first digit is due.

    copy_probe.py [--model models/leoam-byte-4l/leoam-byte-4l.gguf] PROMPT_FILE...

Each PROMPT_FILE holds one prompt as `leoam eval --show-prompt` prints it: a JSON string (the
line after the "== ... prompt" header) ending in "... for KEY is:". The prompt and the space the
model answers first are run through the numpy reference (tests/reference/llama_ref.py, f16 KV);
at that last position it prints the mass that layer 1 head 0 (leoam-byte-4l's constructed
induction head) puts on the needle's first digit, the head's three heaviest positions, the digit
wanted and the four highest next-byte logits.
"""

import argparse
import json
import os
import re
import sys

import numpy as np

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
sys.path.insert(0, os.path.join(ROOT, "tests", "reference"))
import llama_ref  # noqa: E402


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=os.path.join(ROOT, "models", "leoam-byte-4l", "leoam-byte-4l.gguf"))
    ap.add_argument("prompts", nargs="+")
    args = ap.parse_args(argv)
    model = llama_ref.load_model(args.model)
    bos = int(model["meta"]["tokenizer.ggml.bos_token_id"])
    for path in args.prompts:
        with open(path, encoding="utf-8") as f:
            text = json.loads(f.read()).encode()
        needle = re.search(rb"for (\w+) is: (\d+)", text)
        if needle is None:
            ap.error(f"{path}: no needle 'for KEY is: DIGITS'")
        digit_pos = needle.start(2) + 1  # BOS is token 0
        tokens = [bos] + list(text) + [ord(" ")]
        seen = {}

        def keep_induction_softmax(layer, scores, positions):
            if layer == 1:
                s = scores[0, -1]
                p = np.exp(s - s.max())
                seen["p"] = p / p.sum()

        cache = llama_ref.new_kv_cache(model)
        for b0 in range(0, len(tokens), 512):
            logits = llama_ref.forward(model, tokens[b0:b0 + 512], cache, kv_f16=True,
                                       drop_keys=keep_induction_softmax)
        p, last = seen["p"], logits[-1]
        heavy = [(int(i), round(float(p[i]), 4)) for i in np.argsort(-p)[:3]]
        best = [(chr(i), round(float(last[i]), 2)) for i in np.argsort(-last)[:4]]
        print(f"{path}: mass on the first digit {float(p[digit_pos]):.4f}, heaviest positions {heavy}, "
              f"wanted {chr(text[needle.start(2)])!r}, top logits {best}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
