#!/usr/bin/env bash
# Perplexity of each sparse attention policy against full attention, on stories260K over text of
# its own domain: a story it samples itself (seeded), then scored token by token with the prompt
# decoded one token at a time (-b 1), so every position goes through the policy. The KV runs
# through the tiered store with tiny budgets, so it is mostly on disk. Perplexity counts the
# positions from FIRST on (before it, the sink and recent window hold everything). Next to each
# perplexity: the share of tokens the policy attended and the KV bytes it read from each tier per
# position (--kv-stats, --kv-stats-json), under the budget rule line.
#
#   bench/policy_perplexity.sh [LEOAM_BINARY] [MORE LEOAM RUN FLAGS...]
#   env: POLICIES="quest leoam", BUDGETS="0.2 0.1", N_TOKENS=512, FIRST=96, SEED=7
set -euo pipefail

leoam=${1:-build/release/leoam}
shift $(($# < 1 ? $# : 1))
model=${LEOAM_MODEL:-../shared/fixtures/models/stories260K/stories260K.gguf}
n_tokens=${N_TOKENS:-512}
first=${FIRST:-96}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

"$leoam" run -m "$model" -p "" -n $((n_tokens - 1)) --temp 0.8 --seed "${SEED:-7}" -c 1024 -t 1 \
  > "$work/story.txt" 2> /dev/null
"$leoam" tokenize -m "$model" -f "$work/story.txt" > "$work/tokens"

# Mean negative log-likelihood of the story's tokens, from rows FIRST.. of a --dump-logits file.
mean_nll() {
  awk -v first="$first" 'NR == FNR { tok[FNR - 1] = $1; n = FNR; next }
    { row = FNR - 1; if (row < first || row + 1 >= n) next
      m = $1; for (i = 2; i <= NF; ++i) if ($i > m) m = $i
      s = 0; for (i = 1; i <= NF; ++i) s += exp($i - m)
      nll += m + log(s) - $(tok[row + 1] + 1); count += 1 }
    END { printf "%.6f", nll / count }' "$work/tokens" "$1"
}

run() {  # run NAME ARGS...: the logits of every position in $work/NAME.logits
  local name=$1
  shift
  "$leoam" run -m "$model" -f "$work/story.txt" -n 0 -c 1024 -t 1 -b 1 --dump-logits "$work/$name.logits" \
    --kv-dir "$work/kv-$name" --kv-device-mb 0.15 --kv-host-mb 0.05 --kv-stats --kv-stats-json "$work/$name.json" "$@" \
    > /dev/null 2> "$work/$name.err" ||
    { cat "$work/$name.err" >&2; exit 1; }
}

run full --policy full
full=$(mean_nll "$work/full.logits")
echo "story: $(wc -l < "$work/tokens") tokens (seed ${SEED:-7}); scored from position $first; flags: ${*:-none}"
n_positions=$(wc -l < "$work/tokens")
# KB per position read from each tier of run NAME: "device host disk", from its --kv-stats-json
kb_read() {
  for tier in device host disk; do
    sed -n "s/.*\"$tier\":{\"bytes_read\":\([0-9]*\).*/\1/p" "$work/$1.json"
  done | awk -v n="$n_positions" '{ printf "%.1f ", $1 / n / 1e3 }'
}
echo
echo "| policy | budget | tokens attended | perplexity | vs full | KV read/token: device KB | host KB | disk KB |"
echo "|---|---|---|---|---|---|---|---|"
awk -v n="$full" -v kb="$(kb_read full)" \
  'BEGIN { split(kb, k, " "); printf "| full | 1 | 100%% | %.4f | +0.00%% | %s | %s | %s |\n", exp(n), k[1], k[2], k[3] }'
for policy in ${POLICIES:-streaming h2o h2o-chunked quest infinigen leoam}; do
  for budget in ${BUDGETS:-0.5 0.2 0.1}; do
    run "$policy-$budget" --policy "$policy" --budget "$budget" "$@"
    nll=$(mean_nll "$work/$policy-$budget.logits")
    # "attention: policy P: attended N tokens, X% of the visible ones, ..." from --kv-stats
    attended=$(sed -n 's/^attention: policy .*tokens, \([0-9.]*%\) of the visible.*/\1/p' "$work/$policy-$budget.err")
    awk -v p="$policy" -v b="$budget" -v a="$attended" -v n="$nll" -v f="$full" -v kb="$(kb_read "$policy-$budget")" \
      'BEGIN { split(kb, k, " ")
               printf "| %s | %s | %s | %.4f | %+.2f%% | %s | %s | %s |\n", p, b, a, exp(n), 100 * (exp(n) / exp(f) - 1),
                      k[1], k[2], k[3] }'
  done
done
echo
awk '/^attention: budget rule: / { sub(/^attention: /, ""); print; exit }' "$work"/*.err
