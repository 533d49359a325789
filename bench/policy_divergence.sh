#!/usr/bin/env bash
# Where each sparse attention policy's greedy text first leaves full attention's, on stories260K
# from BOS alone: for each policy and budget, the index of the first generated token that differs
# (or "none" within the run). The KV runs through the tiered store with tiny budgets, so it is
# mostly on disk; the sink (4) and recent window (64) are the defaults, so are the chunk sizes
# (8 for leoam, 64 for the others; KV_CHUNK=N sets every policy's).
#
#   bench/policy_divergence.sh [LEOAM_BINARY] [N_TOKENS] [MORE LEOAM RUN FLAGS...]
set -euo pipefail

leoam=${1:-build/release/leoam}
n_tokens=${2:-400}
shift $(($# < 2 ? $# : 2))
more=("$@")
model=${LEOAM_MODEL:-../shared/fixtures/models/stories260K/stories260K.gguf}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# The greedy token of every row of a --dump-logits file, one per line.
argmax_rows() {
  awk '{ best = 1; for (i = 2; i <= NF; ++i) if ($i > $best) best = i; print best - 1 }' "$1"
}

run() {  # run NAME ARGS...: greedy tokens of one run in $work/NAME.tokens
  local name=$1
  shift
  "$leoam" run -m "$model" -p "" -n "$n_tokens" --temp 0 -c 1024 -t 1 --dump-logits "$work/$name.logits" \
    --kv-dir "$work/kv-$name" --kv-device-mb 0.15 --kv-host-mb 0.05 ${KV_CHUNK:+--kv-chunk $KV_CHUNK} "${more[@]}" "$@" \
    > /dev/null 2> "$work/$name.err" || { cat "$work/$name.err" >&2; exit 1; }
  argmax_rows "$work/$name.logits" > "$work/$name.tokens"
}

run full --policy full
echo "| policy | budget | first generated token that differs from full (of $n_tokens) |"
echo "|---|---|---|"
for policy in ${POLICIES:-streaming h2o h2o-chunked quest infinigen leoam}; do
  for budget in 0.5 0.2 0.1; do
    run "$policy-$budget" --policy "$policy" --budget "$budget"
    first=$(paste "$work/full.tokens" "$work/$policy-$budget.tokens" | awk '$1 != $2 { print NR - 1; exit }')
    echo "| $policy | $budget | ${first:-none} |"
  done
done
