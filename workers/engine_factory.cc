#include "workers/engine_factory.h"

#include <chrono>

#include "absl/strings/str_cat.h"
#include "common/clock.h"
#include "spdlog/spdlog.h"
#include "workers/cpu/cpu_engine.h"
#include "workers/cpu/cpu_kernels.h"
#include "workers/model/architecture.h"
#include "workers/simulator/synthetic_engine.h"
#include "workers/simulator/synthetic_profile.h"
#ifdef TANDEM_HAVE_UPSTREAM_ENGINE
#include "workers/upstream/upstream_engine.h"
#endif
#ifdef TANDEM_HAVE_CUDA_ENGINE
#include "workers/cuda/cuda_engine.h"
#endif

namespace tandem::workers {
namespace {

// Random weights are never silent: one warning at start, besides WorkerInfo's model_id and the
// info metric's weights label.
void WarnRandomWeights(const WeightsSource& weights, const std::string& model_id) {
  if (weights.random_weights) {
    spdlog::warn(
        "RANDOM WEIGHTS (--random_weights, seed {}): {} built at its full size from {} with every "
        "tensor generated; a measuring tool, the answers are meaningless; router weights random: "
        "expert load is about uniform",
        weights.seed, model_id, weights.model_config);
  } else {
    spdlog::warn(
        "RANDOM WEIGHTS: {} was written by tandem-make-checkpoint ({}); the answers are "
        "meaningless random-weight output (point --checkpoint at real weights); router weights "
        "random: expert load is about uniform",
        weights.checkpoint, model_id);
  }
}

double SecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

const std::string& WeightsPath(const WeightsSource& w) {
  return w.random_weights ? w.model_config : w.checkpoint;
}

absl::StatusOr<LoadedEngine> MakeCudaEngine(const WorkerConfig& config,
                                            [[maybe_unused]] const DeviceDescription& device) {
#ifdef TANDEM_HAVE_CUDA_ENGINE
  cuda::CudaEngineOptions options;
  options.model_name = config.model;
  options.model_id = config.model_id;
  options.device = device.cuda_ordinal;
  options.memory_fraction = config.gpu_memory_fraction;
  options.max_sequences = config.scheduler.max_batch_size;
  options.max_output_tokens = config.max_output_tokens;
  options.max_context_tokens = config.max_context_tokens;
  options.cuda_graphs = config.cuda_graphs;
  options.max_image_patches = config.gpu_max_image_patches;
  const auto start = std::chrono::steady_clock::now();
  bool random_weights = false;
  auto engine = cuda::LoadCudaEngine(config.weights, options, &random_weights);
  if (!engine.ok()) return engine.status();
  spdlog::info("loaded {} onto {} in {:.2f}s; sequence memory budget {} bytes",
               WeightsPath(config.weights), device.id, SecondsSince(start),
               (*engine)->MemoryBudgetBytes());
  if (random_weights) WarnRandomWeights(config.weights, (*engine)->Info().model_id);
  return LoadedEngine{std::move(*engine), random_weights ? "random" : "checkpoint", nullptr};
#else
  return absl::FailedPreconditionError(
      absl::StrCat("--engine=native --device=", config.device,
                   ": this build has no CUDA engine (built without nvcc); use --device=cpu"));
#endif
}

absl::StatusOr<LoadedEngine> MakeCpuEngine(const WorkerConfig& config) {
  CpuEngineOptions options;
  options.model_name = config.model;
  options.model_id = config.model_id;
  options.memory_budget_bytes = config.memory_budget;
  options.prefix_cache_bytes = config.prefix_cache_bytes;
  options.prefix_block_tokens = config.prefix_block_tokens;
  options.max_output_tokens = config.max_output_tokens;
  options.max_context_tokens = config.max_context_tokens;
  cpu::SetKernelThreads(config.native_threads);
  const auto start = std::chrono::steady_clock::now();
  bool random_weights = false;
  auto engine = LoadCpuEngine(config.weights, options, &random_weights);
  if (!engine.ok()) return engine.status();
  const model::ModelShape& shape = (*engine)->model().shape();
  spdlog::info(
      "loaded {} from {} in {:.2f}s (weights quantization {}, KV {} bytes/token, state {} "
      "bytes/sequence)",
      std::string(model::ArchitectureName(shape.architecture)), WeightsPath(config.weights),
      SecondsSince(start), (*engine)->Info().quantization, shape.kv_bytes_per_token,
      shape.state_bytes);
  if (random_weights) WarnRandomWeights(config.weights, (*engine)->Info().model_id);
  return LoadedEngine{std::move(*engine), random_weights ? "random" : "checkpoint", nullptr};
}

absl::StatusOr<LoadedEngine> MakeSyntheticEngine(const WorkerConfig& config) {
  absl::StatusOr<SyntheticProfile> profile = SyntheticProfileFor(config.model);
  if (!profile.ok()) return profile.status();
  if (config.max_output_tokens > 0) profile->info.max_output_tokens = config.max_output_tokens;
  if (config.max_context_tokens > 0) profile->info.max_context_tokens = config.max_context_tokens;
  return LoadedEngine{std::make_unique<SyntheticEngine>(*profile, config.synthetic, Clock::Real()),
                      "none", nullptr};
}

// What the gateway is told about an engine server's model: the model's own limits (those of
// the simulator's profile, which carries both models' real ones) unless capped by flags; another
// model's come from the flags alone (WorkerConfig::Validate requires them), without reasoning.
absl::StatusOr<LoadedEngine> MakeUpstreamEngine(const WorkerConfig& config) {
  absl::StatusOr<SyntheticProfile> profile = SyntheticProfileFor(config.model);
  EngineInfo info;
  if (profile.ok()) {
    info = profile->info;
  } else {
    info.model_name = config.model;
    info.model_id = config.model;
  }
  info.engine = absl::StrCat("upstream:", config.upstream.profile.name);
  info.model_id = !config.upstream.served_model.empty() ? config.upstream.served_model
                  : !config.model_id.empty()            ? config.model_id
                                                        : info.model_id;
  info.vision = config.upstream.vision;
  info.quantization = "unknown";
  if (config.max_output_tokens > 0) info.max_output_tokens = config.max_output_tokens;
  if (config.max_context_tokens > 0) info.max_context_tokens = config.max_context_tokens;
#ifdef TANDEM_HAVE_UPSTREAM_ENGINE
  absl::StatusOr<std::unique_ptr<upstream::UpstreamEngine>> engine =
      upstream::UpstreamEngine::Create(config.upstream, std::move(info));
  if (!engine.ok()) return engine.status();
  LoadedEngine loaded;
  loaded.upstream = *std::move(engine);
  loaded.weights = "upstream";
  return loaded;
#else
  return absl::FailedPreconditionError(
      "--engine=upstream: this build has no upstream engine (built with "
      "-DTANDEM_UPSTREAM_ENGINE=OFF, as the GPU kit is)");
#endif
}

}  // namespace

absl::StatusOr<LoadedEngine> MakeEngine(const WorkerConfig& config,
                                        const DeviceDescription& device) {
  if (config.engine == EngineKind::kSynthetic) return MakeSyntheticEngine(config);
  if (config.engine == EngineKind::kUpstream) return MakeUpstreamEngine(config);
  if (device.id != "cpu") return MakeCudaEngine(config, device);
  return MakeCpuEngine(config);
}

}  // namespace tandem::workers
