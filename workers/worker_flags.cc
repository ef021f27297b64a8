// The flags of tandem-worker and the WorkerConfig they make. Compiled into the binary only, so
// that libraries and tests do not carry these flags.
#include "workers/worker_flags.h"

#include <cstdint>
#include <string>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "common/limit_flags.h"
#include "common/server_tls_flags.h"
#include "common/status_macros.h"

ABSL_FLAG(std::string, model, "", "Model to serve: qwen or nemotron.");
ABSL_FLAG(std::string, checkpoint, "",
          "Native engine: model directory (config.json, *.safetensors, tokenizer.json).");
ABSL_FLAG(std::string, model_id, "", "Upstream model id reported in WorkerInfo (native engine).");
ABSL_FLAG(bool, random_weights, false,
          "Native engine: instead of --checkpoint, build the model --model_config describes at its "
          "full size with every tensor RANDOM, generated from --random_weights_seed (on a GPU, "
          "filled in device memory). A measuring tool, like the synthetic engine: the answers are "
          "meaningless, and with random router weights expert load is about uniform. Shown in "
          "WorkerInfo's model_id (random-weights/...), the start-up log and tandem_worker_info's "
          "weights=\"random\" label.");
ABSL_FLAG(std::string, model_config, "",
          "--random_weights: the config.json to build (e.g. "
          "workers/model/configs/qwen3_5_moe/config.json).");
ABSL_FLAG(uint64_t, random_weights_seed, 1,
          "--random_weights: the seed. tandem-make-checkpoint --model_config=... --seed=N writes "
          "the same weights to disk.");
ABSL_FLAG(std::string, tokenizer, "",
          "Native engine: tokenizer.json to use (default: the checkpoint's, or with "
          "--random_weights the one next to --model_config).");
ABSL_FLAG(int64_t, memory_budget, 4ll << 30,
          "Native engine: bytes of KV cache and recurrent state for all sequences together; "
          "admission waits when it is full.");
ABSL_FLAG(int32_t, native_threads, 0, "Native engine: CPU threads for matrix products (0: all).");
ABSL_FLAG(double, gpu_memory_fraction, 0.9,
          "Native engine on a GPU: share of the memory left after the weights for KV blocks and "
          "recurrent-state slots.");
ABSL_FLAG(int64_t, gpu_max_image_patches, 0,
          "Native engine on a GPU with a vision encoder: most patches of one image the encoder's "
          "scratch (reserved at start-up, ~33 KB a patch for the released model) holds; 0: the "
          "image processor's max_pixels / patch_size^2.");
ABSL_FLAG(bool, cuda_graphs, true,
          "Native engine on a GPU: replay each decode batch size as a captured CUDA graph.");
ABSL_FLAG(std::string, engine, "",
          "Engine, required: native (the model in --checkpoint, or --random_weights) or "
          "synthetic (the load simulator for tests and benchmarks; not a real model).");
ABSL_FLAG(std::string, device, "",
          "Device this process owns: a CUDA ordinal (0, 1, ...) or 'cpu'. Required.");
ABSL_FLAG(std::string, listen, "127.0.0.1:0", "gRPC address; port 0 picks a free port.");
ABSL_FLAG(std::string, metrics_listen, "127.0.0.1:0",
          "Prometheus /metrics address; port 0 picks a free port.");
ABSL_FLAG(int32_t, max_batch_size, 64, "Most sequences in the running batch.");
ABSL_FLAG(int32_t, max_queue, 256,
          "Most requests waiting for a batch slot; beyond it RESOURCE_EXHAUSTED at once.");
ABSL_FLAG(int32_t, image_threads, 2,
          "Threads that decode and resize request images, apart from gRPC's (which answer "
          "health checks and text requests); they run at a lower CPU priority (nice +10).");
ABSL_FLAG(int32_t, image_queue, 16,
          "Requests with images that may wait for an image thread; beyond them "
          "RESOURCE_EXHAUSTED at once.");
ABSL_FLAG(int32_t, max_output_tokens, 0, "Cap on max_tokens; 0 keeps the model's (32768).");
ABSL_FLAG(int32_t, max_context_tokens, 0, "Cap on prompt + output tokens; 0 keeps the model's.");
ABSL_FLAG(int64_t, max_request_bytes, 48ll << 20,
          "Largest request message accepted, in bytes: at least the gateway's "
          "--max_request_bytes plus 1 MiB (the gateway adds its routing fields to what a caller "
          "sent).");
ABSL_FLAG(double, synthetic_time_scale, 1.0,
          "Synthetic engine: multiplies simulated step times; 0 means no delay.");
