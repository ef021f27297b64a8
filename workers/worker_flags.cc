// The flags of tandem-worker and the WorkerConfig they make. Compiled into the binary only, so
// that libraries and tests do not carry these flags.
#include "workers/worker_flags.h"

#include <cstdint>
#include <string>

#include "absl/flags/flag.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/file.h"
#include "common/limit_flags.h"
#include "common/server_tls_flags.h"
#include "common/status_macros.h"
#include "workers/upstream/engine_profile.h"

ABSL_FLAG(std::string, model, "",
          "Model to serve: qwen or nemotron (an upstream worker may serve another name, given "
          "--max_context_tokens and --max_output_tokens).");
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
ABSL_FLAG(int64_t, prefix_cache_bytes, 1ll << 30,
          "Native engine on the CPU: most bytes of prefix-cache snapshots (a sequence's state at a "
          "block boundary: KV so far plus the recurrent and conv states), taken from "
          "--memory_budget only while sequences leave it free; a prompt resumes from its longest "
          "cached prefix. 0 disables the cache.");
ABSL_FLAG(int32_t, prefix_block_tokens, 256,
          "Native engine on the CPU: tokens per prefix-cache block; snapshots are taken at "
          "multiples of it (16 to 65536).");
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
          "Engine, required: native (the model in --checkpoint, or --random_weights), upstream "
          "(an OpenAI-compatible engine server at --upstream_url: vLLM, SGLang, trtllm-serve, "
          "llama-server) or synthetic (the load simulator for tests and benchmarks; not a real "
          "model).");
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
ABSL_FLAG(std::string, upstream_url, "",
          "--engine=upstream: the engine server's base URL, http(s)://HOST:PORT.");
ABSL_FLAG(std::string, upstream_profile, "",
          "--engine=upstream: vllm, sglang, trtllm, llamacpp, openai, or a profile .yaml file "
          "(docs/engines.md).");
ABSL_FLAG(std::string, upstream_model, "",
          "--engine=upstream: the model id the engine must serve (its /v1/models); empty: the "
          "one it serves. Also reported as the worker's model id.");
ABSL_FLAG(std::string, upstream_command, "",
          "--engine=upstream: start the engine server as the worker's child with this shell "
          "command (CUDA_VISIBLE_DEVICES from --device), restart it when it dies, stop it with "
          "the worker; --upstream_url is where that command makes it listen.");
ABSL_FLAG(absl::Duration, upstream_stop_timeout, absl::Seconds(30),
          "--engine=upstream with --upstream_command: time the engine has to exit after SIGTERM "
          "before SIGKILL.");
ABSL_FLAG(std::string, upstream_api_key_file, "",
          "--engine=upstream: a file holding the engine's API key (sent as a bearer token).");
ABSL_FLAG(std::string, upstream_ca, "",
          "--engine=upstream with https: PEM roots that verify the engine (default: system's).");
ABSL_FLAG(std::string, upstream_vision, "auto",
          "--engine=upstream: the engine takes images: on, off, or auto (on for qwen).");
ABSL_FLAG(int32_t, upstream_max_in_flight, 64,
          "--engine=upstream: most requests in flight to the engine at once; more wait in the "
          "worker's queue (--max_queue).");
ABSL_FLAG(absl::Duration, upstream_connect_timeout, absl::Seconds(5),
          "--engine=upstream: time to connect to the engine.");
ABSL_FLAG(absl::Duration, upstream_idle_timeout, absl::Seconds(60),
          "--engine=upstream: a call with no byte from the engine for this long ends UNAVAILABLE.");
ABSL_FLAG(absl::Duration, upstream_health_interval, absl::Seconds(1),
          "--engine=upstream: how often the engine's health endpoint is checked.");
ABSL_FLAG(absl::Duration, upstream_health_timeout, absl::Seconds(10),
          "--engine=upstream: time one health check may take (a busy engine answers slowly).");
ABSL_FLAG(int32_t, upstream_health_failures, 3,
          "--engine=upstream: failed health checks in a row that make a ready engine dead.");
ABSL_FLAG(int32_t, upstream_health_successes, 2,
          "--engine=upstream: good health checks in a row that make a dead engine ready again.");
ABSL_FLAG(absl::Duration, upstream_metrics_interval, absl::Milliseconds(250),
          "--engine=upstream: how often the engine's /metrics is read (at least 50ms).");
ABSL_FLAG(absl::Duration, upstream_probe_interval, absl::ZeroDuration(),
          "--engine=upstream: also ask the engine for one token at most this often while nothing "
          "is in flight; a failed answer is a failed health check, and the first ready needs a "
          "good one (0: no probe).");
ABSL_FLAG(int32_t, upstream_engine_series, 5000,
          "--engine=upstream: most of the engine's own series served again on the worker's "
          "/metrics, labelled tandem_engine=PROFILE (0: none).");
