#!/usr/bin/env bash
# Distil the transformer+bahdanau ensemble into one Multi30k student, then score it on test2016 with beam 5 (recorded
# in its model card) and greedy, as scripts/multi30k.sh scores a recipe.
#   usage: scripts/multi30k_distill.sh STUDENT [--key value ...]
#   STUDENT: transformer-small | transformer-fast | lstm-bahdanau   (configs/distill-multi30k-STUDENT.yaml)
# The teacher's members come first: scripts/multi30k.sh transformer-small and scripts/multi30k.sh lstm-bahdanau.
# The three recipes share one distilled corpus (runs/distill-multi30k-corpus): the first run translates the 29,000
# training sources, the others reuse it, so start the others once the first has finished its translation.
set -euo pipefail
student=$1
shift
data=${MULTI30K_DIR:-data/multi30k}
model=runs/distill-multi30k-$student/student
python -m encdec distill "configs/distill-multi30k-$student.yaml" "$@"
score() {
  python -m encdec evaluate --model "$model" --source-file "$data/test2016.de" --reference-file "$data/test2016.en" \
    --num-beams "$1" --output "$model/test2016-beam$1.json" --overwrite "${@:2}"
}
score 1
score 5 --card-dataset "Multi30k Task 1 De-En"
