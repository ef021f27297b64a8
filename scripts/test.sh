#!/usr/bin/env bash
# The test command: installs what is missing, builds, and runs every test (unit, integration with
# real processes on loopback, metrics lint with promtool). GPU tests (label gpu) skip cleanly
# without a device.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh
BUILD_DIR=${TANDEM_BUILD_DIR:-build}
cd "$BUILD_DIR"
ctest --output-on-failure -j "$(nproc)" --timeout 300 "$@"
