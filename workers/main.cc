// tandem-worker: one process per accelerator, serving one model.
#include <grpcpp/grpcpp.h>

#include <chrono>
#include <cstdio>
#include <memory>
#include <thread>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "common/grpc_server.h"
#include "common/limit_flags.h"
#include "common/metrics_server.h"
#include "common/process.h"
#include "common/server_tls_flags.h"
#include "spdlog/spdlog.h"
#include "workers/device.h"
#include "workers/native/kernels.h"
#include "workers/native_engine.h"
#ifdef TANDEM_HAVE_CUDA_ENGINE
#include "workers/cuda/cuda_engine.h"
#endif
#include "workers/scheduler.h"
#include "workers/synthetic_engine.h"
#include "workers/weights_source.h"
#include "workers/worker_metrics.h"
#include "workers/worker_service.h"

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
          "workers/models/qwen3_5_moe/config.json).");
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
ABSL_FLAG(int32_t, max_output_tokens, 0, "Cap on max_tokens; 0 keeps the model's (32768).");
ABSL_FLAG(int32_t, max_context_tokens, 0, "Cap on prompt + output tokens; 0 keeps the model's.");
ABSL_FLAG(int64_t, max_request_bytes, 32ll << 20, "Largest request message accepted, in bytes.");
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
ABSL_FLAG(std::string, log_level, "info", "trace, debug, info, warn, error.");

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

