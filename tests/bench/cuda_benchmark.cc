// CUDA engine speed, reported as fractions of the memory-bandwidth bound so runs compare across
// GPUs. For a checkpoint with the real models' layer shapes and fewer layers (make one with
// tandem-make-checkpoint, see docs/engines.md), measures decode time per token at batch 1, decode
// throughput at batch 64 and prefill throughput for an 8K-token prompt, and extrapolates per
// layer to the full models (40 layers for Qwen3.5, 52 for Nemotron-H). Or, with
// --model_config, the full model itself on random weights generated on the device (no
// checkpoint at all; router weights random: expert load is about uniform). Needs a GPU.
//
//   cuda_benchmark --checkpoint=DIR [--layers_full=40] [--peak_gbps=4800] [--json=FILE]
//   cuda_benchmark --model_config=workers/models/qwen3_5_moe/config.json [--seed=1]
#include <cuda_runtime.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <numeric>
#include <sstream>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "workers/cuda/cuda_model.h"
#include "workers/cuda/kernels.h"
#include "workers/native/random_checkpoint.h"
#include "workers/native/safetensors.h"

ABSL_FLAG(std::string, checkpoint, "", "Checkpoint directory (real layer shapes, few layers).");
ABSL_FLAG(std::string, model_config, "",
          "Instead of --checkpoint: a config.json whose model is built at full size with random "
          "weights generated on the device (workers/models/*/config.json).");
ABSL_FLAG(uint64_t, seed, 1, "--model_config: the random weights' seed.");
ABSL_FLAG(int32_t, layers_full, 0, "Layers of the full model for the extrapolation (0: skip).");
ABSL_FLAG(double, peak_gbps, 0, "Peak memory bandwidth in GB/s (0: from the device).");
ABSL_FLAG(int32_t, prefill_tokens, 8192, "Prompt length of the prefill measurement.");
ABSL_FLAG(int32_t, iterations, 50, "Decode steps timed per batch size.");
ABSL_FLAG(std::string, json, "", "Also write the results as JSON here.");

namespace tandem::workers::cuda {
namespace {

int Fail(const std::string& what) {
  std::fprintf(stderr, "cuda_benchmark: %s\n", what.c_str());
  return 1;
}

int Run() {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::printf("no CUDA device: nothing to measure\n");
    return 0;
  }
  const std::string dir = absl::GetFlag(FLAGS_checkpoint);
  const std::string config = absl::GetFlag(FLAGS_model_config);
  if (dir.empty() == config.empty()) return Fail("give --checkpoint or --model_config");
  absl::StatusOr<std::unique_ptr<native::Checkpoint>> ckpt;
  if (!config.empty()) {
    std::ifstream in(config, std::ios::binary);
    std::stringstream text;
    text << in.rdbuf();
    if (!in) return Fail("cannot read " + config);
    ckpt = native::RandomWeightsCheckpoint(text.str(), absl::GetFlag(FLAGS_seed),
                                           "random weights of " + config);
  } else {
    ckpt = native::Checkpoint::Open(dir);
  }
  if (!ckpt.ok()) return Fail(std::string(ckpt.status().message()));
  const bool random =
      (*ckpt)->config_json().find("\"tandem_random_weights\": true") != std::string::npos;
  auto model = LoadCudaModel(**ckpt);
  if (!model.ok()) return Fail(std::string(model.status().message()));
  CudaModel& m = **model;
  cudaDeviceProp prop{};
  cudaGetDeviceProperties(&prop, 0);
  double peak = absl::GetFlag(FLAGS_peak_gbps);
  if (peak <= 0) {
    int clock_khz = 0;
    cudaDeviceGetAttribute(&clock_khz, cudaDevAttrMemoryClockRate, 0);
    peak = 2.0 * clock_khz * 1e3 * (prop.memoryBusWidth / 8) / 1e9;
  }
  const int64_t batch_max = 64;
  const int64_t prefill = absl::GetFlag(FLAGS_prefill_tokens);
  const int64_t max_blocks = (prefill + 64 + kKvBlockTokens - 1) / kKvBlockTokens;
  const int64_t slots = batch_max + 1;
  const int64_t blocks = slots * max_blocks;
  void* state = nullptr;
  void* kv = nullptr;
  if (m.state_slot_bytes() > 0)
    cudaMalloc(&state, static_cast<size_t>(slots * m.state_slot_bytes()));
  if (m.kv_block_bytes() > 0) cudaMalloc(&kv, static_cast<size_t>(blocks * m.kv_block_bytes()));
  if (!m.BindMemory(state, slots, kv, blocks).ok()) return Fail("BindMemory");
  cudaStream_t stream;
  cudaStreamCreate(&stream);
  const int64_t vocab = m.shape().vocab_size;
  // Block tables: sequence s owns blocks [s * max_blocks, (s + 1) * max_blocks).
  std::vector<int32_t> tables(static_cast<size_t>(slots * max_blocks));
  std::iota(tables.begin(), tables.end(), 0);
  int32_t* d_tables = nullptr;
  cudaMalloc(&d_tables, tables.size() * 4);
  cudaMemcpy(d_tables, tables.data(), tables.size() * 4, cudaMemcpyHostToDevice);
  float* logits = nullptr;
  cudaMalloc(&logits, static_cast<size_t>(batch_max * vocab * 4));

