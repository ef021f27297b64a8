# Helpers shared by the bench scripts, scripts/soak.sh and tests/bench/bench_smoke.sh (sourced,
# not run).
# Starts tandem-worker and tandem-gateway on port 0, reads their "listening grpc=..." line,
# and stops everything it started on exit.

BENCH_PIDS=()

# bench_require PATH...: exits 1 unless every PATH is an executable (a binary to build first);
# the word h2load stands for the h2load command, which scripts/setup.sh installs.
bench_require() {
  local bin
  for bin in "$@"; do
    if [[ $bin == h2load ]]; then
      command -v h2load >/dev/null || { echo "h2load missing: run scripts/setup.sh" >&2; exit 1; }
    else
      [[ -x $bin ]] || { echo "missing $bin: build it first" >&2; exit 1; }
    fi
  done
}

# bench_cpu_ticks PID: the user and system CPU time PID has used so far, in clock ticks.
bench_cpu_ticks() { awk '{ sub(/^.*\) /, ""); print $12 + $13 }' "/proc/$1/stat"; }

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
  # The child truncates its .out only once it runs: an earlier run's line must not be read first.
  rm -f "$logdir/$name.out"
  "$@" >"$logdir/$name.out" 2>"$logdir/$name.log" &
  BENCH_PID=$!
  BENCH_PIDS+=("$BENCH_PID")
  for _ in $(seq 400); do
    # Only a whole line counts: the file can be read while the line is half written.
    BENCH_ADDR=$(sed -n 's/.*listening grpc=\([^ ]*\) .*/\1/p' "$logdir/$name.out" 2>/dev/null | head -1)
    if [[ -n $BENCH_ADDR ]]; then return 0; fi
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

# Benchmarks run on loopback without API keys (said loudly in the gateway's log); plaintext, or
# TLS on both hops when bench_start_stack gets a certificate directory.
BENCH_GATEWAY_DEV_FLAGS="--plaintext --worker_plaintext --allow_unauthenticated"

# bench_start_stack BUILD LOGDIR [CERTS]: a synthetic qwen worker with no simulated delay, and a
# gateway with both model names on it. With CERTS (scripts/make_dev_certs.sh's layout) both hops
# use TLS: clients verify the gateway, the gateway and the worker verify each other (mutual TLS).
# Sets WORKER_ADDR, WORKER_PID, GATEWAY_ADDR, GATEWAY_PID and BENCH_CLIENT_TLS (tandem-bench's
# flags for that stack). SYNTHETIC_OUTPUT_TOKENS (default 16) is the answers' length; WORKER_FLAGS
# and GATEWAY_FLAGS add flags (e.g. GATEWAY_FLAGS=--log_level=warning).
bench_start_stack() {
  local build=$1 logdir=$2 certs=${3:-}
  local worker_tls=(--plaintext) gateway_tls=($BENCH_GATEWAY_DEV_FLAGS)
  BENCH_CLIENT_TLS="--plaintext"
  if [[ -n $certs ]]; then
    worker_tls=(--tls_cert="$certs/worker/tls.crt" --tls_key="$certs/worker/tls.key"
      --tls_client_ca="$certs/worker/ca.crt")
    gateway_tls=(--tls_cert="$certs/gateway/tls.crt" --tls_key="$certs/gateway/tls.key"
      --worker_tls_ca="$certs/gateway-client/ca.crt"
      --worker_tls_cert="$certs/gateway-client/tls.crt"
      --worker_tls_key="$certs/gateway-client/tls.key" --allow_unauthenticated)
    # The client certificate lets tandem-bench call the worker directly, as the gateway does.
    BENCH_CLIENT_TLS="--tls_ca=$certs/ca.crt --tls_cert=$certs/gateway-client/tls.crt"
    BENCH_CLIENT_TLS+=" --tls_key=$certs/gateway-client/tls.key"
  fi
  # --max_queue and the gateway's --max_queued: 512 concurrent streams of one caller must fit.
  bench_start worker "$logdir" "$build/workers/tandem-worker" --model=qwen --engine=synthetic --device=cpu \
    --synthetic_time_scale=0 --synthetic_output_tokens="${SYNTHETIC_OUTPUT_TOKENS:-16}" \
    --max_queue=1024 --listen=127.0.0.1:0 --metrics_listen=127.0.0.1:0 "${worker_tls[@]}" \
    ${WORKER_FLAGS:-} || return 1
  WORKER_ADDR=$BENCH_ADDR
  WORKER_PID=$BENCH_PID
  bench_start gateway "$logdir" "$build/gateway/tandem-gateway" \
    --workers="qwen=$WORKER_ADDR,nemotron=$WORKER_ADDR" \
    --listen=127.0.0.1:0 --metrics_listen=127.0.0.1:0 "${gateway_tls[@]}" --max_queued=1024 \
    ${GATEWAY_FLAGS:-} || return 1
  GATEWAY_ADDR=$BENCH_ADDR
  GATEWAY_PID=$BENCH_PID
}

# bench_start_llama NAME LOGDIR [LLAMA_SERVER_FLAGS...]: llama.cpp's llama-server
# (scripts/build_llama_server.sh) on 127.0.0.1, port 0, serving the tiny test model
# (tests/support/make_tiny_gguf.py, written once into LOGDIR) as "tiny-qwen", with --metrics.
# Sets LLAMA_ADDR (HOST:PORT) and LLAMA_PID once it listens (10 s at most; it may still be
# loading). Stopped with the others by bench_cleanup.
bench_start_llama() {
  local name=$1 logdir=$2 ls gguf
  shift 2
  ls=$(bash scripts/build_llama_server.sh) || return 1
  gguf=$logdir/tiny-qwen.gguf
  [[ -f $gguf ]] || PYTHONPATH=$ls/gguf-py /usr/bin/python3 tests/support/make_tiny_gguf.py \
    "$ls" "$gguf" qwen || return 1
  rm -f "$logdir/$name.log"
  "$ls/bin/llama-server" -m "$gguf" --host 127.0.0.1 --port 0 --jinja --metrics -c 16384 -t 1 \
    --alias tiny-qwen "$@" >"$logdir/$name.log" 2>&1 &
  LLAMA_PID=$!
  BENCH_PIDS+=("$LLAMA_PID")
  for _ in $(seq 200); do
    LLAMA_ADDR=$(sed -n 's/.*listening on http:\/\/\([^ ]*\).*/\1/p' "$logdir/$name.log" | head -1)
    [[ -n $LLAMA_ADDR ]] && return 0
    kill -0 "$LLAMA_PID" 2>/dev/null || break
    sleep 0.05
  done
  echo "$name did not listen; its log:" >&2
  cat "$logdir/$name.log" >&2
  return 1
}
