#!/usr/bin/env bash
# Gateway overhead, side by side in one run: a synthetic worker with zero simulated
# delay, called directly and through a gateway in front of it; unary and streaming at
# concurrency 1, a rate sweep, 512 concurrent streams, the gateway's RSS idle and under load.
#
#   bash scripts/bench_overhead.sh [extra tandem-bench flags, e.g. --duration=3s --rates=1000,5000]
#
# Results: build/bench/overhead.json, overhead.md (the tables), overhead.svg, and the logs.
# BUILD_DIR (default build) and OUT_DIR (default $BUILD_DIR/bench) change the paths;
# WORKER_FLAGS and GATEWAY_FLAGS add flags to the two processes (e.g. --log_level=warning).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
OUT_DIR=${OUT_DIR:-$BUILD_DIR/bench}
mkdir -p "$OUT_DIR"
source scripts/bench_lib.sh
trap bench_cleanup EXIT

for bin in workers/tandem-worker gateway/tandem-gateway tools/tandem-bench; do
  [[ -x $BUILD_DIR/$bin ]] || { echo "missing $BUILD_DIR/$bin: build it first" >&2; exit 1; }
done

bench_start_stack "$BUILD_DIR" "$OUT_DIR"
echo "worker $WORKER_ADDR, gateway $GATEWAY_ADDR (pid $GATEWAY_PID)" >&2

"$BUILD_DIR/tools/tandem-bench" --plaintext --preset=overhead \
  --worker_address="$WORKER_ADDR" --gateway_address="$GATEWAY_ADDR" --gateway_pid="$GATEWAY_PID" \
  --prompt=short --max_tokens=16 --duration=6s \
  --json="$OUT_DIR/overhead.json" --svg="$OUT_DIR/overhead.svg" "$@" | tee "$OUT_DIR/overhead.md"
echo "wrote $OUT_DIR/overhead.json, overhead.md, overhead.svg" >&2
