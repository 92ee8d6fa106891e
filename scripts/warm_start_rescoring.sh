#!/usr/bin/env bash
# Whole-set LibriSpeech reranking by the warm-start study's models (issue 55 item 3; figures in
# docs/warm_start.md): the step-$STOP_STEP T-TAs of scripts/warm_start_study.sh (warm from
# all-MiniLM-L6-v2 and scratch, seeds 1 and 2) rerank every list of the four shared 30-best sets,
# both first passes (am: decoder + CTC; full: with the ESPnet2 fused Transformer LM), λ tuned on
# each dev set and applied to its test set, with the paired bootstrap against the first pass.
# MODELS adds or replaces LMs (NAME=SPEC, comma-separated: a model dir, kenlm:PATH, hf:DIR).
#
# Cost: one T-TA pass per hypothesis, ~334 k hypotheses per model over the four sets; the LM
# scores are cached in $WORK/rescoring_whole/cache, so a re-run resumes where a stop left it.
# Usage: WORK=/path/to/work bash scripts/warm_start_rescoring.sh
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source scripts/setup_env.sh
WORK="${WORK:?set WORK to the folder of warm_start_study.sh}"
steps="$WORK/at_step"
MODELS="${MODELS:-warm_s1=$steps/tta_warm_s1,warm_s2=$steps/tta_warm_s2,scratch_s1=$steps/tta_scratch_s1,scratch_s2=$steps/tta_scratch_s2}"
python run_rescoring.py --model_dir="$MODELS" --settings=am,full \
  --output_dir="$WORK/rescoring_whole" 2>&1 | tee -a "$WORK/logs/rescoring_whole.log"
