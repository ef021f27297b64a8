#!/usr/bin/env bash
# The floor gRPC 1.51 puts under a relaying gateway, side by side in one run: the same synthetic
# worker called directly, through a bare callback-API proxy and through a bare completion-queue
# proxy (tests/bench/grpc_proxy_floor.cc: opaque bytes, nothing of Tandem), and through
# tandem-gateway; in alternating rounds, at concurrency 1 and with many calls in flight, with the
# CPU time per request of the proxy in front and of the worker (/proc/PID/stat). Then the cost of
# relaying one stream chunk: a second worker paced to emit one chunk per token
# (--synthetic_time_scale=CHUNK_TIME_SCALE, default 0.02), streams of 16 and 128 tokens through a
# bare callback proxy and through a gateway, the CPU difference over the chunk difference.
# Last, the gateway's gap to the floor (the cheaper bare proxy) on every measure.
#
#   bash scripts/bench_proxy_floor.sh [extra tandem-bench flags, e.g. --duration=2s]
#
# Prints Markdown tables and writes $OUT_DIR/proxy_floor.md (default build/bench). BUILD_DIR
# changes the build; ROUNDS (default 3), IN_FLIGHT (default 128) and CHUNK_IN_FLIGHT (16) the
# runs.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
OUT_DIR=${OUT_DIR:-$BUILD_DIR/bench}
ROUNDS=${ROUNDS:-3}
IN_FLIGHT=${IN_FLIGHT:-128}
mkdir -p "$OUT_DIR"
source scripts/bench_lib.sh
trap bench_cleanup EXIT
BENCH=$BUILD_DIR/tools/tandem-bench
FLOOR=$BUILD_DIR/tests/grpc_proxy_floor
for bin in "$BENCH" "$FLOOR"; do
  [[ -x $bin ]] || { echo "missing $bin: build it first" >&2; exit 1; }
done

bench_start_stack "$BUILD_DIR" "$OUT_DIR"
bench_start callback_proxy "$OUT_DIR" "$FLOOR" --mode=callback --upstream="$WORKER_ADDR"
CALLBACK_ADDR=$BENCH_ADDR CALLBACK_PID=$BENCH_PID
bench_start cq_proxy "$OUT_DIR" "$FLOOR" --mode=cq --threads="$(nproc)" --upstream="$WORKER_ADDR"
CQ_ADDR=$BENCH_ADDR CQ_PID=$BENCH_PID
# The paced stack, for the per-chunk cost; its own log directory (the names repeat).
mkdir -p "$OUT_DIR/paced"
FAST_WORKER_ADDR=$WORKER_ADDR FAST_WORKER_PID=$WORKER_PID
FAST_GATEWAY_ADDR=$GATEWAY_ADDR FAST_GATEWAY_PID=$GATEWAY_PID
SYNTHETIC_OUTPUT_TOKENS=100000 \
  WORKER_FLAGS="--synthetic_time_scale=${CHUNK_TIME_SCALE:-0.02}" \
  bench_start_stack "$BUILD_DIR" "$OUT_DIR/paced"
PACED_WORKER_ADDR=$WORKER_ADDR PACED_WORKER_PID=$WORKER_PID
PACED_GATEWAY_ADDR=$GATEWAY_ADDR PACED_GATEWAY_PID=$GATEWAY_PID
bench_start paced_proxy "$OUT_DIR/paced" "$FLOOR" --mode=callback --upstream="$PACED_WORKER_ADDR"
PACED_PROXY_ADDR=$BENCH_ADDR PACED_PROXY_PID=$BENCH_PID
WORKER_ADDR=$FAST_WORKER_ADDR WORKER_PID=$FAST_WORKER_PID
GATEWAY_ADDR=$FAST_GATEWAY_ADDR GATEWAY_PID=$FAST_GATEWAY_PID

# run SERIES TARGET ADDRESS FRONT_PID CONCURRENCY [flags]: one tandem-bench run; its row.
# WORKER_PID, API (unary) and TOKENS (16) as set by the caller.
run() {
  local series=$1 target=$2 address=$3 front=$4 c=$5
  shift 5
  local pids="worker=$WORKER_PID"
  [[ $front -gt 0 ]] && pids="front=$front,$pids"
  local json="$OUT_DIR/proxy_floor_${series// /_}_c${c}_${API:-unary}${TOKENS:-16}_$round.json"
  "$BENCH" --plaintext --target="$target" --address="$address" --model=qwen \
    --api="${API:-unary}" --max_tokens="${TOKENS:-16}" --concurrency="$c" --duration=2s \
    --warmup_requests=20 --cpu_pids="$pids" --json="$json" "$@" >/dev/null
  /usr/bin/python3 - "$json" "$series" <<'PY' >>"$OUT_DIR/proxy_floor.rows"
import json, sys
run = json.load(open(sys.argv[1]))["runs"][0]
cpu = run["cpu_us_per_request"]
# Chunks per answer: each stream's gaps are its chunks but one.
chunks = run["chunk_gap_ms"]["count"] / run["ok"] + 1 if run["ok"] else 0
print("\t".join([sys.argv[2], str(run["concurrency"]), str(run["ok"]), str(run["requests_per_second"]),
                 str(run["e2e_ms"]["mean"]), str(run["e2e_ms"]["p99"]), str(cpu.get("front", -1)),
                 str(cpu.get("worker", -1)), " ".join(f"{k}={v}" for k, v in run["codes"].items()),
                 str(chunks)]))
PY
}

