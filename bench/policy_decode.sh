#!/usr/bin/env bash
# Decode speed of each sparse attention policy against full attention, with the KV mostly on disk:
# a prompt is prefilled once and saved (--kv-save); each run then loads it (--kv-load) into a
# tiered store whose device tier holds a small part of it, decodes N tokens, and reports its
# decode rate. Runs are interleaved over REPS rounds; the table gives each policy's median rate,
# its ratio to full's median, and next to them the share of tokens it attended and the KV bytes
# it read from each tier per decode step (N tokens take N - 1 steps; the decode's bytes alone, not
# the session load's; the last round's run: --kv-stats and
# --kv-stats-json), under the budget rule line every sparse policy ran under.
#
#   bench/policy_decode.sh LEOAM_BINARY MODEL PROMPT_FILE [MORE LEOAM RUN FLAGS...]
#   env: POLICIES="full streaming ...", BUDGET=0.1, N_TOKENS=32, REPS=5, CTX=4608, DEVICE_MB=8,
#        HOST_MB=0, THREADS=2, KV_DIR (default: a fresh directory in $TMPDIR)
set -euo pipefail

leoam=$1
model=$2
prompt=$3
shift 3
work=$(mktemp -d)
kv_dir=${KV_DIR:-$work/kv}
trap 'rm -rf "$work" "$kv_dir"' EXIT
policies=${POLICIES:-full streaming h2o h2o-chunked quest infinigen leoam}
common=(-m "$model" -c "${CTX:-4608}" -t "${THREADS:-2}" --temp 0 --kv-dir "$kv_dir"
        --kv-device-mb "${DEVICE_MB:-8}" --kv-host-mb "${HOST_MB:-0}")

"$leoam" run "${common[@]}" -f "$prompt" -n 1 --kv-save "$work/session" > /dev/null 2> "$work/prefill.err" ||
  { cat "$work/prefill.err" >&2; exit 1; }

for rep in $(seq "${REPS:-5}"); do
  for policy in $policies; do
    err="$work/$policy-$rep.err"
    "$leoam" run "${common[@]}" --kv-load "$work/session" -n "${N_TOKENS:-32}" --policy "$policy" \
      --budget "${BUDGET:-0.1}" --kv-stats --kv-stats-json "$work/$policy-$rep.json" "$@" > /dev/null 2> "$err" ||
      { cat "$err" >&2; exit 1; }
    # "leoam: generated     32 tokens     1342.4 ms       11.9 tok/s ..."
    sed -n 's/^leoam: generated .* \([0-9.]*\) tok\/s.*/\1/p' "$err" >> "$work/$policy.rates"
  done
done

median() { sort -g "$1" | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
last=${REPS:-5}
full=$(median "$work/full.rates" 2> /dev/null || echo 0)
# "attention: budget rule: ..." (a sparse run prints it; full has no selector)
awk '/^attention: budget rule: / { sub(/^attention: /, ""); print; exit }' "$work"/*-"$last".err
echo
echo "| policy | decode tok/s (median of $last) | vs full | tokens attended | KV read/token: device KB | host KB | disk KB |"
echo "|---|---|---|---|---|---|---|"
# The decode's bytes read from tier $1 (--kv-stats-json's "decode", the run's traffic after the
# prompt: the session load and its last token are the prompt's) in file $2.
read_bytes() { python3 -c 'import json, sys; print(json.load(open(sys.argv[2]))["decode"]["bytes_read"][sys.argv[1]])' "$1" "$2"; }
for policy in $policies; do
  rate=$(median "$work/$policy.rates")
  attended=$(sed -n 's/^attention: policy .*tokens, \([0-9.]*%\) of the visible.*/\1/p' "$work/$policy-$last.err")
  json="$work/$policy-$last.json"
  awk -v p="$policy" -v r="$rate" -v f="$full" -v a="${attended:-100%}" -v n="$((${N_TOKENS:-32} - 1))" \
    -v dev="$(read_bytes device "$json")" -v host="$(read_bytes host "$json")" -v disk="$(read_bytes disk "$json")" \
    'BEGIN { printf "| %s | %.1f | %.2fx | %s | %.1f | %.1f | %.1f |\n", p, r, (f > 0 ? r / f : 0), a,
             dev / n / 1e3, host / n / 1e3, disk / n / 1e3 }'
done
