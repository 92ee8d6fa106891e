#!/usr/bin/env bash
# Creates (or reuses) the project's virtual environment in .venv, installs requirements.txt, and
# puts the venv first on PATH. Re-installs only when requirements.txt changed since the last
# successful install. Meant to be sourced: `source scripts/setup_env.sh` (it leaves the caller's
# shell options alone).

# The names requirements.txt pins, on one line.
_tta_requirements() {
  sed -n 's/^\([A-Za-z0-9_.-]*\)==.*/\1/p' "$1/requirements.txt" | paste -sd, - | sed 's/,/, /g'
}

# pip's lines into log file $1; on stderr, how far it is: every 20th package fetched (one line
# rewritten in place on a terminal), then the install.
_tta_pip_progress() {
  local line name fetched=0
  : > "$1"
  while IFS= read -r line; do
    printf '%s\n' "$line" >> "$1"
    case "$line" in
      Collecting\ *)
        fetched=$((fetched + 1))
        name="${line#Collecting }"
        name="${name%%[ <>=!~;[]*}"
        if [ -t 2 ]; then
          printf '\rsetup_env: %d packages fetched (%s)\033[K' "$fetched" "$name" >&2
        elif [ $((fetched % 20)) -eq 0 ]; then
          echo "setup_env: $fetched packages fetched (the latest: $name)" >&2
        fi
        ;;
      Installing\ collected\ packages:*)
        if [ -t 2 ]; then echo >&2; fi
        echo "setup_env: installing the $fetched packages fetched (~1 minute)" >&2
        ;;
      Successfully\ installed*)
        echo "setup_env: installed" >&2
        ;;
    esac
  done
}

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
    echo "setup_env: installing into $venv (first time: ~3 minutes): $(_tta_requirements "$root")" \
      "and their dependencies; pip's output: $venv/pip-install.log" >&2
    # pip's status through a file: a caller's `set -e -o pipefail` (scripts/reproduce.sh) would
    # end the script at a failed pipeline before the lines below say why.
    rm -f "$venv/.pip-failed"
    { "$venv/bin/python" -m pip install --disable-pip-version-check --progress-bar off \
        -r "$root/requirements.txt" 2>&1 || echo "$?" > "$venv/.pip-failed"; } \
      | _tta_pip_progress "$venv/pip-install.log"
    if [ -e "$venv/.pip-failed" ]; then
      rm -f "$venv/.pip-failed"
      tail -n 20 "$venv/pip-install.log" >&2
      echo "setup_env: pip install failed; its output: $venv/pip-install.log" >&2
      return 1
    fi
    echo "$want" > "$stamp"
  fi
  export TF_CPP_MIN_LOG_LEVEL="${TF_CPP_MIN_LOG_LEVEL:-2}"
  export PATH="$venv/bin:$PATH"
}
_tta_setup
