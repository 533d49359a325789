#!/usr/bin/env python3
"""The perplexity that sparse attention could reach with perfect ranking (an oracle).

    oracle_ppl.py [--model models/leoam-byte-4l/leoam-byte-4l.gguf] [--text FILE] [--ctx 8192]
                  [--budget 0.1] [--modes full,recent,top-tokens,top-chunks,kv-chunks,layer-chunks]
                  [--chunk 8]

Scores the first --ctx tokens of --text (BOS, then one token per byte: a byte-level vocab such
as leoam-byte-4l's) with the numpy reference of the forward pass (tests/reference/llama_ref.py,
K and V rounded to f16 as the engine stores them), every position attending to:
    full        every earlier position;
    recent      the sink and the last --budget of the context (StreamingLLM);
    top-tokens  the sink, the recent window and, of the positions between them, the --budget
                share of the context with the highest exact scores q.k, per query head;
    top-chunks  the same in aligned chunks of --chunk positions, ranked by their highest exact
                score (what chunk bounds approximate from above: a perfect bound);
    kv-chunks   aligned chunks, one set per KV head, ranked by the exact attention mass that
                its query heads put on them (summed), as a selection shared by a GQA group;
    layer-chunks  aligned chunks, one set per layer shared by every head, each chunk scoring its
                best KV head's summed exact mass: leoam's selection (one set of chunks per layer,
                `--group-combine sum`) with perfect scores.
--sink and --recent are `leoam eval`'s --kv-sink and --kv-recent (4 and 64 by default). The
oracles rank by the real scores (or attention mass) of each query head, which no policy knows
before reading the keys: the perplexity they reach is the best a top-k selection at that budget
can do, and so says whether a gap to full attention comes from the ranking or from the budget
itself.

Prints one line per mode and budget: perplexity, its change against full, and the keys attended
as a share of those visible, over every layer, head and position (`leoam eval`'s "attended").
"""

import argparse
import math
import os
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..", "..")
sys.path.insert(0, os.path.join(ROOT, "tests", "reference"))
import llama_ref  # noqa: E402

MODES = ("full", "recent", "top-tokens", "top-chunks", "kv-chunks", "layer-chunks")


