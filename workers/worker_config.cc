#include "workers/worker_config.h"

#include "absl/strings/str_cat.h"

namespace tandem::workers {
namespace {

absl::Status Invalid(absl::string_view message) { return absl::InvalidArgumentError(message); }

absl::Status ValidateWeights(const WorkerConfig& c) {
  const WeightsSource& w = c.weights;
  if (w.random_weights) {
    if (c.engine != EngineKind::kNative) return Invalid("--random_weights needs --engine=native");
    if (!w.checkpoint.empty()) {
      return Invalid("--random_weights builds the model from --model_config; drop --checkpoint");
    }
    if (w.model_config.empty()) {
      return Invalid(
          "--random_weights needs --model_config=PATH (a config.json, e.g. "
          "workers/model/configs/qwen3_5_moe/config.json)");
    }
  } else if (!w.model_config.empty()) {
    return Invalid(
        "--model_config is for --random_weights (a checkpoint brings its own config.json)");
  }
  if (c.engine == EngineKind::kNative && !w.random_weights && w.checkpoint.empty()) {
    return Invalid(
        "--engine=native needs --checkpoint=DIR (a model directory), or --random_weights "
        "--model_config=PATH");
  }
  if (c.memory_budget < 1) return Invalid("--memory_budget must be >= 1 byte");
  if (c.native_threads < 0) return Invalid("--native_threads must be >= 0");
  if (c.prefix_cache_bytes < 0) return Invalid("--prefix_cache_bytes must be >= 0");
  if (c.prefix_block_tokens < 16 || c.prefix_block_tokens > 65536) {
    return Invalid("--prefix_block_tokens must be in [16, 65536]");
  }
  if (c.gpu_max_image_patches < 0) return Invalid("--gpu_max_image_patches must be >= 0");
  if (!(c.gpu_memory_fraction > 0 && c.gpu_memory_fraction <= 1)) {
    return Invalid("--gpu_memory_fraction must be in (0, 1]");
  }
  return absl::OkStatus();
}

absl::Status ValidateServing(const WorkerConfig& c) {
  if (c.engine == EngineKind::kUpstream) {
    if (absl::Status s = upstream::ValidateUpstreamOptions(c.upstream); !s.ok()) return s;
    // Another model than the two Tandem knows: nothing else says its limits.
    if (c.model != "qwen" && c.model != "nemotron" &&
        (c.max_context_tokens <= 0 || c.max_output_tokens <= 0)) {
      return Invalid(
          absl::StrCat("--model=", c.model,
                       " is neither qwen nor nemotron: an upstream worker serving it "
                       "needs its limits, --max_context_tokens and --max_output_tokens"));
    }
  }
  if (c.scheduler.max_batch_size < 1) return Invalid("--max_batch_size must be >= 1");
  if (c.scheduler.max_queue < 0) return Invalid("--max_queue must be >= 0");
  if (c.image_pool.threads < 1 || c.image_pool.threads > 256) {
    return Invalid("--image_threads must be in [1, 256]");
  }
  if (c.image_pool.queue < 0 || c.image_pool.queue > 65536) {
    return Invalid("--image_queue must be in [0, 65536]");
  }
  if (c.synthetic.time_scale < 0) return Invalid("--synthetic_time_scale must be >= 0");
  if (c.synthetic.output_tokens < 0) return Invalid("--synthetic_output_tokens must be >= 0");
  if (c.synthetic_load_time < absl::ZeroDuration()) {
    return Invalid("--synthetic_load_time must be >= 0");
  }
  if (c.max_output_tokens < 0 || c.max_context_tokens < 0) {
    return Invalid("--max_output_tokens and --max_context_tokens must be >= 0");
  }
  if (c.max_request_bytes < 1024) return Invalid("--max_request_bytes must be >= 1024");
  if (c.server_credentials == nullptr)
    return Invalid("no server credentials (--tls_* or --plaintext)");
  if (c.drain_timeout < absl::ZeroDuration()) return Invalid("--drain_timeout must be >= 0");
  if (c.device_refresh_interval <= absl::ZeroDuration()) {
    return Invalid("--device_refresh_interval must be > 0");
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status WorkerConfig::Validate() const {
  if (model.empty()) return Invalid("--model is required (qwen or nemotron)");
  if (device.empty()) return Invalid("--device is required: a CUDA ordinal such as 0, or 'cpu'");
  if (absl::Status s = ValidateWeights(*this); !s.ok()) return s;
  return ValidateServing(*this);
}

std::vector<std::string> WorkerConfig::LimitWarnings() const {
  std::vector<std::string> out;
  if (limits.max_image_bytes > max_request_bytes) {
    out.push_back(absl::StrCat("--max_image_bytes (", limits.max_image_bytes,
                               ") exceeds --max_request_bytes (", max_request_bytes,
                               "): no request can carry an image that large"));
  }
  return out;
}

}  // namespace tandem::workers
