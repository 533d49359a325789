#!/usr/bin/env python3
"""PNG plots of `leoam eval` results (the JSON lines its --out file holds).

    tools/eval/plot_eval.py RESULTS.jsonl [more.jsonl ...] --out DIR [--title-prefix S]

Writes into DIR, for what the files hold:
  accuracy_vs_budget_<task>.png       each retrieval task: mean score per policy against the share
                                      of tokens it attended, at the task's largest context (full is
                                      a dashed line)
  passkey_heatmap_<policy>_<budget>.png  each (policy, budget) with passkey lines: mean score per
                                      context length (x) and needle depth (y)
  ppl_vs_budget.png                   --task ppl lines: perplexity relative to full per policy
                                      against the share of tokens it attended, at the largest context
and prints the paths written, one a line. A kind with nothing to plot is said and skipped.

The line fields are those tools/leoam/eval_command.cpp writes. Each (policy, budget) point sits at
the share of tokens its runs attended (the mean of their tokens_attended_pct), not at its budget:
policies differ in what one budget attends (chunk grain, first steps), so points at equal x compare
equal attention. Each point is labelled with its budget. Lines without tokens_attended_pct fall
back to the budget (a fraction of the far tokens, <= 1, or a count of them, > 1, taken as a share
of the context). Full's budget is recorded as 1. Several files are merged; a run (task, ctx,
depth, seed, policy, budget) found twice counts once.

Exit status: 0 done (also when there is nothing to plot), 1 matplotlib missing, 2 a bad argument,
an unreadable file or a line that is not a result line (the message names the file and line). A
torn last line, with no newline after it (an interrupted sweep), is skipped with a warning.
"""

import argparse
import json
import math
import os
import sys

PPL_TASK = "ppl"  # `leoam eval --task ppl`: perplexity lines, not retrieval lines

# Fields every line must have, and those of each kind (the rest are not plotted).
KEY_FIELDS = ("task", "ctx", "depth", "seed", "policy", "budget")
RETRIEVAL_FIELDS = ("score",)
PPL_FIELDS = ("nll_sum", "n_tokens")


class InputError(Exception):
    """A file or line that cannot be used; the message names it. Exit status 2."""


def warn(message):
    print(f"plot_eval: warning: {message}", file=sys.stderr)


def format_budget(budget):
    """0.1 -> "0.1", 512.0 -> "512": as `leoam eval` prints budgets (%g)."""
    return f"{budget:g}"


# ------------------------------------------------------------------ reading ---

def check_line(row, where):
    """Raises InputError unless `row` is a result line of `leoam eval` with the fields plotted."""
    if not isinstance(row, dict):
        raise InputError(f"{where}: not a JSON object")
    fields = KEY_FIELDS + (PPL_FIELDS if row.get("task") == PPL_TASK else RETRIEVAL_FIELDS)
    missing = [f for f in fields if f not in row]
    if missing:
        raise InputError(f"{where}: not a result line of `leoam eval` (no {', '.join(missing)})")
    if not isinstance(row["task"], str) or not isinstance(row["policy"], str):
        raise InputError(f"{where}: task and policy must be strings")
    for f in fields:
        if f in ("task", "policy"):
            continue
        # bool is an int in Python; a JSON true is not a number here.
        if isinstance(row[f], bool) or not isinstance(row[f], (int, float)):
            raise InputError(f"{where}: {f} must be a number, not {json.dumps(row[f])}")


