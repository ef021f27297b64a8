#!/usr/bin/env bash
# Reproduces the held-out evaluation of the shipped classifier (router/classifier/model.tcls):
# per-class precision and recall, confusion matrix, accuracy by source.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh >/dev/null
BUILD_DIR=${TANDEM_BUILD_DIR:-build}
python3 router/classifier/make_dataset.py "$BUILD_DIR/classifier-data" >/dev/null
"$BUILD_DIR/tools/tandem-train-classifier" --model=router/classifier/model.tcls \
  --heldout="$BUILD_DIR/classifier-data/heldout.jsonl" "$@"
