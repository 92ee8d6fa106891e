# The schedule and bookkeeping shared by the warm-start studies (sourced by
# scripts/warm_start_study.sh and scripts/distill_study.sh; figures in docs/warm_start.md).
# Needs WORK (the study's folder) and RECORDS (its records, made with the source's vocab).
#
# One schedule for every run of the studies: lr 1e-4, warmup 40 of 400 steps, batch 64, fp32,
# 128 positions, a checkpoint and an eval (100 batches) every 100 steps, 10 steps per call.

study_train() {  # NAME STOP_STEP FLAGS...: the schedule, stopped after its eval at STOP_STEP
  local name=$1 stop=$2 log="$WORK/logs/$1.log" pid
  shift 2
  mkdir -p "$WORK/logs"
  if grep -q "eval at step $stop:" "$log" 2>/dev/null; then return; fi
  python run_pretraining.py --input_file="$RECORDS/train-*.tfrecord" \
    --eval_file="$RECORDS/eval-*.tfrecord" --output_dir="$WORK/runs/$name" \
    --max_position_embeddings=128 --train_batch_size=64 --learning_rate=1e-4 \
    --num_warmup_steps=40 --num_train_steps=400 --save_checkpoints_steps=100 \
    --eval_every_steps=100 --max_eval_steps=100 --steps_per_loop=10 "$@" >> "$log" 2>&1 &
  pid=$!
  # SIGTERM: the run saves the step it reached and exits 75 (resumable); the eval is what counts.
  while kill -0 "$pid" 2>/dev/null; do
    if grep -q "eval at step $stop:" "$log"; then kill -TERM "$pid"; fi
    sleep 10
  done
  wait "$pid" || true
}

study_at_step() {  # NAME STEP [DIR]: DIR (default $WORK/at_step/NAME@STEP), a model dir whose
  # latest checkpoint is the run's of STEP. Made once, the files' times kept (cp -p): a model dir's
  # identity holds its checkpoint's sizes and mtimes, and a run that records it as its teacher
  # resumes only while they are the same.
  local src="$WORK/runs/$1" dst="${3:-$WORK/at_step/$1@$2}"
  [ -e "$dst/checkpoint" ] && return
  mkdir -p "$dst"
  cp -p "$src/config.json" "$src/vocab.txt" "$src/ckpt-$2".* "$dst/"
  printf 'model_checkpoint_path: "ckpt-%s"\n' "$2" > "$dst/checkpoint"
}
