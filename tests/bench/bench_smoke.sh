#!/usr/bin/env bash
# ctest smoke test of tandem-bench (label bench): tiny runs of every mode and both presets
# against a synthetic worker and a gateway; checks only that each completes and writes valid
# JSON (and an SVG). No timing assertions.
#   bench_smoke.sh SOURCE_DIR BUILD_DIR OUT_DIR
set -euo pipefail
SRC=$1 BUILD=$2 OUT=$3
rm -rf "$OUT" && mkdir -p "$OUT"
source "$SRC/scripts/bench_lib.sh"
trap bench_cleanup EXIT
BENCH=$BUILD/tools/tandem-bench

bench_start_stack "$BUILD" "$OUT"

check_json() {
  /usr/bin/python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); assert d["runs"], "no runs"; assert all(r["ok"] > 0 for r in d["runs"]), "a run had no OK request"' "$1"
  grep -q '</svg>' "${1%.json}.svg"
  echo "ok: $1"
}

common=(--plaintext --warmup_requests=2 --max_tokens=8)
"$BENCH" "${common[@]}" --target=gateway --address="$GATEWAY_ADDR" --api=stream \
  --concurrencies=1,4 --duration=0.3s --json="$OUT/closed.json" --svg="$OUT/closed.svg"
check_json "$OUT/closed.json"
"$BENCH" "${common[@]}" --target=gateway --address="$GATEWAY_ADDR" --api=unary --model=qwen \
  --prompt=long --rates=50,100 --arrival=fixed --duration=0.3s \
  --json="$OUT/open.json" --svg="$OUT/open.svg"
check_json "$OUT/open.json"
"$BENCH" "${common[@]}" --target=worker --address="$WORKER_ADDR" --rate=100 --duration=0.3s \
  --json="$OUT/worker.json" --svg="$OUT/worker.svg"
check_json "$OUT/worker.json"
"$BENCH" "${common[@]}" --preset=overhead --worker_address="$WORKER_ADDR" \
  --gateway_address="$GATEWAY_ADDR" --gateway_pid="$GATEWAY_PID" --duration=0.3s \
  --cpu_pids="gateway=$GATEWAY_PID,worker=$WORKER_PID" --throughput_inflight=8 \
  --rates=100 --streams=16 --json="$OUT/overhead.json" --svg="$OUT/overhead.svg"
check_json "$OUT/overhead.json"
/usr/bin/python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); assert all("gateway" in r["cpu_us_per_request"] for r in d["runs"]), "a run without the gateway CPU"' "$OUT/overhead.json"
# h2load's request body: one gRPC message frame (5-byte prefix and the request).
"$BENCH" --target=gateway --model=qwen --write_grpc_request="$OUT/request.bin"
[[ $(stat -c %s "$OUT/request.bin") -gt 5 ]]
"$BENCH" "${common[@]}" --preset=seeds --address="$GATEWAY_ADDR" --iterations=1 --models=qwen \
  --json="$OUT/seeds.json" --svg="$OUT/seeds.svg"
check_json "$OUT/seeds.json"

# The bare proxies of scripts/bench_proxy_floor.sh, each relaying calls to the worker.
for mode in callback cq; do
  bench_start "proxy_$mode" "$OUT" "$BUILD/tests/grpc_proxy_floor" --mode="$mode" \
    --upstream="$WORKER_ADDR"
  "$BENCH" "${common[@]}" --target=worker --address="$BENCH_ADDR" --concurrency=4 \
    --duration=0.3s --cpu_pids="proxy=$BENCH_PID" --json="$OUT/proxy_$mode.json" \
    --svg="$OUT/proxy_$mode.svg"
  check_json "$OUT/proxy_$mode.json"
done

# The TLS stack of scripts/bench_overhead.sh (TLS on both hops, mutual to the worker).
bench_cleanup
bash "$SRC/scripts/make_dev_certs.sh" "$OUT/certs" >/dev/null
bench_start_stack "$BUILD" "$OUT" "$OUT/certs"
"$BENCH" $BENCH_CLIENT_TLS --warmup_requests=2 --max_tokens=8 --target=worker \
  --address="$WORKER_ADDR" --duration=0.3s --json="$OUT/tls_worker.json" --svg="$OUT/tls_worker.svg"
check_json "$OUT/tls_worker.json"
"$BENCH" $BENCH_CLIENT_TLS --warmup_requests=2 --max_tokens=8 --target=gateway --model=qwen \
  --address="$GATEWAY_ADDR" --duration=0.3s --json="$OUT/tls_gateway.json" \
  --svg="$OUT/tls_gateway.svg"
check_json "$OUT/tls_gateway.json"