def read_results(path):
    """The result lines of one file, parsed, in file order. Blank lines are skipped."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise InputError(f"{path}: cannot read: {e.strerror or e}") from None
    rows = []
    lines = data.split(b"\n")
    # After the last newline: "" when the file ends with one, else the last line, maybe torn.
    for line_no, raw in enumerate(lines, start=1):
        is_last_unterminated = line_no == len(lines)
        if not raw.strip():
            continue
        where = f"{path} line {line_no}"
        try:
            row = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            if is_last_unterminated:
                # `leoam eval` writes each line whole, newline included: a last line with no
                # newline that does not parse is a write the sweep did not finish.
                warn(f"{where}: torn last line (an interrupted sweep?), skipped")
                continue
            raise InputError(f"{where}: not valid JSON ({e})") from None
        check_line(row, where)
        rows.append(row)
    return rows


def run_key(row):
    return tuple(row[f] for f in KEY_FIELDS)


def read_all(paths):
    """The lines of every file, merged; a run found again (same key) is dropped with a warning."""
    rows, seen, n_duplicates = [], set(), 0
    for path in paths:
        for row in read_results(path):
            key = run_key(row)
            if key in seen:
                n_duplicates += 1
                continue
            seen.add(key)
            rows.append(row)
    if n_duplicates:
        warn(f"{n_duplicates} runs found more than once; each counted once")
    return rows


# -------------------------------------------------------------- aggregation ---

def mean_and_sem(values):
    """The mean of `values` and its standard error (0 for a single value)."""
    n = len(values)
    mean = sum(values) / n
    if n < 2:
        return mean, 0.0
    var = sum((v - mean) ** 2 for v in values) / (n - 1)
    return mean, math.sqrt(var / n)


def retrieval_tasks(rows):
    """The retrieval tasks present, sorted."""
    return sorted({r["task"] for r in rows if r["task"] != PPL_TASK})


def budget_fraction(budget, ctx):
    """A budget as a fraction of the context: > 1 is a count (of far tokens), over the context."""
    return budget / ctx if budget > 1 else budget


def attended_share(rows, budget, ctx):
    """Where a point sits: the mean share of tokens its `rows` attended (tokens_attended_pct / 100),
    or budget_fraction(budget, ctx) when a line lacks it (written before the field existed)."""
    if all(isinstance(r.get("tokens_attended_pct"), (int, float)) for r in rows):
        return sum(r["tokens_attended_pct"] for r in rows) / len(rows) / 100.0
    return budget_fraction(budget, ctx)


def accuracy_series(rows, task):
    """The accuracy plot's data for `task` at its largest ctx:
    (ctx, {policy: [(attended_share, budget, mean, sem, n), ...] sorted by share},
     full: (mean, sem, n) or None)."""
    task_rows = [r for r in rows if r["task"] == task]
    ctx = max(r["ctx"] for r in task_rows)
    scores = {}  # (policy, budget) -> [score]
    point_rows = {}  # (policy, budget) -> [line]
    for r in task_rows:
        if r["ctx"] == ctx:
            scores.setdefault((r["policy"], r["budget"]), []).append(float(r["score"]))
            point_rows.setdefault((r["policy"], r["budget"]), []).append(r)
    # full's budget is irrelevant (recorded as 1): all its lines pool into one value.
    full_scores = [v for (policy, _), values in scores.items() if policy == "full" for v in values]
    full = (*mean_and_sem(full_scores), len(full_scores)) if full_scores else None
    series = {}
    for (policy, budget), values in scores.items():
        if policy != "full":
            mean, sem = mean_and_sem(values)
            share = attended_share(point_rows[(policy, budget)], budget, ctx)
            series.setdefault(policy, []).append((share, budget, mean, sem, len(values)))
    for points in series.values():
        points.sort()
    return ctx, series, full


def heatmap_cells(rows, task="passkey"):
    """{(policy, budget): (ctxs, depths, {(ctx, depth): mean score})} over `task`'s lines."""
    grouped = {}  # (policy, budget) -> {(ctx, depth): [score]}
    for r in rows:
        if r["task"] == task:
            cell = grouped.setdefault((r["policy"], r["budget"]), {})
            cell.setdefault((r["ctx"], r["depth"]), []).append(float(r["score"]))
    out = {}
    for key, cells in grouped.items():
        ctxs = sorted({c for c, _ in cells})
        depths = sorted({d for _, d in cells})
        out[key] = (ctxs, depths, {cd: sum(v) / len(v) for cd, v in cells.items()})
    return out


def ppl_ratios(rows):
    """The ppl plot's data at the largest ppl ctx: (ctx, {policy: [(attended_share, budget,
    ratio, n_windows), ...] sorted by share}), ratio = perplexity / full's perplexity over
    the windows both have (the share too is over those windows). None when there are no ppl lines; (ctx, None) when full has none at
    that ctx."""
    ppl_rows = [r for r in rows if r["task"] == PPL_TASK]
    if not ppl_rows:
        return None
    ctx = max(r["ctx"] for r in ppl_rows)
    # A window is its depth (the share prefilled before scoring) and its index (the seed).
    windows = {}  # (policy, budget) -> {(depth, seed): (nll_sum, n_tokens)}
    lines = {}  # (policy, budget) -> {(depth, seed): line}
    for r in ppl_rows:
        if r["ctx"] == ctx:
            windows.setdefault((r["policy"], r["budget"]), {})[(r["depth"], r["seed"])] = (
                float(r["nll_sum"]), float(r["n_tokens"]))
            lines.setdefault((r["policy"], r["budget"]), {})[(r["depth"], r["seed"])] = r
    full = {}
    for (policy, _), w in windows.items():
        if policy == "full":
            full.update(w)
    if not full:
        return ctx, None
    series = {}
    for (policy, budget), w in windows.items():
        if policy == "full":
            continue
        # Only the windows full has too: an interrupted sweep must not compare different text.
        common = sorted(set(w) & set(full))
        if not common:
            continue
        n_tokens = sum(w[s][1] for s in common)
        # Same windows, same tokens: ppl / ppl_full = exp((nll - nll_full) / n_tokens).
        delta_nll = sum(w[s][0] - full[s][0] for s in common)
        ratio = math.exp(delta_nll / n_tokens)
        share = attended_share([lines[(policy, budget)][s] for s in common], budget, ctx)
        series.setdefault(policy, []).append((share, budget, ratio, len(common)))
    for points in series.values():
        points.sort()
    return ctx, series