rm -f "$OUT_DIR/proxy_floor.rows"
for c in 1 "$IN_FLIGHT"; do
  for round in $(seq "$ROUNDS"); do
    run "direct" worker "$WORKER_ADDR" 0 "$c" "$@"
    run "callback proxy" worker "$CALLBACK_ADDR" "$CALLBACK_PID" "$c" "$@"
    run "cq proxy" worker "$CQ_ADDR" "$CQ_PID" "$c" "$@"
    run "tandem-gateway" gateway "$GATEWAY_ADDR" "$GATEWAY_PID" "$c" "$@"
  done
done
# Per chunk: streams of 16 and 128 tokens, one chunk each, on the paced worker.
WORKER_PID=$PACED_WORKER_PID
for round in $(seq "$ROUNDS"); do
  for TOKENS in 16 128; do
    API=stream TOKENS=$TOKENS run "stream $TOKENS callback proxy" worker "$PACED_PROXY_ADDR" \
      "$PACED_PROXY_PID" "${CHUNK_IN_FLIGHT:-16}" "$@"
    API=stream TOKENS=$TOKENS run "stream $TOKENS tandem-gateway" gateway "$PACED_GATEWAY_ADDR" \
      "$PACED_GATEWAY_PID" "${CHUNK_IN_FLIGHT:-16}" "$@"
  done
done

/usr/bin/python3 - "$OUT_DIR/proxy_floor.rows" <<'PY' | tee "$OUT_DIR/proxy_floor.md"
import collections, sys
rows = collections.defaultdict(list)
for line in open(sys.argv[1]):
    f = line.rstrip("\n").split("\t")
    rows[(f[0], int(f[1]))].append(f)
def mean(xs):
    xs = [x for x in xs if x >= 0]
    return sum(xs) / len(xs) if xs else float("nan")
ORDER = ["direct", "callback proxy", "cq proxy", "tandem-gateway"]
stat = {}
print("| series | in flight | req/s | mean latency (us) | p99 (us) | front CPU us/req | worker CPU us/req | codes |")
print("|---|---|---|---|---|---|---|---|")
for (series, c), fs in sorted((kv for kv in rows.items() if kv[0][0] in ORDER),
                              key=lambda kv: (kv[0][1], ORDER.index(kv[0][0]))):
    s = stat[(series, c)] = dict(
        rps=mean([float(f[3]) for f in fs]), lat=mean([float(f[4]) * 1000 for f in fs]),
        p99=mean([float(f[5]) * 1000 for f in fs]), front=mean([float(f[6]) for f in fs]),
        worker=mean([float(f[7]) for f in fs]))
    codes = " ".join(sorted(set(f[8] for f in fs)))
    front_text = "-" if series == "direct" else f"{s['front']:.0f}"
    print(f"| {series} | {c} | {s['rps']:.0f} | {s['lat']:.0f} | {s['p99']:.0f} | {front_text} | {s['worker']:.0f} | {codes} |")

# Per chunk: (CPU per 128-token stream - CPU per 16-token stream) / (chunk difference).
def per_chunk(front):
    short = [f for (series, c), fs in rows.items() if series == f"stream 16 {front}" for f in fs]
    long_ = [f for (series, c), fs in rows.items() if series == f"stream 128 {front}" for f in fs]
    if not short or not long_:
        return float("nan"), float("nan")
    chunks = mean([float(f[9]) for f in long_]) - mean([float(f[9]) for f in short])
    cpu = mean([float(f[6]) for f in long_]) - mean([float(f[6]) for f in short])
    return (cpu / chunks if chunks > 0.5 else float("nan")), chunks
print()
print("| relaying one stream chunk | front CPU per chunk (us) | chunks per 128-token answer, less a 16-token one's |")
print("|---|---|---|")
chunk = {}
for front in ["callback proxy", "tandem-gateway"]:
    chunk[front], n = per_chunk(front)
    print(f"| {front} | {chunk[front]:.1f} | {n:.0f} |")

# The gateway against the floor: the cheaper bare proxy on each measure.
c_many = max(c for _, c in stat)
def floor(key, c, best=min):
    return best(stat[(p, c)][key] for p in ("callback proxy", "cq proxy"))
g1, gm = stat[("tandem-gateway", 1)], stat[("tandem-gateway", c_many)]
d1, dm = stat[("direct", 1)], stat[("direct", c_many)]
lines = [
    ("front CPU per request, c=1 (us)", g1["front"], floor("front", 1)),
    (f"front CPU per request, c={c_many} (us)", gm["front"], floor("front", c_many)),
    ("added mean latency, c=1 (us)", g1["lat"] - d1["lat"], floor("lat", 1) - d1["lat"]),
    ("added p99 latency, c=1 (us)", g1["p99"] - d1["p99"], floor("p99", 1) - d1["p99"]),
    (f"throughput, c={c_many}, share of direct", gm["rps"] / dm["rps"], floor("rps", c_many, max) / dm["rps"]),
    ("front CPU per stream chunk (us)", chunk["tandem-gateway"], chunk["callback proxy"]),
]
print()
print("| measure | tandem-gateway | floor (cheaper bare proxy) | gateway / floor |")
print("|---|---|---|---|")
for name, g, f in lines:
    fmt = "{:.2f}" if "share" in name else "{:.0f}" if "chunk" not in name else "{:.1f}"
    ratio = g / f if f and f == f else float("nan")
    print(f"| {name} | {fmt.format(g)} | {fmt.format(f)} | {ratio:.2f} |")
PY
