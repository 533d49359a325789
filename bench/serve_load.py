#!/usr/bin/env python3
"""A bounded load test of `leoam serve` on the loopback (Python's standard library only).

Two phases against a running server:
  1. load:     --requests streamed completions of distinct prompts, --concurrency at a time;
               latency (request to last byte) and time to first token, p50 and p99, the
               generated tokens per second of wall time, the requests that failed, and the
               kernel's listen-queue overflows meanwhile (TcpExt ListenOverflows, this machine's).
  2. document: one question about --doc (a cold prompt: its KV computed), then --questions more
               about the same document one after another (with --kv-dir, its KV loaded from the
               prompt cache); time to first token without and with the reuse, tokens reused.

Usage: bench/serve_load.py --url http://127.0.0.1:8080 [--requests 64] [--concurrency 8]
                           [--max-tokens 32] [--doc FILE] [--doc-chars 6000] [--questions 4]
                           [--json OUT]
Prints a markdown table; --json writes every figure.
"""
import argparse
import concurrent.futures
import json
import statistics
import time
import urllib.parse
import http.client


def percentile(values, p):
    s = sorted(values)
    if not s:
        return float("nan")
    k = (len(s) - 1) * p
    lo, hi = int(k), min(int(k) + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


def stream_completion(url, body):
    """Posts a streamed completion; returns (latency_s, ttft_s, completion_tokens, cached_tokens)."""
    u = urllib.parse.urlparse(url)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=3600)
    payload = dict(body, stream=True, stream_options={"include_usage": True})
    t0 = time.perf_counter()
    conn.request("POST", "/v1/completions", json.dumps(payload), {"Content-Type": "application/json"})
    res = conn.getresponse()
    if res.status != 200:
        raise RuntimeError(f"HTTP {res.status}: {res.read()[:200]!r}")
    ttft = None
    usage = {}
    buffer = b""
    while True:
        data = res.read1(65536)
        if not data:
            break
        buffer += data
        while b"\n\n" in buffer:
            event, buffer = buffer.split(b"\n\n", 1)
            if not event.startswith(b"data: ") or event == b"data: [DONE]":
                continue
            chunk = json.loads(event[6:])
            if ttft is None and chunk.get("choices") and chunk["choices"][0].get("text"):
                ttft = time.perf_counter() - t0
            if "usage" in chunk:
                usage = chunk["usage"]
    latency = time.perf_counter() - t0
    conn.close()
    cached = usage.get("prompt_tokens_details", {}).get("cached_tokens", 0)
    return latency, ttft if ttft is not None else latency, usage.get("completion_tokens", 0), cached


def listen_overflows():
    """The kernel's count of connections dropped from full listen queues (all sockets)."""
    try:
        with open("/proc/net/netstat") as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    for names, values in zip(lines[::2], lines[1::2]):
        if names.startswith("TcpExt:"):
            row = dict(zip(names.split()[1:], values.split()[1:]))
            return int(row.get("ListenOverflows", 0))
    return None


def attempt(url, body):
    """stream_completion, or None when the request failed."""
    try:
        return stream_completion(url, body)
    except Exception:  # noqa: BLE001: a failed request is counted, whatever failed
        return None


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--url", required=True)
    ap.add_argument("--requests", type=int, default=64)
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--doc", help="a text file: the long document of phase 2 (none: phase 2 skipped)")
    ap.add_argument("--doc-chars", type=int, default=6000, help="characters of --doc to use")
    ap.add_argument("--questions", type=int, default=4)
    ap.add_argument("--json", help="write every figure to this file")
    args = ap.parse_args()

    starts = ["Once upon a time", "The little dog", "One day, Lily", "Tom wanted to", "The sun was bright",
              "A big bird", "In the park", "Sam and Mia"]
    prompts = [f"{starts[i % len(starts)]} ({i})" for i in range(args.requests)]
    body = {"max_tokens": args.max_tokens, "temperature": 0.8, "seed": 1}
    overflows0 = listen_overflows()
    t0 = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(args.concurrency) as pool:
        attempts = list(pool.map(lambda p: attempt(args.url, dict(body, prompt=p)), prompts))
    wall = time.perf_counter() - t0
    overflows = None if overflows0 is None else listen_overflows() - overflows0
    results = [r for r in attempts if r is not None]
    errors = len(attempts) - len(results)
    latency = [r[0] for r in results]
    ttft = [r[1] for r in results]
    tokens = sum(r[2] for r in results)
    out = {
        "requests": args.requests, "concurrency": args.concurrency, "max_tokens": args.max_tokens,
        "wall_s": wall, "completion_tokens": tokens, "tokens_per_s": tokens / wall,
        "latency_p50_ms": 1e3 * percentile(latency, 0.5), "latency_p99_ms": 1e3 * percentile(latency, 0.99),
        "ttft_p50_ms": 1e3 * percentile(ttft, 0.5), "ttft_p99_ms": 1e3 * percentile(ttft, 0.99),
        "errors": errors, "listen_overflows": overflows,
    }
    rows = [("requests (concurrency)", f"{args.requests} ({args.concurrency})"),
            ("latency p50 / p99", f"{out['latency_p50_ms']:.0f} / {out['latency_p99_ms']:.0f} ms"),
            ("time to first token p50 / p99", f"{out['ttft_p50_ms']:.0f} / {out['ttft_p99_ms']:.0f} ms"),
            ("generated", f"{tokens} tokens in {wall:.2f} s: {out['tokens_per_s']:.1f} tok/s"),
            ("failed requests", f"{errors}"),
            ("listen-queue overflows (the machine's, meanwhile)", "unknown" if overflows is None else f"{overflows}")]

    if args.doc:
        with open(args.doc, encoding="utf-8", errors="replace") as f:
            doc = f.read()[: args.doc_chars]
        doc_body = {"max_tokens": args.max_tokens, "temperature": 0}
        asked = []
        for i in range(args.questions + 1):
            asked.append(stream_completion(args.url, dict(doc_body, prompt=f"{doc}\n\nQuestion {i}: who is it about?\nAnswer:")))
        cold, warm = asked[0], asked[1:]
        out.update({
            "doc_chars": len(doc), "doc_cold_ttft_ms": 1e3 * cold[1], "doc_cold_cached_tokens": cold[3],
            "doc_reused_ttft_ms_median": 1e3 * statistics.median(r[1] for r in warm),
            "doc_reused_ttft_ms": [1e3 * r[1] for r in warm],
            "doc_reused_cached_tokens": [r[3] for r in warm],
        })
        rows += [("document: first question, time to first token",
                  f"{out['doc_cold_ttft_ms']:.0f} ms ({cold[3]} tokens reused)"),
                 (f"document: {args.questions} more questions, time to first token (median)",
                  f"{out['doc_reused_ttft_ms_median']:.0f} ms ({min(r[3] for r in warm)}-{max(r[3] for r in warm)} tokens reused)"),
                 ("document: each reused question, in order",
                  ", ".join(f"{t:.0f} ms" for t in out["doc_reused_ttft_ms"]))]

    print("| figure | value |\n|---|---|")
    for k, v in rows:
        print(f"| {k} | {v} |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
