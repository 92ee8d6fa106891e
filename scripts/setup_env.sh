#!/usr/bin/env bash
# Creates (or reuses) the project's virtual environment in .venv, installs requirements.txt, and
# puts the venv first on PATH. Re-installs only when requirements.txt changed since the last
# successful install. Meant to be sourced: `source scripts/setup_env.sh` (it leaves the caller's
# shell options alone).
_tta_setup() {
  local root venv python stamp want
  root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
  venv="${TTA_VENV:-$root/.venv}"
  python="${PYTHON:-python3.11}"
  command -v "$python" >/dev/null 2>&1 || python=python3
  if ! "$python" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))'; then
    echo "setup_env: Python 3.11 is required, found $("$python" --version 2>&1)" >&2
    return 1
  fi
  if [ ! -x "$venv/bin/python" ]; then
    echo "setup_env: creating $venv" >&2
    "$python" -m venv "$venv" || return 1
  fi
  stamp="$venv/.requirements.sha256"
  want="$(sha256sum "$root/requirements.txt" | cut -d' ' -f1)"
  if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
    echo "setup_env: installing requirements.txt into $venv (first time: ~3 minutes)" >&2
    "$venv/bin/python" -m pip install -q --disable-pip-version-check -r "$root/requirements.txt" \
      >&2 || { echo "setup_env: pip install failed" >&2; return 1; }
    echo "$want" > "$stamp"
  fi
  export TF_CPP_MIN_LOG_LEVEL="${TF_CPP_MIN_LOG_LEVEL:-2}"
  export PATH="$venv/bin:$PATH"
}
_tta_setup
