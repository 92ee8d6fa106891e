#!/usr/bin/env bash
# The README's main-job command: sets up .venv if needed, then runs the main job.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source scripts/setup_env.sh
exec python smoke.py "$@"
