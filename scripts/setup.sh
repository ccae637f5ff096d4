#!/usr/bin/env bash
# Idempotent project setup, run by `npm test` and CI before the tests.
# - installs npm dependencies with `npm ci`, but only when node_modules is missing or
#   package-lock.json is newer than node_modules/.package-lock.json (npm's record of the last install);
# - creates the .cache/pyclient venv with the official `openai` Python client, when `import openai` fails there;
# - needs no TTY and prints one line per step.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

log() { printf 'setup: %s\n' "$*"; }

# --- npm dependencies ------------------------------------------------------------------------
needs_install=0
if [[ ! -d node_modules ]]; then
  needs_install=1
  log "node_modules missing"
elif [[ ! -f node_modules/.package-lock.json ]]; then
  needs_install=1
  log "node_modules/.package-lock.json missing"
elif [[ package-lock.json -nt node_modules/.package-lock.json ]]; then
  needs_install=1
  log "package-lock.json is newer than the installed tree"
fi

if [[ $needs_install -eq 1 ]]; then
  log "npm ci"
  CI="${CI:-1}" npm ci --no-audit --no-fund --progress=false </dev/null
else
  log "npm dependencies up to date"
fi

# --- official Python client (for test/model/api/python-client.test.ts) ------------------------
# A virtual environment at .cache/pyclient with the `openai` package; created/installed only
# when `import openai` fails there.
pyclient=.cache/pyclient
if "$pyclient/bin/python" -c "import openai" >/dev/null 2>&1; then
  log "python openai client up to date ($pyclient)"
else
  if [[ ! -x "$pyclient/bin/python" ]]; then
    log "python3 -m venv $pyclient"
    mkdir -p "$(dirname "$pyclient")"
    python3 -m venv "$pyclient" </dev/null
  fi
  log "pip install openai into $pyclient"
  PIP_NO_INPUT=1 "$pyclient/bin/python" -m pip install --quiet openai </dev/null
fi

# --- system packages (hook) ------------------------------------------------------------------
# Not needed yet. When a test needs Debian packages (e.g. espeak-ng and ffmpeg for the speech
# upload tests), install them here, only when missing and without prompting:
#
# apt_packages=(espeak-ng ffmpeg)
# missing=()
# for p in "${apt_packages[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
# if (( ${#missing[@]} )); then
#   SUDO=""; [[ $(id -u) -ne 0 ]] && SUDO="sudo -n"
#   $SUDO apt-get update -qq
#   DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
# fi

log "done"
