#!/usr/bin/env bash
# The floor gRPC 1.51 puts under a relaying gateway, side by side in one run: the same synthetic
# worker called directly, through a bare callback-API proxy and through a bare completion-queue
# proxy (tests/bench/grpc_proxy_floor.cc: opaque bytes, nothing of Tandem), and through
# tandem-gateway; in alternating rounds, at concurrency 1 and with many calls in flight, with the
# CPU time per request of the proxy in front and of the worker (/proc/PID/stat).
#
#   bash scripts/bench_proxy_floor.sh [extra tandem-bench flags, e.g. --duration=2s]
#
# Prints a Markdown table and writes $OUT_DIR/proxy_floor.md (default build/bench). BUILD_DIR
# changes the build; ROUNDS (default 3) and IN_FLIGHT (default 128) the runs.
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

# run SERIES TARGET ADDRESS FRONT_PID CONCURRENCY [flags]: one tandem-bench run; its JSON.
run() {
  local series=$1 target=$2 address=$3 front=$4 c=$5
  shift 5
  local pids="worker=$WORKER_PID"
  [[ $front -gt 0 ]] && pids="front=$front,$pids"
  local json="$OUT_DIR/proxy_floor_${series// /_}_c${c}_$round.json"
  "$BENCH" --plaintext --target="$target" --address="$address" --model=qwen --api=unary \
    --max_tokens=16 --concurrency="$c" --duration=2s --warmup_requests=20 --cpu_pids="$pids" \
    --json="$json" "$@" >/dev/null
  /usr/bin/python3 - "$json" "$series" <<'PY' >>"$OUT_DIR/proxy_floor.rows"
import json, sys
run = json.load(open(sys.argv[1]))["runs"][0]
cpu = run["cpu_us_per_request"]
print("\t".join([sys.argv[2], str(run["concurrency"]), str(run["ok"]), str(run["requests_per_second"]),
                 str(run["e2e_ms"]["mean"]), str(run["e2e_ms"]["p99"]), str(cpu.get("front", -1)),
                 str(cpu.get("worker", -1)), " ".join(f"{k}={v}" for k, v in run["codes"].items())]))
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

/usr/bin/python3 - "$OUT_DIR/proxy_floor.rows" <<'PY' | tee "$OUT_DIR/proxy_floor.md"
import collections, sys
rows = collections.defaultdict(list)
for line in open(sys.argv[1]):
    f = line.rstrip("\n").split("\t")
    rows[(f[0], int(f[1]))].append(f)
def mean(xs):
    xs = [x for x in xs if x >= 0]
    return sum(xs) / len(xs) if xs else float("nan")
print("| series | in flight | req/s | mean latency (us) | p99 (us) | front CPU us/req | worker CPU us/req | codes |")
print("|---|---|---|---|---|---|---|---|")
for (series, c), fs in sorted(rows.items(), key=lambda kv: (kv[0][1], ["direct", "callback proxy", "cq proxy", "tandem-gateway"].index(kv[0][0]))):
    rps = mean([float(f[3]) for f in fs])
    lat = mean([float(f[4]) * 1000 for f in fs])
    p99 = mean([float(f[5]) * 1000 for f in fs])
    front = mean([float(f[6]) for f in fs])
    worker = mean([float(f[7]) for f in fs])
    codes = " ".join(sorted(set(f[8] for f in fs)))
    front_text = "-" if series == "direct" else f"{front:.0f}"
    print(f"| {series} | {c} | {rps:.0f} | {lat:.0f} | {p99:.0f} | {front_text} | {worker:.0f} | {codes} |")
PY
