#!/usr/bin/env bash
# What each attention policy and the KV store keep about the KV, next to the KV itself: one
# `leoam run` a policy (prefill of PROMPT_FILE, N generated tokens, a tiered store with the KV
# mostly on disk), read from --kv-stats-json. The table gives per policy its store chunk size, the
# KV the store holds (all tiers), the store's abstracts (device and host in memory, inside their
# tier budgets; disk, the abstract files), and the policy's own state (trees, scores, partial
# keys, the per-step copies it reads) now and at its peak, also as a share of the KV; and beside
# them, as for every policy figure, the share of tokens it attended and the KV it read from disk
# per decode step (N tokens take N - 1 steps).
#
#   bench/policy_memory.sh LEOAM_BINARY MODEL PROMPT_FILE [MORE LEOAM RUN FLAGS...]
#   env: POLICIES="streaming ...", BUDGET=0.1, N_TOKENS=16, CTX=8200, DEVICE_MB=4, HOST_MB=4, THREADS=2
set -euo pipefail

leoam=$1
model=$2
prompt=$3
shift 3
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
policies=${POLICIES:-full streaming h2o h2o-chunked quest infinigen leoam oracle}

echo "| policy | chunk | tokens attended | disk KB read/step | KV, all tiers | abstracts: device / host / disk | policy now | policy peak | peak / KV |"
echo "|---|---|---|---|---|---|---|---|---|"
for policy in $policies; do
  err="$work/$policy.err"
  "$leoam" run -m "$model" -f "$prompt" -c "${CTX:-8200}" -t "${THREADS:-2}" -n "${N_TOKENS:-16}" --temp 0 \
    --policy "$policy" --budget "${BUDGET:-0.1}" --kv-dir "$work/kv-$policy" --kv-device-mb "${DEVICE_MB:-4}" \
    --kv-host-mb "${HOST_MB:-4}" --kv-stats --kv-stats-json "$work/$policy.json" "$@" > /dev/null 2> "$err" ||
    { cat "$err" >&2; exit 1; }
  chunk=$(sed -n 's/.*chunks of \([0-9]*\) tokens.*/\1/p' "$err" | head -1)
  attended=$(sed -n 's/^attention: policy .*tokens, \([0-9.]*%\) of the visible.*/\1/p' "$err")
  python3 - "$work/$policy.json" "$policy" "$chunk" "${attended:-100%}" "$((${N_TOKENS:-16} - 1))" <<'PY'
import json, sys
stats, policy, chunk, attended, steps = json.load(open(sys.argv[1])), sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5])
disk_per_step = stats["decode"]["bytes_read"]["disk"] / steps / 1e3
tiers = stats["tiers"]
mib = lambda b: f"{b / 2**20:.2f} MiB"
kv = sum(tiers[t]["resident_bytes"] for t in ("device", "host", "disk"))
abstracts = " / ".join(mib(tiers[t]["abstract_bytes"]) for t in ("device", "host", "disk"))
memory = stats.get("policy_memory", {"bytes": 0, "peak_bytes": 0})
print(f"| {policy} | {chunk} | {attended} | {disk_per_step:.1f} | {mib(kv)} | {abstracts} | {mib(memory['bytes'])} "
      f"| {mib(memory['peak_bytes'])} "
      f"| {100 * memory['peak_bytes'] / kv:.1f}% |")
PY
done
