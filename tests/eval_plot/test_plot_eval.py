"""Test of tools/eval/plot_eval.py (no pytest needed):

    /usr/bin/python3 tests/eval_plot/test_plot_eval.py

Builds small `leoam eval` result files in a temporary directory, runs the script on them and
checks the PNGs it writes (the exact set, the PNG signature, the IHDR size), the numbers behind
them, and its errors. Exits 77 (ctest's SKIP_RETURN_CODE) when matplotlib is not importable.
"""

import json
import math
import os
import struct
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.normpath(os.path.join(HERE, "..", "..", "tools", "eval", "plot_eval.py"))
SKIP = 77

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"

# The sweep: 2 sparse policies at 3 budgets, plus full, over 2 contexts, 3 depths and 2 seeds.
POLICIES = ("quest", "leoam")
BUDGETS = (0.05, 0.1, 0.2)
CTXS = (1024, 2048)
DEPTHS = (0.0, 0.5, 1.0)
SEEDS = (0, 1)


def passkey_score(policy, budget, ctx, depth, seed):
    """A made-up score with known means: full always finds the key; leoam finds it from budget
    0.1 on, and at 0.05 only for seed 0; quest finds it at depth 0, else only for seed 0 at 0.2;
    at ctx 2048 nobody sparse finds it at depth 1."""
    if policy == "full":
        return 1.0
    if ctx == 2048 and depth == 1.0:
        return 0.0
    if policy == "leoam":
        return 1.0 if budget >= 0.1 or seed == 0 else 0.0
    return 1.0 if depth == 0.0 or (budget == 0.2 and seed == 0) else 0.0


def attended_pct(policy, budget):
    """The made-up share of tokens attended: leoam attends a quarter more than its budget (its
    finer chunks), quest its budget, full everything."""
    return 100.0 if policy == "full" else 100.0 * budget * (1.25 if policy == "leoam" else 1.0)


def result_line(task, ctx, depth, seed, policy, budget, **fields):
    row = {"task": task, "ctx": ctx, "depth": depth, "seed": seed, "policy": policy, "budget": budget}
    row.update(fields)
    return json.dumps(row) + "\n"


def passkey_lines():
    lines = []
    runs = [("full", 1.0)] + [(p, b) for p in POLICIES for b in BUDGETS]
    for ctx in CTXS:
        for depth in DEPTHS:
            for seed in SEEDS:
                for policy, budget in runs:
                    score = passkey_score(policy, budget, ctx, depth, seed)
                    lines.append(result_line("passkey", ctx, depth, seed, policy, budget, needle_pos=ctx // 2,
                                             answers=["12345"], output="12345" if score else "999",
                                             score=score, tokens_attended_pct=attended_pct(policy, budget),
                                             bytes_read={"device": 4096, "host": 0, "disk": 0},
                                             n_generated=2, decode_ms=1.5))
    return lines


# ppl: 2 windows of 1024 tokens; nll_sum = 2000 for full, + 1023 * 0.01 / budget for leoam.
PPL_N_TOKENS = 1023


def ppl_lines():
    lines = []
    for seed in (0, 1):
        for policy, budget in [("full", 1.0)] + [("leoam", b) for b in BUDGETS]:
            nll = 2000.0 + (0.0 if policy == "full" else PPL_N_TOKENS * 0.01 / budget)
            lines.append(result_line("ppl", 1024, 0.0, seed, policy, budget, nll_sum=nll, n_tokens=PPL_N_TOKENS,
                                     n_bytes=4000, ppl=math.exp(nll / PPL_N_TOKENS), bits_per_byte=0.7,
                                     tokens_attended_pct=attended_pct(policy, budget), decode_ms=3.0))
    return lines


TORN_LINE = '{"task": "passkey", "ctx": 2048, "depth": 0.5, "seed": 1, "poli'


def write(path, text):
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
    return path


def run_script(*args):
    return subprocess.run([sys.executable, SCRIPT, *args], capture_output=True, text=True, timeout=300)


def png_size(path):
    """(width, height) from the IHDR chunk, after checking the signature."""
    with open(path, "rb") as f:
        head = f.read(24)
    assert head[:8] == PNG_SIGNATURE, f"{path}: not a PNG: {head[:8]!r}"
    # 8 signature, 4 chunk length, 4 chunk type, then width and height, big-endian.
    assert head[12:16] == b"IHDR", f"{path}: first chunk is {head[12:16]!r}, not IHDR"
    return struct.unpack(">II", head[16:24])


