#!/usr/bin/env bash
# Bounded soak test: steady mixed load through the gateway for SOAK_SECONDS while one worker
# replica is SIGKILLed and restarted on its port every SOAK_KILL_EVERY seconds, one is hung
# (SIGSTOP, then SIGCONT after SOAK_HANG_SECONDS) every SOAK_HANG_EVERY seconds, and the policy file
# is rewritten (new version) every SOAK_RELOAD_EVERY seconds. Checks, and exits 1 if any fails:
#   - nothing crashed: the gateway, every worker not being restarted and every load generator
#     stay alive; the gateway exits 0 on SIGTERM at the end;
#   - every restarted worker is ready again in the gateway (tandem_gateway_endpoint_ready) and
#     every policy rewrite is live (tandem_policy_info{version}) within SOAK_CHECK_TIMEOUT s;
#   - the gateway's RSS grew at most SOAK_RSS_BOUND_MIB from the end of warm-up
#     (SOAK_WARMUP_SECONDS: 20% of the run, at least 60 s, at most half of it) to the end of the
#     load. Warm-up must outlast the policy's longest signal window: the gateway keeps every
#     worker's scrapes for that window (30 s in default.yaml, ~20 MiB for 4 workers), so RSS
#     climbs for the first ~30 s by design, then stays flat;
#   - every request is accounted for: sent == sum of the status codes the clients saw ==
#     sum of the gateway's tandem_gateway_requests_total, code by code; every OK answer has all
#     its tokens; failures are only UNAVAILABLE / RESOURCE_EXHAUSTED; those the policy shed
#     on purpose (RESOURCE_EXHAUSTED with a retry hint, tandem_gateway_shed_requests_total) are
#     at most SOAK_MAX_SHED_PCT % of the requests (how many depends on the machine's speed), all
#     others at most SOAK_MAX_FAILURE_PCT %;
#   - every OK answer has the right text: requests are greedy, so each generator's answers
#     (one prompt each) must all equal its answers that had no retry or failover
#     (tandem-bench --check_text); a mid-stream failover's answer included.
#
# With SOAK_UPSTREAM=1 (the default) a third model, "tiny", is served by two upstream workers
# (tandem-worker --engine=upstream), each in front of its own llama-server (built by
# scripts/build_llama_server.sh, serving the tiny test model of tests/support/make_tiny_gguf.py),
# and a fifth generator streams to it at SOAK_UPSTREAM_RATE req/s. Its replicas take their turn
# in the kills (the worker is killed and restarted; its engine keeps running) and the hangs (the
# engine, not the worker, is stopped: the worker stays connected while its engine is silent), and
# every check above covers its requests too. SOAK_UPSTREAM=0 leaves it out.
#
#   bash scripts/soak.sh                     # 300 s at 200 req/s
#   SOAK_SECONDS=600 bash scripts/soak.sh    # what docs/development.md reports (CI runs 120 s, the shortest that is not a smoke run)
#
# Runs under 120 s are smoke runs: their warm-up ends before the signal window fills, so the RSS
# check would see that growth. Other knobs: SOAK_RATE, SOAK_KILL_EVERY, SOAK_RELOAD_EVERY,
# SOAK_WARMUP_SECONDS, SOAK_RSS_BOUND_MIB (16), SOAK_MAX_FAILURE_PCT (1), SOAK_MAX_SHED_PCT (5),
# SOAK_MAX_TOKENS (32),
# SOAK_TIME_SCALE, SOAK_CHECK_TIMEOUT (10 s), SOAK_POLICY (policies/default.yaml), BUILD_DIR.
#
# Load: four tandem-bench processes (open loop, Poisson), each at SOAK_RATE/4: Generate and
# GenerateStream routed by the policy, GenerateStream pinned to qwen, Generate pinned to
# nemotron. Workers: 2 synthetic replicas per model at realistic step times. Results (summary,
# RSS samples, the load generators' JSON, every log) in OUT_DIR (default $BUILD_DIR/soak),
# replacing a previous run's. Every process started here is stopped on exit.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-${TANDEM_BUILD_DIR:-build}}
OUT_DIR=${OUT_DIR:-$BUILD_DIR/soak}
SOAK_SECONDS=${SOAK_SECONDS:-300}
SOAK_RATE=${SOAK_RATE:-200}                 # requests per second, all four generators together
SOAK_KILL_EVERY=${SOAK_KILL_EVERY:-20}      # seconds between worker kills
SOAK_RELOAD_EVERY=${SOAK_RELOAD_EVERY:-15}  # seconds between policy rewrites
SOAK_HANG_EVERY=${SOAK_HANG_EVERY:-40}      # seconds between worker hangs (SIGSTOP ... SIGCONT)
SOAK_HANG_SECONDS=${SOAK_HANG_SECONDS:-3}   # how long a hung worker stays stopped
# The gateway's --stall_timeout_min: the simulator has no long prefills that pause a batch, so
# the soak can detect a hang sooner than the default that real GPUs need.
SOAK_STALL_TIMEOUT=${SOAK_STALL_TIMEOUT:-2s}
SOAK_WARMUP_SECONDS=${SOAK_WARMUP_SECONDS:-$(((_w = SOAK_SECONDS / 5) < 60 ? (SOAK_SECONDS / 2 < 60 ? SOAK_SECONDS / 2 : 60) : _w))}
SOAK_RSS_BOUND_MIB=${SOAK_RSS_BOUND_MIB:-16}
SOAK_MAX_FAILURE_PCT=${SOAK_MAX_FAILURE_PCT:-1}
SOAK_MAX_SHED_PCT=${SOAK_MAX_SHED_PCT:-5}
SOAK_MAX_TOKENS=${SOAK_MAX_TOKENS:-32}
SOAK_TIME_SCALE=${SOAK_TIME_SCALE:-1}       # synthetic step times (1: the models' on an H200)
SOAK_CHECK_TIMEOUT=${SOAK_CHECK_TIMEOUT:-10}
SOAK_POLICY=${SOAK_POLICY:-policies/default.yaml}
SOAK_UPSTREAM=${SOAK_UPSTREAM:-1}
SOAK_UPSTREAM_RATE=${SOAK_UPSTREAM_RATE:-8}  # requests per second to the upstream workers

