#!/usr/bin/env bash
# A streamed chat through Tandem's OpenAI-compatible front with curl: Server-Sent Events over TLS,
# with a tenant's API key.
#
#   TANDEM_API_KEY=KEY examples/curl/chat_stream.sh https://HOST:PORT/v1 ca.pem "Hello"
#
# Run by tests/integration/openai_sdk_test.cc against a real gateway.
set -euo pipefail
base_url="$1" ca="$2" prompt="${3:-Hello there}"
body=$(printf '{"model": "auto", "stream": true, "max_tokens": 16, "reasoning_effort": "none",
  "messages": [{"role": "user", "content": "%s"}]}' "$prompt")
curl --silent --show-error --fail-with-body --no-buffer --cacert "$ca" \
  -H "Authorization: Bearer $TANDEM_API_KEY" -H "Content-Type: application/json" \
  "$base_url/chat/completions" -d "$body"