def expected_pngs():
    names = ["accuracy_vs_budget_passkey.png", "passkey_heatmap_full_1.png", "ppl_vs_budget.png"]
    names += [f"passkey_heatmap_{p}_{b:g}.png" for p in POLICIES for b in BUDGETS]
    return sorted(names)


# -------------------------------------------------------------------- tests ---

def test_plots(tmp):
    results = write(os.path.join(tmp, "results.jsonl"), "".join(passkey_lines() + ppl_lines()) + TORN_LINE)
    out_dir = os.path.join(tmp, "plots")
    r = run_script(results, "--out", out_dir, "--title-prefix", "test: ")
    assert r.returncode == 0, f"exit {r.returncode}\n{r.stdout}\n{r.stderr}"
    line_no = len(passkey_lines()) + len(ppl_lines()) + 1
    assert f"{results} line {line_no}: torn last line" in r.stderr, r.stderr
    assert sorted(os.listdir(out_dir)) == expected_pngs(), sorted(os.listdir(out_dir))
    # stdout: the paths written, one a line.
    printed = sorted(os.path.basename(p) for p in r.stdout.split("\n") if p.endswith(".png"))
    assert printed == expected_pngs(), r.stdout
    for name in expected_pngs():
        width, height = png_size(os.path.join(out_dir, name))
        assert 300 <= width <= 3000 and 200 <= height <= 3000, f"{name}: {width}x{height}"
    # 7x4.5 inches at 100 dpi.
    assert png_size(os.path.join(out_dir, "accuracy_vs_budget_passkey.png")) == (700, 450)


def test_numbers(tmp):
    sys.dont_write_bytecode = True  # no __pycache__ left in tools/eval
    sys.path.insert(0, os.path.dirname(SCRIPT))
    import plot_eval as pe

    results = write(os.path.join(tmp, "numbers.jsonl"), "".join(passkey_lines() + ppl_lines()))
    rows = pe.read_all([results, results])  # the same runs twice count once
    assert len(rows) == len(passkey_lines()) + len(ppl_lines()), len(rows)

    # Accuracy at the largest ctx (2048), over 3 depths x 2 seeds = 6 samples a point.
    ctx, series, full = pe.accuracy_series(rows, "passkey")
    assert ctx == 2048
    assert full == (1.0, 0.0, 6), full
    assert sorted(series) == ["leoam", "quest"]
    # leoam: depth 1 fails; at 0.05 seed 1 fails too -> 2/6, else 4/6.
    assert [(p[1], p[2], p[4]) for p in series["leoam"]] == [(0.05, 2 / 6, 6), (0.1, 4 / 6, 6), (0.2, 4 / 6, 6)]
    # Each point sits at the share its runs attended, not at its budget: leoam's a quarter more.
    for p in series["leoam"]:
        assert math.isclose(p[0], 1.25 * p[1]), p
    for p in series["quest"]:
        assert math.isclose(p[0], p[1]), p
    # quest: depth 0 (2 samples), plus seed 0 at depth 0.5 at budget 0.2 -> 2/6, 2/6, 3/6.
    assert [p[2] for p in series["quest"]] == [2 / 6, 2 / 6, 3 / 6]
    # standard error of 2/6 over six 0/1 samples: sqrt(var / n), var with n - 1.
    mean = 2 / 6
    sem = math.sqrt((2 * (1 - mean) ** 2 + 4 * mean ** 2) / 5 / 6)
    assert math.isclose(series["quest"][0][3], sem), series["quest"][0]

    # Heatmaps: every (policy, budget), mean over 2 seeds a cell.
    cells = pe.heatmap_cells(rows)
    assert sorted(cells) == sorted([("full", 1.0)] + [(p, b) for p in POLICIES for b in BUDGETS])
    ctxs, depths, leoam_05 = cells[("leoam", 0.05)]
    assert ctxs == [1024, 2048] and depths == [0.0, 0.5, 1.0]
    assert leoam_05 == {(1024, 0.0): 0.5, (1024, 0.5): 0.5, (1024, 1.0): 0.5,
                        (2048, 0.0): 0.5, (2048, 0.5): 0.5, (2048, 1.0): 0.0}, leoam_05
    assert cells[("quest", 0.2)][2][(1024, 0.5)] == 0.5

    # ppl relative to full: exp(0.01 / budget) per token.
    ppl_ctx, ppl_series = pe.ppl_ratios(rows)
    assert ppl_ctx == 1024 and sorted(ppl_series) == ["leoam"]
    for (share, budget, ratio, n_windows), b in zip(ppl_series["leoam"], BUDGETS):
        assert budget == b and n_windows == 2
        assert math.isclose(share, 1.25 * b), (b, share)
        assert math.isclose(ratio, math.exp(0.01 / b)), (b, ratio)

    # Windows scored after a prefill (depth 0.5) compare with full's at that depth, not at 0:
    # full scores 1000 there and leoam 1000 + 512 * 0.02, so the ratio pools both depths.
    prefilled = [json.loads(line) for line in ppl_lines()]
    for r in prefilled:
        r["depth"], r["n_tokens"] = 0.5, 512
        r["nll_sum"] = 1000.0 + (0.0 if r["policy"] == "full" else 512 * 0.02)
    _, both = pe.ppl_ratios(rows + prefilled)
    for (share, budget, ratio, n_windows), b in zip(both["leoam"], BUDGETS):
        assert n_windows == 4, n_windows
        expected = math.exp((2 * PPL_N_TOKENS * 0.01 / b + 2 * 512 * 0.02) / (2 * PPL_N_TOKENS + 2 * 512))
        assert math.isclose(ratio, expected), (b, ratio, expected)

    # A token-count budget is a share of the context.
    assert pe.budget_fraction(512, 8192) == 0.0625 and pe.budget_fraction(0.1, 8192) == 0.1
    # Lines without tokens_attended_pct (older sweeps) sit at their budget.
    old = [dict(r) for r in rows if r["task"] == "passkey"]
    for r in old:
        r.pop("tokens_attended_pct")
    _, old_series, _ = pe.accuracy_series(old, "passkey")
    assert [p[0] for p in old_series["leoam"]] == list(BUDGETS), old_series["leoam"]


