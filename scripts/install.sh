#!/usr/bin/env bash
# Installs what running kiln needs: the npm dependencies, and ffmpeg (speech models decode uploaded
# audio with it) when `ffmpeg` is not on PATH. Run by `npm start` (and by scripts/setup.sh for the
# tests), so a fresh clone needs no separate install step.
# - runs `npm ci` only when node_modules is missing or package-lock.json is newer than
#   node_modules/.package-lock.json (npm's record of the last install);
# - up to date, it prints nothing and takes a few milliseconds;
# - needs no TTY.
# `npm ci` deletes and rewrites node_modules. That is safe from inside `npm start`: npm runs from its
# own installation, and nothing from node_modules is loaded until this script has finished.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

log() { printf 'install: %s\n' "$*"; }

stale_reason() {
  if [[ ! -d node_modules ]]; then
    echo "node_modules missing"
  elif [[ ! -f node_modules/.package-lock.json ]]; then
    echo "node_modules/.package-lock.json missing"
  elif [[ package-lock.json -nt node_modules/.package-lock.json ]]; then
    echo "package-lock.json is newer than the installed tree"
  fi
}

if ! command -v ffmpeg >/dev/null 2>&1; then
  APT_LOG_PREFIX=install bash scripts/apt-install.sh ffmpeg
fi

reason=$(stale_reason)
[[ -z $reason ]] && exit 0

log "$reason: npm ci"
CI="${CI:-1}" npm ci --no-audit --no-fund --progress=false </dev/null