for v in SOAK_SECONDS SOAK_RATE SOAK_KILL_EVERY SOAK_RELOAD_EVERY SOAK_HANG_EVERY SOAK_HANG_SECONDS SOAK_WARMUP_SECONDS \
  SOAK_RSS_BOUND_MIB SOAK_MAX_TOKENS SOAK_CHECK_TIMEOUT SOAK_UPSTREAM_RATE; do
  [[ ${!v} =~ ^[0-9]+$ && ${!v} -gt 0 ]] || { echo "soak: $v=${!v}: a positive integer" >&2; exit 2; }
done
[[ $SOAK_UPSTREAM == [01] ]] || { echo "soak: SOAK_UPSTREAM=$SOAK_UPSTREAM: 0 or 1" >&2; exit 2; }
for bin in workers/tandem-worker gateway/tandem-gateway tools/tandem-bench; do
  [[ -x $BUILD_DIR/$bin ]] || { echo "soak: missing $BUILD_DIR/$bin: build it first" >&2; exit 1; }
done
mkdir -p "$OUT_DIR"
OUT_DIR=$(cd "$OUT_DIR" && pwd)
rm -rf "${OUT_DIR:?}/bin"
rm -f "$OUT_DIR"/{summary.txt,rss.tsv,restarts.log,policy.yaml,gateway.*,worker-*,load-*,llama-*}
# The run uses a copy of the binaries (removed on exit): a rebuild of $BUILD_DIR during the run
# (a worker restart execs the binary again) must not swap in another version halfway.
mkdir -p "$OUT_DIR/bin"
cp "$BUILD_DIR/workers/tandem-worker" "$BUILD_DIR/gateway/tandem-gateway" \
  "$BUILD_DIR/tools/tandem-bench" "$OUT_DIR/bin/"
WORKER_BIN=$OUT_DIR/bin/tandem-worker
GATEWAY_BIN=$OUT_DIR/bin/tandem-gateway
BENCH_BIN=$OUT_DIR/bin/tandem-bench

# Transport and authentication flags, in one place. Both servers refuse to start without TLS
# unless told --plaintext; the gateway also needs --worker_plaintext (its calls to the workers)
# and --allow_unauthenticated (or a --tenants file). Each of the gateway, the workers and the
# load generators gets every flag of SECURITY_FLAGS that its --helpfull lists, so this script
# runs with binaries from before and after that change.
SECURITY_FLAGS=(--plaintext --worker_plaintext --allow_unauthenticated)
security_flags_for() {  # BINARY: the SECURITY_FLAGS it knows, one a line
  local help f
  help=$("$1" --helpfull 2>&1 || true)
  for f in "${SECURITY_FLAGS[@]}"; do
    grep -qE -- "^ *$f( |=|$)" <<<"$help" && echo "$f"
  done
  return 0
}
mapfile -t SECURITY_WORKER_FLAGS < <(security_flags_for "$WORKER_BIN")
mapfile -t SECURITY_GATEWAY_FLAGS < <(security_flags_for "$GATEWAY_BIN")
mapfile -t SECURITY_BENCH_FLAGS < <(security_flags_for "$BENCH_BIN")

source scripts/bench_lib.sh
trap 'bench_cleanup; rm -rf "${OUT_DIR:?}/bin"' EXIT

