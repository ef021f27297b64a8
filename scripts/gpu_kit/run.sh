#!/usr/bin/env bash
# The GPU kit's runner (docs/gpu-kit.md); scripts/gpu_kit.sh copies it to build-gpu-kit/run.sh.
#
#   bash build-gpu-kit/run.sh OUTDIR            every step, in under 8 minutes on an H200
#   bash build-gpu-kit/run.sh --cpu-e2e OUTDIR  only the end-to-end step, on the CPU engine and
#                                               requiring equal answers (the kit build's check)
#   bash build-gpu-kit/run.sh --day-one OUTDIR  only the device facts and the day-one table
#
# Steps, each time-boxed so one hang cannot eat the rest: device facts, every gpu test (gtest
# XML), the golden checks, the vision checks (their numbers from the gpu tests' output), an
# end-to-end worker run per architecture, the transformers
# comparison (scripts/gpu_kit/compare_transformers.py), the full-size benchmark, and the day-one
# table when time is left (tandem-bench against a worker per full-size model). Writes
# OUTDIR/summary.md and OUTDIR/results.json. Exit status: 0 when every correctness step passed
# (or there is no CUDA device: one line says so), 1 otherwise.
set -euo pipefail

MODE=gpu
if [[ ${1:-} == --cpu-e2e ]]; then
  MODE=cpu
  shift
elif [[ ${1:-} == --day-one ]]; then
  MODE=day_one
  shift