int Run() {
  const std::string model = absl::GetFlag(FLAGS_model);
  if (model.empty()) Fatal("--model is required (qwen or nemotron)");
  const std::string device_flag = absl::GetFlag(FLAGS_device);
  if (device_flag.empty()) Fatal("--device is required: a CUDA ordinal such as 0, or 'cpu'");
  const std::string engine_name = absl::GetFlag(FLAGS_engine);
  if (engine_name.empty()) {
    Fatal("--engine is required: native (the model from --checkpoint) or synthetic (the load "
          "simulator: filler text, not a model)");
  }
  if (engine_name != "synthetic" && engine_name != "native") {
    Fatal(absl::StrCat("--engine=", engine_name,
                       ": unknown engine; expected native (the model from --checkpoint) or "
                       "synthetic (the load simulator)"));
  }
  if (absl::GetFlag(FLAGS_max_batch_size) < 1) Fatal("--max_batch_size must be >= 1");
  if (absl::GetFlag(FLAGS_max_queue) < 0) Fatal("--max_queue must be >= 0");
  if (absl::GetFlag(FLAGS_synthetic_time_scale) < 0) Fatal("--synthetic_time_scale must be >= 0");

  // Transport and limits are checked before a checkpoint is loaded: bad flags fail in
  // milliseconds, not after minutes of weight loading.
  auto credentials = ServerCredentialsFromFlags("tandem-worker", /*require_client_ca=*/true);
  if (!credentials.ok()) Fatal(std::string(credentials.status().message()));
  auto metrics_options = MetricsServerOptionsFromFlags();
  if (!metrics_options.ok()) Fatal(std::string(metrics_options.status().message()));
  auto limits = RequestLimitsFromFlags();
  if (!limits.ok()) Fatal(std::string(limits.status().message()));

  auto device = OpenDevice(device_flag);
  if (!device.ok()) Fatal(std::string(device.status().message()));

  // The native engine's weights: a checkpoint, or generated ones (--random_weights).
  WeightsSource weights;
  weights.checkpoint = absl::GetFlag(FLAGS_checkpoint);
  weights.random_weights = absl::GetFlag(FLAGS_random_weights);
  weights.model_config = absl::GetFlag(FLAGS_model_config);
  weights.seed = absl::GetFlag(FLAGS_random_weights_seed);
  weights.tokenizer = absl::GetFlag(FLAGS_tokenizer);
  const std::string checkpoint = weights.random_weights ? weights.model_config : weights.checkpoint;
  if (weights.random_weights) {
    if (engine_name != "native") Fatal("--random_weights needs --engine=native");
    if (!weights.checkpoint.empty()) {
      Fatal("--random_weights builds the model from --model_config; drop --checkpoint");
    }
    if (weights.model_config.empty()) {
      Fatal(
          "--random_weights needs --model_config=PATH (a config.json, e.g. "
          "workers/models/qwen3_5_moe/config.json)");
    }
  } else if (!weights.model_config.empty()) {
    Fatal("--model_config is for --random_weights (a checkpoint brings its own config.json)");
  }

  std::unique_ptr<Engine> engine_holder;
  bool random_weights = false;
  if (engine_name == "native") {
    if (checkpoint.empty()) {
      Fatal(
          "--engine=native needs --checkpoint=DIR (a model directory), or --random_weights "
          "--model_config=PATH");
    }
    if (device->id != "cpu") {
#ifdef TANDEM_HAVE_CUDA_ENGINE
      cuda::CudaEngineOptions options;
      options.model_name = model;
      options.model_id = absl::GetFlag(FLAGS_model_id);
      options.device = device->cuda_ordinal;
      options.memory_fraction = absl::GetFlag(FLAGS_gpu_memory_fraction);
      options.max_sequences = absl::GetFlag(FLAGS_max_batch_size);
      options.max_output_tokens = absl::GetFlag(FLAGS_max_output_tokens);
      options.max_context_tokens = absl::GetFlag(FLAGS_max_context_tokens);
      options.cuda_graphs = absl::GetFlag(FLAGS_cuda_graphs);
      const auto start = std::chrono::steady_clock::now();
      auto engine = cuda::LoadCudaEngine(weights, options, &random_weights);
      if (!engine.ok()) Fatal(std::string(engine.status().message()));
      spdlog::info("loaded {} onto {} in {:.2f}s; sequence memory budget {} bytes", checkpoint,
                   device->id,
                   std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(),
                   (*engine)->MemoryBudgetBytes());
      if (random_weights) WarnRandomWeights(weights, (*engine)->Info().model_id);
      engine_holder = std::move(*engine);
#else
      Fatal(absl::StrCat("--engine=native --device=", device_flag,
                         ": this build has no CUDA engine (built without nvcc); use --device=cpu"));
#endif
    }
  }
  if (engine_name == "native" && engine_holder == nullptr) {
    if (absl::GetFlag(FLAGS_memory_budget) < 1) Fatal("--memory_budget must be >= 1 byte");
    NativeEngineOptions options;
    options.model_name = model;
    options.model_id = absl::GetFlag(FLAGS_model_id);
    options.memory_budget_bytes = absl::GetFlag(FLAGS_memory_budget);
    options.max_output_tokens = absl::GetFlag(FLAGS_max_output_tokens);
    options.max_context_tokens = absl::GetFlag(FLAGS_max_context_tokens);
    native::SetKernelThreads(absl::GetFlag(FLAGS_native_threads));
    const auto start = std::chrono::steady_clock::now();
    auto native = LoadNativeEngine(weights, options, &random_weights);
    if (!native.ok()) Fatal(std::string(native.status().message()));
    spdlog::info("loaded {} from {} in {:.2f}s (KV {} bytes/token, state {} bytes/sequence)",
                 (*native)->model().shape().architecture, checkpoint,
                 std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(),
                 (*native)->model().shape().kv_bytes_per_token,
                 (*native)->model().shape().state_bytes);
    if (random_weights) WarnRandomWeights(weights, (*native)->Info().model_id);
    engine_holder = std::move(*native);
  } else if (engine_holder == nullptr) {
    auto profile = SyntheticProfileFor(model);
    if (!profile.ok()) Fatal(std::string(profile.status().message()));
    if (int32_t v = absl::GetFlag(FLAGS_max_output_tokens); v > 0) {
      profile->info.max_output_tokens = v;
    }
    if (int32_t v = absl::GetFlag(FLAGS_max_context_tokens); v > 0) {
      profile->info.max_context_tokens = v;
    }
    SyntheticEngineOptions engine_options;
    engine_options.time_scale = absl::GetFlag(FLAGS_synthetic_time_scale);
    engine_options.output_tokens = absl::GetFlag(FLAGS_synthetic_output_tokens);
    engine_holder = std::make_unique<SyntheticEngine>(*profile, engine_options, Clock::Real());
  }
  Engine& engine = *engine_holder;
  const EngineInfo& info = engine.Info();

  auto registry = std::make_shared<prometheus::Registry>();
  WorkerMetrics metrics(*registry,
                        {info.model_name, info.model_id, info.engine, device->id, device->name,
                         engine_name != "native" ? "none"
                         : random_weights        ? "random"
                                                 : "checkpoint"});

  metrics.sequence_memory_budget.Set(static_cast<double>(engine.MemoryBudgetBytes()));
  Scheduler scheduler(&engine, &metrics, Clock::Real(),
                      {absl::GetFlag(FLAGS_max_batch_size), absl::GetFlag(FLAGS_max_queue)});
  WorkerService service(&engine, &scheduler, &metrics, *device, *limits);

  auto metrics_server =
      MetricsServer::Start(absl::GetFlag(FLAGS_metrics_listen), registry, *metrics_options);
  if (!metrics_server.ok()) Fatal(std::string(metrics_server.status().message()));

  {
    const std::string& a = (*metrics_server)->Address();
    int port = 0;
    if (absl::SimpleAtoi(a.substr(a.rfind(':') + 1), &port)) {
      service.SetMetricsEndpoint(port, std::string((*metrics_server)->Scheme()) == "https");
    }
  }

  GrpcServerOptions server_options;
  server_options.listen = absl::GetFlag(FLAGS_listen);
  server_options.credentials = *credentials;
  HealthService health;
  // Both names answer: "" (the whole server) and the worker service.
  health.SetServingStatus("", false);
  health.SetServingStatus("tandem.v1.Worker", false);
  server_options.services = {&service};
  server_options.health = &health;
  server_options.max_receive_message_bytes =
      static_cast<int>(std::min<int64_t>(absl::GetFlag(FLAGS_max_request_bytes), INT32_MAX));
  // Clients re-resolve DNS when connections age out, so new gateway replicas spread load.
  server_options.max_connection_age_ms = 5 * 60 * 1000;
  auto grpc_server = StartGrpcServer(server_options);
  if (!grpc_server.ok()) Fatal(std::string(grpc_server.status().message()));
  grpc::Server* server = grpc_server->server.get();
  const std::string& grpc_address = grpc_server->address;

  // Listening before the model is ready lets health checks and WorkerInfo report LOADING.
  AnnounceListening("tandem-worker", grpc_address, (*metrics_server)->Address());

  // The synthetic engine has no weights; it can simulate a load time. A native engine loads here.
  std::this_thread::sleep_for(absl::ToChronoMilliseconds(absl::GetFlag(FLAGS_synthetic_load_time)));
  scheduler.Start();
  service.SetState(tandem::v1::WorkerInfo::READY);
  metrics.ready.Set(1);
  health.SetAllServingStatus(true);
  spdlog::info(
      "serving model={} ({}) engine={}{} device={} ({}) grpc={} transport={} metrics={} "
      "metrics_transport={}",
      info.model_name, info.model_id, info.engine,
      info.engine == "synthetic" ? " [LOAD SIMULATOR: not a real model]"
      : random_weights
          ? " [RANDOM WEIGHTS: a measuring tool, meaningless answers; router weights random: "
            "expert load is about uniform]"
          : "",
      device->id, device->name, grpc_address, ServerTransportFromFlags(),
      (*metrics_server)->Address(), MetricsTransportFromFlags());

  std::atomic<bool> done{false};
  std::mutex refresh_mu;
  std::condition_variable refresh_cv;
  std::thread refresher([&] {
    const auto interval = absl::ToChronoMilliseconds(absl::GetFlag(FLAGS_device_refresh_interval));
    std::unique_lock<std::mutex> l(refresh_mu);
    while (!refresh_cv.wait_for(l, interval, [&] { return done.load(); })) service.RefreshDevice();
  });

  const int sig = WaitForTerminationSignal();
  spdlog::info("signal {}: draining (health NOT_SERVING, up to {})", sig,
               absl::FormatDuration(absl::GetFlag(FLAGS_drain_timeout)));
  service.SetState(tandem::v1::WorkerInfo::DRAINING);
  health.SetAllServingStatus(false);
  metrics.ready.Set(0);
  scheduler.Drain();
  const auto drain_deadline = std::chrono::steady_clock::now() +
                              absl::ToChronoMilliseconds(absl::GetFlag(FLAGS_drain_timeout));
  if (!scheduler.WaitIdle(drain_deadline)) spdlog::warn("drain timed out; ending what is left");
  scheduler.Stop();
  StopGrpcServer(server, &health, /*grace_seconds=*/5);
  {
    std::lock_guard<std::mutex> l(refresh_mu);
    done = true;
  }
  refresh_cv.notify_all();
  refresher.join();
  spdlog::info("stopped");
  MetricsServer::KeepUntilExit(std::move(*metrics_server));
  return 0;
}

}  // namespace
}  // namespace tandem::workers

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage("tandem-worker --model=qwen|nemotron --device=N|cpu [flags]");
  absl::ParseCommandLine(argc, argv);
  // Debian's Abseil checks every Mutex acquisition for lock-order cycles (~2% of the gateway's
  // CPU in perf); lock-order bugs are for a ThreadSanitizer build to find.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  tandem::BlockTerminationSignals();
  tandem::InitLogging("tandem-worker", absl::GetFlag(FLAGS_log_level));
  return tandem::workers::Run();
}
