#!/usr/bin/env bash
# Checks with clang what the clang sanitizer builds (CUDA off, test suite only) never compile:
# the CUDA engine's host C++ (workers/cuda/*.cc, which include the CUDA runtime headers),
# tests/gpu/, the benchmarks (tests/bench/) and the GPU kit's tools (tools/gpu_kit/). With those
# builds this puts every C++ source of the tree through clang's -Werror=thread-safety. Each is
# parsed (-fsyntax-only: nothing is generated) with the project's warnings. Device code (.cu) is
# nvcc's and is not checked here.
#   bash scripts/check_clang_rest.sh BUILD_DIR   (BUILD_DIR: a CUDA build, for its protos)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:?usage: $0 BUILD_DIR}
cuda_include=${CUDA_HOME:-/usr/local/cuda}/include
gtest_flags=$(pkg-config --cflags gtest gmock benchmark 2>/dev/null || true)
files=(workers/cuda/*.cc tests/gpu/*.cc tests/bench/*.cc tools/gpu_kit/*.cc)
# Through ccache when it is there (it caches -fsyntax-only runs, never failed ones): an unchanged
# file is not parsed again, in this checkout or another (paths under the checkout are relative).
launcher=$(command -v ccache || true)
export CCACHE_BASEDIR=$PWD
printf '%s\n' "${files[@]}" | xargs -P "$(nproc)" -I{} sh -c '
  $5 clang++ -std=c++20 -fsyntax-only -Wall -Wextra -Werror -Wthread-safety -Werror=thread-safety \
    -I. -I"$1/proto" -I"$1/tests" -isystem "$2" $3 -DSPDLOG_COMPILED_LIB -DSPDLOG_FMT_EXTERNAL \
    -DTANDEM_HAVE_CUDA=1 "$4" || { echo "check_clang_rest: $4 failed" >&2; exit 255; }
' _ "$build" "$cuda_include" "$gtest_flags" {} "$launcher"
echo "check_clang_rest: ${#files[@]} files parse with clang and -Werror=thread-safety"
