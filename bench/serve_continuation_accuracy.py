#!/usr/bin/env python3
"""How far reused-prefix answers of `leoam serve` stray from cold ones (Python's standard library only).

Starts three servers in turn on loopback, each asking the same questions about one document:
  cold    without the prompt cache: every question's prompt computed whole (the reference)
  dense   with the prompt cache: the document's KV reused, the question's prefill dense
  sparse  the same with --sparse-continuation: the question's rows attend the policy's picks
Each first asks one question to put the document in the cache, then --questions more, greedy.
Prints, for dense and sparse, how many answers equal the cold ones and the mean share of the
cold text they share from its start.

Usage: bench/serve_continuation_accuracy.py --leoam BIN --model GGUF --doc FILE [--doc-chars 1400]
           [--doc-offset 2000] [--max-tokens 32] [--work DIR] [-- extra serve flags]
The servers get -c 1024 -t 1 --kv-device-mb 0.05 --kv-host-mb 0 --policy leoam --budget 0.1
--prompt-cache-min-tokens 64 unless the extra flags say otherwise (later flags win).
"""
import argparse
import http.client
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

OPENINGS = [" Then", " The man said", " She looked at the", " After that,", " Once upon a time", " The little girl",
            " He was very", " They went to the", " One day,", " The end of the", " Suddenly,", " In the morning"]
DEFAULT_FLAGS = ["-c", "1024", "-t", "1", "--kv-device-mb", "0.05", "--kv-host-mb", "0", "--policy", "leoam",
                 "--budget", "0.1", "--prompt-cache-min-tokens", "64"]


def start(args, kv_dir, flags):
    err_path = kv_dir + ".err"
    with open(err_path, "w") as err:
        proc = subprocess.Popen([args.leoam, "serve", "-m", args.model, "--port", "0", "--kv-dir", kv_dir] + flags,
                                stderr=err)
    for _ in range(300):
        with open(err_path) as f:
            m = re.search(r"http://127\.0\.0\.1:(\d+)", f.read())
        if m:
            return proc, int(m.group(1))
        if proc.poll() is not None:
            break
        time.sleep(0.1)
    proc.kill()
    with open(err_path) as f:
        sys.exit(f"the server did not start:\n{f.read()}")


def ask(port, prompt, max_tokens):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    conn.request("POST", "/v1/completions", json.dumps({"prompt": prompt, "max_tokens": max_tokens, "temperature": 0}),
                 {"Content-Type": "application/json"})
    r = json.loads(conn.getresponse().read())
    return r["choices"][0]["text"], r["usage"]["prompt_tokens_details"]["cached_tokens"]


def shared_share(cold, other):
    k = 0
    while k < min(len(cold), len(other)) and cold[k] == other[k]:
        k += 1
    return k / max(1, len(cold))


def main():
    argv = sys.argv[1:]
    extra = argv[argv.index("--") + 1:] if "--" in argv else []
    argv = argv[:argv.index("--")] if "--" in argv else argv
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--leoam", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--doc", required=True)
    ap.add_argument("--doc-chars", type=int, default=1400)
    ap.add_argument("--doc-offset", type=int, default=2000)
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--work", help="scratch directory (default: a temporary one)")
    args = ap.parse_args(argv)
    with open(args.doc, encoding="utf-8", errors="replace") as f:
        doc = f.read()[args.doc_offset: args.doc_offset + args.doc_chars]
    work = args.work or tempfile.mkdtemp(prefix="leoam-continuation-")
    answers = {}
    for tag, flags in (("cold", ["--prompt-cache-gb", "0"]), ("dense", []), ("sparse", ["--sparse-continuation"])):
        kv_dir = os.path.join(work, tag)
        shutil.rmtree(kv_dir, ignore_errors=True)
        os.makedirs(kv_dir)
        proc, port = start(args, kv_dir, DEFAULT_FLAGS + flags + extra)
        try:
            ask(port, doc + " Now", args.max_tokens)  # puts the document in the cache, where there is one
            answers[tag] = [ask(port, doc + q, args.max_tokens) for q in OPENINGS]
        finally:
            proc.send_signal(2)
            proc.wait()
    print(f"{len(OPENINGS)} questions, {args.max_tokens} greedy tokens each; "
          f"tokens reused a question: dense {answers['dense'][0][1]}, sparse {answers['sparse'][0][1]}")
    for tag in ("dense", "sparse"):
        pairs = list(zip(answers["cold"], answers[tag]))
        same = sum(c[0] == o[0] for c, o in pairs)
        share = sum(shared_share(c[0], o[0]) for c, o in pairs) / len(pairs)
        print(f"{tag}: {same} of {len(pairs)} answers the cold ones; {100 * share:.0f}% of the cold text shared on average")
    if not args.work:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