now_ms() { date +%s%3N; }
log() { printf '[soak %6.1fs] %s\n' "$(awk -v a="$(now_ms)" -v b="${T0:-$(now_ms)}" 'BEGIN{print (a-b)/1000}')" "$*"; }
FAILURES=()
fail() { FAILURES+=("$*"); log "CHECK FAILED: $*"; }
# GET /metrics of the gateway with bash's /dev/tcp (no curl on a fresh Debian): the body.
metrics() {
  timeout 5 bash -c 'exec 3<>"/dev/tcp/${1%:*}/${1##*:}" || exit 1
    printf "GET /metrics HTTP/1.0\r\nHost: %s\r\nConnection: close\r\n\r\n" "$1" >&3
    cat <&3' _ "$GATEWAY_METRICS" 2>/dev/null | tr -d '\r' | sed '1,/^$/d'
}
# The tandem-bench JSON of a plain run holds one run; these read its members without jq.
json_num() { grep -o "\"$2\":[0-9.eE+-]*" "$1" | head -1 | sed 's/.*://'; }   # FILE KEY
json_codes() { grep -o '"codes":{[^}]*}' "$1" | head -1 | sed 's/"codes":{//; s/}//' |
  tr ',' '\n' | sed -n 's/^"\([^"]*\)":\([0-9]*\)$/\1 \2/p'; }                # FILE: CODE N lines
json_ms() { grep -o "\"$2\":{[^}]*}" "$1" | head -1 | grep -o "\"$3\":[0-9.eE+-]*" |
  sed 's/.*://' | awk '{printf "%.0f", $1}'; }                                   # FILE OBJ KEY
# metric_sum NAME [LABEL_REGEX]: sum of every sample of NAME (whose labels match the regex).
metric_sum() {
  metrics | awk -v name="$1" -v re="${2:-}" '
    $1 !~ /^#/ { n = $1; sub(/\{.*/, "", n); if (n == name && (re == "" || $1 ~ re)) s += $NF }
    END { printf "%.0f\n", s }'
}
rss_kb() { awk '/^VmRSS:/ {print $2}' "/proc/$1/status" 2>/dev/null || echo 0; }

# --- The stack: 2 replicas per model, then the gateway with a copy of the policy. ---
# --synthetic_output_tokens: answers longer than max_tokens, so every OK answer has exactly
# max_tokens tokens (and the token check above is exact). A failover's continuation resumes the
# same answer (the simulator continues its own partial answer word for word).
WORKER_COMMON=(--engine=synthetic --device=cpu --synthetic_time_scale="$SOAK_TIME_SCALE"
  --synthetic_output_tokens=$((SOAK_MAX_TOKENS * 4)) --log_level=warning
  "${SECURITY_WORKER_FLAGS[@]}")
# The upstream replicas ("tiny-*") front their own llama-server (LLAMA_ADDRS), started once.
UPSTREAM_COMMON=(--engine=upstream --upstream_profile=llamacpp --device=cpu
  --max_context_tokens=4096 --max_output_tokens=1024 --upstream_health_interval=100ms --upstream_metrics_interval=100ms --log_level=warning
  "${SECURITY_WORKER_FLAGS[@]}")
declare -A WPID WADDR WMODEL WSTARTS LLAMA_PIDS LLAMA_ADDRS
# The order is the kills' and hangs' turn: in 120 s both reach an upstream replica.
REPLICAS=(qwen-a nemotron-a qwen-b nemotron-b)
((SOAK_UPSTREAM)) && REPLICAS=(qwen-a tiny-a nemotron-a qwen-b nemotron-b tiny-b)
start_worker() {  # NAME LISTEN
  local name=$1 listen=$2 n=$((${WSTARTS[$1]:-0} + 1)) flags=("${WORKER_COMMON[@]}")
  WSTARTS[$name]=$n
  [[ $name == tiny-* ]] && flags=("${UPSTREAM_COMMON[@]}" --upstream_url="http://${LLAMA_ADDRS[$name]}")
  : >"$OUT_DIR/worker-$name.$n.out"  # bench_start may read it before the child opens it
  bench_start "worker-$name.$n" "$OUT_DIR" "$WORKER_BIN" --model="${name%-*}" \
    --listen="$listen" --metrics_listen=127.0.0.1:0 "${flags[@]}" || return 1
  WPID[$name]=$BENCH_PID
  WADDR[$name]=$BENCH_ADDR
  WMODEL[$name]=${name%-*}
}
# What a hang stops: the worker, or for an upstream replica its engine.
hang_pid() { [[ $1 == tiny-* ]] && echo "${LLAMA_PIDS[$1]}" || echo "${WPID[$1]}"; }
ENTRIES=()
for name in "${REPLICAS[@]}"; do
  if [[ $name == tiny-* ]]; then
    bench_start_llama "llama-$name" "$OUT_DIR" -np 4
    LLAMA_PIDS[$name]=$LLAMA_PID
    LLAMA_ADDRS[$name]=$LLAMA_ADDR
  fi
  start_worker "$name" 127.0.0.1:0
  ENTRIES+=("${name%-*}=${WADDR[$name]}")
done

