#!/usr/bin/env bash
# Installs the packages of `run_benchmark.py --peers` (requirements-peers.txt) into the project's
# venv, after `source scripts/setup_env.sh` made it. One pip command holds the torch pin, so no
# package of the file can pull another torch build; requirements.txt is passed as constraints,
# so the project's own versions stay. Re-installs only when either file changed.
#
# Usage: bash scripts/setup_peers.sh
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="${TTA_VENV:-$root/.venv}"
if [ ! -x "$venv/bin/python" ]; then
  echo "setup_peers: no venv at $venv; run 'source scripts/setup_env.sh' first" >&2
  exit 1
fi
stamp="$venv/.requirements-peers.sha256"
want="$(cat "$root/requirements.txt" "$root/requirements-peers.txt" | sha256sum | cut -d' ' -f1)"
if [ "$(cat "$stamp" 2>/dev/null)" = "$want" ]; then
  echo "setup_peers: requirements-peers.txt already installed in $venv" >&2
  exit 0
fi
echo "setup_peers: installing requirements-peers.txt into $venv" >&2
"$venv/bin/python" -m pip install -q --disable-pip-version-check \
  -r "$root/requirements-peers.txt" -c "$root/requirements.txt" >&2
echo "$want" > "$stamp"