  // Prefill of one long prompt.
  std::vector<int32_t> prompt(static_cast<size_t>(prefill));
  for (int64_t i = 0; i < prefill; ++i) prompt[i] = static_cast<int32_t>((i * 7919) % vocab);
  SequenceSlot seq;
  seq.state_slot = 1;
  seq.block_table = d_tables + max_blocks;
  seq.blocks.assign(tables.begin() + max_blocks, tables.begin() + 2 * max_blocks);
  if (!m.ResetSlot(1, stream).ok()) return Fail("ResetSlot");
  cudaStreamSynchronize(stream);
  auto t0 = std::chrono::steady_clock::now();
  if (!m.Prefill(prompt.data(), prefill, 0, seq, logits, stream).ok()) return Fail("Prefill");
  cudaStreamSynchronize(stream);
  const double prefill_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

  struct Result {
    int64_t batch;
    double ms_per_step;
    double tokens_per_s;
  };
  std::vector<Result> results;
  for (int64_t batch : {int64_t{1}, batch_max}) {
    std::vector<int32_t> tokens(static_cast<size_t>(batch), 1), positions(batch), slot_ids(batch);
    std::vector<int32_t> rows(static_cast<size_t>(batch * max_blocks));
    for (int64_t b = 0; b < batch; ++b) {
      slot_ids[b] = static_cast<int32_t>(b + 1);
      positions[b] = static_cast<int32_t>(b == 0 ? prefill : 512);
      std::copy(tables.begin() + (b + 1) * max_blocks, tables.begin() + (b + 2) * max_blocks,
                rows.begin() + b * max_blocks);
    }
    int32_t *d_tokens, *d_positions, *d_slots, *d_rows;
    cudaMalloc(&d_tokens, batch * 4);
    cudaMalloc(&d_positions, batch * 4);
    cudaMalloc(&d_slots, batch * 4);
    cudaMalloc(&d_rows, rows.size() * 4);
    cudaMemcpy(d_tokens, tokens.data(), batch * 4, cudaMemcpyHostToDevice);
    cudaMemcpy(d_positions, positions.data(), batch * 4, cudaMemcpyHostToDevice);
    cudaMemcpy(d_slots, slot_ids.data(), batch * 4, cudaMemcpyHostToDevice);
    cudaMemcpy(d_rows, rows.data(), rows.size() * 4, cudaMemcpyHostToDevice);
    DecodeBatch db{batch, d_tokens, d_positions, d_slots, d_rows, max_blocks, logits};
    // Capture once, replay: what the engine does.
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal);
    const bool ok = m.Decode(db, stream).ok();
    cudaStreamEndCapture(stream, &graph);
    if (!ok || cudaGraphInstantiate(&exec, graph, 0) != cudaSuccess) return Fail("Decode capture");
    for (int i = 0; i < 3; ++i) cudaGraphLaunch(exec, stream);
    cudaEvent_t a, b;
    cudaEventCreate(&a);
    cudaEventCreate(&b);
    const int iters = absl::GetFlag(FLAGS_iterations);
    cudaEventRecord(a, stream);
    for (int i = 0; i < iters; ++i) cudaGraphLaunch(exec, stream);
    cudaEventRecord(b, stream);
    cudaEventSynchronize(b);
    float ms = 0;
    cudaEventElapsedTime(&ms, a, b);
    results.push_back({batch, ms / iters, batch * 1000.0 / (ms / iters)});
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
  }

