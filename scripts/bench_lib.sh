# Helpers shared by scripts/bench_overhead.sh and tests/bench/bench_smoke.sh (sourced, not run).
# Starts tandem-worker and tandem-gateway on port 0, reads their "listening grpc=..." line,
# and stops everything it started on exit.

BENCH_PIDS=()

bench_cleanup() {
  local pid
  for pid in "${BENCH_PIDS[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  for pid in "${BENCH_PIDS[@]}"; do
    for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  done
  BENCH_PIDS=()
}

# bench_start NAME LOGDIR CMD...: runs CMD in the background; sets BENCH_ADDR (gRPC address)
# and BENCH_PID once it prints its listening line (20 s at most).
bench_start() {
  local name=$1 logdir=$2
  shift 2
  "$@" >"$logdir/$name.out" 2>"$logdir/$name.log" &
  BENCH_PID=$!
  BENCH_PIDS+=("$BENCH_PID")
  for _ in $(seq 400); do
    if grep -q 'listening grpc=' "$logdir/$name.out"; then
      BENCH_ADDR=$(sed -n 's/.*listening grpc=\([^ ]*\) .*/\1/p' "$logdir/$name.out" | head -1)
      return 0
    fi
    if ! kill -0 "$BENCH_PID" 2>/dev/null; then
      echo "$name exited before listening; its log:" >&2
      cat "$logdir/$name.log" >&2
      return 1
    fi
    sleep 0.05
  done
  echo "$name did not print its listening line in 20 s" >&2
  return 1
}

# Benchmarks run on loopback: plaintext, no API keys (said loudly in the gateway's log).
BENCH_GATEWAY_DEV_FLAGS="--plaintext --worker_plaintext --allow_unauthenticated"

# bench_start_stack BUILD LOGDIR: a synthetic qwen worker with no simulated delay, and a gateway
# with both model names on it. Sets WORKER_ADDR, GATEWAY_ADDR, GATEWAY_PID. WORKER_FLAGS and
# GATEWAY_FLAGS add flags (e.g. GATEWAY_FLAGS=--log_level=warning).
bench_start_stack() {
  local build=$1 logdir=$2
  # --max_queue: 512 concurrent streams must fit (64 running + the queue).
  bench_start worker "$logdir" "$build/workers/tandem-worker" --model=qwen --engine=synthetic --device=cpu \
    --synthetic_time_scale=0 --synthetic_output_tokens=16 --max_queue=1024 \
    --listen=127.0.0.1:0 --metrics_listen=127.0.0.1:0 --plaintext ${WORKER_FLAGS:-} || return 1
  WORKER_ADDR=$BENCH_ADDR
  bench_start gateway "$logdir" "$build/gateway/tandem-gateway" \
    --workers="qwen=$WORKER_ADDR,nemotron=$WORKER_ADDR" \
    --listen=127.0.0.1:0 --metrics_listen=127.0.0.1:0 $BENCH_GATEWAY_DEV_FLAGS \
    ${GATEWAY_FLAGS:-} || return 1
  GATEWAY_ADDR=$BENCH_ADDR
  GATEWAY_PID=$BENCH_PID
}
