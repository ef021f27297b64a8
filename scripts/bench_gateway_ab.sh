#!/usr/bin/env bash
# Two tandem-gateway builds (or flag sets) in front of one synthetic worker, driven by h2load in
# alternating rounds, so a change is measured against what it replaces on the same machine at the
# same time: this VM's speed drifts by 2x within an hour, and only side-by-side ratios hold.
#
#   GATEWAY_A=old/tandem-gateway GATEWAY_B=build/gateway/tandem-gateway \
#     bash scripts/bench_gateway_ab.sh
#   GATEWAY_A_FLAGS=--log_level=warning bash scripts/bench_gateway_ab.sh   # same binary, flags
#
# Per round and side: h2load's req/s and mean request time at 1 and IN_FLIGHT (128) streams on
# one connection, and the CPU microseconds per request of that gateway and of the worker
# (/proc/PID/stat); then the medians and the per-round ratios B/A. GATEWAY_A/B default to
# $BUILD_DIR/gateway/tandem-gateway; GATEWAY_A_PRELOAD/GATEWAY_B_PRELOAD set LD_PRELOAD (e.g. an
# allocator); ROUNDS (7), REQUESTS_1 (3000), REQUESTS_N (30000), OUT_DIR (build/bench/ab).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
OUT_DIR=${OUT_DIR:-$BUILD_DIR/bench/ab}
ROUNDS=${ROUNDS:-7}
REQUESTS_1=${REQUESTS_1:-3000}
REQUESTS_N=${REQUESTS_N:-30000}
IN_FLIGHT=${IN_FLIGHT:-128}
GATEWAY_A=${GATEWAY_A:-$BUILD_DIR/gateway/tandem-gateway}
GATEWAY_B=${GATEWAY_B:-$BUILD_DIR/gateway/tandem-gateway}
mkdir -p "$OUT_DIR"
source scripts/bench_lib.sh
trap bench_cleanup EXIT
bench_require "$GATEWAY_A" "$GATEWAY_B" "$BUILD_DIR"/{workers/tandem-worker,tools/tandem-bench} h2load

bench_start worker "$OUT_DIR" "$BUILD_DIR/workers/tandem-worker" --model=qwen --engine=synthetic \
  --device=cpu --synthetic_time_scale=0 --synthetic_output_tokens=16 --max_queue=1024 \
  --listen=127.0.0.1:0 --metrics_listen=127.0.0.1:0 --plaintext
WORKER_ADDR=$BENCH_ADDR WORKER_PID=$BENCH_PID
# start_gateway NAME BINARY PRELOAD FLAGS: env execs the gateway, so BENCH_PID is the gateway's.
start_gateway() {
  local name=$1 bin=$2 preload=$3 flags=$4
  # shellcheck disable=SC2086 # FLAGS is a list of flags
  bench_start "$name" "$OUT_DIR" env ${preload:+LD_PRELOAD=$preload} "$bin" \
    --workers="qwen=$WORKER_ADDR,nemotron=$WORKER_ADDR" --listen=127.0.0.1:0 \
    --metrics_listen=127.0.0.1:0 $BENCH_GATEWAY_DEV_FLAGS --max_queued=1024 $flags
}
start_gateway gateway_a "$GATEWAY_A" "${GATEWAY_A_PRELOAD:-}" "${GATEWAY_A_FLAGS:-}"
A_ADDR=$BENCH_ADDR A_PID=$BENCH_PID
start_gateway gateway_b "$GATEWAY_B" "${GATEWAY_B_PRELOAD:-}" "${GATEWAY_B_FLAGS:-}"
B_ADDR=$BENCH_ADDR B_PID=$BENCH_PID
BODY=$OUT_DIR/request.bin
"$BUILD_DIR/tools/tandem-bench" --target=gateway --model=qwen --max_tokens=16 \
  --write_grpc_request="$BODY" >/dev/null

# round SIDE ADDR PID IN_FLIGHT REQUESTS: one line "SIDE C REQ_PER_S MEAN GATEWAY_US WORKER_US".
round() {
  local side=$1 addr=$2 pid=$3 c=$4 n=$5 g0 w0 g1 w1 report
  g0=$(bench_cpu_ticks "$pid") w0=$(bench_cpu_ticks "$WORKER_PID")
  report=$(h2load -n "$n" -c 1 -m "$c" -d "$BODY" -H 'content-type: application/grpc' \
    -H 'te: trailers' "http://$addr/tandem.v1.Gateway/Generate" 2>&1)
  g1=$(bench_cpu_ticks "$pid") w1=$(bench_cpu_ticks "$WORKER_PID")
  local us_per_tick=$((1000000 / $(getconf CLK_TCK)))
  echo "$side $c $(sed -n 's/.*finished in [^,]*, \([0-9.]*\) req\/s.*/\1/p' <<<"$report")" \
    "$(awk '/time for request:/ {print $6}' <<<"$report")" \
    "$(((g1 - g0) * us_per_tick / n)) $(((w1 - w0) * us_per_tick / n))"
}
round A "$A_ADDR" "$A_PID" 16 3000 >/dev/null  # warm-up
round B "$B_ADDR" "$B_PID" 16 3000 >/dev/null
: >"$OUT_DIR/rounds.txt"
for _ in $(seq "$ROUNDS"); do
  for c in 1 "$IN_FLIGHT"; do
    n=$REQUESTS_1
    ((c > 1)) && n=$REQUESTS_N
    round A "$A_ADDR" "$A_PID" "$c" "$n" | tee -a "$OUT_DIR/rounds.txt"
    round B "$B_ADDR" "$B_PID" "$c" "$n" | tee -a "$OUT_DIR/rounds.txt"
  done
done
python3 - "$OUT_DIR/rounds.txt" <<'EOF'
import statistics, sys
rows = [line.split() for line in open(sys.argv[1]) if line.strip()]
for c in sorted({r[1] for r in rows}, key=int):
    a = [r for r in rows if r[0] == "A" and r[1] == c]
    b = [r for r in rows if r[0] == "B" and r[1] == c]
    med = lambda rs, i: statistics.median(float(r[i]) for r in rs)
    for side, rs in (("A", a), ("B", b)):
        print(f"{side} c={c}: median {med(rs, 2):.0f} req/s, gateway {med(rs, 4):.0f} us/req, "
              f"worker {med(rs, 5):.0f} us/req")
    cpu = [float(y[4]) / float(x[4]) for x, y in zip(a, b)]
    rps = [float(y[2]) / float(x[2]) for x, y in zip(a, b)]
    print(f"B/A c={c}: gateway CPU per request {statistics.median(cpu):.2f} "
          f"(rounds {' '.join(f'{v:.2f}' for v in cpu)}), req/s {statistics.median(rps):.2f}")
EOF
