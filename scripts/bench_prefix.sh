#!/usr/bin/env bash
# Prefix caching and prefix-aware worker choice, measured side by side in one run (tandem-bench
# --preset=prefix): qwen workers (the native CPU engine on a small random-weights model,
# written once into the log directory) behind four gateways that differ only in how they pick a
# worker or in whether the workers cache:
#   prefix          --endpoint_pick=prefix, caches on
#   least_loaded    --endpoint_pick=least_outstanding, caches on
#   round_robin     --endpoint_pick=round_robin, caches on
#   prefix_no_cache --endpoint_pick=prefix, two other workers with --prefix_cache_bytes=0
# and three workloads on each (chat turns under a shared system prompt, agent loops resending
# their history, unshared prompts; tools/bench/prefix_preset.h).
#   bash scripts/bench_prefix.sh [BUILD_DIR]      # about 5 minutes on 2 cores
# PREFIX_HIDDEN / PREFIX_LAYERS size the model (default 256 / 4); PREFIX_CACHE_BYTES is each
# caching worker's --prefix_cache_bytes (default 1 GiB: room for everything; 12582912 puts the
# default workloads under pressure: a worker then holds about two live conversations);
# PREFIX_WORKERS is the number of qwen workers of each kind (default 2), PREFIX_BLOCK their
# --prefix_block_tokens (default 256); PREFIX_ARGS adds tandem-bench flags (e.g.
# "--prefix_conversations=4", "--prefix_private_words=1500": each conversation its own document).
# Results: stdout and $LOGDIR/prefix.json.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
source scripts/bench_lib.sh
LOGDIR=${LOGDIR:-$(mktemp -d /tmp/tandem-bench-prefix.XXXXXX)}
trap bench_cleanup EXIT

MODEL=$LOGDIR/qwen-small
if [[ ! -f $MODEL/model.safetensors ]]; then
  "$BUILD/tools/tandem-make-checkpoint" --arch=qwen3_5_moe --out="$MODEL" \
    --tokenizer=tests/tokenizer/qwen3/tokenizer.json --hidden="${PREFIX_HIDDEN:-256}" \
    --layers="${PREFIX_LAYERS:-4}" --seed=7 >/dev/null
fi
# One matrix thread per worker: the two workers of a pair then share the 2 cores fairly.
native=(--engine=native --checkpoint="$MODEL" --native_threads=1 --memory_budget=2147483648
  --listen=127.0.0.1:0 --metrics_listen=127.0.0.1:0 --plaintext --log_level=warning)
start_worker() {  # NAME EXTRA...: sets the address in $BENCH_ADDR
  local name=$1
  shift
  bench_start "$name" "$LOGDIR" "$BUILD/workers/tandem-worker" --model=qwen --device=cpu \
    "${native[@]}" "$@"
}
cache=(--prefix_cache_bytes="${PREFIX_CACHE_BYTES:-1073741824}"
  --prefix_block_tokens="${PREFIX_BLOCK:-256}")
cached="" uncached=""
for i in $(seq "${PREFIX_WORKERS:-2}"); do
  start_worker "cached-$i" "${cache[@]}" && cached+="qwen=$BENCH_ADDR,"
  start_worker "uncached-$i" --prefix_cache_bytes=0 && uncached+="qwen=$BENCH_ADDR,"
done
# The default policy names nemotron too; every request here pins qwen.
bench_start nemotron "$LOGDIR" "$BUILD/workers/tandem-worker" --model=nemotron --engine=synthetic \
  --device=cpu --synthetic_time_scale=0 --listen=127.0.0.1:0 --metrics_listen=127.0.0.1:0 \
  --plaintext && NEMO=$BENCH_ADDR

targets=()
start_gateway() {  # LABEL WORKERS PICK
  bench_start "gateway-$1" "$LOGDIR" "$BUILD/gateway/tandem-gateway" \
    --workers="$2nemotron=$NEMO" --endpoint_pick="$3" \
    --listen=127.0.0.1:0 --metrics_listen=127.0.0.1:0 $BENCH_GATEWAY_DEV_FLAGS \
    --log_level=warning
  targets+=("$1=$BENCH_ADDR")
}
start_gateway prefix "$cached" prefix
start_gateway least_loaded "$cached" least_outstanding
start_gateway round_robin "$cached" round_robin
start_gateway prefix_no_cache "$uncached" prefix

joined=$(IFS=';'; echo "${targets[*]}")
"$BUILD/tools/tandem-bench" --preset=prefix --prefix_targets="$joined" --model=qwen \
  --json="$LOGDIR/prefix.json" ${PREFIX_ARGS:-}
echo "logs and prefix.json: $LOGDIR" >&2
