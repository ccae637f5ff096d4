#!/usr/bin/env bash
# Idempotent setup for the tests, run by `npm test` (and so by CI) before vitest:
# - the npm dependencies, through scripts/install.sh (what `npm start` runs too);
# - the .cache/pyclient venv with the official `openai` and `anthropic` Python clients and
#   `faster-whisper` (the speech tests' reference), when importing them fails there (running kiln
#   needs none of them);
# - the .cache/pyframeworks venv with `langchain-openai`, `instructor` and the OpenAI Agents SDK
#   (`openai-agents`) (frameworks.test.ts), apart
#   from pyclient because langchain-openai pins an older `openai` and pyclient tests the newest;
# - the Debian packages espeak-ng and ffmpeg (speech test fixtures; ffmpeg also decodes uploads),
#   postgresql, redis-server and nginx (the cloud fleet's real servers, test/support/servers/), and
#   sqlite3 (an operator's reads beside a running server, test/unit/catalogue/db-locks.test.ts), and
#   chromium (the web console checked in a real browser, test/model/console/), when missing,
#   through scripts/apt-install.sh;
# - the Vulkan loader and Mesa's Vulkan drivers, recent enough that onnxruntime's WebGPU provider
#   runs on lavapipe (a software Vulkan device), so the GPU tests run without a GPU, through
#   scripts/vulkan-install.sh (on Debian 12, from its bookworm-backports suite);
# - needs no TTY and prints one line per step.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

log() { printf 'setup: %s\n' "$*"; }

# --- npm dependencies ------------------------------------------------------------------------
bash scripts/install.sh
log "npm dependencies up to date"

# --- Python test clients: openai (python-client.test.ts), anthropic (python-anthropic.test.ts), faster-whisper (speech reference) ----
pyclient=.cache/pyclient
if "$pyclient/bin/python" -c "import openai, anthropic, faster_whisper" >/dev/null 2>&1; then
  log "python openai, anthropic and faster-whisper up to date ($pyclient)"
else
  if [[ ! -x "$pyclient/bin/python" ]]; then
    log "python3 -m venv $pyclient"
    mkdir -p "$(dirname "$pyclient")"
    python3 -m venv "$pyclient" </dev/null
  fi
  log "pip install openai anthropic faster-whisper into $pyclient"
  PIP_NO_INPUT=1 "$pyclient/bin/python" -m pip install --quiet openai anthropic faster-whisper </dev/null
fi

# --- Python frameworks: langchain-openai, instructor and openai-agents (frameworks.test.ts) ----
pyframeworks=.cache/pyframeworks
if "$pyframeworks/bin/python" -c "import langchain_openai, instructor, agents" >/dev/null 2>&1; then
  log "python langchain-openai, instructor and openai-agents up to date ($pyframeworks)"
else
  if [[ ! -x "$pyframeworks/bin/python" ]]; then
    log "python3 -m venv $pyframeworks"
    mkdir -p "$(dirname "$pyframeworks")"
    python3 -m venv "$pyframeworks" </dev/null
  fi
  log "pip install langchain-openai instructor openai-agents into $pyframeworks"
  PIP_NO_INPUT=1 "$pyframeworks/bin/python" -m pip install --quiet langchain-openai instructor openai-agents </dev/null
fi

# --- system packages (for the speech and cloud fleet tests) ----------------------------------
# espeak-ng speaks the test sentences (test/support/speech.ts) and ffmpeg converts them into every
# upload format and decodes uploads; postgresql, redis-server and nginx are started by the cloud
# tests, each in a temporary directory on a free port (test/support/servers/); installed only when
# missing, without prompting. sqlite3 is the command-line shell an operator reads kiln.sqlite with.
# chromium is the headless browser puppeteer-core drives through the web console. openssl makes the
# HTTPS test's certificate (test/support/tls.ts).
APT_LOG_PREFIX=setup bash scripts/apt-install.sh espeak-ng ffmpeg postgresql redis-server nginx sqlite3 chromium openssl
log "system packages present (espeak-ng, ffmpeg, postgresql, redis-server, nginx, sqlite3, chromium, openssl)"

# --- Vulkan for --device webgpu without a GPU (test/model/api/webgpu-speech.test.ts) -------------
APT_LOG_PREFIX=setup bash scripts/vulkan-install.sh

log "done"
