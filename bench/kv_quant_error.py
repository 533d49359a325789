#!/usr/bin/env python3
"""What compressing the KV costs in accuracy, per quantization layout (issue 27, item 2).

Runs a GGUF model with the numpy reference (tests/reference/llama_ref.py), independent of the
engine: the first N - E tokens of a text fill the KV cache (f16, as the engine stores it), the
cache is quantized in one layout, and the last E tokens are decoded one at a time against it
(their own KV stays exact, as the engine's open chunk and recent window do). Reported per layout:
bits per value, the perplexity of those E tokens and its change against the f16 cache, and the
mean KL divergence of the next-token distributions from the f16 cache's.

Layouts (asymmetric, a minimum and a scale per group, as kv/kv_codec.h; K keeps its signs):
  token-int4/int8   K and V by token: groups of 32 channels of one position (leoam's codec)
  channel-int4-G    K by channel: groups of G positions of one channel (KIVI); V by token
Positions past the last whole group of G stay exact in every layout of that G, for equal terms.

  python3 bench/kv_quant_error.py --model M.gguf --text T.txt --leoam build/test/leoam -n 2048 -e 128
"""
import argparse
import math
import os
import subprocess
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "reference"))
import llama_ref  # noqa: E402

GROUP = 32  # kv_codec.h: kKvCodecGroup


def f16_down(x):
    h = x.astype(np.float16)
    return np.where(h.astype(np.float64) > x, np.nextafter(h, np.float16(-np.inf)), h).astype(np.float64)


def f16_up(x):
    h = x.astype(np.float16)
    return np.where(h.astype(np.float64) < x, np.nextafter(h, np.float16(np.inf)), h).astype(np.float64)


def quantize_groups(x, levels, keep_signs):
    """x [..., g]: each last-axis group to `levels` + 1 codes with an f16 minimum (rounded down)
    and scale (rounded up); returns the decoded values rounded to f16."""
    mn = f16_down(x.min(axis=-1, keepdims=True))
    scale = f16_up((x.max(axis=-1, keepdims=True) - mn) / levels)
    safe = np.where(scale > 0, scale, 1.0)
    codes = np.where(scale > 0, np.clip(np.floor((x - mn) / safe + 0.5), 0, levels), 0)
    if keep_signs:
        dec = mn + scale * codes
        codes = np.where((x >= 0) & (dec < 0), codes + 1, codes)
        codes = np.where((x < 0) & (dec > 0), codes - 1, codes)
    return (mn + scale * codes).astype(np.float16).astype(np.float64)


def by_token(x, levels, keep_signs):
    """x [n][n_head_kv][head_dim]: groups of 32 channels of each position."""
    n, h, d = x.shape
    row = x.reshape(n, h * d)
    pad = (-row.shape[1]) % GROUP
    padded = np.concatenate([row, np.repeat(row[:, -1:], pad, axis=1)], axis=1) if pad else row
    q = quantize_groups(padded.reshape(n, -1, GROUP), levels, keep_signs).reshape(n, -1)[:, : h * d]
    return q.reshape(n, h, d)


def by_channel(x, levels, keep_signs, g):
    """x [n][n_head_kv][head_dim]: groups of g positions of each channel (whole groups only)."""
    n = x.shape[0] // g * g
    out = x.copy()
    part = x[:n].reshape(n // g, g, -1).transpose(0, 2, 1)  # [groups][channels][g]
    out[:n] = quantize_groups(part, levels, keep_signs).transpose(0, 2, 1).reshape(x[:n].shape)
    return out


def layouts(g):
    """name -> (bits per value, K quantizer, V quantizer); positions >= exact_from stay exact."""
    tok4 = lambda x, ks: by_token(x, 15, ks)  # noqa: E731
    tok8 = lambda x, ks: by_token(x, 255, ks)  # noqa: E731
    return {
        "f16": (16.0, None, None),
        "token-int8": ((8 * GROUP + 32) / GROUP, tok8, tok8),
        "token-int4": ((4 * GROUP + 32) / GROUP, tok4, tok4),
        f"channel-int4-{g} (K), token-int4 (V)": ((4 * g + 32) / g / 2 + (4 * GROUP + 32) / GROUP / 2,
                                                  lambda x, ks: by_channel(x, 15, ks, g), tok4),
    }


def log_softmax(z):
    z = z - z.max()
    return z - math.log(np.exp(z).sum())


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True)
    ap.add_argument("--text", required=True)
    ap.add_argument("--leoam", required=True, help="the leoam binary, to tokenize the text")
    ap.add_argument("-n", "--n-tokens", type=int, default=512, help="tokens in all")
    ap.add_argument("-e", "--n-eval", type=int, default=64, help="the last tokens, decoded against the quantized KV")
    ap.add_argument("--channel-group", type=int, nargs="+", default=[32], help="positions per K channel group")
    args = ap.parse_args()

    with open(args.text, encoding="utf-8", errors="replace") as f:
        text = f.read(args.n_tokens * 8)
    ids = subprocess.run([args.leoam, "tokenize", "-m", args.model, "-p", text], check=True,
                         capture_output=True, text=True).stdout.split()
    tokens = [int(t) for t in ids][: args.n_tokens]
    if len(tokens) < args.n_tokens:
        sys.exit(f"the text gives only {len(tokens)} tokens")
    model = llama_ref.load_model(args.model)
    n_fill = args.n_tokens - args.n_eval
    cache = llama_ref.new_kv_cache(model)
    logits = llama_ref.forward(model, tokens[:n_fill], cache, kv_f16=True)[-1]

    def decode(quant_k, quant_v):
        c = [{"k": kv["k"].copy(), "v": kv["v"].copy()} for kv in cache]
        for kv in c:
            if quant_k is not None:
                kv["k"] = quant_k(kv["k"], True)
                kv["v"] = quant_v(kv["v"], False)
        lp, z = [], logits
        for t in tokens[n_fill:]:
            lp.append(log_softmax(z))
            z = llama_ref.forward(model, [t], c, kv_f16=True)[-1]
        return np.array(lp)

    print(f"{os.path.basename(args.model)}: {n_fill} positions of KV, then {args.n_eval} tokens decoded against it\n")
    print("| layout | bits per value | perplexity | vs f16 | mean KL from f16 (nats) |")
    print("| --- | ---: | ---: | ---: | ---: |")
    targets = np.array(tokens[n_fill:])
    base = None
    seen = set()
    for g in args.channel_group:
        for name, (bits, qk, qv) in layouts(g).items():
            if name in seen:
                continue
            seen.add(name)
            lp = decode(qk, qv)
            ppl = math.exp(-lp[np.arange(len(targets)), targets].mean())
            if base is None:
                base = lp
            kl = float((np.exp(base) * (base - lp)).sum(axis=1).mean())
            base_ppl = math.exp(-base[np.arange(len(targets)), targets].mean())
            print(f"| {name} | {bits:.2f} | {ppl:.4f} | {100 * (ppl / base_ppl - 1):+.2f}% | {kl:.5f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
