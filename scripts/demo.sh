#!/usr/bin/env bash
# The main job on one box: installs what is missing, builds, starts a qwen worker, a nemotron
# worker and the gateway, sends a short demo of varied requests through the gateway showing
# which model served each and why, then keeps serving until Ctrl-C.
#
# Environment: TANDEM_HOST (bind address, default 127.0.0.1), TANDEM_GATEWAY_PORT (7000),
# TANDEM_METRICS_PORT (9100; workers use the next two), TANDEM_WORKER_PORT (7101; and 7102).
# Secured like a deployment: TLS on every gRPC port with throwaway certificates
# (scripts/make_dev_certs.sh), mutual TLS between gateway and workers, and an API key: a
# one-tenant tenants file made for this run (the key is printed at the end).
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
LOGS=$(mktemp -d /tmp/tandem-demo.XXXXXX)

# Development certificates (a throwaway CA; see scripts/make_dev_certs.sh) and a tenants file
# with one admin tenant whose API key is made here; only its hash is in the file.
TLS=$LOGS/tls
case "$HOST" in 127.0.0.1|localhost|::1) SAN_ARGS=() ;; *) SAN_ARGS=(--san="$HOST") ;; esac
bash scripts/make_dev_certs.sh "${SAN_ARGS[@]}" "$TLS" >/dev/null
TANDEM_API_KEY=demo-$(od -An -N12 -tx1 /dev/urandom | tr -d ' \n')
export TANDEM_API_KEY
cat >"$LOGS/tenants.yaml" <<TENANTS
tenants:
  - name: demo
    keys: [$(printf %s "$TANDEM_API_KEY" | "$BUILD_DIR/tools/tandemctl" hash-key)]
    admin: true
TENANTS
CTL="$BUILD_DIR/tools/tandemctl --gateway=$HOST:$GW_PORT --tls_ca=$TLS/gateway/ca.crt"
WORKER_TLS=(--tls_cert="$TLS/worker/tls.crt" --tls_key="$TLS/worker/tls.key"
            --tls_client_ca="$TLS/worker/ca.crt")

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
# Engine: native (the real model code; random weights unless checkpoints are given) or
# synthetic (the load simulator with H200 timings).
ENGINE=${TANDEM_ENGINE:-native}
MAKE_CKPT=$BUILD_DIR/tools/tandem-make-checkpoint
if [[ $ENGINE == native ]]; then
  QWEN_CKPT=${TANDEM_QWEN_CHECKPOINT:-}
  NEMOTRON_CKPT=${TANDEM_NEMOTRON_CHECKPOINT:-}
  if [[ -z $QWEN_CKPT || -z $NEMOTRON_CKPT ]]; then
    MODELS=$BUILD_DIR/random-models
    # qwen is multimodal as the released model is: a small vision encoder (--vision), its
    # preprocessor_config.json, and the image token ids taken from the tokenizer. A qwen
    # checkpoint cached by an older demo (text only: no preprocessor_config.json) is remade.
    for arch in qwen3_5_moe nemotron_h; do
      made=$MODELS/$arch/config.json vision=false
      if [[ $arch == qwen3_5_moe ]]; then
        made=$MODELS/$arch/preprocessor_config.json vision=true
      fi
      if [[ ! -f $made ]]; then
        "$MAKE_CKPT" --arch=$arch --out="$MODELS/$arch" --vision=$vision \
          --tokenizer="$PWD/tests/tokenizer/qwen3/tokenizer.json" --hidden=256 --layers=4 \
          --experts=16 --moe_intermediate=128 --shared_intermediate=128 >/dev/null
      fi
    done
    QWEN_CKPT=${QWEN_CKPT:-$MODELS/qwen3_5_moe}
    NEMOTRON_CKPT=${NEMOTRON_CKPT:-$MODELS/nemotron_h}
    echo "NOTE: RANDOM WEIGHTS. No real checkpoints are configured (TANDEM_QWEN_CHECKPOINT,"
    echo "      TANDEM_NEMOTRON_CHECKPOINT), so both workers run the native engine on small"
    echo "      random-weight models in the real architectures (qwen with its vision encoder):"
    echo "      the answers are MEANINGLESS random-weight output; the tokenizer, image"
    echo "      preprocessing, routing, streaming and metrics are real."
  fi
  # The native engine runs on the CPU until its CUDA path lands.
  QWEN_DEVICE=cpu; NEMOTRON_DEVICE=cpu
  QWEN_ARGS=(--engine=native --checkpoint="$QWEN_CKPT" --memory_budget=1073741824)
  NEMOTRON_ARGS=(--engine=native --checkpoint="$NEMOTRON_CKPT" --memory_budget=1073741824)
else
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
  QWEN_ARGS=(--engine=synthetic)
  NEMOTRON_ARGS=(--engine=synthetic)
fi
echo

start_worker() {  # model device grpc_port metrics_port engine-args...
  local model=$1 device=$2 grpc=$3 metrics=$4
  shift 4
  "$WORKER" --model="$model" --device="$device" --listen="$HOST:$grpc" \
    --metrics_listen="$HOST:$metrics" "${WORKER_TLS[@]}" "$@" \
    >"$LOGS/$model.out" 2>"$LOGS/$model.log" &
  pids+=($!)
}
start_worker qwen "$QWEN_DEVICE" "$WORKER_PORT" $((METRICS_PORT + 1)) "${QWEN_ARGS[@]}"
start_worker nemotron "$NEMOTRON_DEVICE" $((WORKER_PORT + 1)) $((METRICS_PORT + 2)) \
  "${NEMOTRON_ARGS[@]}"
