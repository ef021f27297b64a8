#!/usr/bin/env bash
# Builds the libFuzzer targets (fuzz/, clang with ASan and UBSan) in ${TANDEM_FUZZ_BUILD_DIR:-build-fuzz}
# and runs each for FUZZ_SECONDS (default 30) from its seed corpus in fuzz/corpus/. A crash fails
# the script and leaves the reproducer (crash-*) in the working directory; add it to the corpus
# and a regression test.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
BUILD_DIR=${TANDEM_FUZZ_BUILD_DIR:-build-fuzz}
SECONDS_EACH=${FUZZ_SECONDS:-30}
# A build directory already configured with TANDEM_FUZZ=ON keeps its configuration: CI points
# TANDEM_FUZZ_BUILD_DIR at build-asan (the asan preset, tests on, also builds these targets), so
# the fuzzers are not built twice.
if ! grep -qs '^TANDEM_FUZZ:BOOL=ON$' "$BUILD_DIR/CMakeCache.txt"; then
  CC=clang CXX=clang++ cmake -S . -B "$BUILD_DIR" -G Ninja -DTANDEM_FUZZ=ON -DTANDEM_ENABLE_CUDA=OFF \
    -DBUILD_TESTING=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
fi
targets=(prometheus_text policy safetensors tokenizer request image_decoder json_consumers
  http_server upstream_stream)
cmake --build "$BUILD_DIR" -j "$(nproc)" --target "${targets[@]/%/_fuzzer}"
work=$(mktemp -d /tmp/tandem-fuzz.XXXXXX)
trap 'rm -rf "$work"' EXIT
# fuzz_one TARGET: one libFuzzer process (one core) for SECONDS_EACH; its exit code in TARGET.rc.
fuzz_one() {
  local t=$1
  mkdir -p "$work/$t"
  cp fuzz/corpus/"$t"/* "$work/$t"/
  local rc=0
  "$BUILD_DIR/fuzz/${t}_fuzzer" -max_total_time="$SECONDS_EACH" -rss_limit_mb=4096 \
    -print_final_stats=1 "$work/$t" >"$work/$t.log" 2>&1 || rc=$?
  echo "$rc" >"$work/$t.rc"
}
# As many targets at once as there are cores: each fuzzer is one single-threaded process.
echo "[fuzz] ${#targets[@]} targets, ${SECONDS_EACH}s each, $(nproc) at a time"
for t in "${targets[@]}"; do
  while (($(jobs -rp | wc -l) >= $(nproc))); do wait -n || true; done
  fuzz_one "$t" &
done
wait
failed=0
for t in "${targets[@]}"; do
  rc=$(cat "$work/$t.rc")
  echo "[fuzz] $t: $(grep -E '^stat::number_of_executed_units' "$work/$t.log" || echo 'no stats')"
  if [[ $rc -ne 0 ]]; then
    tail -n 40 "$work/$t.log" >&2
    echo "[fuzz] $t failed (exit $rc)" >&2
    failed=1
  fi
done
((failed == 0)) || exit 1
echo "[fuzz] all targets ran clean"
