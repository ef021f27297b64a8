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
# runs. TLS=1 runs every hop over TLS (scripts/make_dev_certs.sh), the bare proxies as the gateway
# (TLS to clients, mutual TLS to the worker), and writes proxy_floor_tls.md.
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
bench_require "$BENCH" "$FLOOR"

CERTS="" SUFFIX="" PROXY_TLS=()
if [[ -n ${TLS:-} ]]; then
  CERTS=$OUT_DIR/certs SUFFIX=_tls
  bash scripts/make_dev_certs.sh "$CERTS" >/dev/null
  PROXY_TLS=(--tls_cert="$CERTS/gateway/tls.crt" --tls_key="$CERTS/gateway/tls.key"
    --upstream_ca="$CERTS/gateway-client/ca.crt" --upstream_cert="$CERTS/gateway-client/tls.crt"
    --upstream_key="$CERTS/gateway-client/tls.key")
fi
bench_start_stack "$BUILD_DIR" "$OUT_DIR" "$CERTS"
bench_start callback_proxy "$OUT_DIR" "$FLOOR" --mode=callback --upstream="$WORKER_ADDR" \
  "${PROXY_TLS[@]}"
CALLBACK_ADDR=$BENCH_ADDR CALLBACK_PID=$BENCH_PID
bench_start cq_proxy "$OUT_DIR" "$FLOOR" --mode=cq --threads="$(nproc)" --upstream="$WORKER_ADDR" \
  "${PROXY_TLS[@]}"
CQ_ADDR=$BENCH_ADDR CQ_PID=$BENCH_PID
# The paced stack, for the per-chunk cost; its own log directory (the names repeat).
mkdir -p "$OUT_DIR/paced"
FAST_WORKER_ADDR=$WORKER_ADDR FAST_WORKER_PID=$WORKER_PID
FAST_GATEWAY_ADDR=$GATEWAY_ADDR FAST_GATEWAY_PID=$GATEWAY_PID
SYNTHETIC_OUTPUT_TOKENS=100000 \
  WORKER_FLAGS="--synthetic_time_scale=${CHUNK_TIME_SCALE:-0.02}" \
  bench_start_stack "$BUILD_DIR" "$OUT_DIR/paced" "$CERTS"
PACED_WORKER_ADDR=$WORKER_ADDR PACED_WORKER_PID=$WORKER_PID
PACED_GATEWAY_ADDR=$GATEWAY_ADDR PACED_GATEWAY_PID=$GATEWAY_PID
bench_start paced_proxy "$OUT_DIR/paced" "$FLOOR" --mode=callback --upstream="$PACED_WORKER_ADDR" \
  "${PROXY_TLS[@]}"
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
  local json="$OUT_DIR/proxy_floor${SUFFIX}_${series// /_}_c${c}_${API:-unary}${TOKENS:-16}_$round.json"
  # shellcheck disable=SC2086 # BENCH_CLIENT_TLS is a list of flags
  "$BENCH" $BENCH_CLIENT_TLS --target="$target" --address="$address" --model=qwen \
    --api="${API:-unary}" --max_tokens="${TOKENS:-16}" --concurrency="$c" --duration=2s \
    --warmup_requests=20 --cpu_pids="$pids" --json="$json" "$@" >/dev/null
  /usr/bin/python3 - "$json" "$series" "$round" <<'PY' >>"$OUT_DIR/proxy_floor$SUFFIX.rows"
import json, sys
run = json.load(open(sys.argv[1]))["runs"][0]
cpu = run["cpu_us_per_request"]
# Chunks per answer: each stream's gaps are its chunks but one.
chunks = run["chunk_gap_ms"]["count"] / run["ok"] + 1 if run["ok"] else 0
print("\t".join([sys.argv[2], str(run["concurrency"]), str(run["ok"]), str(run["requests_per_second"]),
                 str(run["e2e_ms"]["mean"]), str(run["e2e_ms"]["p99"]), str(cpu.get("front", -1)),
                 str(cpu.get("worker", -1)), " ".join(f"{k}={v}" for k, v in run["codes"].items()),
                 str(chunks), sys.argv[3]]))
