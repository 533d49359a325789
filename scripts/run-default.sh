#!/usr/bin/env bash
# The main job of `make run`: the demo of the project's own long-context model,
# models/leoam-byte-4l. A pass key is hidden at a random depth of an 8192-token context and the
# model is asked for it twice, under LeoAM's sparse attention at a 10% budget and under full
# attention, with the KV in the tiered store: device and host tiers of an eighth of the KV each,
# the rest on disk. `leoam eval --show` prints each run's answer, output, tokens attended, bytes
# read per tier and decode latency.
# Environment: LEOAM_DEMO_CTX (tokens, 8192), LEOAM_DEMO_SEED and LEOAM_DEMO_DEPTH (the sample
# and the needle's depth in [0, 1]; drawn at random when unset, and printed so that a run can be
# repeated), LEOAM_BIN (the binary, build/release/leoam).
set -euo pipefail
cd "$(dirname "$0")/.."

leoam=${LEOAM_BIN:-build/release/leoam}
model=models/leoam-byte-4l/leoam-byte-4l.gguf
ctx=${LEOAM_DEMO_CTX:-8192}
seed=${LEOAM_DEMO_SEED:-$((RANDOM % 1000))}
# Not in the first or last 5%, which every policy keeps (the sink and the recent window).
depth=${LEOAM_DEMO_DEPTH:-$(printf '0.%02d' $((5 + RANDOM % 91)))}

# The model's KV: 4 layers x (K, V) x 4 KV heads x 64 dims x 2 bytes (f16) = 4 KiB a token.
kv_mib=$((ctx * 4096 / 1048576))
tier_mib=$(awk -v kv="$kv_mib" 'BEGIN { t = kv / 8; printf "%g", t < 1 ? 1 : t }')

work=$(mktemp -d "${TMPDIR:-/tmp}/leoam-demo.XXXXXX")
trap 'rm -rf "$work"' EXIT
trap 'exit 130' INT TERM  # through the EXIT trap

fmt -w 100 <<EOF
make run: leoam's own long-context model, $model (a byte-level Llama; see its MODEL_CARD.md). \
A 5-digit pass key is hidden at depth $depth of a $ctx-token context (sample seed $seed), and \
the model is asked for it twice: with LeoAM's sparse attention at a budget of 10% of the far \
tokens, and with full attention. The context's KV, $kv_mib MiB, lives in leoam's tiered store: \
device and host tiers of $tier_mib MiB each, the rest on disk in $work, so decoding reads most \
of it back from disk. To repeat this run: LEOAM_DEMO_SEED=$seed LEOAM_DEMO_DEPTH=$depth make run
EOF
echo
# -c: the context and the answer's tokens (passkey asks for at most 12).
"$leoam" eval -m "$model" --task passkey --ctx "$ctx" -c $((ctx + 16)) --depth "$depth" \
  --seeds 1 --first-seed "$seed" --policy leoam,full --budget 0.1 --kv-dir "$work/kv" \
  --kv-device-mb "$tier_mib" --kv-host-mb "$tier_mib" --show --out "$work/results.jsonl"
