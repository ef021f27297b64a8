#!/usr/bin/env bash
# Reproduces the held-out evaluation of the shipped classifier (router/classifier/model.tcls), on
# the whole sources it was never trained on and on everything held out:
# per-class precision, recall and F1, confusion matrix, accuracy by source, reliability table,
# expected calibration error and the recommended min_confidence. Extra arguments go to
# tandem-train-classifier, e.g. --min_class_accuracy=0.95 --min_unseen_class_accuracy=0.68 (what ctest requires) or
# --show_errors=50.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh >/dev/null
BUILD_DIR=${TANDEM_BUILD_DIR:-build}
python3 router/classifier/make_dataset.py "$BUILD_DIR/classifier-data" >/dev/null
"$BUILD_DIR/tools/tandem-train-classifier" --model=router/classifier/model.tcls \
  --heldout="$BUILD_DIR/classifier-data/heldout.jsonl" \
  --heldout_sources="$BUILD_DIR/classifier-data/heldout_sources.jsonl" "$@"
