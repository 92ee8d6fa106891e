#!/usr/bin/env bash
# The README's test command: sets up .venv and KenLM's lmplz/build_binary if needed (both are
# reused once built), checks the code style (ruff.toml), then runs the pytest suite.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source scripts/setup_env.sh
bash scripts/build_kenlm.sh >/dev/null
ruff format --check --quiet . || { echo "test.sh: code style: run 'ruff format .'" >&2; exit 1; }
ruff check --quiet . || { echo "test.sh: lint errors above (ruff check)" >&2; exit 1; }
# A test whose shared data is missing fails here instead of skipping (conftest.data_dir_or_skip):
# a skipped real-data test would otherwise pass CI unnoticed.
export TTA_REQUIRE_DATA="${TTA_REQUIRE_DATA:-1}"
exec python -m pytest -q tests "$@"