  // The bound: the weight bytes a decode step must read, once each, at peak bandwidth. Weights
  // every token uses are read once per step; of the routed experts, a batch of B tokens with k
  // of E experts each touches E * (1 - (1 - k/E)^B) per MoE layer on average (uniform routing).
  // Device weights are BF16: 2 bytes per element whatever the checkpoint stores.
  const double weights = static_cast<double>(m.weight_bytes());
  double routed = 0, all = 0;
  for (const auto& [name, t] : (*ckpt)->tensors()) {
    const double bytes = 2.0 * static_cast<double>(t->elements());
    all += bytes;
    if (name.find(".experts.") != std::string::npos) routed += bytes;
  }
  const std::string& cfg = (*ckpt)->config_json();
  auto number = [&](const char* key) {
    const size_t at = cfg.find(std::string("\"") + key + "\"");
    return at == std::string::npos ? 0.0 : std::atof(cfg.c_str() + cfg.find(':', at) + 1);
  };
  const double experts =
      number("num_experts") > 0 ? number("num_experts") : number("n_routed_experts");
  const double k = number("num_experts_per_tok");
  auto step_bytes = [&](int64_t batch) {
    if (experts <= 0 || k <= 0) return all;
    const double touched = 1.0 - std::pow(1.0 - k / experts, static_cast<double>(batch));
    return (all - routed) + routed * touched;
  };
  const int full = absl::GetFlag(FLAGS_layers_full);
  std::printf("device %s, %.0f GB/s peak, weights %.2f GB, %d layers\n", prop.name, peak,
              weights / 1e9, m.shape().num_layers);
  if (random) {
    std::printf("RANDOM WEIGHTS (%s): router weights random: expert load is about uniform\n",
                (*ckpt)->dir().c_str());
  }
  std::printf("prefill %lld tokens: %.3f s, %.0f tokens/s\n", static_cast<long long>(prefill),
              prefill_s, prefill / prefill_s);
  for (const Result& r : results) {
    const double bound_ms = step_bytes(r.batch) / (peak * 1e9) * 1e3;
    std::printf(
        "decode batch %3lld: %.3f ms/step, %.0f tokens/s; bandwidth bound %.3f ms for %.2f GB "
        "read per step: %.0f%% of the bound",
        static_cast<long long>(r.batch), r.ms_per_step, r.tokens_per_s, bound_ms,
        step_bytes(r.batch) / 1e9, 100.0 * bound_ms / r.ms_per_step);
    if (full > 0) {
      std::printf("; extrapolated to %d layers: %.3f ms/step", full,
                  r.ms_per_step * full / m.shape().num_layers);
    }
    std::printf("\n");
  }
  if (const std::string path = absl::GetFlag(FLAGS_json); !path.empty()) {
    std::ofstream out(path);
    out << "{\"device\":\"" << prop.name << "\",\"random_weights\":" << (random ? "true" : "false")
        << (random ? ",\"note\":\"router weights random: expert load is about uniform\"" : "")
        << ",\"peak_gbps\":" << peak << ",\"weight_bytes\":" << weights
        << ",\"layers\":" << m.shape().num_layers
        << ",\"prefill_tokens_per_s\":" << prefill / prefill_s << ",\"decode\":[";
    for (size_t i = 0; i < results.size(); ++i) {
      out << (i ? "," : "") << "{\"batch\":" << results[i].batch
          << ",\"ms_per_step\":" << results[i].ms_per_step
          << ",\"tokens_per_s\":" << results[i].tokens_per_s << "}";
    }
    out << "]}\n";
  }
  return 0;
}

}  // namespace
}  // namespace tandem::workers::cuda

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return tandem::workers::cuda::Run();
}
