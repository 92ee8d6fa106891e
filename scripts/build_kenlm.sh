#!/usr/bin/env bash
# Builds KenLM's `lmplz` (ARPA estimation) and `build_binary` (ARPA -> mmap-able binary) from the
# kenlm source package on PyPI and installs them into third_party/kenlm/bin/ (git-ignored).
#
# Idempotent: if both binaries are already installed it does nothing. Debian build dependencies
# are installed with apt-get only when missing (sudo only when not root). ~2 minutes on 2 cores.
#
# Usage: bash scripts/build_kenlm.sh
# Env:   KENLM_VERSION (default 0.3.0), KENLM_JOBS (make -j, default 2), PYTHON (python with pip).
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
version="${KENLM_VERSION:-0.3.0}"
jobs="${KENLM_JOBS:-2}"
prefix="$root/third_party/kenlm"
bindir="$prefix/bin"
bins=(lmplz build_binary)

log() { echo "build_kenlm: $*" >&2; }
die() { echo "build_kenlm: ERROR: $*" >&2; exit 1; }
trap 'rc=$?; if [ $rc -ne 0 ]; then echo "build_kenlm: FAILED (exit $rc); see the messages above." >&2; fi' EXIT

if [ -x "$bindir/lmplz" ] && [ -x "$bindir/build_binary" ]; then
  log "lmplz and build_binary already installed in $bindir; nothing to do."
  echo "$bindir/lmplz"
  echo "$bindir/build_binary"
  exit 0
fi

start=$(date +%s)

# --- 1. Debian build dependencies (only the missing ones). -------------------------------------
deps=(build-essential cmake libboost-program-options-dev libboost-system-dev libboost-thread-dev
      libboost-test-dev zlib1g-dev libbz2-dev liblzma-dev libeigen3-dev)
missing=()
for p in "${deps[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
if [ ${#missing[@]} -gt 0 ]; then
  command -v apt-get >/dev/null 2>&1 \
    || die "missing build dependencies (${missing[*]}) and no apt-get to install them; install them by hand."
  sudo_cmd=()
  if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null 2>&1 || die "not root and no sudo: install ${missing[*]} by hand."
    sudo_cmd=(sudo)
  fi
  log "installing missing build dependencies: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt_log="$(mktemp -t build_kenlm_apt.XXXXXX.log)"
  "${sudo_cmd[@]}" apt-get update >"$apt_log" 2>&1 \
    || { tail -n 20 "$apt_log" >&2; die "apt-get update failed; full log: $apt_log"; }
  "${sudo_cmd[@]}" apt-get install -y --no-install-recommends "${missing[@]}" >>"$apt_log" 2>&1 \
    || { tail -n 30 "$apt_log" >&2; die "apt-get install ${missing[*]} failed; full log: $apt_log"; }
  rm -f "$apt_log"
else
  log "build dependencies already installed."
fi

# --- 2. Source package from PyPI. ---------------------------------------------------------------
# `--no-binary kenlm` (not `:all:`) so pip fetches the kenlm sdist without trying to build cmake.
python="${PYTHON:-}"
if [ -z "$python" ]; then
  if [ -x "$root/.venv/bin/python" ]; then python="$root/.venv/bin/python"; else python=python3; fi
fi
"$python" -m pip --version >/dev/null 2>&1 || die "'$python -m pip' does not work; set PYTHON to a python with pip."

work="$prefix/build-$version"
rm -rf "$work"
mkdir -p "$work"
log "downloading the kenlm==$version source package into $work"
"$python" -m pip download -q --no-deps --no-binary kenlm "kenlm==$version" -d "$work" \
  || die "pip download kenlm==$version failed"
sdist="$(ls "$work"/kenlm-*.tar.gz 2>/dev/null | head -n1)"
[ -n "$sdist" ] || die "pip download produced no kenlm-*.tar.gz in $work"
tar -xzf "$sdist" -C "$work"
src="$work/kenlm-$version"
[ -f "$src/CMakeLists.txt" ] || die "no CMakeLists.txt in $src: the sdist layout changed?"

# --- 3. Build. ------------------------------------------------------------------------------------
mkdir -p "$src/build"
log "configuring (cmake Release)"
(cd "$src/build" && cmake -DCMAKE_BUILD_TYPE=Release .. >"$work/cmake.log" 2>&1) \
  || { tail -n 40 "$work/cmake.log" >&2; die "cmake failed; full log: $work/cmake.log"; }
log "compiling lmplz and build_binary with make -j$jobs (~100 s on 2 cores)"
(cd "$src/build" && make -j"$jobs" lmplz build_binary >"$work/make.log" 2>&1) \
  || { tail -n 40 "$work/make.log" >&2; die "make failed; full log: $work/make.log"; }

# --- 4. Install. ----------------------------------------------------------------------------------
for b in "${bins[@]}"; do
  [ -x "$src/build/bin/$b" ] || die "build finished but $src/build/bin/$b is missing"
done
# Smoke run before installing: catches a binary that can't start (e.g. a missing shared library).
# `lmplz --help` prints its usage and exits 1, so check the text, not the status.
help="$("$src/build/bin/lmplz" --help 2>&1 || true)"
grep -q "Kneser-Ney" <<<"$help" \
  || die "the freshly built lmplz does not run; its output: $help"
mkdir -p "$bindir"
for b in "${bins[@]}"; do
  install -m 0755 "$src/build/bin/$b" "$bindir/$b.tmp"
  mv -f "$bindir/$b.tmp" "$bindir/$b"
done
rm -rf "$work"

# The paths on stderr too: the README's commands send stdout (the paths, for a caller) to /dev/null.
log "done in $(( $(date +%s) - start )) s: $bindir/lmplz and $bindir/build_binary"
echo "$bindir/lmplz"
echo "$bindir/build_binary"
