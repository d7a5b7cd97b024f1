#!/usr/bin/env bash
# Train one Multi30k De->En recipe, then score it on test2016 with beam 5 (recorded in the model card) and greedy.
#   usage: scripts/multi30k.sh RECIPE [--section.key value ...]
#   RECIPE: transformer-small | lstm-bahdanau | lstm-luong-general | lstm-noattn  (configs/multi30k-RECIPE.yaml)
# The data is read from MULTI30K_DIR (default data/multi30k: python scripts/fetch_multi30k.py puts it there).
# docs/results.md gives each row's OMP_NUM_THREADS (1 for every row: two recipes at a time on the 2-core machine).
# A seeded run repeats exactly at the same thread count.
set -euo pipefail
recipe=$1
shift
data=${MULTI30K_DIR:-data/multi30k}
out=${OUT:-runs/multi30k-$recipe}   # OUT=DIR writes the run elsewhere
python -m encdec train "configs/multi30k-$recipe.yaml" --training.output_dir "$out" "$@"
score() {
  python -m encdec evaluate --model "$out" --source-file "$data/test2016.de" --reference-file "$data/test2016.en" \
    --num-beams "$1" --output "$out/test2016-beam$1.json" --overwrite "${@:2}"
}
score 1
score 5 --card-dataset "Multi30k Task 1 De-En"
