#!/usr/bin/env bash
# Builds llama.cpp's llama-server (CPU only) from the source that the npm package node-llama-cpp
# bundles at a pinned version, into a cache outside the clone keyed by that version, and prints
# the cache folder. The upstream-engine integration tests run it as a real OpenAI-compatible peer.
#
#   bash scripts/build_llama_server.sh            # builds once, later runs print the cache path
#   TANDEM_CACHE=/some/dir bash scripts/...       # cache root (default ~/.cache/tandem)
#
# The package is fetched with `npm pack` (the tarball only: no install scripts, none of the
# optional CUDA/Vulkan prebuilt addons) and checked against its published sha1 before use.
# Its llama/gitRelease.bundle is llama.cpp's full source at the tag in llama.cpp.info.json
# (MIT licence, ggml-org/llama.cpp); its gguf-py, Qwen3.5 vocabulary and chat templates make the
# test model.
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"

VERSION=3.21.1
SHASUM=f7579ace3d45c8e93856cebbd8671fa43c2eef1b
ROOT="${TANDEM_CACHE:-$HOME/.cache/tandem}/llama-server-node-llama-cpp-$VERSION"
JOBS="${TANDEM_JOBS:-$(nproc)}"

built() {
  [[ -x "$ROOT/bin/llama-server" && -d "$ROOT/gguf-py/gguf" && -f "$ROOT/models/ggml-vocab-qwen35.gguf" ]]
}
if built; then
  echo "$ROOT"
  exit 0
fi
# One build at a time (.ci/run starts one in the background): a second caller waits for it and
# then finds the cache filled.
mkdir -p "$(dirname "$ROOT")"
exec 9>"$ROOT.lock"
flock 9
if built; then
  echo "$ROOT"
  exit 0
fi

for tool in npm git cmake ninja g++; do
  command -v "$tool" >/dev/null || { echo "build_llama_server: $tool missing (run scripts/setup.sh)" >&2; exit 1; }
done

WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT

echo "[llama-server] npm pack node-llama-cpp@$VERSION" >&2
(cd "$WORK" && npm pack --silent "node-llama-cpp@$VERSION" >/dev/null)
TARBALL="$WORK/node-llama-cpp-$VERSION.tgz"
GOT="$(sha1sum "$TARBALL" | cut -d' ' -f1)"
if [[ "$GOT" != "$SHASUM" ]]; then
  echo "build_llama_server: node-llama-cpp-$VERSION.tgz has sha1 $GOT, expected $SHASUM" >&2
  exit 1
fi
tar -xzf "$TARBALL" -C "$WORK" package/llama/gitRelease.bundle package/llama/llama.cpp.info.json
git clone -q "$WORK/package/llama/gitRelease.bundle" "$WORK/src" 2>/dev/null

echo "[llama-server] building (CPU only, $JOBS jobs; about 2-3 min on 2 cores without ccache)" >&2
LAUNCHER=()
if command -v ccache >/dev/null; then
  LAUNCHER=(-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
fi
# -O1: the tests run a tiny model, whose answers take milliseconds at any optimisation; on 2 cores
# the build took 406 s at -O1 against about 550 s at -O3 (-O0: 380 s). llama_server_unity.cmake
# compiles its targets of many small files (model graphs, common, the server) in unity batches:
# 116 s against 236 s per file, from scratch on the same evening (without ccache).
cmake -S "$WORK/src" -B "$WORK/build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_C_FLAGS_RELEASE="-O1 -DNDEBUG" -DCMAKE_CXX_FLAGS_RELEASE="-O1 -DNDEBUG" \
  -DBUILD_SHARED_LIBS=OFF -DGGML_NATIVE=OFF -DGGML_CUDA=OFF -DGGML_VULKAN=OFF \
  -DLLAMA_BUILD_UI=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF \
  -DLLAMA_BUILD_EXAMPLES=OFF "-DCMAKE_PROJECT_llama.cpp_INCLUDE=$HERE/llama_server_unity.cmake" \
  "${LAUNCHER[@]}" >"$WORK/configure.log" 2>&1 ||
  { cat "$WORK/configure.log" >&2; exit 1; }
cmake --build "$WORK/build" --target llama-server -j "$JOBS" >"$WORK/build.log" 2>&1 ||
  { tail -50 "$WORK/build.log" >&2; exit 1; }

STAGE="$ROOT.partial.$$"
rm -rf "$STAGE"
mkdir -p "$STAGE/bin"
cp "$WORK/build/bin/llama-server" "$STAGE/bin/"
cp -r "$WORK/src/gguf-py" "$STAGE/gguf-py"
# What the tiny test model is made of (tests/support/make_tiny_gguf.py): the Qwen3.5 vocabulary
# and the two models' chat templates, as llama.cpp ships them for its own tests.
mkdir -p "$STAGE/models"
cp "$WORK/src/models/ggml-vocab-qwen35.gguf" "$WORK/src/models/templates/Qwen3.5-4B.jinja" \
  "$WORK/src/models/templates/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16.jinja" "$STAGE/models/"
cp "$WORK/src/LICENSE" "$STAGE/LICENSE.llama.cpp"
cp "$WORK/package/llama/llama.cpp.info.json" "$STAGE/"
"$STAGE/bin/llama-server" --version >"$STAGE/VERSION" 2>&1 || true
rm -rf "$ROOT"
mv "$STAGE" "$ROOT"
echo "$ROOT"
