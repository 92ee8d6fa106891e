#!/usr/bin/env bash
# The README's test command: sets up .venv if needed, then runs the pytest suite.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source scripts/setup_env.sh
exec python -m pytest -q tests "$@"
