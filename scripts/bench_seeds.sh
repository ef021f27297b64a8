#!/usr/bin/env bash
# The seeds' methodology: prompt sizes short/medium/long, 5 iterations each,
# concurrency 1, 2, 4, 8, 16, per model (pinned) and through the gateway's routing.
#
#   bash scripts/bench_seeds.sh [extra tandem-bench flags, e.g. --max_tokens=128]
#
# Without GATEWAY it starts a synthetic qwen and a synthetic nemotron worker (the load
# simulator, realistic H200 step times) and a gateway in front of them; GATEWAY=HOST:PORT runs
# against a running gateway instead. Results: build/bench/seeds.json, seeds.md, seeds.svg.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
OUT_DIR=${OUT_DIR:-$BUILD_DIR/bench}
mkdir -p "$OUT_DIR"
source scripts/bench_lib.sh
trap bench_cleanup EXIT

address=${GATEWAY:-}
if [[ -z $address ]]; then
  bench_start seeds-qwen "$OUT_DIR" "$BUILD_DIR/workers/tandem-worker" --model=qwen --engine=synthetic --device=cpu \
    --listen=127.0.0.1:0 --metrics_listen=127.0.0.1:0 --plaintext
  qwen=$BENCH_ADDR
  bench_start seeds-nemotron "$OUT_DIR" "$BUILD_DIR/workers/tandem-worker" --model=nemotron \
    --engine=synthetic --device=cpu --listen=127.0.0.1:0 --metrics_listen=127.0.0.1:0 --plaintext
  nemotron=$BENCH_ADDR
  bench_start seeds-gateway "$OUT_DIR" "$BUILD_DIR/gateway/tandem-gateway" \
    --workers="qwen=$qwen,nemotron=$nemotron" --listen=127.0.0.1:0 --metrics_listen=127.0.0.1:0 \
    $BENCH_GATEWAY_DEV_FLAGS
  address=$BENCH_ADDR
fi

# A gateway given in $GATEWAY is reached as BENCH_CLIENT_FLAGS say (default plaintext; e.g.
# "--tls_ca=ca.pem" and TANDEM_API_KEY for a production one).
"$BUILD_DIR/tools/tandem-bench" ${BENCH_CLIENT_FLAGS:---plaintext} --preset=seeds --address="$address" --max_tokens=128 \
  --json="$OUT_DIR/seeds.json" --svg="$OUT_DIR/seeds.svg" "$@" | tee "$OUT_DIR/seeds.md"
echo "wrote $OUT_DIR/seeds.json, seeds.md, seeds.svg" >&2
