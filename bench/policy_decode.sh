#!/usr/bin/env bash
# Decode speed of each sparse attention policy against full attention, with the KV mostly on disk:
# a prompt is prefilled once and saved (--kv-save); each run then loads it (--kv-load) into a
# tiered store whose device tier holds a small part of it, decodes N tokens, and reports its
# decode rate. Runs are interleaved over REPS rounds; the table gives each policy's median rate,
# its ratio to full's median, the tokens it attended and what it read from disk.
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
full=$(median "$work/full.rates" 2> /dev/null || echo 0)
echo "| policy | decode tok/s (median of ${REPS:-5}) | vs full | tokens attended | disk MB read (last run) |"
echo "|---|---|---|---|---|"
for policy in $policies; do
  rate=$(median "$work/$policy.rates")
  attended=$(sed -n 's/^attention: policy .*tokens, \([0-9.]*%\) of the visible.*/\1/p' "$work/$policy-${REPS:-5}.err")
  disk=$(sed -n 's/.*"disk":{"bytes_read":\([0-9]*\).*/\1/p' "$work/$policy-${REPS:-5}.json")
  awk -v p="$policy" -v r="$rate" -v f="$full" -v a="${attended:-100%}" -v d="${disk:-0}" \
    'BEGIN { printf "| %s | %.1f | %.2fx | %s | %.0f |\n", p, r, (f > 0 ? r / f : 0), a, d / 1e6 }'
done