ABSL_FLAG(int32_t, synthetic_output_tokens, 0,
          "Synthetic engine: fixed answer length in tokens; 0 derives it from the prompt.");
ABSL_FLAG(absl::Duration, synthetic_load_time, absl::ZeroDuration(),
          "Synthetic engine: simulated model load time before the worker turns READY.");
ABSL_FLAG(absl::Duration, drain_timeout, absl::Seconds(30),
          "On SIGTERM/SIGINT, how long in-flight requests may take to finish.");
ABSL_FLAG(absl::Duration, device_refresh_interval, absl::Seconds(1),
          "How often device memory is re-read into metrics and worker info.");
namespace tandem::workers {
namespace {

absl::StatusOr<EngineKind> EngineFromFlag() {
  const std::string name = absl::GetFlag(FLAGS_engine);
  if (name == "native") return EngineKind::kNative;
  if (name == "synthetic") return EngineKind::kSynthetic;
  if (name.empty()) {
    return absl::InvalidArgumentError(
        "--engine is required: native (the model from --checkpoint) or synthetic (the load "
        "simulator: filler text, not a model)");
  }
  return absl::InvalidArgumentError(
      absl::StrCat("--engine=", name,
                   ": unknown engine; expected native (the model from --checkpoint) or "
                   "synthetic (the load simulator)"));
}

void ReadEngine(WorkerConfig& c) {
  c.model = absl::GetFlag(FLAGS_model);
  c.device = absl::GetFlag(FLAGS_device);
  c.weights.checkpoint = absl::GetFlag(FLAGS_checkpoint);
  c.weights.random_weights = absl::GetFlag(FLAGS_random_weights);
  c.weights.model_config = absl::GetFlag(FLAGS_model_config);
  c.weights.seed = absl::GetFlag(FLAGS_random_weights_seed);
  c.weights.tokenizer = absl::GetFlag(FLAGS_tokenizer);
  c.model_id = absl::GetFlag(FLAGS_model_id);
  c.memory_budget = absl::GetFlag(FLAGS_memory_budget);
  c.native_threads = absl::GetFlag(FLAGS_native_threads);
  c.gpu_memory_fraction = absl::GetFlag(FLAGS_gpu_memory_fraction);
  c.cuda_graphs = absl::GetFlag(FLAGS_cuda_graphs);
  c.gpu_max_image_patches = absl::GetFlag(FLAGS_gpu_max_image_patches);
  c.synthetic.time_scale = absl::GetFlag(FLAGS_synthetic_time_scale);
  c.synthetic.output_tokens = absl::GetFlag(FLAGS_synthetic_output_tokens);
  c.synthetic_load_time = absl::GetFlag(FLAGS_synthetic_load_time);
}

void ReadServing(WorkerConfig& c) {
  c.max_output_tokens = absl::GetFlag(FLAGS_max_output_tokens);
  c.max_context_tokens = absl::GetFlag(FLAGS_max_context_tokens);
  c.max_request_bytes = absl::GetFlag(FLAGS_max_request_bytes);
  c.scheduler.max_batch_size = absl::GetFlag(FLAGS_max_batch_size);
  c.scheduler.max_queue = absl::GetFlag(FLAGS_max_queue);
  c.image_pool.threads = absl::GetFlag(FLAGS_image_threads);
  c.image_pool.queue = absl::GetFlag(FLAGS_image_queue);
  c.listen = absl::GetFlag(FLAGS_listen);
  c.metrics_listen = absl::GetFlag(FLAGS_metrics_listen);
  c.drain_timeout = absl::GetFlag(FLAGS_drain_timeout);
  c.device_refresh_interval = absl::GetFlag(FLAGS_device_refresh_interval);
}

}  // namespace

absl::StatusOr<WorkerConfig> WorkerConfigFromFlags() {
  WorkerConfig c;
  ASSIGN_OR_RETURN(c.engine, EngineFromFlag());
  ReadEngine(c);
  ReadServing(c);
  ASSIGN_OR_RETURN(c.server_credentials,
                   ServerCredentialsFromFlags("tandem-worker", /*require_client_ca=*/true));
  c.server_transport = ServerTransportFromFlags();
  ASSIGN_OR_RETURN(c.metrics_server, MetricsServerOptionsFromFlags());
  c.metrics_transport = MetricsTransportFromFlags();
  ASSIGN_OR_RETURN(c.limits, RequestLimitsFromFlags());
  return c;
}

}  // namespace tandem::workers