POLICY_FILE=$OUT_DIR/policy.yaml
POLICY_SRC_DIR=$(cd "$(dirname "$SOAK_POLICY")" && pwd)
BASE_VERSION=$(sed -n 's/^version: *//p' "$SOAK_POLICY")
[[ -n $BASE_VERSION ]] || { echo "soak: no version: line in $SOAK_POLICY" >&2; exit 1; }
# write_policy VERSION: the policy with another version (and the classifier path made absolute,
# since relative paths are from the policy file's folder), replaced atomically.
write_policy() {
  local tiny=()
  ((SOAK_UPSTREAM)) && tiny=(-e '/^models:/a\  tiny: {}')
  sed -e "s|^version: .*|version: $1|" "${tiny[@]}" \
    -e "s|^\( *model: *\)\(\.\./[^ ]*\)|\1$POLICY_SRC_DIR/\2|" "$SOAK_POLICY" >"$POLICY_FILE.tmp"
  mv -f "$POLICY_FILE.tmp" "$POLICY_FILE"
}
write_policy "$BASE_VERSION-soak-0"
WORKERS_FLAG=$(IFS=,; echo "${ENTRIES[*]}")
: >"$OUT_DIR/gateway.out"
bench_start gateway "$OUT_DIR" "$GATEWAY_BIN" --workers="$WORKERS_FLAG" \
  --policy="$POLICY_FILE" --listen=127.0.0.1:0 --metrics_listen=127.0.0.1:0 \
  --stall_timeout_min="$SOAK_STALL_TIMEOUT" --log_level=warning "${SECURITY_GATEWAY_FLAGS[@]}"
GATEWAY_ADDR=$BENCH_ADDR
GATEWAY_PID=$BENCH_PID
GATEWAY_METRICS=$(sed -n 's/.*listening grpc=[^ ]* metrics=\([^ ]*\).*/\1/p' "$OUT_DIR/gateway.out" | head -1)

# wait_for SECONDS CMD...: polls CMD every 50 ms until it succeeds; fails after SECONDS.
wait_for() {
  local deadline=$(($(now_ms) + $1 * 1000))
  shift
  until "$@"; do
    (($(now_ms) < deadline)) || return 1
    sleep 0.05
  done
}
endpoint_ready() {  # ADDRESS
  [[ $(metric_sum tandem_gateway_endpoint_ready "endpoint=\"$1\"") == 1 ]]
}
# Ready and its breaker closed: a replica just resumed from a hang can be ready yet still
# ejected (the gateway readmits it after its ejection), and then takes no traffic.
endpoint_usable() {  # ADDRESS
  endpoint_ready "$1" &&
    [[ $(metric_sum tandem_gateway_endpoint_breaker_state "endpoint=\"$1\"") == 0 ]]
}
policy_live() {  # VERSION
  [[ $(metric_sum tandem_policy_info "version=\"$1\"") == 1 ]]
}
for name in "${REPLICAS[@]}"; do
  wait_for "$SOAK_CHECK_TIMEOUT" endpoint_ready "${WADDR[$name]}" ||
    { echo "soak: worker $name (${WADDR[$name]}) never ready in the gateway" >&2; exit 1; }
done
wait_for "$SOAK_CHECK_TIMEOUT" policy_live "$BASE_VERSION-soak-0" ||
  { echo "soak: the gateway did not load $POLICY_FILE" >&2; exit 1; }

echo "soak: ${SOAK_SECONDS}s at ${SOAK_RATE} req/s, kill a worker every ${SOAK_KILL_EVERY}s," \
  "rewrite the policy every ${SOAK_RELOAD_EVERY}s; gateway $GATEWAY_ADDR (pid $GATEWAY_PID," \
  "metrics $GATEWAY_METRICS); security flags: gateway '${SECURITY_GATEWAY_FLAGS[*]}'," \
  "worker '${SECURITY_WORKER_FLAGS[*]}', load '${SECURITY_BENCH_FLAGS[*]}'; out $OUT_DIR" >&2

# --- Load: four open-loop generators, one quarter of the rate each. ---
declare -A GEN_PID
RATE_EACH=$(awk -v r="$SOAK_RATE" 'BEGIN{printf "%g", r / 4}')
LOADS=("unary-routed:unary::$RATE_EACH" "stream-routed:stream::$RATE_EACH"
  "stream-qwen:stream:qwen:$RATE_EACH" "unary-nemotron:unary:nemotron:$RATE_EACH")
((SOAK_UPSTREAM)) && LOADS+=("stream-tiny:stream:tiny:$SOAK_UPSTREAM_RATE")
seed=1
for spec in "${LOADS[@]}"; do
  IFS=: read -r gname api model rate <<<"$spec"
  "$BENCH_BIN" "${SECURITY_BENCH_FLAGS[@]}" --target=gateway --address="$GATEWAY_ADDR" --api="$api" --model="$model" \
    --rate="$rate" --arrival=poisson --seed=$seed --duration="${SOAK_SECONDS}s" \
    --warmup_requests=0 --prompt=short --max_tokens="$SOAK_MAX_TOKENS" --timeout=30s --check_text \
    --json="$OUT_DIR/load-$gname.json" >"$OUT_DIR/load-$gname.out" 2>"$OUT_DIR/load-$gname.log" &
  GEN_PID[$gname]=$!
  BENCH_PIDS+=($!)
  seed=$((seed + 1))
done

