#!/usr/bin/env bash
# Idempotent setup for the tests, run by `npm test` (and so by CI) before vitest:
# - the npm dependencies, through scripts/install.sh (what `npm start` runs too);
# - the .cache/pyclient venv with the official `openai` Python client, when `import openai` fails
#   there (only test/model/api/python-client.test.ts needs it; running kiln does not);
# - needs no TTY and prints one line per step.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

log() { printf 'setup: %s\n' "$*"; }

# --- npm dependencies ------------------------------------------------------------------------
bash scripts/install.sh
log "npm dependencies up to date"

# --- official Python client (for test/model/api/python-client.test.ts) ------------------------
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