ABSL_FLAG(absl::Duration, upstream_metrics_stale, absl::Seconds(5),
          "--engine=upstream: engine metrics older than this are stale and not used.");

namespace tandem::workers {
namespace {

absl::StatusOr<EngineKind> EngineFromFlag() {
  const std::string name = absl::GetFlag(FLAGS_engine);
  if (name == "native") return EngineKind::kNative;
  if (name == "synthetic") return EngineKind::kSynthetic;
  if (name == "upstream") return EngineKind::kUpstream;
  if (name.empty()) {
    return absl::InvalidArgumentError(
        "--engine is required: native (the model from --checkpoint), upstream (an engine "
        "server at --upstream_url) or synthetic (the load simulator: filler text, not a model)");
  }
  return absl::InvalidArgumentError(
      absl::StrCat("--engine=", name,
                   ": unknown engine; expected native (the model from --checkpoint), upstream "
                   "(an engine server at --upstream_url) or synthetic (the load simulator)"));
}

absl::Status ReadUpstream(WorkerConfig& c) {
  upstream::UpstreamOptions& u = c.upstream;
  u.url = absl::GetFlag(FLAGS_upstream_url);
  const std::string profile = absl::GetFlag(FLAGS_upstream_profile);
  if (c.engine != EngineKind::kUpstream) {
    if (!u.url.empty() || !profile.empty()) {
      return absl::InvalidArgumentError(
          "--upstream_url and --upstream_profile need --engine=upstream");
    }
    return absl::OkStatus();
  }
  if (profile.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--engine=upstream needs --upstream_profile: ",
        absl::StrJoin(upstream::BuiltinProfileNames(), ", "), ", or a profile .yaml file"));
  }
  absl::StatusOr<upstream::EngineProfile> p = upstream::LoadEngineProfile(profile);
  if (!p.ok())
    return absl::InvalidArgumentError(absl::StrCat("--upstream_profile: ", p.status().message()));
  u.profile = *std::move(p);
  u.served_model = absl::GetFlag(FLAGS_upstream_model);
  u.command = absl::GetFlag(FLAGS_upstream_command);
  u.device = c.device;
  u.stop_timeout = absl::GetFlag(FLAGS_upstream_stop_timeout);
  if (const std::string key_file = absl::GetFlag(FLAGS_upstream_api_key_file); !key_file.empty()) {
    absl::StatusOr<std::string> key = ReadFileToString(key_file, 4096, "");
    if (!key.ok())
      return absl::InvalidArgumentError(
          absl::StrCat("--upstream_api_key_file: ", key.status().message()));
    u.api_key = std::string(absl::StripAsciiWhitespace(*key));
  }
  u.tls.ca = absl::GetFlag(FLAGS_upstream_ca);
  const std::string vision = absl::GetFlag(FLAGS_upstream_vision);
  if (vision != "auto" && vision != "on" && vision != "off") {
    return absl::InvalidArgumentError(
        absl::StrCat("--upstream_vision=", vision, ": expected on, off or auto"));
  }
  u.vision = vision == "on" || (vision == "auto" && c.model == "qwen");
  u.max_in_flight = absl::GetFlag(FLAGS_upstream_max_in_flight);
  u.max_queue = absl::GetFlag(FLAGS_max_queue);
  u.connect_timeout = absl::GetFlag(FLAGS_upstream_connect_timeout);
  u.idle_timeout = absl::GetFlag(FLAGS_upstream_idle_timeout);
  u.health_interval = absl::GetFlag(FLAGS_upstream_health_interval);
  u.health_timeout = absl::GetFlag(FLAGS_upstream_health_timeout);
  u.health_failures = absl::GetFlag(FLAGS_upstream_health_failures);
  u.health_successes = absl::GetFlag(FLAGS_upstream_health_successes);
  u.metrics_interval = absl::GetFlag(FLAGS_upstream_metrics_interval);
  u.metrics_stale = absl::GetFlag(FLAGS_upstream_metrics_stale);
  u.engine_series = absl::GetFlag(FLAGS_upstream_engine_series);
  u.probe_interval = absl::GetFlag(FLAGS_upstream_probe_interval);
  return absl::OkStatus();
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
  c.prefix_cache_bytes = absl::GetFlag(FLAGS_prefix_cache_bytes);
  c.prefix_block_tokens = absl::GetFlag(FLAGS_prefix_block_tokens);
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
  RETURN_IF_ERROR(ReadUpstream(c));
  ASSIGN_OR_RETURN(c.server_credentials,
                   ServerCredentialsFromFlags("tandem-worker", /*require_client_ca=*/true));
  c.server_transport = ServerTransportFromFlags();
  ASSIGN_OR_RETURN(c.metrics_server, MetricsServerOptionsFromFlags());
  c.metrics_transport = MetricsTransportFromFlags();
  ASSIGN_OR_RETURN(c.limits, RequestLimitsFromFlags());
  return c;
}

}  // namespace tandem::workers