# ----------------------------------------------------------------- plotting ---

def import_pyplot():
    """matplotlib.pyplot on the Agg backend (files only, no display), or exit 1 with what to do."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("plot_eval: matplotlib is not installed; on Debian: apt-get install python3-matplotlib "
              "(scripts/install-deps.sh installs it)", file=sys.stderr)
        sys.exit(1)
    return plt


def percent_share_axis(ax, shares):
    """A log x axis of attended shares, ticked at 1-2-5 steps and labelled in percent."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullLocator
    ax.set_xscale("log")
    ax.xaxis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _: f"{100 * x:g}%"))
    ax.xaxis.set_minor_locator(NullLocator())
    # A margin of a quarter decade on each side; a single point still gets a visible span.
    lo, hi = min(shares), max(shares)
    ax.set_xlim(lo / 10 ** 0.25, hi * 10 ** 0.25)
    ax.set_xlabel("tokens attended (measured share; points labelled with their budget)")


def label_budgets(ax, xs, ys, budgets):
    """Writes each point's budget beside it."""
    for x, y, b in zip(xs, ys, budgets):
        ax.annotate(format_budget(b), (x, y), textcoords="offset points", xytext=(4, 4), fontsize=7)


def n_label(counts):
    """"3", or "2-3" when the points of a line have different sample counts."""
    lo, hi = min(counts), max(counts)
    return f"{lo}" if lo == hi else f"{lo}-{hi}"


def title(prefix, text):
    return f"{prefix}{text}" if prefix else text


def save(plt, fig, path, written):
    fig.savefig(path, dpi=100)
    plt.close(fig)
    written.append(path)


def plot_accuracy(plt, rows, task, out_dir, prefix, written):
    from matplotlib.ticker import FuncFormatter
    ctx, series, full = accuracy_series(rows, task)
    fig, ax = plt.subplots(figsize=(7, 4.5))
    shares = [p[0] for points in series.values() for p in points] or [1.0]
    percent_share_axis(ax, shares)
    for policy in sorted(series):
        points = series[policy]
        ax.errorbar([p[0] for p in points], [p[2] for p in points], yerr=[p[3] for p in points],
                    marker="o", capsize=3, label=f"{policy} (n={n_label([p[4] for p in points])})")
        label_budgets(ax, [p[0] for p in points], [p[2] for p in points], [p[1] for p in points])
    if full is not None:
        mean, sem, n = full
        ax.axhline(mean, color="black", linestyle="--", label=f"full ({n=})")
        if sem > 0:
            ax.axhspan(mean - sem, mean + sem, color="black", alpha=0.08)
    ax.set_ylim(-0.03, 1.03)
    ax.yaxis.set_major_formatter(FuncFormatter(lambda y, _: f"{100 * y:.0f}%"))
    ax.set_ylabel("mean score (error bars: standard error)")
    ax.set_title(title(prefix, f"{task}, {ctx} tokens"))
    ax.grid(True, alpha=0.3)
    ax.legend()
    fig.tight_layout()
    save(plt, fig, os.path.join(out_dir, f"accuracy_vs_budget_{task}.png"), written)


