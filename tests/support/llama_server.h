#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "tests/support/stack.h"

namespace tandem::testing {

// llama.cpp's llama-server as a real OpenAI-compatible engine, built by
// scripts/build_llama_server.sh into its cache (TANDEM_LLAMA_SERVER_DIR, default
// ~/.cache/tandem/llama-server-node-llama-cpp-3.21.1, the version that script pins), serving a
// tiny random-weight model written at test time (tests/support/make_tiny_gguf.py).

// The cache folder; FAILED_PRECONDITION naming the script when it is not built.
absl::StatusOr<std::string> LlamaServerDir();

// Writes the tiny model standing in for `model` ("qwen" or "nemotron") into a temp file, once per
// process and model; returns its path.
absl::StatusOr<std::string> TinyGguf(const std::string& model);

// Starts llama-server on 127.0.0.1 (port 0 unless `port` is given) with --metrics, --jinja and
// the alias "tiny-MODEL"; returns once it listens (it may still be loading: /health 503).
// Server::http_address is its HOST:PORT.
absl::StatusOr<Server> StartLlamaServer(const std::string& model, int port = 0,
                                        const std::vector<std::string>& extra_args = {});

// The flags of a tandem-worker in front of `llama`.
std::vector<std::string> UpstreamWorkerFlags(const Server& llama,
                                             const std::vector<std::string>& extra = {});

}  // namespace tandem::testing
