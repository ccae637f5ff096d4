#!/usr/bin/env bash
# Installs what `--device webgpu` needs without a GPU, for the tests: the Vulkan loader (libvulkan1)
# and Mesa's Vulkan drivers (mesa-vulkan-drivers, whose lavapipe is a software Vulkan device on the
# CPU), when missing or when the installed Mesa is older than Dawn (onnxruntime's WebGPU) accepts.
# - Debian 12 (bookworm) ships Mesa 22.3, which Dawn refuses; there Mesa comes from the
#   bookworm-backports suite, added to apt's sources (from the archive that already serves bookworm)
#   when absent.
# - Elsewhere the distribution's own packages are installed, and a Mesa still too old is reported.
# - Up to date, it checks with dpkg-query and prints one line; needs no TTY; `sudo -n` when not root.
# Called by scripts/setup.sh. Two checks for the unit tests, which print and change nothing:
#   bash scripts/vulkan-install.sh --mesa-ok VERSION      exit 0 when that Mesa version is recent enough
#   bash scripts/vulkan-install.sh --backports-source     the deb822 stanza it would add (APT_ETC: /etc/apt)
set -euo pipefail

prefix="${APT_LOG_PREFIX:-vulkan}"
log() { printf '%s: %s\n' "$prefix" "$*"; }

# The oldest Mesa measured to run onnxruntime-node 1.30's WebGPU provider on lavapipe (25.0.7 does;
# Debian 12's 22.3.6 does not).
MIN_MESA=25
APT_ETC="${APT_ETC:-/etc/apt}"
# Where an added suite is written: a file of its own, so it is easy to find and remove.
BACKPORTS_FILE=kiln-backports.sources

mesa_ok() { dpkg --compare-versions "$1" ge "$MIN_MESA"; }

installed_version() { dpkg-query -W -f='${Status} ${Version}\n' "$1" 2>/dev/null | awk '$3 == "installed" { print $4 }'; }

codename() { (. /etc/os-release 2>/dev/null && printf '%s' "${VERSION_CODENAME:-}"); }

# Whether apt's sources already name the suite $1 (one-line or deb822 format).
has_suite() {
  local suite=$1
  local files=() f
  for f in "$APT_ETC"/sources.list "$APT_ETC"/sources.list.d/*.list "$APT_ETC"/sources.list.d/*.sources; do
    [[ -f $f ]] && files+=("$f")
  done
  ((${#files[@]} > 0)) || return 1
  grep -hv '^[[:space:]]*#' "${files[@]}" | grep -Eq "(^|[[:space:]])${suite}([[:space:]]|$)"
}

# "URI<TAB>SIGNED-BY" of the first source that serves the suite $1 with binary packages; nothing when none.
suite_source() {
  local suite=$1 f
  for f in "$APT_ETC"/sources.list.d/*.sources; do
    [[ -f $f ]] || continue
    # deb822: blank-line separated stanzas; the first URI of a "deb" stanza whose Suites hold the suite.
    awk -v suite="$suite" '
      function flush() {
        if (types ~ /(^| )deb( |$)/ && (" " suites " ") ~ (" " suite " ") && uri != "") { print uri "\t" signed; found = 1; exit }
        types = ""; suites = ""; uri = ""; signed = ""
      }
      /^[[:space:]]*#/ { next }
      /^[[:space:]]*$/ { flush(); next }
      { key = tolower($1); sub(/:$/, "", key); $1 = ""; sub(/^ +/, ""); value = $0 }
      key == "types" { types = value }
      key == "suites" { suites = value }
      key == "uris" { split(value, u, " "); uri = u[1] }
      key == "signed-by" { signed = value }
      END { if (!found) flush() }
    ' "$f" | head -n 1 | grep . && return 0
  done
  for f in "$APT_ETC"/sources.list "$APT_ETC"/sources.list.d/*.list; do
    [[ -f $f ]] || continue
    # One-line: deb [options] URI suite components...; a signed-by option is kept.
    awk -v suite="$suite" '
      $1 != "deb" { next }
      {
        signed = ""; i = 2
        if ($2 ~ /^\[/) {
          while (i <= NF) { if ($i ~ /^\[?signed-by=/) { s = $i; sub(/^\[?signed-by=/, "", s); sub(/\]$/, "", s); signed = s } if ($i ~ /\]$/) { i++; break } i++ }
        }
        if ($(i + 1) == suite) { print $i "\t" signed; exit }
      }
    ' "$f" | head -n 1 | grep . && return 0
  done
  return 1
}

# The deb822 stanza of "<codename>-backports" from the archive that serves "<codename>".
backports_stanza() {
  local release=$1 source uri signed
  source=$(suite_source "$release") || {
    # On stderr: stdout is the stanza, captured by the caller.
    log "no apt source serves $release: add $release-backports to apt's sources by hand" >&2
    return 1
  }
  uri=${source%%$'\t'*}
  signed=${source#*$'\t'}
  printf 'Types: deb\nURIs: %s\nSuites: %s-backports\nComponents: main\n' "$uri" "$release"
  [[ -n $signed ]] && printf 'Signed-By: %s\n' "$signed"
  return 0
}

case "${1:-}" in
  --mesa-ok)
    mesa_ok "$2"
    exit
    ;;
  --backports-source)
    backports_stanza "${2:-$(codename)}"
    exit
    ;;
esac

loader=$(installed_version libvulkan1)
mesa=$(installed_version mesa-vulkan-drivers)
if [[ -n $loader && -n $mesa ]] && mesa_ok "$mesa"; then
  log "Vulkan loader $loader and Mesa $mesa (lavapipe) present"
  exit 0
fi

if ! command -v apt-get >/dev/null 2>&1; then
  log "needs the Vulkan loader and Mesa $MIN_MESA or newer (lavapipe) and apt-get is not available: install them with the system's package manager"
  exit 1
fi
sudo=()
if [[ $(id -u) -ne 0 ]]; then
  sudo=(sudo -n)
fi

release=$(codename)
target=()
if [[ $release == bookworm ]]; then
  if ! has_suite bookworm-backports; then
    stanza=$(backports_stanza bookworm)
    log "adding bookworm-backports to apt's sources ($APT_ETC/sources.list.d/$BACKPORTS_FILE)"
    printf '%s\n' "$stanza" | "${sudo[@]}" tee "$APT_ETC/sources.list.d/$BACKPORTS_FILE" >/dev/null
  fi
  target=(-t bookworm-backports)
fi

log "apt-get update"
"${sudo[@]}" apt-get update -qq </dev/null
log "apt-get install libvulkan1 mesa-vulkan-drivers ${target[*]}"
# env (not a prefix assignment) so the variable survives sudo, which resets the environment.
"${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${target[@]}" libvulkan1 mesa-vulkan-drivers </dev/null >/dev/null

mesa=$(installed_version mesa-vulkan-drivers)
if ! mesa_ok "${mesa:-0}"; then
  log "Mesa ${mesa:-(none)} is older than $MIN_MESA: --device webgpu will find no adapter on this machine without a GPU"
  exit 1
fi
log "Vulkan loader $(installed_version libvulkan1) and Mesa $mesa (lavapipe) installed"
