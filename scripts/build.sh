#!/usr/bin/env bash
# Installs what is missing (scripts/setup.sh), then configures and builds Tandem into
# ${TANDEM_BUILD_DIR:-build}. Extra arguments go to CMake's configure step.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
BUILD_DIR=${TANDEM_BUILD_DIR:-build}
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE="${TANDEM_BUILD_TYPE:-RelWithDebInfo}" "$@"
cmake --build "$BUILD_DIR" -j "$(nproc)"
