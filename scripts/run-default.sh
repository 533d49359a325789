#!/usr/bin/env bash
# The main job of `make run`: generate text with the default model.
# - With ../shared present: the trained stories260K model (Karpathy's TinyStories, 260K params).
# - Without it: a random-weight Llama model that leoam itself writes with a fixed seed (its text is
#   gibberish; the run shows that the whole pipeline works: load, tokenize, prefill, decode).
# The project's own trained long-context model replaces both in a later issue.
set -euo pipefail
cd "$(dirname "$0")/.."

leoam=build/release/leoam
stories=../shared/fixtures/models/stories260K/stories260K.gguf

if [[ -f "$stories" ]]; then
  echo "make run: stories260K from ../shared (trained at 512 tokens)" >&2
  exec "$leoam" run -m "$stories" -c 512 -n 200 --seed 42 \
    -p "Once upon a time, there was a little girl named Lily. She loved to play outside in the park. One day, she saw a big, red ball. She wanted to play with it, but it was too high. Lily asked her mom to help her."
fi

model=build/default-model.gguf
if [[ ! -f "$model" ]]; then
  echo "make run: ../shared is absent; writing a random-weight Llama model to $model (seed 42)" >&2
  "$leoam" gguf synth --preset tiny --seed 42 -o "$model"
fi
prompt=$(for i in $(seq 1 40); do printf 'The quick brown fox jumps over the lazy dog, line %d. ' "$i"; done)
exec "$leoam" run -m "$model" -n 64 --seed 42 -p "$prompt"
