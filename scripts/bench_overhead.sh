#!/usr/bin/env bash
# Gateway overhead, side by side in one run: a synthetic worker with zero simulated delay, called
# directly and through a gateway in front of it, with the CPU time of both processes per request
# (/proc/PID/stat). Two stacks, plaintext and then TLS on both hops; for each, tandem-bench's
# overhead preset (concurrency 1, throughput with 128 in flight, 512 concurrent streams, a rate
# sweep, the gateway's RSS) and h2load (Debian's nghttp2-client) as a second, independent driver.
#
#   bash scripts/bench_overhead.sh [extra tandem-bench flags, e.g. --duration=3s --rates=1000,5000]
#
# Results in $OUT_DIR (default build/bench): overhead.{json,md,svg} (plaintext),
# overhead_tls.{json,md,svg}, overhead_h2load.md (both stacks), and the processes' logs.
# BUILD_DIR (default build) and OUT_DIR change the paths; WORKER_FLAGS and GATEWAY_FLAGS add flags
# to the two processes (e.g. --log_level=warning); H2LOAD_REQUESTS (default 20000) sizes the
# h2load runs.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
OUT_DIR=${OUT_DIR:-$BUILD_DIR/bench}
H2LOAD_REQUESTS=${H2LOAD_REQUESTS:-20000}
# The preset's long stream asks for 4x --max_tokens (16): the worker's answers must be that long.
export SYNTHETIC_OUTPUT_TOKENS=${SYNTHETIC_OUTPUT_TOKENS:-64}
mkdir -p "$OUT_DIR"
source scripts/bench_lib.sh
trap bench_cleanup EXIT

bench_require "$BUILD_DIR"/{workers/tandem-worker,gateway/tandem-gateway,tools/tandem-bench} h2load

cpu_seconds() { awk '{ sub(/^.*\) /, ""); print ($12 + $13) / '"$(getconf CLK_TCK)"' }' "/proc/$1/stat"; }

# h2load_round NAME URL BODY IN_FLIGHT: closed loop, one connection, `concurrency` streams in flight;
# prints a Markdown row with h2load's mean request time, req/s and the processes' CPU per request.
h2load_round() {
  local name=$1 url=$2 body=$3 concurrency=$4
  local g0 w0 g1 w1 report
  g0=$(cpu_seconds "$GATEWAY_PID") w0=$(cpu_seconds "$WORKER_PID")
  report=$(h2load -n "$H2LOAD_REQUESTS" -c 1 -m "$concurrency" -d "$body" \
    -H 'content-type: application/grpc' -H 'te: trailers' "$url" 2>&1)
  g1=$(cpu_seconds "$GATEWAY_PID") w1=$(cpu_seconds "$WORKER_PID")
  awk -v name="$name" -v c="$concurrency" -v n="$H2LOAD_REQUESTS" -v g="$g0 $g1" -v w="$w0 $w1" '
    /^finished in/ { rps = $4 }
    /^requests:/ { ok = $8 }
    /^time for request:/ { mean = $6 }
    END {
      split(g, gs, " "); split(w, ws, " ")
      printf "| %s | %d | %s | %s | %s | %.0f | %.0f |\n", name, c, ok, rps, mean,
        (gs[2] - gs[1]) * 1e6 / n, (ws[2] - ws[1]) * 1e6 / n
    }
  ' <<<"$report"
}

# run_stack LABEL [CERTS]: starts a stack, runs the preset and h2load against it, stops it.
run_stack() {
  local label=$1 certs=${2:-} suffix="" scheme=http
  shift 2
  [[ -n $certs ]] && suffix=_tls scheme=https
  bench_start_stack "$BUILD_DIR" "$OUT_DIR" "$certs"
  echo "$label: worker $WORKER_ADDR (pid $WORKER_PID), gateway $GATEWAY_ADDR (pid $GATEWAY_PID)" >&2
  # shellcheck disable=SC2086  # BENCH_CLIENT_TLS is a list of flags
  "$BUILD_DIR/tools/tandem-bench" $BENCH_CLIENT_TLS --preset=overhead \
    --worker_address="$WORKER_ADDR" --gateway_address="$GATEWAY_ADDR" \
    --gateway_pid="$GATEWAY_PID" --cpu_pids="gateway=$GATEWAY_PID,worker=$WORKER_PID" \
    --prompt=short --max_tokens=16 --duration=6s --json="$OUT_DIR/overhead$suffix.json" \
    --svg="$OUT_DIR/overhead$suffix.svg" "$@" | tee "$OUT_DIR/overhead$suffix.md"
  "$BUILD_DIR/tools/tandem-bench" --plaintext --target=worker --max_tokens=16 \
    --write_grpc_request="$OUT_DIR/worker_request.bin"
  "$BUILD_DIR/tools/tandem-bench" --target=gateway --model=qwen --max_tokens=16 \
    --write_grpc_request="$OUT_DIR/gateway_request.bin"
  local direct="$scheme://$WORKER_ADDR/tandem.v1.Worker/Generate"
  local gateway="$scheme://$GATEWAY_ADDR/tandem.v1.Gateway/Generate"
  # h2load cannot present a client certificate, so with TLS the worker is reached through the
  # gateway only; the plaintext stack has the direct rows.
  for c in 1 128; do
    for round in 1 2 3; do
      if [[ -z $certs ]]; then
        h2load_round "$label direct (round $round)" "$direct" "$OUT_DIR/worker_request.bin" "$c"
      fi
      h2load_round "$label gateway unary (round $round)" "$gateway" \
        "$OUT_DIR/gateway_request.bin" "$c"
    done
  done >>"$OUT_DIR/overhead_h2load.md"
  bench_cleanup
}

{
  echo "### h2load (HTTP/2 requests carrying one gRPC message; HTTP 2xx counted as succeeded)"
  echo
  echo "| series | in flight | succeeded | req/s | mean request time | gateway CPU us/req | worker CPU us/req |"
  echo "|---|---|---|---|---|---|---|"
} >"$OUT_DIR/overhead_h2load.md"
run_stack plaintext "" "$@"
bash scripts/make_dev_certs.sh "$OUT_DIR/certs" >/dev/null
run_stack tls "$OUT_DIR/certs" "$@"
cat "$OUT_DIR/overhead_h2load.md"
echo "wrote $OUT_DIR/overhead{,_tls}.{json,md,svg} and overhead_h2load.md" >&2
