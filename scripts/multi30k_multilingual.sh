#!/usr/bin/env bash
# Train the CPU-sized Multi30k multilingual model or one bilingual baseline, then score test2016 with beam 5 (and
# greedy), one JSON per direction in the model folder (test2016-SRC-TGT-beamN.json; docs/results.md, "Several
# languages", collects them with scripts/multi30k_results.py).
#   usage: scripts/multi30k_multilingual.sh multilingual [--section.key value ...]
#          scripts/multi30k_multilingual.sh bilingual SRC TGT [--section.key value ...]
# The data is read from MULTI30K_DIR (default data/multi30k: python scripts/fetch_multi30k.py puts it there).
# OMP_NUM_THREADS=1 for every run: two at a time on a 2-core machine. A seeded run repeats exactly at the same
# thread count.
set -euo pipefail
kind=$1
shift
data=${MULTI30K_DIR:-data/multi30k}
if [ "$kind" = multilingual ]; then
  out=${OUT:-runs/multi30k-multilingual-cpu}
  directions="de-en en-de fr-en en-fr cs-en en-cs de-fr fr-de de-cs cs-de fr-cs cs-fr"
  python -m encdec train configs/multi30k-multilingual-cpu.yaml --data.data_dir "$data" \
    --training.output_dir "$out" "$@"
elif [ "$kind" = bilingual ]; then
  src=$1 tgt=$2
  shift 2
  out=${OUT:-runs/multi30k-bilingual-cpu-$src-$tgt}
  directions="$src-$tgt"
  python -m encdec train configs/multi30k-bilingual-cpu.yaml --data.data_dir "$data" \
    --data.source_lang "$src" --data.target_lang "$tgt" --training.output_dir "$out" "$@"
else
  echo "usage: $0 multilingual | bilingual SRC TGT" >&2
  exit 2
fi
for direction in $directions; do
  src=${direction%-*} tgt=${direction#*-}
  languages=()
  [ "$kind" = multilingual ] && languages=(--source-lang "$src" --target-lang "$tgt")
  for beams in 5 1; do
    python -m encdec evaluate --model "$out" --source-file "$data/test2016.$src" \
      --reference-file "$data/test2016.$tgt" "${languages[@]}" --num-beams "$beams" \
      --output "$out/test2016-$direction-beam$beams.json" --overwrite
  done
done
