#!/usr/bin/env python3
"""Where does the retrieval head look? Attention mass on the needle at the induction head.

    probe_retrieval.py DIR [--ctx 4096] [--samples 5]

Loads DIR/checkpoint.pt (written by train.py) and builds passkey prompts in the eval's format
(BOS, instruction, haystack of held-out KJV text, the needle at depths spread over the
context, the question). For the last prompt position and each answer digit (teacher-forced),
reports the attention mass of layer 1 head 0 (the constructed induction head) on the needle's
bytes, on BOS (its "no match" rest) and on the last 64 positions, and whether the greedy next
byte is right. Prints a JSON summary.
"""

import argparse
import json
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from train import Trainer  # noqa: E402

INSTRUCTION = (b"There is important info hidden inside a lot of irrelevant text. Find it and memorize it. "
               b"I will quiz you about the important information there.\n")


def load_trainer(out_dir):
    """The Trainer of a train.py output directory, with its checkpoint loaded."""
    summary = json.load(open(os.path.join(out_dir, "train_summary.json")))
    targs = argparse.Namespace(ctx=summary["config"]["ctx_train"], max_ctx=summary["circuit"]["max_ctx"], seed=0,
                               lr=0.0, texts=summary["texts"], out=out_dir, resume=True, init=None,
                               logn_length=None, copy_norm=None)
    trainer = Trainer(targs)
    trainer.load()
    return trainer


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("dir")
    ap.add_argument("--ctx", type=int, default=4096)
    ap.add_argument("--samples", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    trainer = load_trainer(args.dir)
    model, embed = trainer.model, trainer.embedding().detach()
    haystack = trainer.corpus.test[0]  # held-out KJV
    rng = np.random.default_rng(7)
    rows = []
    for i in range(args.samples):
        key = str(rng.integers(10000, 99999))
        needle = f" The pass key is {key}. Remember it. {key} is the pass key.".encode()
        question = b"\nWhat is the pass key? The pass key is"
        n_hay = args.ctx - 1 - len(INSTRUCTION) - len(needle) - len(question)
        start = int(rng.integers(0, len(haystack) - n_hay))
        hay = haystack[start:start + n_hay].tobytes()
        at = int(n_hay * (i + 0.5) / args.samples)
        prompt = [256] + list(INSTRUCTION + hay[:at] + needle + hay[at:] + question)
        answer = list(f" {key}".encode())
        tokens = torch.tensor([prompt + answer])
        with torch.no_grad():
            logits, att = model(tokens, embed=embed, attn_probe=(1, 0))
        lo = 1 + len(INSTRUCTION) + at
        for step in range(len(answer)):
            pos = len(prompt) - 1 + step
            a = att[0, pos]
            rows.append({"depth": round((i + 0.5) / args.samples, 2), "step": step,
                         "needle_mass": float(a[lo:lo + len(needle)].sum()), "bos_mass": float(a[0]),
                         "recent64_mass": float(a[pos - 63:pos + 1].sum()),
                         "correct": int(logits[0, pos].argmax()) == answer[step]})
    mass = np.array([r["needle_mass"] for r in rows])
    out = {"ctx": args.ctx, "samples": args.samples, "positions": len(rows),
           "needle_mass_median": float(np.median(mass)), "needle_mass_min": float(mass.min()),
           "recent64_mass_median": float(np.median([r["recent64_mass"] for r in rows])),
           "next_byte_accuracy": float(np.mean([r["correct"] for r in rows]))}
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