PY
}

rm -f "$OUT_DIR/proxy_floor$SUFFIX.rows"
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

/usr/bin/python3 - "$OUT_DIR/proxy_floor$SUFFIX.rows" <<'PY' | tee "$OUT_DIR/proxy_floor$SUFFIX.md"
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

# Per chunk, per round: (CPU per 128-token stream - CPU per 16-token stream) / chunk difference.
def per_chunk(front, rnd):
    fs = {t: [f for (series, c), v in rows.items() if series == f"stream {t} {front}" for f in v
              if f[10] == rnd] for t in (16, 128)}
    if not fs[16] or not fs[128]:
        return float("nan")
    chunks = float(fs[128][0][9]) - float(fs[16][0][9])
    cpu = float(fs[128][0][6]) - float(fs[16][0][6])
    return cpu / chunks if chunks > 0.5 else float("nan")
def median(xs):
    xs = sorted(x for x in xs if x == x)
    if not xs:
        return float("nan")
    return xs[len(xs) // 2] if len(xs) % 2 else (xs[len(xs) // 2 - 1] + xs[len(xs) // 2]) / 2
rounds = sorted({f[10] for fs in rows.values() for f in fs}, key=int)
print()
print("| relaying one stream chunk, median of rounds | front CPU per chunk (us) |")
print("|---|---|")
chunk = {front: [per_chunk(front, r) for r in rounds] for front in ["callback proxy", "tandem-gateway"]}
for front, xs in chunk.items():
    print(f"| {front} | {median(xs):.1f} |")

# The gateway against the floor, round by round (the series of a round run back to back, so the
# ratios hold while the machine's speed drifts): the cheaper bare proxy of that round on each
# measure; the median ratio and its range.
c_many = max(c for _, c in stat)
def one(series, c, rnd):
    return next(f for f in rows[(series, c)] if f[10] == rnd)
def measures(rnd):
    out = {}
    for c in (1, c_many):
        d, g = one("direct", c, rnd), one("tandem-gateway", c, rnd)
        ps = [one(p, c, rnd) for p in ("callback proxy", "cq proxy")]
        out[f"front CPU per request, c={c} (us)"] = (float(g[6]), min(float(p[6]) for p in ps))
        if c == 1:
            for name, col in (("added mean latency, c=1 (us)", 4), ("added p99 latency, c=1 (us)", 5)):
                out[name] = ((float(g[col]) - float(d[col])) * 1000,
                             min(float(p[col]) - float(d[col]) for p in ps) * 1000)
        else:
            out[f"throughput, c={c}, share of direct"] = (
                float(g[3]) / float(d[3]), max(float(p[3]) for p in ps) / float(d[3]))
    cb, gw = per_chunk("callback proxy", rnd), per_chunk("tandem-gateway", rnd)
    out["front CPU per stream chunk (us)"] = (gw, cb)
    return out
per_round = [measures(r) for r in rounds]
print()
print("| measure, median of rounds | tandem-gateway | floor (cheaper bare proxy) | gateway / floor: median (range) |")
print("|---|---|---|---|")
for name in per_round[0]:
    gs = [m[name][0] for m in per_round]
    fl = [m[name][1] for m in per_round]
    ratios = [g / f for g, f in zip(gs, fl) if f and f == f and g == g]
    fmt = "{:.2f}" if "share" in name else "{:.1f}" if "chunk" in name else "{:.0f}"
    lo, hi = (min(ratios), max(ratios)) if ratios else (float("nan"), float("nan"))
    print(f"| {name} | {fmt.format(median(gs))} | {fmt.format(median(fl))} | "
          f"{median(ratios):.2f} ({lo:.2f}-{hi:.2f}) |")
PY
