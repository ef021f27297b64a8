#!/usr/bin/env bash
# Installs what is missing (scripts/setup.sh), then configures and builds Tandem into
# ${TANDEM_BUILD_DIR:-build}. Extra arguments go to CMake's configure step.
# TANDEM_UNITY_BUILD=ON compiles each target's sources in batches (CMAKE_UNITY_BUILD): a build
# from scratch takes about a third less time, an edit recompiles its whole batch. CI sets it;
# left as it was configured when unset. TANDEM_TEST_SET=optimized builds only the tests that need
# an optimized build (tests/CMakeLists.txt); CI runs the rest under the sanitizers.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
BUILD_DIR=${TANDEM_BUILD_DIR:-build}
configure=()
if [[ -n ${TANDEM_UNITY_BUILD:-} ]]; then configure=(-DCMAKE_UNITY_BUILD="$TANDEM_UNITY_BUILD"); fi
if [[ -n ${TANDEM_TEST_SET:-} ]]; then configure+=(-DTANDEM_TEST_SET="$TANDEM_TEST_SET"); fi
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE="${TANDEM_BUILD_TYPE:-RelWithDebInfo}" \
  "${configure[@]}" "$@"
cmake --build "$BUILD_DIR" -j "$(nproc)"