fi
if [[ $# -ne 1 ]]; then
  echo "usage: run.sh [--cpu-e2e | --day-one] OUTDIR" >&2
  exit 2
fi
KIT=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)
ROOT=$(cd "$KIT/.." && pwd -P)  # the work tree the kit travels in (physical: never the link)
mkdir -p "$1"
OUT=$(cd "$1" && pwd)
mkdir -p "$OUT/logs" "$OUT/gtest" "$OUT/work"
START=$SECONDS
# The whole run must end within 8 minutes: the steps share this budget in order, and up to a
# minute more goes to grace periods (timeout -k, stopping workers).
BUDGET=${TANDEM_KIT_BUDGET_SECONDS:-420}
export TANDEM_KIT_LIBRARY_PATH=""

# --- bookkeeping -------------------------------------------------------------------------------
# "name status seconds correctness note numbers", separated by US (0x1f): read keeps empty
# fields between non-whitespace separators.
SEP=$'\x1f'
STEPS=()
NOTE=""
NUMBERS=""
FAILED=0
NO_DEVICE=0

json_str() {
  local s=$1
  s=${s//\\/\\\\}
  s=${s//\"/\\\"}
  s=${s//$'\n'/\\n}
  s=${s//$'\t'/ }
  s=${s//$'\r'/}
  printf '"%s"' "$s"
}

# Progress lines go to logs/run.log, and to the terminal once a device is known (without one,
# the run prints a single line).
QUIET=1
# jget KEY JSON: a top-level number or string of a one-line JSON object (our tools' output).
jget() { sed -n "s/.*\"$1\":\"\{0,1\}\([^,\"}]*\).*/\1/p" <<<"$2" | head -1; }

log() {
  echo "[kit $((SECONDS - START))s] $*" >>"$OUT/logs/run.log"
  ((QUIET)) || echo "[kit $((SECONDS - START))s] $*"
}

# Seconds a step may take: its own cap, or what is left of the budget.
STEP_T0=0
STEP_LIMIT=0
# What is left of the current step's limit; at least 1, since `timeout 0` would mean no limit.
step_left() {
  local left=$((STEP_LIMIT - (SECONDS - STEP_T0)))
  echo $((left < 1 ? 1 : left))
}
step_limit() {
  local left=$((BUDGET - (SECONDS - START)))
  ((left < $1)) && echo "$left" || echo "$1"
}

# run_step NAME CORRECTNESS(yes|no) CAP FUNCTION: runs FUNCTION with STEP_LIMIT seconds; its
# status 0 is pass, 124 timeout, 77 skip, anything else fail. It sets NOTE and NUMBERS.
run_step() {
  local name=$1 correctness=$2 cap=$3 fn=$4 status rc=0 t0=$SECONDS
  STEP_T0=$SECONDS
  NOTE=""
  NUMBERS=""
  STEP_LIMIT=$(step_limit "$cap")
  if ((STEP_LIMIT < 10)); then
    status=skip
    NOTE="out of time: the run's ${BUDGET}s budget is spent"
  else
    "$fn" || rc=$?
    case $rc in
      0) status=pass ;;
      77) status=skip ;;
      124 | 137) status=timeout ;;
      *) status=fail ;;
    esac
  fi
  if [[ $correctness == yes && ($status == fail || $status == timeout) ]]; then FAILED=1; fi
  [[ $status == timeout && -z $NOTE ]] && NOTE="killed after ${STEP_LIMIT}s"
  STEPS+=("$name$SEP$status$SEP$((SECONDS - t0))$SEP$correctness$SEP$NOTE$SEP$NUMBERS")
  log "$name: $status ($((SECONDS - t0))s) $NOTE${NUMBERS:+ [$NUMBERS]}"
}

write_reports() {
  local device_json=$1 headline=$2 ok=true line name status secs corr note nums first=1
  ((FAILED)) && ok=false
  {
    echo "# Tandem GPU kit run"
    echo
    echo "$headline"
    echo
    echo "Kit: $(sed -n 's/.*"commit": *"\([^"]*\)".*/\1/p' "$KIT/manifest.json"), built" \
      "$(sed -n 's/.*"built_utc": *"\([^"]*\)".*/\1/p' "$KIT/manifest.json"). Run:" \
      "$(date -u +%Y-%m-%dT%H:%M:%SZ), $((SECONDS - START)) s."
    echo
    echo "| step | result | time | key numbers and notes |"
    echo "|---|---|---|---|"
    for line in "${STEPS[@]}"; do
      IFS=$SEP read -r name status secs corr note nums <<<"$line"
      [[ $corr == yes ]] || name="$name (not a correctness step)"
      [[ -n $nums && -n $note ]] && nums+="; "
      echo "| $name | **$status** | ${secs} s | ${nums//|/\\|}${note//|/\\|} |"
    done
    echo
    if ((NO_DEVICE)); then
      echo "Correctness: not checked (no CUDA device)."
    elif [[ $ok == true ]]; then
      echo "Correctness: every correctness step passed."
    else
      echo "Correctness: FAILED (see the steps above and logs/)."
    fi
    echo "Files: results.json, logs/ (every step's output), gtest/ (XML per test binary)," \
      "e2e-*.jsonl (streamed answers with their comparison)."
  } >"$OUT/summary.md"
  {
    echo "{"
    echo "  \"ok\": $ok,"
    echo "  \"headline\": $(json_str "$headline"),"
    echo "  \"seconds\": $((SECONDS - START)),"
    echo "  \"kit\": $(tr -d '\n' <"$KIT/manifest.json"),"
    echo "  \"device\": ${device_json:-null},"
    echo "  \"cublas\": $(json_str "${CUBLAS_NOTE:-}"),"
    echo "  \"steps\": ["
    for line in "${STEPS[@]}"; do
      IFS=$SEP read -r name status secs corr note nums <<<"$line"
      ((first)) || echo ","
      first=0
      printf '    {"name": %s, "status": "%s", "seconds": %s, "correctness": %s, "note": %s, "numbers": %s}' \
        "$(json_str "$name")" "$status" "$secs" "$([[ $corr == yes ]] && echo true || echo false)" \
        "$(json_str "$note")" "$(json_str "$nums")"
    done
    echo
    echo "  ]"
    echo "}"
  } >"$OUT/results.json"
}

# --- finding the GPU machine's libraries --------------------------------------------------------
# The driver (libcuda.so.1 and the libnvidia-* it loads) is the host's; its directory goes on the
# kit loader's search path after the kit's own libraries.
driver_dir() {
  local lib
  lib=$( (ldconfig -p 2>/dev/null || /sbin/ldconfig -p 2>/dev/null || true) |
    awk '/libcuda\.so\.1 .*x86-64/ {print $NF; exit}')
  if [[ -n $lib ]]; then
    dirname "$lib"
    return
  fi
  for d in /usr/lib/x86_64-linux-gnu /usr/lib64 /usr/local/nvidia/lib64 /usr/lib/wsl/lib; do
    if [[ -e $d/libcuda.so.1 ]]; then
      echo "$d"
      return
    fi
  done
  return 0
}

# cuBLAS 13 is too big for the kit: the CUDA toolkit's, or the one PyTorch's pip packages carry.
find_cublas() {
  local d candidates=()
  [[ -n ${TANDEM_KIT_CUBLAS_DIR:-} ]] && candidates+=("$TANDEM_KIT_CUBLAS_DIR")
  for d in ${CUDA_HOME:-} ${CUDA_PATH:-} /usr/local/cuda /usr/local/cuda-13*; do
    candidates+=("$d/lib64" "$d/targets/x86_64-linux/lib")
  done
  d=$( (ldconfig -p 2>/dev/null || /sbin/ldconfig -p 2>/dev/null || true) |
    awk '/libcublas\.so\.13 .*x86-64/ {print $NF; exit}')
  [[ -n $d ]] && candidates+=("$(dirname "$d")")
  if command -v python3 >/dev/null; then
    # nvidia-cublas wheels: nvidia/cublas/lib (CUDA 12 layout) or nvidia/cu13/lib (CUDA 13).
    while read -r d; do candidates+=("$d"); done < <(python3 - 2>/dev/null <<'EOF' || true
import glob, os
try:
    import nvidia
    for p in nvidia.__path__:
        for f in glob.glob(os.path.join(p, "*", "lib", "libcublas.so.13")):
            print(os.path.dirname(f))
except Exception:
    pass
try:
    import torch
    print(os.path.join(os.path.dirname(torch.__file__), "lib"))
except Exception:
    pass
EOF
    )
  fi
  for d in "${candidates[@]}"; do
    if [[ -e $d/libcublas.so.13 && -e $d/libcublasLt.so.13 ]]; then
      echo "$d"
      return
    fi
  done
  return 0
}

# --- steps ---------------------------------------------------------------------------------------
DEVICE_JSON=""
step_device() {
  local rc=0
  DEVICE_JSON=$(timeout -k 5 "$STEP_LIMIT" "$KIT/bin/tandem-kit-probe" 2>"$OUT/logs/probe.err") || rc=$?
  echo "$DEVICE_JSON" >"$OUT/logs/probe.json"
  if command -v nvidia-smi >/dev/null; then
    timeout -k 5 20 nvidia-smi >"$OUT/logs/nvidia-smi.txt" 2>&1 || true
  fi
  if ((rc == 0)); then
    NUMBERS="$(jget name "$DEVICE_JSON"), $(($(jget memory_total_bytes "$DEVICE_JSON") >> 20)) MiB,"
    NUMBERS+=" sm $(jget compute_capability "$DEVICE_JSON"), driver API $(jget driver_version "$DEVICE_JSON"),"
    NUMBERS+=" runtime $(jget runtime_version "$DEVICE_JSON")"
  fi
  return "$rc"
}

# Every gpu-labelled test of tests/CMakeLists.txt (gpu_kit.sh lists them).
mapfile -t GPU_TESTS <"$KIT/gpu_tests"
step_gpu_tests() {
  local t rc=0 trc tests fails skips total=0 failed=0 skipped=0 bad=()
  for t in "${GPU_TESTS[@]}"; do
    trc=0
    timeout -k 5 "$(step_left)" "$KIT/bin/$t" --gtest_output="xml:$OUT/gtest/$t.xml" \
      >"$OUT/logs/$t.log" 2>&1 || trc=$?
    tests=$(grep -o '<testsuites tests="[0-9]*"' "$OUT/gtest/$t.xml" 2>/dev/null | grep -o '[0-9]*' || echo 0)
    fails=$(grep -o '<testsuites tests="[0-9]*" failures="[0-9]*"' "$OUT/gtest/$t.xml" 2>/dev/null |
      sed 's/.*failures="//; s/"//' || echo 0)
    skips=$(grep -c '<skipped' "$OUT/gtest/$t.xml" 2>/dev/null || true)
    total=$((total + ${tests:-0}))
    failed=$((failed + ${fails:-0}))
    skipped=$((skipped + ${skips:-0}))
    if ((trc != 0)); then
      bad+=("$t (exit $trc)")
      if ((trc == 124 || trc == 137)); then
        rc=124
      elif ((rc == 0)); then
        rc=1
      fi
    fi
  done
  NUMBERS="$total tests, $failed failed, $skipped skipped"
  ((${#bad[@]})) && NOTE="failed: ${bad[*]}; logs/<test>.log"
  # A skip on a GPU machine is worth a look (a test that found no device, or too little memory).
  local skipped_names
  skipped_names=$(cat "$OUT"/gtest/*.xml 2>/dev/null | grep -o '<testcase name="[^"]*"[^>]*result="skipped"' |
    sed 's/<testcase name="\([^"]*\)".*/\1/' | sort -u | head -5 | paste -sd' ' - || true)
  [[ -n $skipped_names ]] && NOTE="${NOTE:+$NOTE; }skipped: $skipped_names"
  return "$rc"
}

# The golden tests read tests/golden through the path they were built with (the kit build's
# link to its work tree, recreated here by run.sh): check they found it, ran, and what they saw.
step_golden() {
  local t ok=0 agree model
  if [[ ! -r $SOURCE_LINK/tests/golden/qwen3_5_moe/cases.json ]]; then
    NOTE="$SOURCE_LINK (the tests' compiled-in source path) does not lead to tests/golden"
    NOTE+=" (logs/source-link.err)"
    return 1
  fi
  for t in cuda_model_test cuda_engine_test; do
    if [[ ! -s $OUT/gtest/$t.xml ]]; then
      NOTE="$t wrote no XML (did it start? logs/$t.log)"
      return 1
    fi
    if grep -q '<skipped' "$OUT/gtest/$t.xml"; then
      NOTE="${NOTE:+$NOTE; }$t skipped tests: they did not run on the device"
      ok=1
    fi
    if grep -q '<failure' "$OUT/gtest/$t.xml"; then
      NOTE="${NOTE:+$NOTE; }$t has failures (gtest/$t.xml)"
      ok=1
    fi
  done
  agree=$(grep -ho '[a-z0-9_]*: [0-9]* of [0-9]* greedy tokens equal to the fp32 golden' \
    "$OUT/logs/cuda_engine_test.log" | sed 's/ greedy tokens equal to the fp32 golden//' |
    paste -sd',' - || true)
  # cuda_model_test: "[arch] greedy agreement: N of M steps", "[arch] prefill median rel rms X".
  model=$(grep -hoE '\[[a-z0-9_]+\] (greedy agreement: [0-9]+ of [0-9]+|prefill median rel rms [0-9.e-]+)' \
    "$OUT/logs/cuda_model_test.log" 2>/dev/null | sed 's/ of /\//' | paste -sd',' - || true)
  NUMBERS="engine greedy tokens equal to the fp32 golden: ${agree:-none printed}"
  NUMBERS+="; model vs CPU: ${model:-none printed}"
  return "$ok"
}

# The Qwen3.5 vision path (tests/gpu/cuda_vision_test.cc, and the image cases of
# cuda_engine_test.cc) on tests/golden/qwen3_5_moe_vl, from the gpu_tests step's output: every
# vision test ran on the device and passed; numbers: the encoder's worst stage error against the
# golden, the text model's image prefill error and greedy agreement, the engine's greedy tokens
# on the image prompts, and the full-size encoder's time on a 1024 x 1024 image (random weights).
step_vision() {
  local rc=0 log="$OUT/logs/cuda_vision_test.log" xml="$OUT/gtest/cuda_vision_test.xml"
  local stage model engine timing
  if [[ ! -r $SOURCE_LINK/tests/golden/qwen3_5_moe_vl/cases.json ]]; then
    NOTE="$SOURCE_LINK/tests/golden/qwen3_5_moe_vl (the vision golden) is missing"
    return 1
  fi
  if [[ ! -s $xml ]]; then
    NOTE="cuda_vision_test wrote no XML (did it start? logs/cuda_vision_test.log)"
    return 1
  fi
  if grep -q '<skipped' "$xml"; then
    NOTE="cuda_vision_test skipped tests: they did not run on the device"
    rc=1
  fi
  if grep -q '<failure' "$xml"; then
    NOTE="${NOTE:+$NOTE; }cuda_vision_test has failures (gtest/cuda_vision_test.xml)"
    rc=1
  fi
  # gtest's XML: one <testcase ... result="..." ... classname="SUITE"> line per test.
  engine=$(grep 'classname="CudaEngineVisionTest"' "$OUT/gtest/cuda_engine_test.xml" 2>/dev/null || true)
  if [[ -z $engine ]] || grep -q 'result="skipped"' <<<"$engine"; then
    NOTE="${NOTE:+$NOTE; }cuda_engine_test's image cases (CudaEngineVisionTest) did not run"
    rc=1
  fi
  # "[vision a_wide] merged: max abs X, rel rms Y": the worst max abs over every image and stage.
  stage=$(sed -nE 's/^\[vision [a-z_+]+\] [a-z_0-9 ()]+: max abs ([0-9.e+-]+), rel rms.*/\1/p' "$log" |
    sort -g | tail -1 || true)
  model=$(grep -hoE '\[vision model, device embeddings\] (prefill median rel rms [0-9.e-]+|greedy agreement: [0-9]+ of [0-9]+)' \
    "$log" 2>/dev/null | sed 's/\[vision model, device embeddings\] //; s/ of /\//' | paste -sd',' - || true)
  engine=$(grep -ho 'qwen3_5_moe_vl: [0-9]* of [0-9]* greedy tokens' "$OUT/logs/cuda_engine_test.log" 2>/dev/null |
    sed 's/qwen3_5_moe_vl: //; s/ of /\//' || true)
  timing=$(sed -nE 's/^vision encoder full size: 1024x1024 image, ([0-9]+) patches, [0-9]+ blocks, ([0-9.]+) ms per image.*/\2 ms (\1 patches)/p' \
    "$log" 2>/dev/null | head -1 || true)
  NUMBERS="encoder worst stage max abs vs golden: ${stage:-none printed} (bound 0.05)"
  NUMBERS+="; model with the device encoder: ${model:-none printed}"
  NUMBERS+="; engine greedy tokens equal to the golden: ${engine:-none printed}"
  NUMBERS+="; full-size encoder, 1024x1024 image, random weights: ${timing:-not measured}"
  return "$rc"
}

WORKER_PID=""
stop_worker() {
  [[ -z $WORKER_PID ]] && return
  kill -TERM "$WORKER_PID" 2>/dev/null || true
  timeout 15 tail -s 0.1 --pid="$WORKER_PID" -f /dev/null 2>/dev/null ||
    kill -KILL "$WORKER_PID" 2>/dev/null || true
  wait "$WORKER_PID" 2>/dev/null || true
  WORKER_PID=""
}
trap stop_worker EXIT

# One architecture end to end: tandem-worker on the golden checkpoint (with the kit's small
# tokenizer), answers streamed by tandem-worker-client and compared with the CPU engine's
# answers made at kit-build time.
e2e() {
  local model=$1 arch=$2 device=$3 margin=$4 min_agree=$5 ckpt="$OUT/work/ckpt-$1" addr="" rc=0
  local log="$OUT/logs/worker-$model.log"
  mkdir -p "$ckpt"
  cp "$ROOT/tests/golden/$arch/config.json" "$ROOT/tests/golden/$arch/model.safetensors" "$ckpt/"
  cp "$KIT/e2e/tokenizer.json" "$ckpt/"
  # The worker prints its address on stdout once listening (before its model is loaded; the
  # client then waits for it to serve). Read through a FIFO: no polling.
  local fifo="$OUT/work/worker-$model.stdout" fd line
  rm -f "$fifo"
  mkfifo "$fifo"
  "$KIT/bin/tandem-worker" --model="$model" --engine=native --device="$device" \
    --checkpoint="$ckpt" --listen=127.0.0.1:0 --metrics_listen=127.0.0.1:0 --plaintext \
    --native_threads=2 --max_batch_size=16 --gpu_memory_fraction=0.1 >"$fifo" 2>"$log" &
  WORKER_PID=$!
  exec {fd}<"$fifo"
  while IFS= read -r -t "$(step_left)" -u "$fd" line; do
    echo "$line" >>"$log"
    if [[ $line == *" listening grpc="* ]]; then
      addr=${line#* listening grpc=}
      addr=${addr%% *}
      break
    fi
  done
  # Keep draining it, so the worker can never block on a full pipe.
  cat <&"$fd" >>"$log" &
  exec {fd}<&-
  if [[ -z $addr ]]; then
    NOTE="worker did not start; logs/worker-$model.log: $(tail -1 "$log")"
    stop_worker
    return 1
  fi
  timeout -k 5 "$(step_left)" "$KIT/bin/tandem-worker-client" --address="$addr" \
    --prompts="$KIT/e2e/prompts.jsonl" --max_tokens="$(cat "$KIT/e2e/max_tokens")" \
    --expect="$KIT/e2e/$model.reference.jsonl" --margin="$margin" --min_agree="$min_agree" \
    --expect_device="$([[ $device == cpu ]] && echo cpu || echo cuda:)" \
    >"$OUT/e2e-$model.jsonl" 2>"$OUT/logs/client-$model.err" || rc=$?
  stop_worker
  local summary info
  summary=$(grep '"type":"summary"' "$OUT/e2e-$model.jsonl" || true)
  info=$(grep '"type":"info"' "$OUT/e2e-$model.jsonl" || true)
  if [[ -n $summary ]]; then
    NUMBERS="$(jget agree "$summary")/$(jget compared "$summary") answers agree with the CPU engine;"
    NUMBERS+=" tokens equal $(jget tokens_agree "$summary")/$(jget tokens_expected "$summary"),"
    NUMBERS+=" of which $(jget clear_tokens "$summary") required (clear margin);"
    NUMBERS+=" batch = alone for $(jget batch_equals_alone "$summary")/$(jget prompts "$summary") prompts;"
    NUMBERS+=" $(jget rpc_errors "$summary") call errors;"
    NUMBERS+=" $(printf '%.0f' "$(jget batch_tokens_per_second "$summary" | grep . || echo 0)") tokens/s batched;"
    NUMBERS+=" $(jget engine "$info") engine on $(jget device "$info"), serving after $(printf '%.1f' "$(jget ready_seconds "$info" | grep . || echo 0)") s"
  fi
  if ((rc != 0)); then
    NOTE="answers differ from the CPU engine's or a call failed: e2e-$model.jsonl"
    grep -q '"type":"error"' "$OUT/e2e-$model.jsonl" 2>/dev/null &&
      NOTE="$(grep '"type":"error"' "$OUT/e2e-$model.jsonl")"
  fi
  return "$rc"
}
step_e2e_qwen() { e2e qwen qwen3_5_moe "$E2E_DEVICE" "$E2E_MARGIN" "$E2E_MIN_AGREE"; }
step_e2e_nemotron() { e2e nemotron nemotron_h "$E2E_DEVICE" "$E2E_MARGIN" "$E2E_MIN_AGREE"; }

# "prefill 8192: N tok/s, b1 X ms/step (Y% of bound), ..." from a cuda_benchmark log, or its last
# line when it measured nothing.
bench_numbers() {
  local n
  n=$(sed -nE 's/^prefill ([0-9]+) tokens: [0-9.]+ s, ([0-9]+) tokens\/s.*/prefill \1: \2 tok\/s/p
    s/^decode batch +([0-9]+): ([0-9.]+) ms\/step.*: ([0-9]+)% of the bound.*/b\1 \2 ms\/step (\3% of bound)/p' \
    "$1" 2>/dev/null | paste -sd',' - | sed 's/,/, /g')
  echo "${n:-$(tail -1 "$1" 2>/dev/null)}"
}

# The full-size models on random weights when cuda_benchmark has --model_config (configs of the
# released models in workers/model/configs/); otherwise the benchmark on each golden checkpoint, a
# smoke run whose tiny models say nothing about the real ones' speed.
step_benchmark() {
  local rc=0 configs=() cfg name each help
  help=$("$KIT/bin/cuda_benchmark" --helpfull 2>&1 || true)
  if grep -q -- '--model_config' <<<"$help"; then
    while read -r cfg; do configs+=("$cfg"); done < <(ls "$ROOT"/workers/model/configs/*/config.json 2>/dev/null)
    if ((${#configs[@]} == 0)); then
      NOTE="cuda_benchmark has --model_config but workers/model/configs/*/config.json is missing"
      return 1
    fi
    each=$((STEP_LIMIT / ${#configs[@]}))
    for cfg in "${configs[@]}"; do
      name=$(basename "$(dirname "$cfg")")
      timeout -k 5 "$each" "$KIT/bin/cuda_benchmark" --model_config="$cfg" --iterations=20 \
        --budget_s=$((each - 10)) \
        --json="$OUT/bench-$name.json" >"$OUT/logs/bench-$name.log" 2>&1 || rc=$?
      NUMBERS="${NUMBERS:+$NUMBERS; }$name: $(bench_numbers "$OUT/logs/bench-$name.log")"
    done
    NOTE="full-size models, random weights (workers/model/configs)"
  else
    for name in qwen3_5_moe nemotron_h; do
      timeout -k 5 "$((STEP_LIMIT / 2))" "$KIT/bin/cuda_benchmark" \
        --checkpoint="$ROOT/tests/golden/$name" --prefill_tokens=512 --iterations=20 \
        --json="$OUT/bench-$name.json" >"$OUT/logs/bench-$name.log" 2>&1 || rc=$?
      NUMBERS="${NUMBERS:+$NUMBERS; }$name: $(bench_numbers "$OUT/logs/bench-$name.log")"
    done
    NOTE="golden tiny models only: this cuda_benchmark has no --model_config"
  fi
  return "$rc"
}

step_transformers() {
  local script="$ROOT/scripts/gpu_kit/compare_transformers.py" rc=0
  if [[ ! -f $script ]]; then
    NOTE="skipped: scripts/gpu_kit/compare_transformers.py does not exist yet"
    return 77
  fi
  mkdir -p "$OUT/transformers"
  TANDEM_KIT_DIR="$KIT" TANDEM_KIT_STEP_SECONDS="$STEP_LIMIT" \
    timeout -k 5 "$STEP_LIMIT" python3 "$script" "$OUT/transformers" \
    >"$OUT/logs/transformers.log" 2>&1 || rc=$?
  NUMBERS=$(tail -1 "$OUT/logs/transformers.log")
  return "$rc"
}

# The day-one methodology table through the worker's gRPC API, on the full-size random-weight
# models (router weights random: expert load is about uniform): tandem-bench's single-request
# latency and tokens/s for its short, medium and long prompts (~16, ~128 and ~700 tokens), then
# aggregate tokens/s at 1, 2, 4, 8 and 16 concurrent streams. Prompt text is tokenized by Qwen3's
# tokenizer; Nemotron's 131,072-token vocabulary takes the same one cut to that size
# (tiny_tokenizer.py's cut). Not a correctness step.
DAY1_TOKENS=${TANDEM_KIT_DAY1_TOKENS:-128}
day_one_model() {
  local model=$1 arch=$2 tokenizer=$3 log="$OUT/logs/day1-worker-$1.log" addr="" i p rc=0
  local bench=("$KIT/bin/tandem-bench" --plaintext --target=worker --api=stream --max_tokens="$DAY1_TOKENS"
    --timeout=120s --ready_timeout=300s)
  "$KIT/bin/tandem-worker" --model="$model" --engine=native --random_weights --device=0 \
    --model_config="$ROOT/workers/model/configs/$arch/config.json" --tokenizer="$tokenizer" \
    --listen=127.0.0.1:0 --metrics_listen=127.0.0.1:0 --plaintext --max_batch_size=16 \
    >"$log.stdout" 2>"$log" &
  WORKER_PID=$!
  # It prints its address once listening, before building its model (tandem-bench waits for that).
  for ((i = 0; i < 60 && ${#addr} == 0; i++)); do
    sleep 1
    addr=$(sed -n 's/.* listening grpc=\([^ ]*\).*/\1/p' "$log.stdout" | head -1)
    kill -0 "$WORKER_PID" 2>/dev/null || break
  done
  if [[ -z $addr ]]; then
    stop_worker
    NOTE+="$model: worker did not start (logs/day1-worker-$model.log); "
    return 1
  fi
  echo "### $model: $arch, random weights, $DAY1_TOKENS tokens per answer" >"$OUT/day1-$model.md"
  for p in short medium long; do
    timeout -k 5 "$(step_left)" "${bench[@]}" --address="$addr" --prompt=$p --concurrency=1 \
      --requests=3 --warmup_requests=1 --json="$OUT/day1-$model-$p.json" \
      >>"$OUT/day1-$model.md" 2>>"$log" || rc=$?
  done
  timeout -k 5 "$(step_left)" "${bench[@]}" --address="$addr" --prompt=short --duration=6s \
    --concurrencies=1,2,4,8,16 --warmup_requests=2 --json="$OUT/day1-$model-concurrency.json" \
    >>"$OUT/day1-$model.md" 2>>"$log" || rc=$?
  stop_worker
  # Rows in order: three single-request runs, then one per concurrency (columns: tok/s, e2e p50).
  NUMBERS+="$model: $(awk -F'|' '$2 ~ /worker/ {gsub(/ /, ""); n++
      if (n <= 3) s = s (n > 1 ? ", " : "") $4 " " $8 " tok/s (p50 " $9 " ms)"
      else c = c (n > 4 ? "/" : "") $8}
    END {print s "; " c " tok/s at 1/2/4/8/16 streams"}' "$OUT/day1-$model.md"); "
  return "$rc"
}

step_day_one() {
  local rc=0 nemotron_tok="$OUT/work/day1-nemotron-tokenizer.json"
  if [[ ! -x $KIT/bin/tandem-bench ]]; then
    NOTE="tandem-bench is not in the kit (BINARIES in scripts/gpu_kit.sh)"
    return 77
  fi
  python3 -c 'import sys; sys.path.insert(0, sys.argv[1]); import tiny_tokenizer as t
t.KEEP = 131072 - len(t.SPECIALS); sys.argv = sys.argv[1:]; t.main()' "$ROOT/scripts/gpu_kit" \
    "$ROOT/tests/tokenizer/qwen3/tokenizer.json" "$nemotron_tok" \
    2>"$OUT/logs/day1-tokenizer.err" || rc=1
  day_one_model qwen qwen3_5_moe "$ROOT/tests/tokenizer/qwen3/tokenizer.json" || rc=$?
  ((rc == 0)) || NOTE+="qwen or the tokenizer cut failed; "
  day_one_model nemotron nemotron_h "$nemotron_tok" || rc=$?
  cat "$OUT"/day1-*.md >"$OUT/day1.md" 2>/dev/null || true
  NOTE+="table: day1.md"
  return "$rc"
}

# --- main ----------------------------------------------------------------------------------------
# The test binaries were built with the kit build's link to its work tree compiled in (they read
# tests/golden through it); point that link at this work tree.
SOURCE_LINK=$(sed -n 's/.*"source_link": *"\([^"]*\)".*/\1/p' "$KIT/manifest.json")
if [[ $(readlink "$SOURCE_LINK" 2>/dev/null || true) != "$ROOT" ]]; then
  ln -sfn "$ROOT" "$SOURCE_LINK" 2>"$OUT/logs/source-link.err" || true
fi

if [[ $MODE == cpu ]]; then
  QUIET=0
  E2E_DEVICE=cpu E2E_MARGIN=0 E2E_MIN_AGREE=1
  run_step e2e_qwen yes 120 step_e2e_qwen
  run_step e2e_nemotron yes 120 step_e2e_nemotron
  write_reports "" "CPU engine end to end against the kit's reference answers (kit self-check)."
  exit "$FAILED"
fi

run_step device no 30 step_device
if [[ ${STEPS[0]} != "device${SEP}pass"* ]]; then
  error=$(sed -n 's/.*"error":"\([^"]*\)".*/\1/p' <<<"$DEVICE_JSON")
  if [[ -n $error ]]; then
    # No GPU here: nothing else can run, and that is not a failure of the kit.
    STEPS=("device${SEP}no-device${SEP}0${SEP}no${SEP}$error$SEP")
    NO_DEVICE=1
    write_reports "$DEVICE_JSON" "no CUDA device: $error"
    echo "no CUDA device: $error (summary: $OUT/summary.md)"
    exit 0
  fi
  # The probe itself did not start or crashed: the kit is broken on this machine.
  FAILED=1
  problem=$(tail -c 300 "$OUT/logs/probe.err" 2>/dev/null || true)
  write_reports "" "the kit's device probe did not run: ${problem:-no output}"
  echo "the kit's device probe did not run: ${problem:-no output} (logs: $OUT/logs)" >&2
  exit 1
fi
QUIET=0

CUBLAS_DIR=$(find_cublas)
DRIVER_DIR=$(driver_dir)
if [[ -n $CUBLAS_DIR ]]; then
  CUBLAS_NOTE="cuBLAS 13 from $CUBLAS_DIR ($(basename "$(readlink -f "$CUBLAS_DIR/libcublas.so.13")"))"
else
  CUBLAS_NOTE="no libcublas.so.13 found (CUDA_HOME, /usr/local/cuda*, ldconfig, pip nvidia-cublas;"
  CUBLAS_NOTE+=" set TANDEM_KIT_CUBLAS_DIR)"
fi
log "$CUBLAS_NOTE; driver libraries from ${DRIVER_DIR:-the default search path}"
TANDEM_KIT_LIBRARY_PATH="${CUBLAS_DIR}${DRIVER_DIR:+:$DRIVER_DIR}"
TANDEM_KIT_LIBRARY_PATH=${TANDEM_KIT_LIBRARY_PATH#:}

# As tests/gpu/cuda_model_test.cc (kClearMargin): a top-2 gap of 0.5 cannot be closed by the GPU's
# BF16 rounding, so every answer must agree with the CPU's up to its first token below that.
E2E_DEVICE=0 E2E_MARGIN=0.5 E2E_MIN_AGREE=1
if [[ $MODE == day_one ]]; then
  run_step day_one no 420 step_day_one
  write_reports "$DEVICE_JSON" "Day-one table only: $(jget name "$DEVICE_JSON"); $CUBLAS_NOTE"
  exit "$FAILED"
fi
run_step gpu_tests yes 180 step_gpu_tests
run_step golden yes 10 step_golden
run_step vision yes 10 step_vision
run_step e2e_qwen yes 60 step_e2e_qwen
run_step e2e_nemotron yes 60 step_e2e_nemotron
# Correctness before speed: a slow benchmark must not squeeze the comparison out of the budget.
run_step transformers yes 120 step_transformers
run_step benchmark no 180 step_benchmark
run_step day_one no 240 step_day_one
write_reports "$DEVICE_JSON" "$(jget name "$DEVICE_JSON") ($(jget devices "$DEVICE_JSON") device(s)); $CUBLAS_NOTE"
log "summary: $OUT/summary.md"
exit "$FAILED"