# --- The run: one tick a second; RSS sample, liveness, faults and reloads when due. ---
T0=$(now_ms)
END_MS=$((T0 + SOAK_SECONDS * 1000))
WARM_MS=$((T0 + SOAK_WARMUP_SECONDS * 1000))
NEXT_KILL=$((T0 + SOAK_KILL_EVERY * 1000))
NEXT_RELOAD=$((T0 + SOAK_RELOAD_EVERY * 1000))
NEXT_HANG=$((T0 + SOAK_HANG_EVERY * 1000))
HUNG="" HANG_END=0 HANGS=0 HANG_VICTIM=1
RSS_FILE=$OUT_DIR/rss.tsv
echo -e "seconds\trss_kb" >"$RSS_FILE"
RSS_START=$(rss_kb "$GATEWAY_PID")
RSS_WARM="" RSS_END="" RSS_PEAK=$RSS_START
RESTARTS=0 RELOADS=0 VICTIM=0 RESTART_MS_MAX=0 RELOAD_MS_MAX=0
GEN_DEAD=""
while (($(now_ms) < END_MS)); do
  t=$(now_ms)
  if ! kill -0 "$GATEWAY_PID" 2>/dev/null; then fail "the gateway died"; break; fi
  rss=$(rss_kb "$GATEWAY_PID")
  echo -e "$(((t - T0) / 1000))\t$rss" >>"$RSS_FILE"
  ((rss > RSS_PEAK)) && RSS_PEAK=$rss
  [[ -z $RSS_WARM ]] && ((t >= WARM_MS)) && RSS_WARM=$rss && log "warm-up over: RSS $((rss / 1024)) MiB"
  RSS_END=$rss
  for name in "${REPLICAS[@]}"; do
    kill -0 "${WPID[$name]}" 2>/dev/null || fail "worker $name (pid ${WPID[$name]}) died unasked"
    [[ -z ${LLAMA_PIDS[$name]:-} ]] || kill -0 "${LLAMA_PIDS[$name]}" 2>/dev/null ||
      fail "llama-server of $name (pid ${LLAMA_PIDS[$name]}) died"
  done
  for gname in "${!GEN_PID[@]}"; do
    if ! kill -0 "${GEN_PID[$gname]}" 2>/dev/null && [[ $GEN_DEAD != *" $gname"* ]]; then
      GEN_DEAD+=" $gname"
      fail "load generator $gname exited before the end of the run (see $OUT_DIR/load-$gname.log)"
    fi
  done
  ((${#FAILURES[@]} > 0)) && break
  # A hang: one replica stopped (alive, connected, silent) for SOAK_HANG_SECONDS. The gateway
  # must fail its streams over (stall detection) and eject it; every answer must still be whole
  # and equal to its fault-free text.
  if [[ -n $HUNG ]] && ((t >= HANG_END)); then
    kill -CONT "$(hang_pid "$HUNG")"
    log "resumed $HUNG (${WADDR[$HUNG]}) with SIGCONT after ${SOAK_HANG_SECONDS}s stopped"
    HUNG=""
  elif [[ -z $HUNG ]] && ((t >= NEXT_HANG)); then
    NEXT_HANG=$((NEXT_HANG + SOAK_HANG_EVERY * 1000))
    name=${REPLICAS[$((HANG_VICTIM % ${#REPLICAS[@]}))]}
    HANG_VICTIM=$((HANG_VICTIM + 1))
    sibling_ready=1
    for other in "${REPLICAS[@]}"; do
      if [[ $other != "$name" && ${WMODEL[$other]} == "${WMODEL[$name]}" ]] &&
        ! endpoint_usable "${WADDR[$other]}"; then sibling_ready=0; fi
    done
    if ((sibling_ready)); then
      kill -STOP "$(hang_pid "$name")"
      HUNG=$name HANG_END=$((t + SOAK_HANG_SECONDS * 1000)) HANGS=$((HANGS + 1))
      what=worker
      [[ $name == tiny-* ]] && what="its llama-server"
      log "stopped $name (${WADDR[$name]}): $what with SIGSTOP for ${SOAK_HANG_SECONDS}s"
    fi
  fi
  if ((t >= NEXT_KILL)) && [[ -z $HUNG ]]; then
    NEXT_KILL=$((NEXT_KILL + SOAK_KILL_EVERY * 1000))
    name=${REPLICAS[$((VICTIM % ${#REPLICAS[@]}))]}
    VICTIM=$((VICTIM + 1))
    addr=${WADDR[$name]}
    # The other replica of the model must be usable, or the kill would fail the model, not test it.
    for other in "${REPLICAS[@]}"; do
      if [[ $other != "$name" && ${WMODEL[$other]} == "${WMODEL[$name]}" ]] &&
        ! wait_for "$SOAK_CHECK_TIMEOUT" endpoint_usable "${WADDR[$other]}"; then
        fail "before killing $name: its sibling $other is not ready in the gateway"
      fi
    done
    kill -KILL "${WPID[$name]}"
    wait "${WPID[$name]}" 2>/dev/null || true
    k=$(now_ms)
    # Same port: gRPC binds with SO_REUSEADDR; a refused bind (port taken meanwhile) is retried.
    for attempt in 1 2 3; do
      start_worker "$name" "$addr" 2>>"$OUT_DIR/restarts.log" && break
      [[ $attempt == 3 ]] && { fail "worker $name did not restart on $addr"; break; }
    done
    ((${#FAILURES[@]} > 0)) && break
    if wait_for "$SOAK_CHECK_TIMEOUT" endpoint_ready "$addr"; then
      RESTARTS=$((RESTARTS + 1))
      d=$(($(now_ms) - k))
      ((d > RESTART_MS_MAX)) && RESTART_MS_MAX=$d
      log "killed $name ($addr) with SIGKILL; restarted, ready in the gateway after ${d} ms"
    else
      fail "restarted worker $name ($addr) not ready in the gateway after ${SOAK_CHECK_TIMEOUT}s"
      break
    fi
  fi
  if ((t >= NEXT_RELOAD)); then
    NEXT_RELOAD=$((NEXT_RELOAD + SOAK_RELOAD_EVERY * 1000))
    version="$BASE_VERSION-soak-$((RELOADS + 1))"
    r=$(now_ms)
    write_policy "$version"
    if wait_for "$SOAK_CHECK_TIMEOUT" policy_live "$version"; then
      RELOADS=$((RELOADS + 1))
      d=$(($(now_ms) - r))
      ((d > RELOAD_MS_MAX)) && RELOAD_MS_MAX=$d
      log "policy rewritten as version $version: live after ${d} ms"
    else
      fail "policy version $version not live after ${SOAK_CHECK_TIMEOUT}s"
      break
    fi
  fi
  next=$((t + 1000))
  left=$((next - $(now_ms)))
  ((left > 0)) && sleep "$(awk -v l="$left" 'BEGIN{print l / 1000}')"
done
[[ -n $HUNG ]] && kill -CONT "$(hang_pid "$HUNG")" 2>/dev/null
RSS_WARM=${RSS_WARM:-$RSS_END}
ABORTED=$((${#FAILURES[@]} > 0))

# --- The end: generators finish their in-flight calls and write their results. ---
GEN_RC=0
for gname in "${!GEN_PID[@]}"; do
  if ((ABORTED)); then kill -TERM "${GEN_PID[$gname]}" 2>/dev/null || true; fi
  wait "${GEN_PID[$gname]}" || { GEN_RC=$?; ((ABORTED)) || fail "load generator $gname exited $GEN_RC"; }
done
RSS_DRAINED=$(rss_kb "$GATEWAY_PID")

# Client side: sent (issued) and codes, from every generator's JSON.
declare -A CLIENT_CODES
SENT=0 TOKENS_SHORT=0 TEXT_CHECKED=0 TEXT_FAILOVERS=0 TEXT_MISMATCHES=0 TEXT_UNREFERENCED=0
for spec in "${LOADS[@]}"; do
  gname=${spec%%:*}
  json=$OUT_DIR/load-$gname.json
  [[ -s $json ]] || { ((ABORTED)) || fail "no results from load generator $gname"; continue; }
  issued=$(json_num "$json" issued)
  SENT=$((SENT + issued))
  while read -r code n; do
    CLIENT_CODES[$code]=$((${CLIENT_CODES[$code]:-0} + n))
  done < <(json_codes "$json")
  # Every OK answer carries exactly max_tokens tokens (the synthetic engine runs to the limit).
  short=$(($(json_num "$json" ok) * SOAK_MAX_TOKENS - $(json_num "$json" completion_tokens)))
  TOKENS_SHORT=$((TOKENS_SHORT + short))
  # Every OK answer's text against the generator's fault-free answers (--check_text).
  mismatches=$(json_num "$json" text_mismatches)
  if [[ -z $mismatches ]]; then
    ((ABORTED)) || fail "load generator $gname reported no text check (text_mismatches)"
    continue
  fi
  TEXT_MISMATCHES=$((TEXT_MISMATCHES + mismatches))
  TEXT_CHECKED=$((TEXT_CHECKED + $(json_num "$json" text_checked)))
  TEXT_FAILOVERS=$((TEXT_FAILOVERS + $(json_num "$json" text_failovers_checked)))
  TEXT_UNREFERENCED=$((TEXT_UNREFERENCED + $(json_num "$json" text_unreferenced)))
done
CLIENT_TOTAL=0
for code in "${!CLIENT_CODES[@]}"; do CLIENT_TOTAL=$((CLIENT_TOTAL + ${CLIENT_CODES[$code]})); done
OK=${CLIENT_CODES[OK]:-0}

# Gateway side: tandem_gateway_requests_total by code (it counts a request as it finishes, on its
# own thread, so poll until it matches or SOAK_CHECK_TIMEOUT passes).
gateway_codes() {
  metrics | awk '$1 ~ /^tandem_gateway_requests_total\{/ {
      if (match($1, /code="[^"]*"/)) { c = substr($1, RSTART + 6, RLENGTH - 7); s[c] += $NF } }
    END { for (c in s) printf "%s %.0f\n", c, s[c] }' | sort
}
client_codes() {
  for code in "${!CLIENT_CODES[@]}"; do echo "$code ${CLIENT_CODES[$code]}"; done | sort
}
sent_codes() { client_codes | grep -v '^CLIENT_OVERLOAD ' || true; }
counted_codes() { gateway_codes | awk '$2 > 0' || true; }
codes_match() { [[ "$(sent_codes)" == "$(counted_codes)" ]]; }
wait_for "$SOAK_CHECK_TIMEOUT" codes_match || true
GATEWAY_CODES=$(counted_codes)
GATEWAY_TOTAL=$(awk '{s += $2} END {print s + 0}' <<<"$GATEWAY_CODES")

# Failovers and retries the gateway did (from the final chunks' recovery, on /metrics if any).
RECOVERY=$(metrics | grep -E '^tandem_gateway_(retries|retry_budget_exhausted|midstream_failovers|stream_stalls|hedges|fallbacks|shed_requests|endpoint_ejections)_total(\{| )' |
  awk '{n = $1; sub(/\{.*/, "", n); s[n] += $NF} END {for (k in s) printf "%s=%.0f ", k, s[k]}' || true)

# --- Stop: the gateway must drain and exit 0. ---
if kill -0 "$GATEWAY_PID" 2>/dev/null; then
  kill -TERM "$GATEWAY_PID"
  set +e
  wait "$GATEWAY_PID"
  GATEWAY_RC=$?
  set -e
else
  GATEWAY_RC=dead
fi
[[ $GATEWAY_RC == 0 ]] || fail "gateway exit status on SIGTERM: $GATEWAY_RC (want 0)"

# --- Checks and summary. ---
# A failure during the run stops it early; the load generators are killed before they write
# their counts, so the accounting checks below would only repeat it.
SHED=$(sed -n 's/.*tandem_gateway_shed_requests_total=\([0-9]*\).*/\1/p' <<<"$RECOVERY")
SHED=${SHED:-0}
FAILED=$((SENT - OK - SHED))
pct() { awk -v f="$1" -v s="$SENT" 'BEGIN{printf "%.3f", (s > 0) ? 100 * f / s : 100}'; }
FAILED_PCT=$(pct "$FAILED")
SHED_PCT=$(pct "$SHED")
GROWTH_KB=$((RSS_END - RSS_WARM))
if ((ABORTED)); then
  log "aborted: skipping the accounting checks"
else
  ((CLIENT_TOTAL == SENT)) || fail "clients sent $SENT but saw $CLIENT_TOTAL statuses"
  ((${CLIENT_CODES[CLIENT_OVERLOAD]:-0} == 0)) ||
    fail "${CLIENT_CODES[CLIENT_OVERLOAD]} arrivals dropped by the clients (too many in flight)"
  ((GATEWAY_TOTAL == SENT)) || fail "gateway counted $GATEWAY_TOTAL requests, clients sent $SENT"
  [[ "$(sent_codes)" == "$GATEWAY_CODES" ]] ||
    fail "per-code counts differ: clients [$(client_codes | tr '\n' ' ')] gateway [$(tr '\n' ' ' <<<"$GATEWAY_CODES")]"
  ((TOKENS_SHORT == 0)) || fail "OK answers are $TOKENS_SHORT tokens short of max_tokens in total"
  ((TEXT_MISMATCHES == 0)) ||
    fail "$TEXT_MISMATCHES OK answers differ from the fault-free answer to their prompt (see 'mismatch:' in $OUT_DIR/load-*.out)"
  ((TEXT_UNREFERENCED == 0)) ||
    fail "$TEXT_UNREFERENCED OK answers had no fault-free answer to compare with"
  ((TEXT_CHECKED == OK)) || fail "text check compared $TEXT_CHECKED answers of $OK OK"
  for code in "${!CLIENT_CODES[@]}"; do
    [[ $code == OK || $code == UNAVAILABLE || $code == RESOURCE_EXHAUSTED || $code == CLIENT_OVERLOAD ]] ||
      fail "${CLIENT_CODES[$code]} requests failed with $code"
  done
  awk -v p="$FAILED_PCT" -v b="$SOAK_MAX_FAILURE_PCT" 'BEGIN{exit !(p <= b)}' ||
    fail "$FAILED_PCT% of requests failed other than by a policy shed (bound $SOAK_MAX_FAILURE_PCT%)"
  awk -v p="$SHED_PCT" -v b="$SOAK_MAX_SHED_PCT" 'BEGIN{exit !(p <= b)}' ||
    fail "$SHED_PCT% of requests shed by the policy (bound $SOAK_MAX_SHED_PCT%)"
  ((SENT > 0)) || fail "no request was sent"
  ((GROWTH_KB <= SOAK_RSS_BOUND_MIB * 1024)) ||
    fail "gateway RSS grew $((GROWTH_KB / 1024)) MiB after warm-up (bound $SOAK_RSS_BOUND_MIB MiB)"
  EXPECT_RESTARTS=$(((SOAK_SECONDS - 1) / SOAK_KILL_EVERY))
  EXPECT_RELOADS=$(((SOAK_SECONDS - 1) / SOAK_RELOAD_EVERY))
  ((RESTARTS >= EXPECT_RESTARTS - 1)) || fail "only $RESTARTS worker restarts (want $EXPECT_RESTARTS)"
  ((RELOADS >= EXPECT_RELOADS - 1)) || fail "only $RELOADS policy reloads (want $EXPECT_RELOADS)"
  ((SOAK_SECONDS < SOAK_HANG_EVERY + SOAK_HANG_SECONDS || HANGS >= 1)) ||
    fail "no worker was hung (SIGSTOP) during the run"
fi
# RSS trend after warm-up, least squares over the samples (MiB per minute): informational.
SLOPE=$(awk -v w="$SOAK_WARMUP_SECONDS" 'NR > 1 && $1 >= w {
    n++; sx += $1; sy += $2; sxx += $1 * $1; sxy += $1 * $2 }
  END { d = n * sxx - sx * sx; printf "%.2f", (n > 2 && d > 0) ? (n * sxy - sx * sy) / d * 60 / 1024 : 0 }' "$RSS_FILE")
ELAPSED=$(awk -v a="$(now_ms)" -v b="$T0" 'BEGIN{printf "%.0f", (a - b) / 1000}')
mib() { awk -v k="$1" 'BEGIN{printf "%.1f", k / 1024}'; }

{
  echo "soak summary ($(date -u +%Y-%m-%dT%H:%M:%SZ), $(nproc) cores)"
  echo "  duration        ${SOAK_SECONDS} s of load (${ELAPSED} s with the drain), ${SOAK_RATE} req/s offered, max_tokens ${SOAK_MAX_TOKENS}"
  echo "  requests        sent $SENT; clients saw $CLIENT_TOTAL; gateway counted $GATEWAY_TOTAL"
  echo "  by code         clients: $(client_codes | tr '\n' ' ')"
  echo "                  gateway: $(tr '\n' ' ' <<<"$GATEWAY_CODES")"
  echo "  failures        $FAILED ($FAILED_PCT%, bound $SOAK_MAX_FAILURE_PCT%), and $SHED shed by the policy ($SHED_PCT%, bound $SOAK_MAX_SHED_PCT%); OK answers short of tokens: $TOKENS_SHORT"
  echo "  answer text     $TEXT_CHECKED OK answers compared with their prompt's fault-free answer ($TEXT_FAILOVERS failed over mid-stream): $TEXT_MISMATCHES differ, $TEXT_UNREFERENCED without a reference"
  grep -h '^  mismatch: ' "$OUT_DIR"/load-*.out 2>/dev/null | head -3 | cut -c1-400 | sed 's/^  /                  /' || true
  for spec in "${LOADS[@]}"; do
    gname=${spec%%:*}
    json=$OUT_DIR/load-$gname.json
    [[ -s $json ]] || continue
    printf '  %-16sissued %s, %s; e2e p50 %s ms, p99 %s ms, max %s ms\n' "$gname" \
      "$(json_num "$json" issued)" "$(json_codes "$json" | tr ' \n' '= ' | sed 's/ $//')" \
      "$(json_ms "$json" e2e_ms p50)" "$(json_ms "$json" e2e_ms p99)" "$(json_ms "$json" e2e_ms max)"
  done
  echo "  recovery        ${RECOVERY:-none on /metrics}"
  ((SOAK_UPSTREAM)) && echo "  upstream        model tiny: ${#LLAMA_PIDS[@]} tandem-worker --engine=upstream, each in front of its own llama-server, at $SOAK_UPSTREAM_RATE req/s"
  echo "  hangs           $HANGS worker SIGSTOPs of ${SOAK_HANG_SECONDS} s, then SIGCONT (every ${SOAK_HANG_EVERY} s)"
  echo "  restarts        $RESTARTS worker SIGKILLs + restarts on the same port (every ${SOAK_KILL_EVERY} s), slowest back in the gateway ${RESTART_MS_MAX} ms"
  echo "  reloads         $RELOADS policy rewrites (every ${SOAK_RELOAD_EVERY} s), slowest live ${RELOAD_MS_MAX} ms"
  echo "  gateway RSS     start $(mib "$RSS_START") MiB, after warm-up (${SOAK_WARMUP_SECONDS} s) $(mib "$RSS_WARM") MiB, peak $(mib "$RSS_PEAK") MiB, end $(mib "$RSS_END") MiB, after the drain $(mib "$RSS_DRAINED") MiB"
  echo "  RSS growth      $(mib "$GROWTH_KB") MiB after warm-up (bound $SOAK_RSS_BOUND_MIB MiB); trend $SLOPE MiB/min"
  echo "  gateway exit    $GATEWAY_RC on SIGTERM"
  if ((${#FAILURES[@]} == 0)); then
    echo "  result          PASS"
  else
    echo "  result          FAIL"
    printf '    - %s\n' "${FAILURES[@]}"
  fi
} | tee "$OUT_DIR/summary.txt"
((${#FAILURES[@]} == 0))
