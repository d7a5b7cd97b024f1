#!/usr/bin/env bash
# Score an ensemble of trained Multi30k models on test2016 with beam 5 and greedy decoding.
#   usage: scripts/multi30k_ensemble.sh NAME MODEL_DIR MODEL_DIR [...]
#   e.g.:  scripts/multi30k_ensemble.sh transformer+bahdanau runs/multi30k-transformer-small runs/multi30k-lstm-bahdanau
# The members must share one tokenizer (every recipe trains the same 8k BPE on the training split).
# Results go to runs/multi30k-ensembles/NAME/test2016-beam{1,5}.json; scripts/multi30k_results.py tabulates them.
set -euo pipefail
name=$1
shift
data=${MULTI30K_DIR:-data/multi30k}
out=runs/multi30k-ensembles/$name
mkdir -p "$out"
models=()
for model in "$@"; do
  models+=(--model "$model")
done
for beams in 1 5; do
  python -m encdec evaluate "${models[@]}" --source-file "$data/test2016.de" --reference-file "$data/test2016.en" \
    --num-beams "$beams" --output "$out/test2016-beam$beams.json" --overwrite
done
