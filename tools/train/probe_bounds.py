#!/usr/bin/env python3
"""How well do min/max chunk abstracts rank the needle for the induction head?

    probe_bounds.py DIR [--ctx 4096] [--page 8 16]

Loads DIR/checkpoint.pt (train.py) and builds passkey prompts in the eval's format (held-out
KJV haystack, needles at depths 0.1 .. 0.9). For the induction head (layer 1, head 0) at the
last prompt position, it cuts the keys into pages of --page tokens and compares, per page:
    exact   the largest q.k/sqrt(d) in the page (what attention sees)
    bound   sum over channels of max(q*min, q*max) / sqrt(d) (Quest's and LKA's upper bound)
and prints the needle page's exact score and bound next to the median page's, and the needle
page's rank among all pages when ranked by bound (0 = first). A policy attending 10% of the
pages finds the needle only when that rank is below a tenth of the pages.
"""

import argparse
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from llama_model import apply_rope, rms_norm, rope_tables  # noqa: E402
from probe_retrieval import INSTRUCTION, load_trainer  # noqa: E402


def induction_qk(trainer, tokens):
    """The induction head's query at the last position and its keys at every position."""
    model, cfg = trainer.model, trainer.cfg
    n = len(tokens)
    with torch.no_grad():
        x = torch.nn.functional.embedding(torch.tensor([tokens]), trainer.embedding())
        cos, sin = rope_tables(cfg, n)
        mask = torch.full((n, n), float("-inf")).triu(1)
        delta, _ = model.block(0, x, cos, sin, mask)
        h = rms_norm(x + delta, model.p("blk.1.attn_norm.weight"), cfg.eps)
        q = (h @ model.p("blk.1.attn_q.weight").T).view(1, n, cfg.n_heads, cfg.head_dim).transpose(1, 2)
        k = (h @ model.p("blk.1.attn_k.weight").T).view(1, n, cfg.n_kv_heads, cfg.head_dim).transpose(1, 2)
        q, k = apply_rope(q, cos, sin, cfg.n_rot), apply_rope(k, cos, sin, cfg.n_rot)
    scale = 1.0 / np.sqrt(cfg.head_dim)
    return q[0, 0, -1].numpy() * scale, k[0, 0].numpy()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("dir")
    ap.add_argument("--ctx", type=int, default=4096)
    ap.add_argument("--page", type=int, nargs="+", default=[8, 16])
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    trainer = load_trainer(args.dir)
    haystack = trainer.corpus.test[0].tobytes()
    print("| page | depth | needle exact | median exact | needle bound | median bound | needle rank by bound |")
    print("|---|---|---|---|---|---|---|")
    for depth in (0.1, 0.3, 0.5, 0.7, 0.9):
        key = str(10000 + int(depth * 80000))
        needle = f" The pass key is {key}. Remember it. {key} is the pass key.".encode()
        question = b"\nWhat is the pass key? The pass key is"
        n_hay = args.ctx - 1 - len(INSTRUCTION) - len(needle) - len(question)
        hay = haystack[:n_hay]
        at = int(n_hay * depth)
        tokens = [256] + list(INSTRUCTION + hay[:at] + needle + hay[at:] + question)
        q, k = induction_qk(trainer, tokens)
        start = 1 + len(INSTRUCTION) + at
        for page in args.page:
            n_pages = len(tokens) // page
            keys = k[:n_pages * page].reshape(n_pages, page, -1)
            exact = (keys @ q).max(axis=1)
            bound = np.maximum(q * keys.min(axis=1), q * keys.max(axis=1)).sum(axis=1)
            pages = [p for p in range(n_pages) if p * page < start + len(needle) and (p + 1) * page > start]
            best = max(pages, key=lambda p: exact[p])
            rank = int((bound > bound[best]).sum())
            print(f"| {page} | {depth} | {exact[best]:.1f} | {np.median(exact):.1f} | {bound[best]:.1f} | "
                  f"{np.median(bound):.1f} | {rank} of {n_pages} |")


if __name__ == "__main__":
    main()
