#!/usr/bin/env bash
# The README's test command: sets up .venv, Apache Beam's overlay (scripts/setup_beam.sh) and
# KenLM's lmplz/build_binary if needed (each reused once built), checks the code style
# (ruff.toml), then runs the pytest suite.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source scripts/setup_env.sh
# Apache Beam for tests/test_beam.py, in an overlay beside the venv (requirements-beam.txt).
source scripts/setup_beam.sh
bash scripts/build_kenlm.sh >/dev/null
ruff format --check --quiet . || { echo "test.sh: code style: run 'ruff format .'" >&2; exit 1; }
ruff check --quiet . || { echo "test.sh: lint errors above (ruff check)" >&2; exit 1; }
# A test whose shared data is missing fails here instead of skipping (conftest.data_dir_or_skip):
# a skipped real-data test would otherwise pass CI unnoticed.
export TTA_REQUIRE_DATA="${TTA_REQUIRE_DATA:-1}"
# Two worker processes (TTA_TEST_WORKERS): most tests are single-threaded Python and TF start-up,
# so two workers on two cores take about 1/1.7 of one's time. The modules with the longest tests
# come first (conftest.pytest_collection_modifyitems), an idle worker steals queued tests from the
# other, and the slowest tests are listed at the end. A test running longer than 15 minutes (the
# slowest take about 2) fails with its stack (pytest-timeout), so that a hang cannot hold CI.
exec python -m pytest -q -n "${TTA_TEST_WORKERS:-2}" --dist worksteal --durations=15 \
  --timeout="${TTA_TEST_TIMEOUT:-900}" tests "$@"
