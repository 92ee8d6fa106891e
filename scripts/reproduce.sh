#!/usr/bin/env bash
# The README's main-job command: sets up .venv and KenLM's lmplz/build_binary if needed, then
# runs the CPU-scale reproduction (reproduce.py). Quick mode (a few minutes) unless told otherwise:
#   bash scripts/reproduce.sh                                   # quick mode
#   bash scripts/reproduce.sh --mode=full --budget_minutes=40   # full mode (docs/results.md: each
#                                                               # table with the flags of its run)
# Re-running resumes: finished stages are skipped, training continues from its last checkpoint.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source scripts/setup_env.sh
bash scripts/build_kenlm.sh >/dev/null
exec python reproduce.py "$@"
