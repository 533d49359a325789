#!/usr/bin/env python3
"""How well do chunk abstracts rank the needle for the induction head?

    probe_bounds.py [--model models/leoam-byte-4l/leoam-byte-4l.gguf] [--ctx 4096] [--page 8 64]

Reads the GGUF with the numpy reference of the forward pass (tests/reference/llama_ref.py),
and builds passkey prompts in the eval's format (BOS, src/eval/task.cpp's instruction, a
haystack of held-out KJV text: the last 2% of ../shared/fixtures/text/kjv_bible.txt, the needle
at depths 0.1 .. 0.9, the question). For the induction head (layer 1, head 0) at the last
prompt position, it cuts the keys (rounded to f16, as the store keeps them) into pages of
--page tokens and compares, per page:
    exact   the largest q.k/sqrt(d) in the page (what attention sees)
    box     sum over channels of max(q*min, q*max) / sqrt(d) (Quest's bound, LKA's box)
    signs   the box cut to each row's key signs, the largest over the page's rows
            (src/sparse/sign_bound.h, what leoam ranks by)
and prints the needle page's exact score next to the median page's, and the needle page's rank
among all pages by each bound (0 = first). A policy attending 10% of the pages finds the needle
only when that rank is below a tenth of the pages.
"""

import argparse
import math
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..", "..")
sys.path.insert(0, os.path.join(ROOT, "tests", "reference"))
from llama_ref import apply_rope, load_model, logn_scale, rmsnorm, rope_cos_sin, silu  # noqa: E402

INSTRUCTION = (b"There is important info hidden inside a lot of irrelevant text. Find it and memorize it. "
               b"I will quiz you about the important information there.\n")


def induction_qk(model, tokens):
    """Layer 1's head-0 query at the last position (times 1/sqrt(d)) and its kv head's keys (f16)."""
    hp = model["hp"]
    n = len(tokens)
    n_head, n_head_kv, d = hp["n_head"], hp["n_head_kv"], hp["head_dim"]
    group = n_head // n_head_kv
    cos, sin = rope_cos_sin(hp, model["rope_freqs"], np.arange(n))
    x = model["tok_embd"][np.asarray(tokens)].astype(np.float32)
    for il in (0, 1):
        L = model["layers"][il]
        h = rmsnorm(x, L["attn_norm"], hp["eps"])
        q = apply_rope((h @ L["attn_q"].T).reshape(n, n_head, d), cos, sin, hp["n_rot"], hp["neox"])
        k = apply_rope((h @ L["attn_k"].T).reshape(n, n_head_kv, d), cos, sin, hp["n_rot"], hp["neox"])
        k = k.astype(np.float16).astype(np.float32)
        if il == 1:
            return q[-1, 0] * logn_scale(hp, n - 1) / math.sqrt(d), k[:, 0]
        v = (h @ L["attn_v"].T).reshape(n, n_head_kv, d).astype(np.float16).astype(np.float32)
        out = np.zeros((n, n_head, d), np.float32)
        for hh in range(n_head):
            s = (q[:, hh] @ k[:, hh // group].T) / math.sqrt(d)
            s[np.triu_indices(n, 1)] = -np.inf
            p = np.exp(s - s.max(axis=1, keepdims=True))
            out[:, hh] = (p / p.sum(axis=1, keepdims=True)) @ v[:, hh // group]
        x = x + out.reshape(n, n_head * d) @ L["attn_output"].T
        h = rmsnorm(x, L["ffn_norm"], hp["eps"])
        x = x + (silu(h @ L["ffn_gate"].T) * (h @ L["ffn_up"].T)) @ L["ffn_down"].T


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=os.path.join(ROOT, "models", "leoam-byte-4l", "leoam-byte-4l.gguf"))
    ap.add_argument("--kjv", default=os.path.join(ROOT, "..", "shared", "fixtures", "text", "kjv_bible.txt"))
    ap.add_argument("--ctx", type=int, default=4096)
    ap.add_argument("--page", type=int, nargs="+", default=[8, 64])
    args = ap.parse_args()
    model = load_model(args.model)
    kjv = open(args.kjv, "rb").read()
    haystack = kjv[int(len(kjv) * 0.98):]
    print("| page | depth | needle exact | median exact | rank by box | rank by signs |")
    print("|---|---|---|---|---|---|")
    for depth in (0.1, 0.3, 0.5, 0.7, 0.9):
        key = str(10000 + int(depth * 80000))
        needle = f" The pass key is {key}. Remember it. {key} is the pass key.".encode()
        question = b"\nWhat is the pass key? The pass key is"
        n_hay = args.ctx - 1 - len(INSTRUCTION) - len(needle) - len(question)
        at = int(n_hay * depth)
        hay = haystack[:n_hay]
        tokens = [256] + list(INSTRUCTION + hay[:at] + needle + hay[at:] + question)
        q, k = induction_qk(model, tokens)
        start = 1 + len(INSTRUCTION) + at
        for page in args.page:
            n_pages = len(tokens) // page
            keys = k[:n_pages * page].reshape(n_pages, page, -1)
            exact = (keys @ q).max(axis=1)
            lo, hi = keys.min(axis=1), keys.max(axis=1)
            box = np.maximum(q * lo, q * hi).sum(axis=1)
            neg = np.signbit(keys)
            row_lo = np.where(neg, lo[:, None], np.maximum(0, lo)[:, None])
            row_hi = np.where(neg, np.minimum(0, hi)[:, None], hi[:, None])
            signs = np.maximum(q * row_lo, q * row_hi).sum(axis=2).max(axis=1)
            pages = [p for p in range(n_pages) if p * page < start + len(needle) and (p + 1) * page > start]
            best = max(pages, key=lambda p: exact[p])
            print(f"| {page} | {depth} | {exact[best]:.1f} | {np.median(exact):.1f} | "
                  f"{int((box > box[best]).sum())} of {n_pages} | {int((signs > signs[best]).sum())} of {n_pages} |")


if __name__ == "__main__":
    main()
