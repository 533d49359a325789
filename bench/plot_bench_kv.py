#!/usr/bin/env python3
"""PNG plots of `leoam bench kv --json` files.

    bench/plot_bench_kv.py RUN.json[=LABEL] [more ...] --out DIR [--title S]

Every result of every file is one run: its label is the file's LABEL (the file name without
.json when none is given), then its policy, chunk size and context. Writes into DIR:
  ms_per_token.png   a bar per run: its decode latency (ms per output token), with its bound
                     (weights plus the selected KV and abstract bytes over the disk rate measured
                     in the same run) as a black tick; the share of tokens attended on each bar
  breakdown.png      a stacked bar per run: where a step's time went (weights, selection, I/O
                     wait, decode of compressed chunks, attention, other)
  chunk_sweep.png    where one (label, policy, context) ran at several chunk sizes: ms per token
                     and the share attended against the chunk size (written only then)
and prints the paths written, one a line.

Exit status: 0 done, 1 matplotlib missing, 2 a bad argument or a file that is not a
`leoam bench kv --json` file (the message names it).
"""

import argparse
import json
import os
import sys
import textwrap

BREAKDOWN = (("weights_ms", "weights"), ("selection_ms", "selection"), ("io_wait_ms", "I/O wait"),
             ("decode_ms", "decode (compressed)"), ("attention_ms", "attention"), ("other_ms", "other"))
RESULT_FIELDS = ("n_ctx", "policy", "chunk_tokens", "ms_per_token", "bound_ms", "attended_fraction", "breakdown")


class BadInput(Exception):
    pass


def load_runs(specs):
    runs = []
    for spec in specs:
        path, _, label = spec.partition("=")
        label = label or os.path.splitext(os.path.basename(path))[0]
        try:
            with open(path, encoding="utf-8") as f:
                doc = json.load(f)
        except (OSError, ValueError) as e:
            raise BadInput(f"{path}: cannot read it as JSON ({e})")
        results = doc.get("results") if isinstance(doc, dict) else None
        if not isinstance(results, list):
            raise BadInput(f"{path}: not a `leoam bench kv --json` file (no results list)")
        for i, r in enumerate(results):
            missing = [k for k in RESULT_FIELDS if k not in r]
            if missing:
                raise BadInput(f"{path}: result {i} lacks {', '.join(missing)}")
            runs.append(dict(r, label=label))
    return runs


def run_name(r):
    ctx = r["n_ctx"]
    ctx_text = f"{ctx // 1024}K" if ctx % 1024 == 0 else str(ctx)
    return f"{textwrap.fill(r['label'], 16)}\n{r['policy']} c{r['chunk_tokens']} {ctx_text}"


def plot_latency(plt, runs, path, title):
    fig, ax = plt.subplots(figsize=(max(6, 1.1 * len(runs) + 2), 4.5))
    xs = range(len(runs))
    bars = ax.bar(xs, [r["ms_per_token"] for r in runs], color="#4c72b0")
    ax.scatter(xs, [r["bound_ms"] for r in runs], marker="_", s=600, color="black", zorder=3, label="bound")
    for bar, r in zip(bars, runs):
        ax.annotate(f"{100 * r['attended_fraction']:.1f}%", (bar.get_x() + bar.get_width() / 2, bar.get_height()),
                    ha="center", va="bottom", fontsize=8)
    ax.set_xticks(list(xs), [run_name(r) for r in runs], fontsize=7)
    ax.set_ylabel("ms per output token")
    ax.set_title(title + "decode latency (bar), its bound (tick), share attended (label)")
    ax.legend(loc="upper right")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def plot_breakdown(plt, runs, path, title):
    fig, ax = plt.subplots(figsize=(max(6, 1.1 * len(runs) + 2), 4.5))
    xs = list(range(len(runs)))
    bottom = [0.0] * len(runs)
    for key, name in BREAKDOWN:
        values = [float(r["breakdown"].get(key, 0.0)) for r in runs]
        ax.bar(xs, values, bottom=bottom, label=name)
        bottom = [b + v for b, v in zip(bottom, values)]
    ax.set_xticks(xs, [run_name(r) for r in runs], fontsize=7)
    ax.set_ylabel("ms per step")
    ax.set_title(title + "where a decode step's time goes")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def plot_chunk_sweep(plt, runs, path, title):
    groups = {}
    for r in runs:
        groups.setdefault((r["label"], r["policy"], r["n_ctx"]), {})[r["chunk_tokens"]] = r
    sweeps = {k: v for k, v in groups.items() if len(v) > 1}
    if not sweeps:
        return False
    fig, (ax_ms, ax_att) = plt.subplots(1, 2, figsize=(11, 4.5))
    for (label, policy, ctx), by_chunk in sorted(sweeps.items()):
        chunks = sorted(by_chunk)
        name = f"{label} {policy} {ctx}"
        ax_ms.plot(chunks, [by_chunk[c]["ms_per_token"] for c in chunks], marker="o", label=name)
        ax_att.plot(chunks, [100 * by_chunk[c]["attended_fraction"] for c in chunks], marker="o", label=name)
    for ax in (ax_ms, ax_att):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("chunk size (tokens)")
        ax.legend(fontsize=8)
    ax_ms.set_ylabel("ms per output token")
    ax_att.set_ylabel("tokens attended (%)")
    fig.suptitle(title + "chunk size")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return True


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("files", nargs="+", help="bench kv --json files, each optionally =LABEL")
    ap.add_argument("--out", required=True, help="directory for the PNGs (created)")
    ap.add_argument("--title", default="", help="prefix of every title")
    args = ap.parse_args()
    try:
        runs = load_runs(args.files)
    except BadInput as e:
        print(f"plot_bench_kv: {e}", file=sys.stderr)
        return 2
    if not runs:
        print("plot_bench_kv: the files hold no results", file=sys.stderr)
        return 2
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("plot_bench_kv: matplotlib is missing (Debian: python3-matplotlib)", file=sys.stderr)
        return 1
    os.makedirs(args.out, exist_ok=True)
    title = args.title + ": " if args.title else ""
    written = []
    for name, plot in (("ms_per_token.png", plot_latency), ("breakdown.png", plot_breakdown)):
        path = os.path.join(args.out, name)
        plot(plt, runs, path, title)
        written.append(path)
    path = os.path.join(args.out, "chunk_sweep.png")
    if plot_chunk_sweep(plt, runs, path, title):
        written.append(path)
    for path in written:
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
