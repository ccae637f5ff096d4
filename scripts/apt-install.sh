#!/usr/bin/env bash
# Installs the named Debian packages that are missing (checked with dpkg -s), without prompting and
# without a TTY; uses `sudo -n` when not root. Prints one line per step, prefixed by $APT_LOG_PREFIX.
# Usage: bash scripts/apt-install.sh PACKAGE...   (called by scripts/setup.sh and scripts/install.sh)
set -euo pipefail

prefix="${APT_LOG_PREFIX:-apt}"
log() { printf '%s: %s\n' "$prefix" "$*"; }

missing=()
for package in "$@"; do
  dpkg -s "$package" >/dev/null 2>&1 || missing+=("$package")
done
if (( ${#missing[@]} == 0 )); then
  exit 0
fi

if ! command -v apt-get >/dev/null 2>&1; then
  log "missing ${missing[*]} and apt-get is not available: install them with the system's package manager"
  exit 1
fi
sudo=()
if [[ $(id -u) -ne 0 ]]; then
  sudo=(sudo -n)
fi
log "apt-get update"
"${sudo[@]}" apt-get update -qq </dev/null
log "apt-get install ${missing[*]}"
# env (not a prefix assignment) so the variable survives sudo, which resets the environment.
"${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" </dev/null >/dev/null
