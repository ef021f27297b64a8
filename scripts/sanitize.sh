#!/usr/bin/env bash
# Builds Tandem with a sanitizer preset (CMakePresets.json) and runs the unit and integration
# tests under it:
#   bash scripts/sanitize.sh asan   # AddressSanitizer + UndefinedBehaviorSanitizer, build-asan/
#   bash scripts/sanitize.sh tsan   # ThreadSanitizer, build-tsan/
# Only the test binaries and the binaries the tests run are built (the build preset's targets;
# asan also builds the libFuzzer targets so that scripts/fuzz.sh can reuse build-asan).
#
# The integration tests start the real tandem-gateway and tandem-worker of the same build, so they
# are sanitized too. A sanitizer report in any process (test binary or child) is written to
# BUILD/sanitizer-logs/ (log_path in the test preset's environment); the run fails if any report
# is there, even when the test that caused it passed. A report also fails its test: a test binary
# exits with the sanitizer's code (86 for ASan/UBSan, 66 for TSan), and a child that does fails
# the test that started it (tests/support/child_process.cc). Suppressions (each with the reason it is not our bug): tests/sanitizers/.
# Extra arguments go to ctest (e.g. -R Stack). `--build-only` as the first of them builds and
# stops: .ci/run builds both trees that way at idle priority, in the background, while the main
# build and its tests run. The build holds a lock (BUILD_DIR/.build.lock), so a suite started
# meanwhile waits for that build and then finds its tree up to date.
set -euo pipefail
cd "$(dirname "$0")/.."
preset=${1:-}
case "$preset" in
  asan | tsan) shift ;;
  *) echo "usage: $0 asan|tsan [--build-only | ctest args...]" >&2; exit 2 ;;
esac
build_only=0
if [[ ${1:-} == --build-only ]]; then build_only=1; shift; fi
bash scripts/setup.sh
BUILD_DIR=build-$preset
LOGS=$BUILD_DIR/sanitizer-logs

start=$SECONDS
mkdir -p "$BUILD_DIR"
(
  flock 9
  cmake --preset "$preset" >/dev/null
  cmake --build --preset "$preset" -j "$(nproc)"
) 9>"$BUILD_DIR/.build.lock"
echo "[sanitize] $preset build: $((SECONDS - start)) s"
if ((build_only)); then exit 0; fi

rm -rf "$LOGS"
mkdir -p "$LOGS"
start=$SECONDS
repeat=()
# TSan slows every process several times; a few integration tests assert on timing (deadlines,
# where a kill lands in a stream) and can miss under it. A failing test gets a second run there;
# a sanitizer report still fails the whole run below, whichever run it came from.
if [[ $preset == tsan ]]; then repeat=(--repeat until-pass:2); fi
set +e
# Two tests per core, as in scripts/test.sh: sanitized processes wait even more than plain ones.
# Under TSan three: a process takes seconds to start there, and with two per core the cores sat
# half idle through the suite's last two minutes (its many short integration cases).
per_core=2
if [[ $preset == tsan ]]; then per_core=3; fi
ctest --preset "$preset" -j "${TANDEM_TEST_JOBS:-$((per_core * $(nproc)))}" "${repeat[@]}" "$@" 2>&1 |
  tee "$BUILD_DIR/ctest.log"
rc=${PIPESTATUS[0]}
set -e
echo "[sanitize] $preset tests: $((SECONDS - start)) s (ctest exit $rc)"
# A rerun must not hide a flaky test: name every test that failed a run, even if it passed later.
mapfile -t failed_once < <(grep -E 'Test +#[0-9]+: .*\*\*\*(Failed|Timeout|Exception|Not Run)' \
  "$BUILD_DIR/ctest.log" | sed -nE 's/^.*Test +#[0-9]+: ([^ ]+) .*/\1/p' | sort -u)
if ((${#failed_once[@]})); then
  echo "[sanitize] $preset: failed at least one run: ${failed_once[*]}" >&2
fi
# A gateway or worker that died of a signal nobody sent (tests/support/child_process.cc) is a
# crash, not a timing miss: it fails the run even when the test's rerun passed.
crashes=$(grep -c 'child crashed: ' "$BUILD_DIR/ctest.log" || true)

shopt -s nullglob
# TSan symbolizes a stack to match it against the suppressions (tests/sanitizers/tsan.supp); a
# stack through Boost.Beast's handlers (the gateway's HTTP front calling into gRPC) has names
# longer than its symbolizer's buffer, which it says in a log line of its own. A file holding
# only those lines reports nothing: the race it symbolized was suppressed.
for f in "$LOGS"/*; do
  grep -qv 'WARNING: Symbolizer buffer too small' "$f" || rm "$f"
done
reports=("$LOGS"/*)
if ((${#reports[@]})); then
  for f in "${reports[@]}"; do
    echo "===== $f" >&2
    head -n 120 "$f" >&2
  done
  echo "[sanitize] $preset: ${#reports[@]} sanitizer report file(s) in $LOGS (see above)" >&2
  exit 1
fi
if ((crashes)); then
  grep 'child crashed: ' "$BUILD_DIR/ctest.log" >&2
  echo "[sanitize] $preset: $crashes child process crash(es) (see above; logs kept in their test dirs)" >&2
  exit 1
fi
if ((rc != 0)); then
  echo "[sanitize] $preset: tests failed" >&2
  exit "$rc"
fi
echo "[sanitize] $preset: unit and integration tests pass, no sanitizer reports"
