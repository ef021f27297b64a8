// CUDA engine speed against what the hardware allows. For each decode batch size and context
// length: ms per step and tokens/s, beside the step's bound (cuda_bench_cost.h: the bytes it must
// move through HBM at peak bandwidth, or its FLOPs at the BF16 tensor-core peak if that is
// longer); for each prompt length: prefill tokens/s and time to first token, beside theirs.
// Needs a GPU; without one it prints "no CUDA device" and exits 0 (1 in the logits mode).
//
// The model: --model_config builds the full model of a config.json
// (workers/model/configs/*/config.json) with random weights generated on the device (router weights
// random: expert load is about uniform, which the bound assumes too); --checkpoint loads one (e.g.
// the real layer shapes with fewer layers from tandem-make-checkpoint; --layers_full extrapolates
// per layer).
//
// Decode context is filled synthetically: the KV and state pools are zeroed and every sequence
// feeds its token at position `context`, so a step reads exactly the KV and state bytes a real
// context of that length makes it read (their values do not change the bytes; each sequence feeds
// a different token, so routing spreads as over real text). A prefill per sequence would cost
// minutes at 64 x 16K tokens. Configurations that do not fit the device's
// memory, or the run's time budget (--budget_s), are skipped with a line saying why.
//
//   cuda_benchmark --model_config=workers/model/configs/qwen3_5_moe/config.json [--json=FILE]
//   cuda_benchmark --checkpoint=DIR --layers_full=40 --batches=1,64 --prefill_tokens=8192
//   cuda_benchmark --checkpoint=DIR --logits_prompts=IN.jsonl --logits_out=PREFIX  (logits mode:
//       cuda_bench_logits.h; for scripts/gpu_kit/compare_transformers.py)
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/status_macros.h"
#include "tests/bench/cuda_bench_cost.h"
#include "tests/bench/cuda_bench_device.h"
#include "tests/bench/cuda_bench_logits.h"
#include "workers/cuda/cuda_model.h"
#include "workers/cuda/model_common.h"
#include "workers/model/random_checkpoint.h"
#include "workers/model/safetensors.h"

ABSL_FLAG(std::string, checkpoint, "",
          "Checkpoint directory (e.g. real layer shapes, few layers).");
ABSL_FLAG(std::string, model_config, "",
          "Instead of --checkpoint: a config.json whose model is built at full size with random "
          "weights generated on the device (workers/model/configs/*/config.json).");
ABSL_FLAG(uint64_t, seed, 1, "--model_config: the random weights' seed.");
ABSL_FLAG(int32_t, layers_full, 0, "Layers of the full model for the extrapolation (0: none).");
ABSL_FLAG(double, peak_gbps, 0,
          "Peak HBM bandwidth in GB/s (0: from the device, 2 x memory clock x bus width).");
ABSL_FLAG(double, peak_tflops, 989,
          "Peak dense BF16 tensor-core TFLOP/s (989: H100 and H200 SXM; no device property "
          "says it).");
ABSL_FLAG(std::string, batches, "1,8,64,256", "Decode batch sizes.");
ABSL_FLAG(std::string, contexts, "1024,16384",
          "Decode context lengths: tokens already in each sequence's KV cache and state.");
ABSL_FLAG(std::string, prefill_tokens, "1024,8192,32768",
          "Prompt lengths of the prefill and time-to-first-token measurements.");
ABSL_FLAG(int32_t, iterations, 50,
          "Most decode steps timed per configuration (fewer when steps are slow: about one "
          "second of them).");
ABSL_FLAG(double, budget_s, 120,
          "Wall-clock budget of the run in seconds, loading included: measurements that would "
          "not fit are skipped with a line saying so.");
ABSL_FLAG(std::string, json, "", "Also write the results as JSON here.");
ABSL_FLAG(std::string, logits_prompts, "",
          "Logits mode: JSON lines {\"id\", \"tokens\"} to run instead of measuring "
          "(tests/bench/cuda_bench_logits.h).");
