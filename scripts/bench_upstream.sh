#!/usr/bin/env bash
# Tandem in front of an engine it does not run, against that engine direct: llama-server
# (scripts/build_llama_server.sh, the tiny test model) behind tandem-worker --engine=upstream and
# a gateway's OpenAI front, and the same llama-server called directly, with the same streamed
# chat request (tandem-bench --target=openai), in alternating rounds. This VM's speed drifts, so
# only the per-round differences and ratios count.
#
#   bash scripts/bench_upstream.sh
#
# Per round and path: TTFT p50, time per output token p50 and tokens/s at 1 stream and at
# STREAMS (8) streams; the worker's and gateway's CPU per request (/proc/PID/stat). ROUNDS (5),
# REQUESTS (200 per run), MAX_TOKENS (64), OUT_DIR (build/bench/upstream).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
OUT_DIR=${OUT_DIR:-$BUILD_DIR/bench/upstream}
ROUNDS=${ROUNDS:-5}
REQUESTS=${REQUESTS:-200}
MAX_TOKENS=${MAX_TOKENS:-64}
STREAMS=${STREAMS:-8}
mkdir -p "$OUT_DIR"
source scripts/bench_lib.sh
trap bench_cleanup EXIT
bench_require "$BUILD_DIR"/{gateway/tandem-gateway,workers/tandem-worker,tools/tandem-bench}
bench_start_llama llama "$OUT_DIR" -np "$STREAMS"
LLAMA=$LLAMA_ADDR
bench_start worker "$OUT_DIR" "$BUILD_DIR/workers/tandem-worker" --model=qwen --device=cpu \
  --engine=upstream --upstream_profile=llamacpp --upstream_url="http://$LLAMA" --plaintext \
  --listen=127.0.0.1:0 --metrics_listen=127.0.0.1:0 --log_level=warning
WORKER=$BENCH_ADDR WORKER_PID=$BENCH_PID
cat >"$OUT_DIR/qwen_only.yaml" <<'YAML'
schema: 1
version: bench
models: {qwen: {}}
classes: [accuracy_critical]
default_class: accuracy_critical
rules:
  - name: all
    action: {route: qwen}
YAML
bench_start gateway "$OUT_DIR" "$BUILD_DIR/gateway/tandem-gateway" --workers="qwen=$WORKER" \
  --policy="$OUT_DIR/qwen_only.yaml" \
  --listen=127.0.0.1:0 --metrics_listen=127.0.0.1:0 --http_listen=127.0.0.1:0 \
  $BENCH_GATEWAY_DEV_FLAGS --log_level=warning
GATEWAY_PID=$BENCH_PID
HTTP=$(sed -n 's/.* http=\([^ ]*\).*/\1/p' "$OUT_DIR/gateway.out" | head -1)

run() {  # run NAME ADDRESS CONCURRENCY
  "$BUILD_DIR/tools/tandem-bench" --target=openai --address="$2" --model=qwen \
    --max_tokens="$MAX_TOKENS" --concurrency="$3" --requests="$REQUESTS" --warmup_requests=20 \
    --cpu_pids="worker=$WORKER_PID,gateway=$GATEWAY_PID" --json="$OUT_DIR/$1.json" >/dev/null
}
for r in $(seq "$ROUNDS"); do
  for c in 1 "$STREAMS"; do
    run "direct_c${c}_r$r" "$LLAMA" "$c"
    run "tandem_c${c}_r$r" "$HTTP" "$c"
  done
  echo "[bench_upstream] round $r of $ROUNDS" >&2
done

/usr/bin/python3 - "$OUT_DIR" "$ROUNDS" "$STREAMS" "$MAX_TOKENS" <<'PY'
import json, statistics, sys
out, rounds, streams, max_tokens = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
def load(name): return json.load(open(f"{out}/{name}.json"))["runs"][0]
print(f"| streams | path | TTFT p50 ms | TPOT p50 ms | tokens/s | worker CPU us/req | gateway CPU us/req |")
print("|---|---|---|---|---|---|---|")
summary = []
for c in ["1", streams]:
    rows = {"direct": [], "tandem": []}
    for r in range(1, rounds + 1):
        for p in rows: rows[p].append(load(f"{p}_c{c}_r{r}"))
    med = lambda p, f: statistics.median(f(x) for x in rows[p])
    for p in ("direct", "tandem"):
        cpu = lambda key: med(p, lambda x: x["cpu_us_per_request"].get(key) or 0)
        print(f"| {c} | {p} | {med(p, lambda x: x['ttft_ms']['p50']):.2f} | "
              f"{med(p, lambda x: x['tpot_ms']['p50']):.3f} | {med(p, lambda x: x['tokens_per_second']):.0f} | "
              f"{cpu('worker') if p == 'tandem' else '':} | {cpu('gateway') if p == 'tandem' else ''} |")
    ttft = statistics.median(t["ttft_ms"]["p50"] - d["ttft_ms"]["p50"] for d, t in zip(rows["direct"], rows["tandem"]))
    tpot = statistics.median(t["tpot_ms"]["p50"] / d["tpot_ms"]["p50"] for d, t in zip(rows["direct"], rows["tandem"]))
    tps = statistics.median(t["tokens_per_second"] / d["tokens_per_second"] for d, t in zip(rows["direct"], rows["tandem"]))
    wcpu = statistics.median((t["cpu_us_per_request"].get("worker") or 0) for t in rows["tandem"])
    summary.append(f"{c} stream(s): TTFT p50 added {ttft:+.2f} ms, TPOT x{tpot:.3f}, tokens/s x{tps:.3f}, "
                   f"worker CPU {wcpu:.0f} us/request ({wcpu / max_tokens:.1f} us/chunk)")
print()
for s in summary: print("- " + s)
PY
