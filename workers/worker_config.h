#pragma once

#include <grpcpp/grpcpp.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "common/metrics_server.h"
#include "common/request_validation.h"
#include "workers/image_pool.h"
#include "workers/scheduler.h"
#include "workers/simulator/synthetic_engine.h"
#include "workers/upstream/upstream_options.h"
#include "workers/weights_source.h"

namespace tandem::workers {

// Which engine serves: the model itself, an engine server the worker fronts (vLLM, SGLang,
// trtllm-serve, llama-server), or the load simulator (filler text, real timing).
enum class EngineKind { kNative, kSynthetic, kUpstream };

// Everything tandem-worker runs with: read from its flags (worker_flags.h) or built by a test,
// and checked by Validate() before a device is opened or a checkpoint read, so that bad flags
// fail in milliseconds, not after minutes of weight loading.
struct WorkerConfig {
  std::string model;   // "qwen" or "nemotron" (any for upstream): the name the gateway routes to
  std::string device;  // a CUDA ordinal ("0") or "cpu"
  EngineKind engine = EngineKind::kNative;

  // Native engine: the weights (checkpoint or generated), what it reports and how much memory
  // it may take.
  WeightsSource weights;
  std::string model_id;               // empty: the checkpoint's
  int64_t memory_budget = 4ll << 30;  // CPU: bytes of KV cache and recurrent state
  int64_t prefix_cache_bytes = 1ll << 30;  // CPU: prefix-cache snapshots, within memory_budget
  int32_t prefix_block_tokens = 256;       // CPU: tokens between snapshot points
  int32_t native_threads = 0;         // CPU: matrix-product threads (0: all)
  double gpu_memory_fraction = 0.9;   // GPU: share of memory after the weights
  bool cuda_graphs = true;            // GPU: replay decode steps as CUDA graphs
  int64_t gpu_max_image_patches = 0;  // GPU: vision scratch, patches of one image (0: model's)

  // Upstream engine: the server, its profile and the worker's limits in front of it.
  upstream::UpstreamOptions upstream;

  // Synthetic engine.
  SyntheticEngineOptions synthetic;
  absl::Duration synthetic_load_time = absl::ZeroDuration();

  // Limits of what one request may ask (0: the model's own).
  int32_t max_output_tokens = 0;
  int32_t max_context_tokens = 0;
  int64_t max_request_bytes = 48ll << 20;
  RequestLimits limits;
  Scheduler::Options scheduler;
  // The threads that decode and resize images, and the requests that may wait for them.
  ImagePool::Options image_pool;

  // Ports and their transport (null credentials: refused by Validate).
  std::string listen = "127.0.0.1:0";
  std::shared_ptr<grpc::ServerCredentials> server_credentials;
  std::string server_transport = "mtls";  // for the start-up line
  std::string metrics_listen = "127.0.0.1:0";
  MetricsServerOptions metrics_server;
  std::string metrics_transport = "http";

  // On SIGTERM, how long requests in flight may take; how often device memory is re-read.
  absl::Duration drain_timeout = absl::Seconds(30);
  absl::Duration device_refresh_interval = absl::Seconds(1);

  // Every check of the configuration, in one place: InvalidArgument naming the flag at fault.
  absl::Status Validate() const;
  // Limits that another limit makes unreachable, one line each naming both flags; logged at
  // start-up.
  std::vector<std::string> LimitWarnings() const;
};

}  // namespace tandem::workers