ABSL_FLAG(std::string, logits_out, "", "Logits mode: writes PREFIX.f32 and PREFIX.json.");
ABSL_FLAG(int32_t, logits_steps, 8, "Logits mode: greedy tokens generated per prompt.");
ABSL_FLAG(int32_t, logits_positions, 8,
          "Logits mode: prompt prefixes (lengths 1..N) prefilled for per-position logits.");

namespace tandem::workers::cuda {
namespace {

using bench::Bound;
using bench::ModelCost;
using Clock = std::chrono::steady_clock;
using Json = nlohmann::ordered_json;

// Seconds of decode steps timed per configuration, and the least a configuration needs.
constexpr double kTimedSeconds = 1.0;
constexpr double kMinDecodeSeconds = 3.0;
// Device memory left free beside a measurement's pools: cuBLAS, graphs, the driver.
constexpr int64_t kHeadroomBytes = int64_t{1} << 30;
// Prefill time is predicted from the previous length as t * (T / T_prev)^kPrefillGrowth, to skip
// a length that would not fit the budget: 1.5 allows for attention's quadratic share (up to about
// a third of the time at the shorter length).
constexpr double kPrefillGrowth = 1.5;

double Since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

std::string Format(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
std::string Format(const char* fmt, ...) {
  char buf[512];
  va_list args;
  va_start(args, fmt);
  std::vsnprintf(buf, sizeof(buf), fmt, args);
  va_end(args);
  return buf;
}

absl::StatusOr<std::vector<int64_t>> ParseList(const char* flag, const std::string& text) {
  std::vector<int64_t> out;
  for (absl::string_view part : absl::StrSplit(text, ',', absl::SkipEmpty())) {
    int64_t v = 0;
    if (!absl::SimpleAtoi(part, &v) || v <= 0) {
      return absl::InvalidArgumentError(absl::StrCat("--", flag, "=", text, ": want N,N,..."));
    }
    out.push_back(v);
  }
  return out;
}

struct Loaded {
  std::unique_ptr<model::Checkpoint> ckpt;
  std::unique_ptr<CudaModel> model;
  std::string label;    // what was loaded
  bool random = false;  // random weights (--model_config, or a tandem-make-checkpoint one)
  double load_s = 0;
};

absl::StatusOr<Loaded> Load() {
  const std::string dir = absl::GetFlag(FLAGS_checkpoint);
  const std::string config = absl::GetFlag(FLAGS_model_config);
  if (dir.empty() == config.empty()) {
    return absl::InvalidArgumentError("give --checkpoint or --model_config");
  }
  const Clock::time_point start = Clock::now();
  Loaded l;
  if (!config.empty()) {
    std::ifstream in(config, std::ios::binary);
    std::stringstream text;
    text << in.rdbuf();
    if (!in) return absl::NotFoundError("cannot read " + config);
    l.label = absl::StrCat("random weights (seed ", absl::GetFlag(FLAGS_seed), ") of ", config);
    ASSIGN_OR_RETURN(l.ckpt, model::RandomWeightsCheckpoint(text.str(), absl::GetFlag(FLAGS_seed),
                                                            "random weights of " + config));
  } else {
    l.label = dir;
    ASSIGN_OR_RETURN(l.ckpt, model::Checkpoint::Open(dir));
  }
  const Json cfg = Json::parse(l.ckpt->config_json(), nullptr, /*allow_exceptions=*/false);
  l.random = cfg.is_object() && cfg.value("tandem_random_weights", false);
  ASSIGN_OR_RETURN(l.model, LoadCudaModel(*l.ckpt));
  TANDEM_CUDA_RETURN(cudaDeviceSynchronize(), "model upload");
  l.load_s = Since(start);
  return l;
}

// The cost model's facts about the loaded model (cuda_bench_cost.h).
ModelCost CostOf(const Loaded& l) {
  const CudaModel& m = *l.model;
  return bench::CostOf(*l.ckpt, static_cast<double>(m.weight_bytes()),
                       static_cast<double>(m.kv_block_bytes()) / kKvBlockTokens,
                       static_cast<double>(m.shape().state_bytes));
}

struct Peaks {
  double gbps = 0;
  std::string gbps_source;
  double tflops = 0;
};

Peaks DevicePeaks(int device) {
  Peaks p;
  p.tflops = absl::GetFlag(FLAGS_peak_tflops);
  p.gbps = absl::GetFlag(FLAGS_peak_gbps);
  p.gbps_source = "--peak_gbps";
  if (p.gbps <= 0) {
    int clock_khz = 0, bus_bits = 0;
    cudaDeviceGetAttribute(&clock_khz, cudaDevAttrMemoryClockRate, device);
    cudaDeviceGetAttribute(&bus_bits, cudaDevAttrGlobalMemoryBusWidth, device);
    // Double data rate: two transfers per memory clock.
    p.gbps = 2.0 * clock_khz * 1e3 * (bus_bits / 8.0) / 1e9;
    p.gbps_source = "the device: 2 x memory clock x bus width";
  }
  if (p.gbps <= 0) {  // the attributes unreadable: the H200's data-sheet figure
    p.gbps = 4800;
    p.gbps_source = "H200 data sheet (the device did not say; pass --peak_gbps)";
  }
  return p;
}

// What every measurement shares.
struct Env {
  CudaModel* model = nullptr;
  ModelCost cost;
  Peaks peaks;
  Clock::time_point start;
  double budget_s = 0;
  int iterations = 0;
  cudaStream_t stream = nullptr;
  bool prefill_warm = false;
  double left() const { return budget_s - Since(start); }
};

// Why `bytes` more device memory cannot be had beside kHeadroomBytes; empty when it can.
std::string MemoryShortfall(int64_t bytes) {
  size_t free = 0, total = 0;
  cudaMemGetInfo(&free, &total);
  if (bytes + kHeadroomBytes <= static_cast<int64_t>(free)) return "";
  return Format("skipped: needs %.1f GB of device memory, %.1f GB free", bytes / 1e9, free / 1e9);
}

// Allocates the pools; an allocation the device refuses (fragmentation can defeat
// MemoryShortfall) becomes `skipped`, not an error that ends the run.
absl::Status AllocateOrSkip(bench::Pools& pools, CudaModel& m, int64_t batch, int64_t tokens,
                            std::string* skipped) {
  const absl::Status s = pools.Allocate(m, batch, tokens);
  if (!absl::IsResourceExhausted(s)) return s;
  cudaGetLastError();  // not sticky: clear it so no later launch check reports it
  *skipped = "skipped: " + std::string(s.message());
  return absl::OkStatus();
}

struct DecodeResult {
  int64_t batch = 0, context = 0;
  std::string skipped;  // empty when measured
  double ms = 0;        // per step
  int steps = 0;        // timed
  Bound bound;
  double percent() const { return ms > 0 ? 100.0 * bound.seconds() * 1e3 / ms : 0; }
  double tokens_per_s() const { return ms > 0 ? batch * 1e3 / ms : 0; }
};

absl::StatusOr<DecodeResult> MeasureDecode(Env& env, int64_t batch, int64_t context) {
  CudaModel& m = *env.model;
  DecodeResult r;
  r.batch = batch;
  r.context = context;
  r.bound = bench::DecodeBound(env.cost, batch, context, env.peaks.gbps, env.peaks.tflops);
  const int64_t tokens = context + 1;
  if (tokens > m.shape().max_positions) {
    r.skipped = Format("skipped: beyond max_position_embeddings %d", m.shape().max_positions);
    return r;
  }
  if (env.left() < kMinDecodeSeconds) {
    r.skipped = Format("skipped: %.0f s of the --budget_s time budget left", env.left());
    return r;
  }
  r.skipped = MemoryShortfall(bench::Pools::Bytes(m, batch, tokens));
  if (!r.skipped.empty()) return r;
  bench::Pools pools;
  RETURN_IF_ERROR(AllocateOrSkip(pools, m, batch, tokens, &r.skipped));
  if (!r.skipped.empty()) return r;
  std::vector<int32_t> ids(batch), positions(batch, static_cast<int32_t>(context));
  for (int64_t i = 0; i < batch; ++i) ids[i] = bench::DistinctToken(i, m.shape().vocab_size);
  RETURN_IF_ERROR(pools.SetDecodeInputs(ids, positions));
  bench::GraphStep step;
  RETURN_IF_ERROR(step.Capture(m, pools.Batch(), env.stream));
  ASSIGN_OR_RETURN(const double warm_ms, step.Time(2, env.stream));
  // About kTimedSeconds of steps, at least 3, within --iterations and the budget.
  const double affordable = std::min(kTimedSeconds, env.left() - 1.0) * 1e3 / warm_ms;
  r.steps = static_cast<int>(std::clamp(affordable, 3.0, static_cast<double>(env.iterations)));
  ASSIGN_OR_RETURN(r.ms, step.Time(r.steps, env.stream));
  return r;
}

struct PrefillResult {
  int64_t tokens = 0;
  std::string skipped;
  double prefill_s = 0;  // Prefill(), which ends synchronized
  double ttft_s = 0;     // + the last token's logits to the host and their argmax
  Bound bound;
  double percent(double s) const { return s > 0 ? 100.0 * bound.seconds() / s : 0; }
};

absl::StatusOr<PrefillResult> MeasurePrefill(Env& env, int64_t tokens, double predicted_s) {
  CudaModel& m = *env.model;
  PrefillResult r;
  r.tokens = tokens;
  r.bound = bench::PrefillBound(env.cost, tokens, env.peaks.gbps, env.peaks.tflops);
  if (tokens > m.shape().max_positions) {
    r.skipped = Format("skipped: beyond max_position_embeddings %d", m.shape().max_positions);
    return r;
  }
  if (predicted_s + 2.0 > env.left()) {
    r.skipped = Format("skipped: would take about %.0f s, %.0f s of the --budget_s budget left",
                       predicted_s, env.left());
    return r;
  }
  r.skipped = MemoryShortfall(bench::Pools::Bytes(m, 1, tokens));
  if (!r.skipped.empty()) return r;
  bench::Pools pools;
  RETURN_IF_ERROR(AllocateOrSkip(pools, m, 1, tokens, &r.skipped));
  if (!r.skipped.empty()) return r;
  std::vector<int32_t> prompt(tokens);
  for (int64_t i = 0; i < tokens; ++i) prompt[i] = bench::DistinctToken(i, m.shape().vocab_size);
  const SequenceSlot seq = pools.Sequence(0);
  if (!env.prefill_warm) {  // cuBLAS picks its prefill-shaped kernels on first use
    RETURN_IF_ERROR(m.ResetSlot(0, env.stream));
    RETURN_IF_ERROR(m.Prefill(prompt.data(), std::min<int64_t>(tokens, 512), 0, seq, pools.logits(),
                              env.stream));
    env.prefill_warm = true;
  }
  RETURN_IF_ERROR(m.ResetSlot(0, env.stream));
  TANDEM_CUDA_RETURN(cudaStreamSynchronize(env.stream));
  const Clock::time_point start = Clock::now();
  RETURN_IF_ERROR(m.Prefill(prompt.data(), tokens, 0, seq, pools.logits(), env.stream));
  r.prefill_s = Since(start);
  // The first token, as a server gets it before streaming it: logits to the host, argmax.
  ASSIGN_OR_RETURN(const std::vector<float> row, pools.LogitsRow(0));
  const int32_t first = bench::Argmax(row);
  r.ttft_s = Since(start);
  if (first < 0) return absl::InternalError("no first token");
  return r;
}

std::string Target(int64_t batch, double percent) {
  const double want = batch == 1 ? 30 : batch == 64 ? 55 : 0;
  if (want == 0) return "";
  return Format(">= %.0f%%: %s", want, percent >= want ? "met" : "not met");
}

void PrintHeader(const Loaded& l, const Env& env, const cudaDeviceProp& prop) {
  const ModelCost& c = env.cost;
  const model::ModelShape& s = l.model->shape();
  if (l.random) {
    std::printf("RANDOM WEIGHTS (%s): router weights random: expert load is about uniform\n",
                l.label.c_str());
  } else {
    std::printf("checkpoint %s\n", l.label.c_str());
  }
  std::printf("device %s: HBM peak %.0f GB/s (%s), BF16 dense peak %.0f TFLOP/s (--peak_tflops)\n",
              prop.name, env.peaks.gbps, env.peaks.gbps_source.c_str(), env.peaks.tflops);
  std::printf(
      "model %s, %d layers, loaded in %.1f s: weights %.2f GB on the device (routed experts %.2f "
      "GB, %g of %g per token; embedding table %.2f GB); KV %.0f B per token (fp32, %g attention "
      "layers); recurrent state %.1f MB per sequence (fp32)\n",
      std::string(model::ArchitectureName(s.architecture)).c_str(), s.num_layers, l.load_s,
      c.weight_bytes / 1e9, c.routed_bytes / 1e9, c.experts_per_token, c.experts,
      c.embed_bytes / 1e9, c.kv_bytes_per_token, c.attention_layers, c.state_bytes / 1e6);
  std::printf(
      "bound = max(HBM bytes / peak bandwidth, FLOPs / peak); decode HBM bytes = shared weights "
      "+ embedding rows + the routed experts a batch touches, E(1-(1-k/E)^B) per MoE layer "
      "(uniform routing, as random routers give) + KV read + recurrent state read and written\n");
}

void PrintDecodeHead() {
  std::printf(
      "\ndecode: one CUDA-graph step replayed; context filled synthetically (zeroed KV and state "
      "pools, every sequence at position = context; a step reads the same bytes as after a real "
      "prefill)\n\n"
      "| context | batch | ms/step | tokens/s | bound ms | GB/step: weights + experts + KV + "
      "state | limiter | %% of bound | target |\n|---|---|---|---|---|---|---|---|---|\n");
}

void PrintDecodeRow(const DecodeResult& r) {
  const Bound& b = r.bound;
  if (!r.skipped.empty()) {
    std::printf("| %d | %d | %s | | %.3f | %.2f | %s | | |\n", static_cast<int>(r.context),
                static_cast<int>(r.batch), r.skipped.c_str(), b.seconds() * 1e3, b.bytes() / 1e9,
                b.limiter());
  } else {
    std::printf(
        "| %d | %d | %.3f | %.0f | %.3f | %.2f: %.2f + %.2f + %.2f + %.2f | %s | %.0f%% | %s |\n",
        static_cast<int>(r.context), static_cast<int>(r.batch), r.ms, r.tokens_per_s(),
        b.seconds() * 1e3, b.bytes() / 1e9, b.shared_bytes / 1e9, b.routed_bytes / 1e9,
        b.kv_bytes / 1e9, b.state_bytes / 1e9, b.limiter(), r.percent(),
        Target(r.batch, r.percent()).c_str());
  }
  std::fflush(stdout);
}

void PrintPrefillHead() {
  std::printf(
      "\nprefill: one sequence from an empty state (the engine runs 512-token chunks); TTFT = "
      "prefill + the first token (logits to the host, argmax)\n\n"
      "| prompt tokens | prefill s | tokens/s | bound s | TFLOP | limiter | %% of bound | TTFT s "
      "| TTFT %% of bound |\n|---|---|---|---|---|---|---|---|---|\n");
}

void PrintPrefillRow(const PrefillResult& r) {
  const Bound& b = r.bound;
  if (!r.skipped.empty()) {
    std::printf("| %d | %s | | %.4f | %.1f | %s | | | |\n", static_cast<int>(r.tokens),
                r.skipped.c_str(), b.seconds(), b.flops / 1e12, b.limiter());
  } else {
    std::printf("| %d | %.4f | %.0f | %.4f | %.1f | %s | %.0f%% | %.4f | %.0f%% |\n",
                static_cast<int>(r.tokens), r.prefill_s, r.tokens / r.prefill_s, b.seconds(),
                b.flops / 1e12, b.limiter(), r.percent(r.prefill_s), r.ttft_s, r.percent(r.ttft_s));
  }
  std::fflush(stdout);
}

// One line per measurement in the form scripts/gpu_kit/run.sh's bench_numbers reads (decode at
// the first context length only: its regex has no context field).
void PrintSummary(const std::vector<DecodeResult>& decode,
                  const std::vector<PrefillResult>& prefill, int layers, int layers_full) {
  std::printf("\n");
  for (const PrefillResult& r : prefill) {
    if (!r.skipped.empty()) continue;
    std::printf(
        "prefill %d tokens: %.3f s, %.0f tokens/s; TTFT %.3f s; bound %.4f s (%s): %.0f%% of "
        "the bound\n",
        static_cast<int>(r.tokens), r.prefill_s, r.tokens / r.prefill_s, r.ttft_s,
        r.bound.seconds(), r.bound.limiter(), r.percent(r.prefill_s));
  }
  for (const DecodeResult& r : decode) {
    if (!r.skipped.empty() || r.context != decode.front().context) continue;
    std::printf(
        "decode batch %3d: %.3f ms/step, %.0f tokens/s at context %d; bound %.3f ms (%s, "
        "%.2f GB/step)",
        static_cast<int>(r.batch), r.ms, r.tokens_per_s(), static_cast<int>(r.context),
        r.bound.seconds() * 1e3, r.bound.limiter(), r.bound.bytes() / 1e9);
    if (layers_full > 0) {
      std::printf("; extrapolated to %d layers: %.3f ms/step", layers_full,
                  r.ms * layers_full / layers);
    }
    std::printf(": %.0f%% of the bound\n", r.percent());
  }
}

Json BoundJson(const Bound& b) {
  return {{"seconds", b.seconds()},
          {"limiter", b.limiter()},
          {"hbm_bytes", b.bytes()},
          {"shared_weight_bytes", b.shared_bytes},
          {"routed_expert_bytes", b.routed_bytes},
          {"kv_bytes", b.kv_bytes},
          {"state_bytes", b.state_bytes},
          {"flops", b.flops},
          {"memory_seconds", b.memory_s},
          {"compute_seconds", b.compute_s}};
}

Json ResultsJson(const Loaded& l, const Env& env, const cudaDeviceProp& prop,
                 const std::vector<DecodeResult>& decode,
                 const std::vector<PrefillResult>& prefill) {
  const ModelCost& c = env.cost;
  Json out = {{"device", prop.name},
              {"model", l.label},
              {"architecture", std::string(model::ArchitectureName(l.model->shape().architecture))},
              {"layers", l.model->shape().num_layers},
              {"random_weights", l.random},
              {"peak_gbps", env.peaks.gbps},
              {"peak_gbps_source", env.peaks.gbps_source},
              {"peak_tflops", env.peaks.tflops},
              {"load_seconds", l.load_s},
              {"weight_bytes", c.weight_bytes},
              {"routed_expert_bytes", c.routed_bytes},
              {"kv_bytes_per_token", c.kv_bytes_per_token},
              {"state_bytes_per_sequence", c.state_bytes},
              {"decode_fill", "synthetic: zeroed KV and state pools, position = context"},
              {"targets", "decode batch 1 >= 30% of the bound, batch 64 >= 55% (not asserted)"}};
  if (l.random) out["note"] = "router weights random: expert load is about uniform";
  Json rows = Json::array();
  for (const DecodeResult& r : decode) {
    Json j = {{"batch", r.batch}, {"context", r.context}, {"bound", BoundJson(r.bound)}};
    if (!r.skipped.empty()) {
      j["skipped"] = r.skipped;
    } else {
      j.update({{"ms_per_step", r.ms},
                {"tokens_per_s", r.tokens_per_s()},
                {"percent_of_bound", r.percent()},
                {"steps_timed", r.steps}});
    }
    rows.push_back(std::move(j));
  }
  out["decode"] = std::move(rows);
  rows = Json::array();
  for (const PrefillResult& r : prefill) {
    Json j = {{"tokens", r.tokens}, {"bound", BoundJson(r.bound)}};
    if (!r.skipped.empty()) {
      j["skipped"] = r.skipped;
    } else {
      j.update({{"prefill_seconds", r.prefill_s},
                {"tokens_per_s", r.tokens / r.prefill_s},
                {"percent_of_bound", r.percent(r.prefill_s)},
                {"ttft_seconds", r.ttft_s},
                {"ttft_percent_of_bound", r.percent(r.ttft_s)}});
    }
    rows.push_back(std::move(j));
  }
  out["prefill"] = std::move(rows);
  return out;
}

// Every decode configuration, then every prefill length; stops at the first error (a CUDA error
// may be sticky) and reports it.
absl::Status MeasureAll(Env& env, std::vector<DecodeResult>* decode,
                        std::vector<PrefillResult>* prefill) {
  ASSIGN_OR_RETURN(const std::vector<int64_t> batches,
                   ParseList("batches", absl::GetFlag(FLAGS_batches)));
  ASSIGN_OR_RETURN(const std::vector<int64_t> contexts,
                   ParseList("contexts", absl::GetFlag(FLAGS_contexts)));
  ASSIGN_OR_RETURN(const std::vector<int64_t> lengths,
                   ParseList("prefill_tokens", absl::GetFlag(FLAGS_prefill_tokens)));
  PrintDecodeHead();
  for (int64_t context : contexts) {
    for (int64_t batch : batches) {
      if (batch > kMaxDecodeBatch) continue;
      ASSIGN_OR_RETURN(DecodeResult r, MeasureDecode(env, batch, context));
      PrintDecodeRow(r);
      decode->push_back(std::move(r));
    }
  }
  PrintPrefillHead();
  double last_s = 0, last_tokens = 0;  // the last length measured
  for (int64_t tokens : lengths) {
    const double predicted =
        last_tokens > 0 ? last_s * std::pow(tokens / last_tokens, kPrefillGrowth) : 0;
    ASSIGN_OR_RETURN(PrefillResult r, MeasurePrefill(env, tokens, predicted));
    PrintPrefillRow(r);
    if (r.skipped.empty()) {
      last_s = r.prefill_s;
      last_tokens = static_cast<double>(tokens);
    }
    prefill->push_back(std::move(r));
  }
  return absl::OkStatus();
}

int Fail(const absl::Status& s) {
  std::fprintf(stderr, "cuda_benchmark: %s\n", std::string(s.message()).c_str());
  return 1;
}

int Run() {
  const Clock::time_point start = Clock::now();
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::printf("no CUDA device: nothing to measure\n");
    // The logits mode's caller waits for its files: without them it has failed.
    return absl::GetFlag(FLAGS_logits_prompts).empty() ? 0 : 1;
  }
  auto loaded = Load();
  if (!loaded.ok()) return Fail(loaded.status());
  cudaStream_t stream = nullptr;
  cudaStreamCreate(&stream);
  if (const std::string in = absl::GetFlag(FLAGS_logits_prompts); !in.empty()) {
    const absl::Status s = bench::DumpLogits(*loaded->model, in, absl::GetFlag(FLAGS_logits_out),
                                             absl::GetFlag(FLAGS_logits_steps),
                                             absl::GetFlag(FLAGS_logits_positions), stream);
    if (!s.ok()) return Fail(s);
    std::printf("logits of %s written to %s.f32 and .json in %.1f s\n", loaded->label.c_str(),
                absl::GetFlag(FLAGS_logits_out).c_str(), Since(start));
    return 0;
  }
  cudaDeviceProp prop{};
  cudaGetDeviceProperties(&prop, 0);
  Env env;
  env.model = loaded->model.get();
  env.cost = CostOf(*loaded);
  env.peaks = DevicePeaks(0);
  env.start = start;
  env.budget_s = absl::GetFlag(FLAGS_budget_s);
  env.iterations = std::max(3, absl::GetFlag(FLAGS_iterations));
  env.stream = stream;
  PrintHeader(*loaded, env, prop);
  std::vector<DecodeResult> decode;
  std::vector<PrefillResult> prefill;
  const absl::Status measured = MeasureAll(env, &decode, &prefill);
  if (!measured.ok()) std::printf("error: %s\n", std::string(measured.message()).c_str());
  PrintSummary(decode, prefill, loaded->model->shape().num_layers,
               absl::GetFlag(FLAGS_layers_full));
  if (const std::string path = absl::GetFlag(FLAGS_json); !path.empty()) {
    Json out = ResultsJson(*loaded, env, prop, decode, prefill);
    if (!measured.ok()) out["error"] = std::string(measured.message());
    std::ofstream(path) << out.dump(1) << "\n";
  }
  std::printf("done in %.1f s\n", Since(start));
  return measured.ok() ? 0 : 1;
}

}  // namespace
}  // namespace tandem::workers::cuda

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return tandem::workers::cuda::Run();
}
