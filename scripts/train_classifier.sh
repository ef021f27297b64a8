#!/usr/bin/env bash
# Retrains the routing classifier's learned tier: rebuilds the labelled data, trains, writes
# router/classifier/model.tcls and router/classifier/EVALUATION.md (the held-out sources, never
# trained on; everything held out; then leave-one-source-out: one model per source; about four
# minutes in all on 2 cores).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh >/dev/null
BUILD_DIR=${TANDEM_BUILD_DIR:-build}
python3 router/classifier/make_dataset.py
"$BUILD_DIR/tools/tandem-train-classifier" \
  --train=router/classifier/data/train.jsonl --heldout=router/classifier/data/heldout.jsonl \
  --heldout_sources=router/classifier/data/heldout_sources.jsonl \
  --out=router/classifier/model.tcls --report=router/classifier/EVALUATION.md --cross_validate \
  --source_balance=0.5 --epochs=20 \
  "$@"