def test_bad_json(tmp):
    lines = passkey_lines()[:4]
    bad = write(os.path.join(tmp, "bad.jsonl"), lines[0] + lines[1] + "{not json\n" + lines[2])
    r = run_script(bad, "--out", os.path.join(tmp, "bad_plots"))
    assert r.returncode == 2, f"exit {r.returncode}\n{r.stderr}"
    assert f"{bad} line 3: not valid JSON" in r.stderr, r.stderr
    assert not os.path.exists(os.path.join(tmp, "bad_plots")), "wrote output despite the error"

    # A last line that does not parse but ends with a newline was written whole: an error, not torn.
    bad_last = write(os.path.join(tmp, "bad_last.jsonl"), lines[0] + "{not json\n")
    r = run_script(bad_last, "--out", os.path.join(tmp, "bad_plots"))
    assert r.returncode == 2 and f"{bad_last} line 2: not valid JSON" in r.stderr, r.stderr

    # Valid JSON that is not a result line.
    no_score = write(os.path.join(tmp, "no_score.jsonl"), lines[0] + result_line("passkey", 1024, 0.5, 0, "full", 1))
    r = run_script(no_score, "--out", os.path.join(tmp, "bad_plots"))
    assert r.returncode == 2 and f"{no_score} line 2: not a result line" in r.stderr and "score" in r.stderr, r.stderr


def test_unreadable(tmp):
    missing = os.path.join(tmp, "missing.jsonl")
    r = run_script(missing, "--out", os.path.join(tmp, "plots_missing"))
    assert r.returncode == 2 and f"{missing}: cannot read" in r.stderr, r.stderr


def test_nothing_to_plot(tmp):
    empty = write(os.path.join(tmp, "empty.jsonl"), "")
    out_dir = os.path.join(tmp, "plots_empty")
    r = run_script(empty, "--out", out_dir)
    assert r.returncode == 0, r.stderr
    assert "nothing to plot" in r.stdout, r.stdout
    assert os.listdir(out_dir) == []

    # ppl lines without full: said, and no perplexity plot.
    only_sparse = write(os.path.join(tmp, "ppl_sparse.jsonl"),
                        "".join(line for line in ppl_lines() if '"full"' not in line))
    r = run_script(only_sparse, "--out", out_dir)
    assert r.returncode == 0 and "no full ppl lines at ctx 1024" in r.stdout, r.stdout
    assert os.listdir(out_dir) == []


def main():
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        print(f"SKIP: matplotlib is not importable by {sys.executable} (apt-get install python3-matplotlib)")
        return SKIP
    tests = [test_plots, test_numbers, test_bad_json, test_unreadable, test_nothing_to_plot]
    with tempfile.TemporaryDirectory(prefix="plot_eval_test.") as tmp:
        for t in tests:
            print(t.__name__)
            t(tmp)
    print(f"OK: {len(tests)} tests passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
