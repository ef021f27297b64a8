#!/usr/bin/env bash
# The OpenAI-compatible HTTP front against the gRPC front, on one gateway in front of one
# synthetic worker (no simulated delay), driven by h2load in alternating rounds: the same request
# (the same prompt, model pinned, max_tokens) as gRPC Generate over HTTP/2 and as
# POST /v1/chat/completions over HTTP/1.1, whole and streamed. This VM's speed drifts, so only
# the per-round ratios HTTP/gRPC count.
#
#   bash scripts/bench_http_front.sh
#
# Per round and front: req/s, mean request time and the gateway's CPU microseconds per request
# (/proc/PID/stat), at 1 request in flight and at CONNECTIONS (32) connections with one request
# each; streamed with STREAM_TOKENS (256) tokens, one chunk a token, the CPU per chunk. Then the
# medians and the median ratio HTTP/gRPC. ROUNDS (5), REQUESTS (3000), OUT_DIR
# (build/bench/http_front).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
OUT_DIR=${OUT_DIR:-$BUILD_DIR/bench/http_front}
ROUNDS=${ROUNDS:-5}
REQUESTS=${REQUESTS:-3000}
CONNECTIONS=${CONNECTIONS:-32}
STREAM_TOKENS=${STREAM_TOKENS:-256}
mkdir -p "$OUT_DIR"
source scripts/bench_lib.sh
trap bench_cleanup EXIT
bench_require "$BUILD_DIR"/{gateway/tandem-gateway,workers/tandem-worker,tools/tandem-bench} h2load

# One worker per answer length: 16 tokens for the whole answers, STREAM_TOKENS for the streams.
start_worker() {
  bench_start "worker_$1" "$OUT_DIR" "$BUILD_DIR/workers/tandem-worker" --model="$2" \
    --engine=synthetic --device=cpu --synthetic_time_scale=0 --synthetic_output_tokens="$1" \
    --max_queue=1024 --listen=127.0.0.1:0 --metrics_listen=127.0.0.1:0 --plaintext
}
start_worker 16 qwen
SHORT_WORKER=$BENCH_ADDR
start_worker "$STREAM_TOKENS" nemotron
LONG_WORKER=$BENCH_ADDR
bench_start gateway "$OUT_DIR" "$BUILD_DIR/gateway/tandem-gateway" \
  --workers="qwen=$SHORT_WORKER,nemotron=$LONG_WORKER" --listen=127.0.0.1:0 \
  --metrics_listen=127.0.0.1:0 --http_listen=127.0.0.1:0 $BENCH_GATEWAY_DEV_FLAGS \
  --max_queued=1024
GRPC_ADDR=$BENCH_ADDR GATEWAY_PID=$BENCH_PID
HTTP_ADDR=$(sed -n 's/.* http=\([^ ]*\).*/\1/p' "$OUT_DIR/gateway.out" | head -1)

# The same request both ways: the gRPC body from tandem-bench, its prompt text into the JSON.
for model in qwen nemotron; do
  "$BUILD_DIR/tools/tandem-bench" --target=gateway --model=$model --max_tokens="$STREAM_TOKENS" \
    --write_grpc_request="$OUT_DIR/$model.grpc" >/dev/null
done
PROMPT=$(tail -c +6 "$OUT_DIR/qwen.grpc" | protoc -I proto --decode=tandem.v1.GenerateRequest \
  tandem/v1/gateway.proto | sed -n 's/^ *text: "\(.*\)"$/\1/p')
for model in qwen nemotron; do
  for stream in false true; do
    printf '{"model": "%s", "max_tokens": %d, "stream": %s, "messages": [{"role": "user", "content": "%s"}]}' \
      "$model" "$STREAM_TOKENS" "$stream" "$PROMPT" >"$OUT_DIR/$model.$stream.json"
  done
done