class Selector:
    """drop_keys for llama_ref.forward: keeps what `mode` attends to, and counts it."""

    def __init__(self, mode, budget, sink, recent, chunk, n_head_kv):
        self.mode, self.budget, self.sink, self.recent, self.chunk = mode, budget, sink, recent, chunk
        self.n_head_kv = n_head_kv
        self.kept = 0  # keys attended, over every layer, head and position
        self.visible = 0  # keys visible (causal), the same

    def __call__(self, layer, scores, positions):
        n_head = scores.shape[0]
        for b, pos in enumerate(positions):
            ctx = int(pos) + 1
            self.visible += n_head * ctx
            if self.mode == "full":
                self.kept += n_head * ctx
                continue
            keep = np.zeros((n_head, scores.shape[2]), dtype=bool)
            keep[:, :min(self.sink, ctx)] = True
            keep[:, max(0, ctx - self.recent):ctx] = True
            self.select_far(keep, scores[:, b], ctx)
            row = scores[:, b]
            row[~keep] = -np.inf
            self.kept += int(keep[:, :ctx].sum())

    def select_far(self, keep, s, ctx):
        lo, hi = self.sink, ctx - self.recent  # the far positions, between sink and recent window
        if hi <= lo:
            return
        n_far = int(math.ceil(self.budget * ctx))
        if self.mode == "recent":
            keep[:, max(lo, hi - n_far):hi] = True
            return
        if self.mode == "top-tokens":
            if n_far >= hi - lo:
                keep[:, lo:hi] = True
                return
            top = np.argpartition(-s[:, lo:hi], n_far - 1, axis=1)[:, :n_far] + lo
            np.put_along_axis(keep, top, True, axis=1)
            return
        c = self.chunk  # top-chunks: whole chunks inside [lo, hi); the partial ones at its ends are kept
        c0, c1 = -(-lo // c), hi // c
        n_sel = -(-n_far // c)
        if c1 - c0 <= n_sel:
            keep[:, lo:hi] = True
            return
        keep[:, lo:c0 * c] = True
        keep[:, c1 * c:hi] = True
        n_head = s.shape[0]
        if self.mode == "top-chunks":
            best = s[:, c0 * c:c1 * c].reshape(n_head, c1 - c0, c).max(axis=2)
            top = np.argpartition(-best, n_sel - 1, axis=1)[:, :n_sel] + c0
            for h in range(n_head):
                for j in top[h]:
                    keep[h, j * c:(j + 1) * c] = True
            return
        # kv-chunks, layer-chunks: each query head's exact softmax mass per chunk, summed per KV head
        group = n_head // self.n_head_kv
        p = np.exp(s[:, :ctx] - s[:, :ctx].max(axis=1, keepdims=True))
        p /= p.sum(axis=1, keepdims=True)
        mass = p[:, c0 * c:c1 * c].reshape(self.n_head_kv, group, c1 - c0, c).sum(axis=(1, 3))
        if self.mode == "layer-chunks":
            top = np.argpartition(-mass.max(axis=0), n_sel - 1)[:n_sel] + c0
            for j in top:
                keep[:, j * c:(j + 1) * c] = True
            return
        top = np.argpartition(-mass, n_sel - 1, axis=1)[:, :n_sel] + c0
        for g in range(self.n_head_kv):
            for j in top[g]:
                keep[g * group:(g + 1) * group, j * c:(j + 1) * c] = True


def perplexity(model, tokens, selector, block):
    cache = llama_ref.new_kv_cache(model)
    nll = 0.0
    for b0 in range(0, len(tokens), block):
        chunk = tokens[b0:b0 + block]
        logits = llama_ref.forward(model, chunk, cache, kv_f16=True, drop_keys=selector)
        targets = tokens[b0 + 1:b0 + 1 + len(chunk)]
        logits = logits[:len(targets)]
        top = logits.max(axis=1, keepdims=True)
        lse = np.log(np.exp(logits - top).sum(axis=1)) + top[:, 0]
        nll += float((lse - logits[np.arange(len(targets)), targets]).sum())
    return math.exp(nll / (len(tokens) - 1))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=os.path.join(ROOT, "models", "leoam-byte-4l", "leoam-byte-4l.gguf"))
    ap.add_argument("--text", required=True, help="the text to score (its first --ctx - 1 bytes)")
    ap.add_argument("--ctx", type=int, default=8192)
    ap.add_argument("--budget", default="0.1", help="comma-separated shares of the context")
    ap.add_argument("--modes", default=",".join(MODES))
    ap.add_argument("--sink", type=int, default=4)
    ap.add_argument("--recent", type=int, default=64)
    ap.add_argument("--chunk", type=int, default=8)
    ap.add_argument("--block", type=int, default=256, help="positions per forward call (memory)")
    args = ap.parse_args(argv)

    modes = [m for m in args.modes.split(",") if m]
    for m in modes:
        if m not in MODES:
            ap.error(f"--modes: '{m}' is not one of {', '.join(MODES)}")
    budgets = [float(b) for b in args.budget.split(",") if b]
    if any(not 0 < b <= 1 for b in budgets):
        ap.error("--budget: each share must be in (0, 1]")
    model = llama_ref.load_model(args.model)
    bos = model["meta"].get("tokenizer.ggml.bos_token_id")
    if model["tok_embd"].shape[0] < 256 or bos is None:
        ap.error("the model needs a byte-level vocab (ids 0-255 the bytes) and a BOS token")
    with open(args.text, "rb") as f:
        data = f.read(args.ctx - 1)
    if len(data) < args.ctx - 1:
        ap.error(f"--text has {len(data)} bytes, fewer than --ctx - 1 = {args.ctx - 1}")
    tokens = [int(bos)] + list(data)

    full = None
    for mode in modes:
        for budget in ([1.0] if mode == "full" else budgets):
            t0 = time.time()
            sel = Selector(mode, budget, args.sink, args.recent, args.chunk, model["hp"]["n_head_kv"])
            ppl = perplexity(model, tokens, sel, args.block)
            if mode == "full":
                full = ppl
            vs = f"{100 * (ppl / full - 1):+.2f}%" if full else "n/a"
            name = mode if mode == "full" else f"{mode}@{budget:g}"
            print(f"{name:18s} ppl {ppl:.4f}  vs full {vs:8s}  attended {100 * sel.kept / sel.visible:5.1f}%"
                  f"  ({time.time() - t0:.0f} s)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
