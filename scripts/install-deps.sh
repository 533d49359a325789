#!/usr/bin/env bash
# Installs the Debian 12 packages that leoam's build and tests need, and only those missing.
# Usage: scripts/install-deps.sh [--with-tests] [--with-fuzz]
#   --with-tests  also what only the tests need: PyTorch and SciPy, for the training smoke and
#                 parity tests of the committed model (tools/train); Chromium, whose headless
#                 mode tests the page of `leoam serve`; python3-jinja2 and npm, for the chat-template
#                 tests (the reference renderer and real templates); haproxy, for the scale-out test
set -euo pipefail

packages=(
  g++ cmake ninja-build pkg-config make
  libpcre2-dev           # Unicode regexes of the BPE pre-tokenizers
  libicu-dev             # NFC, the Unicode normalization of tokenizer.json files that ask for it
  libopenblas-dev        # SGEMM for prefill
  liburing-dev           # batched disk reads of the KV disk tier
  libxxhash-dev          # checksums of KV written to disk
  libcli11-dev           # command-line parsing
  nlohmann-json3-dev     # JSON output
  libcpp-httplib-dev     # the HTTP server of `leoam serve`
  libgtest-dev libgmock-dev  # unit tests
  libbenchmark-dev       # microbenchmarks
  python3 python3-numpy  # the independent numpy reference of the forward pass
  python3-matplotlib     # eval plots
)
for arg in "$@"; do
  case "$arg" in
    --with-tests)
      packages+=(python3-torch python3-scipy chromium python3-jinja2 haproxy)
      command -v npm >/dev/null || packages+=(nodejs npm)  # not over nodesource's nodejs, which has npm
      ;;
    --with-fuzz) packages+=(clang libclang-rt-dev) ;;
    *) echo "install-deps: unknown option '$arg' (use --with-tests or --with-fuzz)" >&2; exit 2 ;;
  esac
done

missing=()
for p in "${packages[@]}"; do
  status=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
  [[ "$status" == "install ok installed" ]] || missing+=("$p")
done

if ((${#missing[@]} == 0)); then
  exit 0
fi

echo "install-deps: installing ${missing[*]}" >&2
sudo=""
if [[ $(id -u) -ne 0 ]]; then
  sudo="sudo"
fi
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