# round NAME CONNECTIONS URL BODY H2LOAD_FLAGS...: "NAME C REQ_PER_S MEAN_MS GATEWAY_US".
round() {
  local name=$1 c=$2 url=$3 body=$4 g0 g1 report
  shift 4
  g0=$(bench_cpu_ticks "$GATEWAY_PID")
  report=$(h2load -n "$REQUESTS" -c "$c" -m 1 -d "$body" "$@" "$url" 2>&1)
  g1=$(bench_cpu_ticks "$GATEWAY_PID")
  grep -q "0 failed, 0 errored" <<<"$report" && grep -q " 0 4xx, 0 5xx" <<<"$report" || { echo "$name: h2load failed:" >&2; echo "$report" >&2; exit 1; }
  echo "$name $c $(sed -n 's/.*finished in [^,]*, \([0-9.]*\) req\/s.*/\1/p' <<<"$report")" \
    "$(awk '/time for request:/ {print $6}' <<<"$report")" \
    "$(((g1 - g0) * (1000000 / $(getconf CLK_TCK)) / REQUESTS))"
}
grpc_round() {  # NAME C MODEL METHOD
  round "$1" "$2" "http://$GRPC_ADDR/tandem.v1.Gateway/$4" "$OUT_DIR/$3.grpc" \
    -H 'content-type: application/grpc' -H 'te: trailers'
}
http_round() {  # NAME C MODEL STREAM
  round "$1" "$2" "http://$HTTP_ADDR/v1/chat/completions" "$OUT_DIR/$3.$4.json" --h1 \
    -H 'content-type: application/json'
}
: >"$OUT_DIR/rounds.txt"
grpc_round warmup 8 qwen Generate >/dev/null
http_round warmup 8 qwen false >/dev/null
for _ in $(seq "$ROUNDS"); do
  for c in 1 "$CONNECTIONS"; do
    grpc_round grpc_whole "$c" qwen Generate | tee -a "$OUT_DIR/rounds.txt"
    http_round http_whole "$c" qwen false | tee -a "$OUT_DIR/rounds.txt"
  done
  grpc_round grpc_stream "$CONNECTIONS" nemotron GenerateStream | tee -a "$OUT_DIR/rounds.txt"
  http_round http_stream "$CONNECTIONS" nemotron true | tee -a "$OUT_DIR/rounds.txt"
done
# The gateway's memory after every round: a per-chunk allocation that is never given back would
# show as growth here.
grep -E '^Vm(HWM|RSS)' "/proc/$GATEWAY_PID/status" | tr -s ' ' | sed 's/^/gateway /'
python3 - "$OUT_DIR/rounds.txt" "$STREAM_TOKENS" <<'EOF'
import statistics, sys
rows = [line.split() for line in open(sys.argv[1]) if line.strip()]
tokens = int(sys.argv[2])
med = lambda xs: statistics.median(xs)
# h2load's mean request time, with its unit ("712us", "7.28ms", "1.2s"), in milliseconds.
def ms(v):
    for unit, scale in (("us", 1e-3), ("ms", 1.0), ("s", 1e3)):
        if v.endswith(unit):
            return float(v[: -len(unit)]) * scale
    return float(v)
print("| front, answer | in flight | req/s | mean ms | gateway CPU us/req | HTTP/gRPC CPU (median of rounds) |")
print("|---|---|---|---|---|---|")
for kind in ("whole", "stream"):
    for c in sorted({r[1] for r in rows if r[0].endswith(kind)}, key=int):
        g = [r for r in rows if r[0] == f"grpc_{kind}" and r[1] == c]
        h = [r for r in rows if r[0] == f"http_{kind}" and r[1] == c]
        ratio = med([float(y[4]) / float(x[4]) for x, y in zip(g, h)])
        for name, rs in (("gRPC", g), ("HTTP", h)):
            extra = f" ({med([float(r[4]) for r in rs]) / tokens:.1f} us/chunk)" if kind == "stream" else ""
            print(f"| {name}, {kind} | {c} | {med([float(r[2]) for r in rs]):.0f} | "
                  f"{med([ms(r[3]) for r in rs]):.2f} | {med([float(r[4]) for r in rs]):.0f}{extra} | "
                  f"{ratio:.2f} |")
EOF
