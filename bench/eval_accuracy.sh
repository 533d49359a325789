#!/usr/bin/env bash
# Accuracy of every attention policy against full attention with `leoam eval`: retrieval tasks on
# a model at one context, and perplexity over held-out text, with the KV in the tiered store
# (small device and host tiers, the rest on disk). Writes JSON lines and PNG plots into OUT_DIR
# and prints the summary tables.
#
#   bench/eval_accuracy.sh LEOAM_BINARY MODEL OUT_DIR
#   env: TASKS="passkey niah_single ...", CTX=4096, DEPTHS=0.1,0.3,0.5,0.7,0.9, SEEDS=1,
#        POLICIES=full,leoam,quest,streaming,h2o,h2o-chunked,infinigen, BUDGETS=0.015,0.05,0.1,0.2,
#        PPL_TEXT (a text file; empty: no perplexity), PPL_CTX=CTX, PPL_WINDOWS=2,
#        HAYSTACK (a text file; empty: filler sentences), DEVICE_MB=1, HOST_MB=1, THREADS=2
set -euo pipefail

leoam=$1
model=$2
out=$3
mkdir -p "$out"
kv_dir=$(mktemp -d)
trap 'rm -rf "$kv_dir"' EXIT
tasks=${TASKS:-passkey niah_single niah_multikey niah_multivalue niah_multiquery vt}
common=(-m "$model" -t "${THREADS:-2}" --policy "${POLICIES:-full,leoam,quest,streaming,h2o,h2o-chunked,infinigen}"
        --budget "${BUDGETS:-0.015,0.05,0.1,0.2}" --kv-dir "$kv_dir" --kv-device-mb "${DEVICE_MB:-1}"
        --kv-host-mb "${HOST_MB:-1}")
haystack=()
[[ -n "${HAYSTACK:-}" ]] && haystack=(--haystack "$HAYSTACK")

for task in $tasks; do
  echo "## $task, ${CTX:-4096} tokens"
  "$leoam" eval "${common[@]}" --task "$task" --ctx "${CTX:-4096}" --depth "${DEPTHS:-0.1,0.3,0.5,0.7,0.9}" \
    --seeds "${SEEDS:-1}" "${haystack[@]}" --out "$out/$task.jsonl"
done
if [[ -n "${PPL_TEXT:-}" ]]; then
  echo "## ppl, ${PPL_CTX:-${CTX:-4096}} tokens"
  "$leoam" eval "${common[@]}" --task ppl --text "$PPL_TEXT" --ctx "${PPL_CTX:-${CTX:-4096}}" \
    --windows "${PPL_WINDOWS:-2}" --out "$out/ppl.jsonl"
fi
/usr/bin/python3 "$(dirname "$0")/../tools/eval/plot_eval.py" "$out"/*.jsonl --out "$out/plots"
