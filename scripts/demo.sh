#!/usr/bin/env bash
# The main job on one box: installs what is missing, builds, starts a qwen worker, a nemotron
# worker and the gateway, sends a short demo of varied requests through the gateway showing
# which model served each and why, then keeps serving until Ctrl-C.
#
# Environment: TANDEM_HOST (bind address, default 127.0.0.1), TANDEM_GATEWAY_PORT (7000),
# TANDEM_METRICS_PORT (9100; workers use the next two), TANDEM_WORKER_PORT (7101; and 7102).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_LOG=/tmp/tandem-build.log
echo "installing and building (the first run takes a few minutes; log: $BUILD_LOG)..."
if ! bash scripts/build.sh >"$BUILD_LOG" 2>&1; then
  tail -n 20 "$BUILD_LOG" >&2
  echo "build failed; the whole log is $BUILD_LOG" >&2
  exit 1
fi

BUILD_DIR=${TANDEM_BUILD_DIR:-build}
HOST=${TANDEM_HOST:-127.0.0.1}
GW_PORT=${TANDEM_GATEWAY_PORT:-7000}
METRICS_PORT=${TANDEM_METRICS_PORT:-9100}
WORKER_PORT=${TANDEM_WORKER_PORT:-7101}
WORKER=$BUILD_DIR/workers/tandem-worker
GATEWAY=$BUILD_DIR/gateway/tandem-gateway
CTL="$BUILD_DIR/tools/tandemctl --gateway=$HOST:$GW_PORT"
LOGS=$(mktemp -d /tmp/tandem-demo.XXXXXX)

pids=()
cleanup() {
  trap - INT TERM EXIT
  echo
  echo "stopping (draining in-flight requests)..."
  for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  echo "logs are in $LOGS"
}
trap cleanup INT TERM EXIT

# Each worker owns one accelerator. Without GPUs they run on the CPU, and say so.
gpus=0
if command -v nvidia-smi >/dev/null 2>&1; then gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true); fi
if [[ $gpus -ge 2 ]]; then
  QWEN_DEVICE=0; NEMOTRON_DEVICE=1
elif [[ $gpus -eq 1 ]]; then
  QWEN_DEVICE=0; NEMOTRON_DEVICE=cpu
  echo "NOTE: one GPU found: qwen runs on GPU 0, nemotron on the CPU."
else
  QWEN_DEVICE=cpu; NEMOTRON_DEVICE=cpu
  echo "NOTE: no GPU found: both workers run on the CPU."
fi
echo "NOTE: the workers use the 'synthetic' engine, a load simulator with H200 timings: the"
echo "      answers are filler text, the routing, streaming, metrics and timings are real."
echo

start_worker() {  # model device grpc_port metrics_port
  "$WORKER" --model="$1" --device="$2" --listen="$HOST:$3" --metrics_listen="$HOST:$4" \
    >"$LOGS/$1.out" 2>"$LOGS/$1.log" &
  pids+=($!)
}
start_worker qwen "$QWEN_DEVICE" "$WORKER_PORT" $((METRICS_PORT + 1))
start_worker nemotron "$NEMOTRON_DEVICE" $((WORKER_PORT + 1)) $((METRICS_PORT + 2))
"$GATEWAY" --listen="$HOST:$GW_PORT" --metrics_listen="$HOST:$METRICS_PORT" \
  --policy="$PWD/policies/default.yaml" \
  --workers="qwen=$HOST:$WORKER_PORT,nemotron=$HOST:$((WORKER_PORT + 1))" \
  >"$LOGS/gateway.out" 2>"$LOGS/gateway.log" &
pids+=($!)

# Wait until the gateway sees both workers ready.
for _ in $(seq 1 150); do
  if $CTL models 2>/dev/null | grep -c 'ready=1/1' | grep -q 2; then break; fi
  for p in "${pids[@]}"; do
    if ! kill -0 "$p" 2>/dev/null; then
      echo "a process exited at start-up; its log:" >&2
      tail -n 5 "$LOGS"/*.log >&2
      exit 1
    fi
  done
  sleep 0.2
done
$CTL models

demo() {  # title, tandemctl args...
  local title=$1; shift
  echo
  echo "== $title"
  $CTL "$@" 2>&1 | sed 's/^/   /' || true
}

printf '\x89PNG\r\n\x1a\n\0\0\0\rIHDR\0\0\0\x01\0\0\0\x01\x08\x02\0\0\0\x90wS\xde\0\0\0\x0cIDATx\x9cc\xf8\xff\xff?\0\x05\xfe\x02\xfe\xa7\x35\x81\x84\0\0\0\0IEND\xaeB`\x82' >"$LOGS/pixel.png"
head -c 200000 >"$LOGS/long_document.txt" < <(
  yes "The quarterly report covers revenue, churn, hiring and the roadmap for next year.")

demo "A plain question (no hints): accuracy-critical by default" generate --max_tokens=12 \
  "Write a Python function that merges two sorted lists."
demo "A chat turn marked latency-critical" generate --objective=latency --max_tokens=12 \
  "hey, what's up?"
demo "Accuracy asked for explicitly" generate --objective=accuracy --max_tokens=12 \
  "Prove that the square root of 2 is irrational."
demo "An image: only qwen accepts images" generate --image="$LOGS/pixel.png" --max_tokens=12 \
  "What is in this picture?"
demo "A 200 KB document (~50K tokens): long context" generate --max_tokens=12 - \
  <"$LOGS/long_document.txt"
demo "Pinned to nemotron, streamed chunk by chunk" stream --model=nemotron --max_tokens=24 \
  "Summarise the meeting in one line."
demo "Routing dry run with the explanation" route --objective=latency "Classify: refund or not?"
demo "A bad request gets INVALID_ARGUMENT naming the field" generate --temperature=7 "hello"

echo
echo "Tandem is serving. Ctrl-C stops it."
echo "  gateway gRPC      $HOST:$GW_PORT   (tandemctl --gateway=$HOST:$GW_PORT generate \"...\")"
echo "  gateway metrics   http://$HOST:$METRICS_PORT/metrics"
echo "  qwen worker       $HOST:$WORKER_PORT, metrics http://$HOST:$((METRICS_PORT + 1))/metrics"
echo "  nemotron worker   $HOST:$((WORKER_PORT + 1)), metrics http://$HOST:$((METRICS_PORT + 2))/metrics"
echo "  routing policy    policies/default.yaml (edit it: the gateway reloads it within a second)"
echo "  logs              $LOGS"
wait
