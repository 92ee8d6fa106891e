#!/usr/bin/env bash
# Apache Beam for beam_data.py, beam_score.py and beam_rescore.py (requirements-beam.txt), opt-in.
# Beam 2.78 needs protobuf < 7 and python-dateutil < 3, below what requirements.txt resolves to,
# so its packages go into an overlay directory beside the venv's own (TTA_BEAM_SITE, default
# .venv/beam-site), put first on PYTHONPATH: a process without it runs on exactly
# requirements.txt's versions. Installed once (~340 MB, about a minute); re-installed only when
# requirements-beam.txt changed. Meant to be sourced after scripts/setup_env.sh:
#
#   source scripts/setup_env.sh && source scripts/setup_beam.sh
_tta_setup_beam() {
  local root venv site stamp want
  root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
  venv="${TTA_VENV:-$root/.venv}"
  site="${TTA_BEAM_SITE:-$venv/beam-site}"
  if [ ! -x "$venv/bin/python" ]; then
    echo "setup_beam: no venv at $venv; run 'source scripts/setup_env.sh' first" >&2
    return 1
  fi
  stamp="$site/.requirements-beam.sha256"
  want="$(sha256sum "$root/requirements-beam.txt" | cut -d' ' -f1)"
  if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
    echo "setup_beam: installing requirements-beam.txt into $site (~1 minute)" >&2
    rm -rf "$site"
    # --no-deps: the file pins every package Beam adds; the rest comes from the venv.
    "$venv/bin/python" -m pip install -q --disable-pip-version-check --no-deps \
      --target "$site" -r "$root/requirements-beam.txt" >&2 || {
      echo "setup_beam: pip install failed" >&2
      return 1
    }
    echo "$want" > "$stamp"
  fi
  case ":${PYTHONPATH:-}:" in
    *":$site:"*) ;;
    *) export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}" ;;
  esac
}
_tta_setup_beam
