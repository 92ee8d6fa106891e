#!/usr/bin/env bash
# The README's test command: sets up .venv and KenLM's lmplz/build_binary if needed (both are
# reused once built), then runs the pytest suite.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source scripts/setup_env.sh
bash scripts/build_kenlm.sh >/dev/null
exec python -m pytest -q tests "$@"