def plot_heatmap(plt, policy, budget, ctxs, depths, cells, out_dir, prefix, written):
    import numpy as np
    # Rows are depths, 0 (the start of the context) on top; a (ctx, depth) not run is NaN (blank).
    grid = np.full((len(depths), len(ctxs)), np.nan)
    for (ctx, depth), mean in cells.items():
        grid[depths.index(depth), ctxs.index(ctx)] = mean
    fig, ax = plt.subplots(figsize=(max(4.5, 1.2 * len(ctxs) + 2.5), max(3.5, 0.6 * len(depths) + 2)))
    cmap = plt.get_cmap("RdYlGn")  # red (0) -> green (1)
    image = ax.imshow(grid, cmap=cmap, vmin=0.0, vmax=1.0, aspect="auto")
    for i in range(len(depths)):
        for j in range(len(ctxs)):
            if np.isnan(grid[i, j]):
                continue
            # Dark text on the light middle of the map, white on its dark ends.
            r, g, b, _ = cmap(grid[i, j])
            light = 0.299 * r + 0.587 * g + 0.114 * b > 0.5
            ax.text(j, i, f"{grid[i, j]:.2f}", ha="center", va="center", color="black" if light else "white")
    ax.set_xticks(range(len(ctxs)), [str(c) for c in ctxs])
    ax.set_yticks(range(len(depths)), [f"{d:g}" for d in depths])
    ax.set_xlabel("context length (tokens)")
    ax.set_ylabel("needle depth")
    label = policy if policy == "full" else f"{policy}, budget {format_budget(budget)}"
    ax.set_title(title(prefix, f"passkey: {label}"))
    fig.colorbar(image, ax=ax, label="mean score")
    fig.tight_layout()
    save(plt, fig, os.path.join(out_dir, f"passkey_heatmap_{policy}_{format_budget(budget)}.png"), written)


def plot_ppl(plt, ctx, series, out_dir, prefix, written):
    fig, ax = plt.subplots(figsize=(7, 4.5))
    percent_share_axis(ax, [p[0] for points in series.values() for p in points])
    for policy in sorted(series):
        points = series[policy]
        ax.plot([p[0] for p in points], [p[2] for p in points], marker="o",
                label=f"{policy} ({n_label([p[3] for p in points])} windows)")
        label_budgets(ax, [p[0] for p in points], [p[2] for p in points], [p[1] for p in points])
    ax.axhline(1.0, color="black", linestyle="--", label="full")
    ax.set_ylabel("perplexity / full's perplexity")
    ax.set_title(title(prefix, f"perplexity, {ctx}-token windows"))
    ax.grid(True, alpha=0.3)
    ax.legend()
    fig.tight_layout()
    save(plt, fig, os.path.join(out_dir, "ppl_vs_budget.png"), written)


# --------------------------------------------------------------------- main ---

def main(argv=None):
    parser = argparse.ArgumentParser(
        description="PNG plots of `leoam eval` results: accuracy vs budget, passkey heatmaps, perplexity vs budget.")
    parser.add_argument("results", nargs="+", metavar="RESULTS.jsonl", help="--out files of `leoam eval`")
    parser.add_argument("--out", required=True, metavar="DIR", help="directory to write the PNGs to (made if absent)")
    parser.add_argument("--title-prefix", default="", metavar="S", help="text put before every plot title")
    args = parser.parse_args(argv)  # exits 2 on a bad argument

    try:
        rows = read_all(args.results)
    except InputError as e:
        print(f"plot_eval: {e}", file=sys.stderr)
        return 2
    plt = import_pyplot()
    try:
        os.makedirs(args.out, exist_ok=True)
    except OSError as e:
        print(f"plot_eval: --out {args.out}: cannot make the directory: {e.strerror or e}", file=sys.stderr)
        return 2

    written = []
    tasks = retrieval_tasks(rows)
    if not tasks:
        print("plot_eval: no retrieval lines: no accuracy plots")
    for task in tasks:
        plot_accuracy(plt, rows, task, args.out, args.title_prefix, written)

    heatmaps = heatmap_cells(rows)
    if not heatmaps:
        print("plot_eval: no passkey lines: no heatmaps")
    for (policy, budget) in sorted(heatmaps):
        ctxs, depths, cells = heatmaps[(policy, budget)]
        plot_heatmap(plt, policy, budget, ctxs, depths, cells, args.out, args.title_prefix, written)

    ppl = ppl_ratios(rows)
    if ppl is None:
        print("plot_eval: no ppl lines: no perplexity plot")
    elif ppl[1] is None:
        print(f"plot_eval: no full ppl lines at ctx {ppl[0]}: no perplexity plot (it is relative to full)")
    elif not ppl[1]:
        print(f"plot_eval: no sparse ppl lines sharing windows with full at ctx {ppl[0]}: no perplexity plot")
    else:
        plot_ppl(plt, ppl[0], ppl[1], args.out, args.title_prefix, written)

    if not written:
        print("plot_eval: nothing to plot")
    for path in written:
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
