#!/usr/bin/env bash
# leoam's accuracy against its store chunk C (`--kv-chunk`; issue 27's chunk-size experiment,
# whose speed side is `leoam bench kv --kv-chunk C`): retrieval on the project's model at 4K and
# 8K tokens, perplexity of a held-out book at 8K, and stories260K's perplexity at 512 tokens, for
# full attention and for leoam at a 10% budget (and 20% on stories260K) with each C. The KV stays
# in RAM: a tier changes what is read, not what is selected. Writes JSON lines into OUT_DIR (runs
# already there are skipped) and prints the table.
#
#   bench/chunk_accuracy.sh LEOAM_BINARY OUT_DIR
#   env: CHUNKS="8 16 32 64 128 256", SHARED=../shared (the fixtures), THREADS=2
set -euo pipefail

leoam=$1
out=$2
shared=${SHARED:-../shared}
model=models/leoam-byte-4l/leoam-byte-4l.gguf
stories=$shared/fixtures/models/stories260K/stories260K.gguf
book=$shared/fixtures/text/pg19_firstbook.txt
threads=${THREADS:-2}
mkdir -p "$out"

# stories260K's own text to score: four samples from the model, as the stories260K sections do.
if [[ ! -s "$out/stories_gen.txt" ]]; then
  for s in 1 2 3 4; do
    "$leoam" run -m "$stories" -c 512 -n 480 --temp 0.8 --seed "$s" -p "Once upon a time" 2>/dev/null
  done > "$out/stories_gen.txt"
fi

for c in full ${CHUNKS:-8 16 32 64 128 256}; do
  if [[ $c == full ]]; then
    policy=(--policy full)
    stories_policy=(--policy full)
  else
    policy=(--policy leoam --budget 0.1 --kv-chunk "$c")
    stories_policy=(--policy leoam --budget 0.1,0.2 --kv-chunk "$c")
  fi
  echo "chunk $c" >&2
  "$leoam" eval -m "$model" -t "$threads" "${policy[@]}" --task niah_single --ctx 4096 \
    --depth 0.1,0.3,0.5,0.7,0.9 --first-seed 2 --seeds 8 --out "$out/niah4k_$c.jsonl"
  "$leoam" eval -m "$model" -t "$threads" "${policy[@]}" --task niah_single --ctx 8192 \
    --depth 0.1,0.3,0.5,0.7,0.9 --seeds 4 --out "$out/niah8k_$c.jsonl"
  "$leoam" eval -m "$model" -t "$threads" "${policy[@]}" --task niah_multikey --ctx 8192 \
    --depth 0.1,0.5,0.9 --first-seed 2 --seeds 8 --out "$out/mk8k_$c.jsonl"
  "$leoam" eval -m "$model" -t "$threads" "${policy[@]}" --task passkey --ctx 8192 -c 8208 \
    --depth 0.1,0.3,0.5,0.7,0.9 --seeds 2 --out "$out/pk8k_$c.jsonl"
  "$leoam" eval -m "$model" -t "$threads" "${policy[@]}" --task ppl --text "$book" --ctx 8192 --windows 2 \
    --out "$out/ppl8k_$c.jsonl"
  "$leoam" eval -m "$stories" -c 512 -t "$threads" "${stories_policy[@]}" --task ppl --text "$out/stories_gen.txt" \
    --ctx 512 --windows 4 --out "$out/stories_$c.jsonl"
done 2> "$out/eval.log"

/usr/bin/env python3 - "$out" ${CHUNKS:-8 16 32 64 128 256} <<'EOF'
import json, math, os, sys

out, chunks = sys.argv[1], ['full'] + sys.argv[2:]

def load(name):
    path = os.path.join(out, name)
    return [json.loads(line) for line in open(path)] if os.path.exists(path) else []

def solved(name):
    runs = load(name)
    return f"{sum(r['score'] for r in runs):g}/{len(runs)}" if runs else '-'

def attended(runs):
    return f"{sum(r['tokens_attended_pct'] for r in runs) / len(runs):.1f}%" if runs else '-'

def ppl(runs):  # pooled over the windows
    return f"{math.exp(sum(r['nll_sum'] for r in runs) / sum(r['n_tokens'] for r in runs)):.4f}" if runs else '-'

head = ['chunk', 'niah_single 4K', 'niah_single 8K', 'niah_multikey 8K', 'passkey 8K', 'attended (passkey)',
        'book ppl 8K', 'attended', 'stories260K ppl @0.1', 'attended', '@0.2', 'attended']
print('| ' + ' | '.join(head) + ' |')
print('|' + '---|' * len(head))
for c in chunks:
    stories = load(f'stories_{c}.jsonl')
    by_budget = [[r for r in stories if abs(r['budget'] - b) < 1e-9] for b in (0.1, 0.2)]
    if c == 'full':
        by_budget = [stories, []]
    cells = [c, solved(f'niah4k_{c}.jsonl'), solved(f'niah8k_{c}.jsonl'), solved(f'mk8k_{c}.jsonl'),
             solved(f'pk8k_{c}.jsonl'), attended(load(f'pk8k_{c}.jsonl')), ppl(load(f'ppl8k_{c}.jsonl')),
             attended(load(f'ppl8k_{c}.jsonl'))]
    for runs in by_budget:
        cells += [ppl(runs), attended(runs)]
    print('| ' + ' | '.join(cells) + ' |')
EOF