"$GATEWAY" --listen="$HOST:$GW_PORT" --metrics_listen="$HOST:$METRICS_PORT" \
  --policy="$PWD/policies/default.yaml" \
  --workers="qwen=$HOST:$WORKER_PORT,nemotron=$HOST:$((WORKER_PORT + 1))" \
  --tls_cert="$TLS/gateway/tls.crt" --tls_key="$TLS/gateway/tls.key" \
  --worker_tls_ca="$TLS/gateway-client/ca.crt" --worker_tls_cert="$TLS/gateway-client/tls.crt" \
  --worker_tls_key="$TLS/gateway-client/tls.key" --worker_tls_server_name=tandem-worker \
  --tenants="$LOGS/tenants.yaml" \
  >"$LOGS/gateway.out" 2>"$LOGS/gateway.log" &
pids+=($!)

# A local Prometheus (Debian's, installed by setup.sh) scraping the stack with the shipped
# recording and alerting rules (deploy/prometheus).
PROM_PORT=${TANDEM_PROMETHEUS_PORT:-9090}
if command -v prometheus >/dev/null 2>&1; then
  prometheus --config.file="$PWD/deploy/prometheus/prometheus.yml" \
    --storage.tsdb.path="$LOGS/prometheus-data" --web.listen-address="$HOST:$PROM_PORT" \
    >"$LOGS/prometheus.log" 2>&1 &
  pids+=($!)
fi

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

# A 64x48 RGB gradient (the image processor scales it up to 320x224: 70 image tokens), written
# with Python's zlib and struct (no imaging library needed).
python3 - "$LOGS/picture.png" <<'PY'
import struct, sys, zlib
w, h = 64, 48
rows = b"".join(b"\0" + bytes(v for x in range(w)
                              for v in (x * 255 // (w - 1), y * 255 // (h - 1), 160))
               for y in range(h))
def chunk(kind, data):
    return (struct.pack(">I", len(data)) + kind + data
            + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF))
with open(sys.argv[1], "wb") as out:
    out.write(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0))
              + chunk(b"IDAT", zlib.compress(rows, 9)) + chunk(b"IEND", b""))
PY
head -c 200000 >"$LOGS/long_document.txt" < <(
  yes "The quarterly report covers revenue, churn, hiring and the roadmap for next year.")

demo "A plain question (no hints): accuracy-critical by default" generate --max_tokens=12 \
  "Write a Python function that merges two sorted lists."
demo "A chat turn marked latency-critical" generate --objective=latency --max_tokens=12 \
  "hey, what's up?"
demo "Accuracy asked for explicitly" generate --objective=accuracy --max_tokens=12 \
  "Prove that the square root of 2 is irrational."
if [[ $ENGINE == native ]]; then
  demo "An image: qwen is the vision model (random weights: its answer is meaningless)" \
    generate --image="$LOGS/picture.png" --max_tokens=12 "What is in this picture?"
  demo "Routing a 200 KB document (~50K tokens): long context (dry run; the small CPU models \
have a 32K context)" route - <"$LOGS/long_document.txt"
else
  demo "An image: only qwen accepts images" generate --image="$LOGS/picture.png" --max_tokens=12 \
    "What is in this picture?"
  demo "A 200 KB document (~50K tokens): long context" generate --max_tokens=12 - \
    <"$LOGS/long_document.txt"
fi
demo "Pinned to nemotron, streamed chunk by chunk" stream --model=nemotron --max_tokens=24 \
  "Summarise the meeting in one line."
demo "Routing dry run with the explanation" route --objective=latency "Classify: refund or not?"
demo "A bad request gets INVALID_ARGUMENT naming the field" generate --temperature=7 "hello"

echo
echo "Tandem is serving. Ctrl-C stops it."
echo "  gateway gRPC      $HOST:$GW_PORT, TLS; API key and CA for tandemctl:"
echo "      export TANDEM_API_KEY=$TANDEM_API_KEY"
echo "      tandemctl --gateway=$HOST:$GW_PORT --tls_ca=$TLS/gateway/ca.crt generate \"...\""
echo "  tenants           $LOGS/tenants.yaml (reloaded on change; echo -n KEY | tandemctl hash-key)"
echo "  gateway metrics   http://$HOST:$METRICS_PORT/metrics"
echo "  qwen worker       $HOST:$WORKER_PORT, metrics http://$HOST:$((METRICS_PORT + 1))/metrics"
echo "  nemotron worker   $HOST:$((WORKER_PORT + 1)), metrics http://$HOST:$((METRICS_PORT + 2))/metrics"
echo "  routing policy    policies/default.yaml (edit it: the gateway reloads it within a second)"
echo "  prometheus        http://$HOST:$PROM_PORT  (rules: deploy/prometheus; try these queries:)"
echo "      sum by (model_name, code) (rate(tandem_gateway_requests_total[1m]))"
echo "      namespace_model_name:tandem_worker_num_requests_waiting:avg"
echo "      sum by (rule) (increase(tandem_gateway_route_decisions_total[5m]))"
echo "      ALERTS"
echo "  operations guide  docs/operations.md (dashboards, alerts, deployment)"
echo "  logs              $LOGS"
wait
