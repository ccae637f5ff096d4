#!/usr/bin/env bash
# Builds llama.cpp's own benchmark tools natively, the strongest form of the llama.cpp peer in
# `npm run bench -- text --native` (the node-llama-cpp binding adds JavaScript work per token and
# understates llama.cpp). The sources are the ones vendored in the llama-cpp-python sdist, fetched
# through pip so no other download path is needed; GGML_NATIVE tunes them to this CPU, which is why
# the binaries are built here rather than taken prebuilt.
# - idempotent: when the binaries exist, prints their folder and exits 0;
# - builds only llama-bench, llama-batched-bench, llama-perplexity and llama-embedding (about 3-5
#   minutes on 2 cores);
# - everything lives under .cache/peers (gitignored); the compiler's output goes to
#   .cache/peers/build.log, and this script prints one line per step;
# - not run by `npm test`: benchmarks only.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/../.."

# Pinned so that figures stay comparable between runs; change deliberately.
LLAMA_CPP_PYTHON_VERSION="${LLAMA_CPP_PYTHON_VERSION:-0.3.36}"
JOBS="${JOBS:-2}"

peers=.cache/peers
bin="$peers/llama.cpp/bin"
targets=(llama-bench llama-batched-bench llama-perplexity llama-embedding)

log() { printf 'llama-cpp-native: %s\n' "$*"; }

if [[ -x "$bin/llama-bench" && -x "$bin/llama-batched-bench" && -x "$bin/llama-embedding" ]]; then
  log "up to date"
  echo "$(pwd)/$bin"
  exit 0
fi

mkdir -p "$peers/sdist" "$bin"
sdist=$(ls "$peers/sdist"/llama_cpp_python-"$LLAMA_CPP_PYTHON_VERSION".tar.gz 2>/dev/null || true)
if [[ -z "$sdist" ]]; then
  log "python3 -m pip download llama-cpp-python==$LLAMA_CPP_PYTHON_VERSION (sdist)"
  python3 -m pip download --quiet --no-deps --no-binary :all: "llama-cpp-python==$LLAMA_CPP_PYTHON_VERSION" --dest "$peers/sdist" </dev/null
  sdist=$(ls "$peers/sdist"/llama_cpp_python-"$LLAMA_CPP_PYTHON_VERSION".tar.gz)
fi

src="$peers/src/llama_cpp_python-$LLAMA_CPP_PYTHON_VERSION"
if [[ ! -f "$src/vendor/llama.cpp/CMakeLists.txt" ]]; then
  log "unpack $sdist"
  rm -rf "$src"
  mkdir -p "$peers/src"
  tar -xzf "$sdist" -C "$peers/src"
fi

build="$peers/build-$LLAMA_CPP_PYTHON_VERSION"
log "cmake configure $src/vendor/llama.cpp -> $build (GGML_NATIVE=ON, Release, static)"
cmake -S "$src/vendor/llama.cpp" -B "$build" \
  -DCMAKE_BUILD_TYPE=Release \
  -DGGML_NATIVE=ON \
  -DLLAMA_CURL=OFF \
  -DBUILD_SHARED_LIBS=OFF \
  -DLLAMA_BUILD_TESTS=OFF \
  -DLLAMA_BUILD_TOOLS=ON \
  -DLLAMA_BUILD_EXAMPLES=ON \
  -DLLAMA_BUILD_SERVER=OFF \
  >"$peers/build.log" 2>&1 || { tail -20 "$peers/build.log" >&2; exit 1; }

# llama-perplexity and llama-embedding are cheap extras (they share llama-common with the others):
# the perplexity checks against llama.cpp and the embeddings benchmark; a failure there must not
# cost the two benchmarks.
log "cmake build ${targets[*]} (-j$JOBS; log $peers/build.log)"
cmake --build "$build" --config Release -j"$JOBS" --target llama-bench llama-batched-bench \
  >>"$peers/build.log" 2>&1 || { tail -20 "$peers/build.log" >&2; exit 1; }
for extra in llama-perplexity llama-embedding; do
  cmake --build "$build" --config Release -j"$JOBS" --target "$extra" \
    >>"$peers/build.log" 2>&1 || log "$extra failed to build (see $peers/build.log); continuing without it"
done

log "install into $bin"
for t in "${targets[@]}"; do
  if [[ -x "$build/bin/$t" ]]; then cp -f "$build/bin/$t" "$bin/$t"; fi
done
echo "llama-cpp-python $LLAMA_CPP_PYTHON_VERSION" >"$peers/llama.cpp/VERSION"
[[ -x "$bin/llama-bench" && -x "$bin/llama-batched-bench" ]] || { log "binaries missing after the build"; exit 1; }
echo "$(pwd)/$bin"
